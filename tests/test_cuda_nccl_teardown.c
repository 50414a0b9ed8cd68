/* test_cuda_nccl_teardown.c: on a real GPU, a rank whose GPU runs a kernel that never returns
 * after a failure (an aborted collective's kernel that NCCL's abort did not end) must still exit
 * within the watchdog's grace period, naming what it waited for (the second review's N6): the
 * NCCL backend's abort (backends/backend.h) leaves its watchdog on while the trainer frees device
 * memory and closes the GPU, each of which waits for that kernel. The kernel spins on a flag in
 * device memory that nothing sets; it is PTX loaded through the driver API (libcuda, opened at
 * run time), so the test needs no CUDA compiler. The process that hangs is a child (this binary,
 * re-run): the watchdog ends it with _exit. Real NCCL at world 1 (no launcher). Labels cuda and
 * nccl; exits 77 (skipped) without a GPU, libcuda or NCCL. The fake GPU twin, which runs
 * everywhere, is test_nccl_fakegpu's test_teardown_hang_ends_within_the_grace. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "exec/devices.h"
#include "kernels/device.h"
#include "dp_config.h"
#include "testutil.h"
#include "trainrun.h"

#if DP_HAVE_NCCL && DP_HAVE_CUDA

#define TIMEOUT_S 1.0

/* ld.volatile until the flag is non-zero: never, nobody writes it */
static const char spin_ptx[] = ".version 7.0\n"
                               ".target sm_75\n"
                               ".address_size 64\n"
                               ".visible .entry dp_spin(.param .u64 flag)\n"
                               "{\n"
                               "  .reg .u64 %rd<2>;\n"
                               "  .reg .u32 %r<2>;\n"
                               "  .reg .pred %p<2>;\n"
                               "  ld.param.u64 %rd0, [flag];\n"
                               "  cvta.to.global.u64 %rd1, %rd0;\n"
                               "SPIN:\n"
                               "  ld.volatile.global.u32 %r0, [%rd1];\n"
                               "  setp.eq.u32 %p0, %r0, 0;\n"
                               "  @%p0 bra SPIN;\n"
                               "  ret;\n"
                               "}\n";

/* Launches dp_spin(flag) on stream through the driver API; 0, or -1 with a reason on stderr. */
static int launch_spin(void *stream, float *flag) {
    void *cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cu) {
        fprintf(stderr, "no libcuda.so.1: %s\n", dlerror());
        return -1;
    }
    int (*load)(void **, const void *) = NULL;
    int (*get)(void **, void *, const char *) = NULL;
    int (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **,
                  void **) = NULL;
    *(void **)&load = dlsym(cu, "cuModuleLoadData");
    *(void **)&get = dlsym(cu, "cuModuleGetFunction");
    *(void **)&launch = dlsym(cu, "cuLaunchKernel");
    void *mod = NULL, *fn = NULL;
    int e = !load || !get || !launch ? -1 : load(&mod, spin_ptx);
    if (!e) e = get(&fn, mod, "dp_spin");
    void *args[] = {&flag};
    if (!e) e = launch(fn, 1, 1, 1, 1, 1, 1, 0, stream, args, NULL);
    if (e) fprintf(stderr, "the spinning kernel did not launch (CUresult %d)\n", e);
    return e ? -1 : 0;
}

/* The child: a trainer on GPU 0 over real NCCL; a failure recorded as the trainer records one; the
 * backend's abort; a kernel that never returns on the GPU's main stream; then the trainer's
 * teardown, which must not return. 77: nothing to test here. */
static int child(void) {
    dp_config c;
    tr_base_config(&c, "lenet");
    c.backend = "nccl", c.device = "cuda", c.max_steps = 4, c.timeout_s = TIMEOUT_S;
    c.log_path = tu_path("cuda_teardown.jsonl");
    dp_trainer *t = NULL;
    if (dp_trainer_create(&c, &t) != DP_OK) {
        fprintf(stderr, "create: %s\n", dp_last_error());
        return 77;
    }
    float *flag = NULL;
    if (t->devs[0]->alloc(t->devs[0], &flag, 1, "the spinning kernel's flag") != DP_OK) return 3;
    if (t->devs[0]->wait(t->devs[0]) != DP_OK) return 3; /* the flag's zeros are in place */
    dp_fail(DP_ERR_BACKEND, "test: an injected failure");
    t->backend->failed = 1;
    if (!dp_backend_abort(t->backend)) {
        fprintf(stderr, "the nccl backend has no abort\n");
        return 4;
    }
    if (launch_spin(t->devs[0]->main.kc.stream, flag) != 0) return 77;
    fprintf(stderr, "spinning\n");
    fflush(stderr);
    dp_trainer_destroy(t); /* its frees and the device's close wait for the kernel */
    fprintf(stderr, "the teardown returned\n");
    return 5;
}

static void test_spinning_kernel_ends_within_the_grace(void **state) {
    (void)state;
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = '\0';
    const double grace = 5 + 0.1 * TIMEOUT_S;
    char *out = NULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const int rc = tu_sh(&out, "timeout -s KILL 90 '%s' spin-child 2>&1", self);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double took = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    print_message("exit %d after %.1f s (grace %.1f s):\n%s", rc, took, grace, out ? out : "");
    if (rc == 77) {
        free(out);
        skip();
    }
    const int ok = rc == 1 && tu_contains(out, "spinning") &&
                   tu_contains(out, "freeing the device memory and closing the GPU after \"test: an injected failure\"") &&
                   tu_contains(out, "(a grace period); the watchdog ends this rank") &&
                   !tu_contains(out, "the teardown returned") && took < 60;
    if (!ok) fail_msg("the child exited %d after %.1f s, expected 1 from the watchdog within the grace:\n%s", rc, took,
                      out ? out : "");
    free(out);
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "spin-child") == 0) return child();
    if (!tu_have_gpu()) return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spinning_kernel_ends_within_the_grace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
int main(void) {
    fprintf(stderr, "test_cuda_nccl_teardown: this build has no CUDA or no NCCL\n");
    return 77;
}
#endif
