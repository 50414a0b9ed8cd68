/* The process as tools see it: no re-execution through /proc/self/exe, so the process is named
 * dptrain (ps, top, pgrep, core files), valgrind can run the binary, and the OpenMP spin bound
 * still reaches libgomp (OMP_DISPLAY_ENV shows it) while a user's own setting wins; a CPU run of
 * the CUDA build maps no GPU library (the dynamic loader's LD_DEBUG=files), which its plugin
 * brings only when a GPU is asked for. */
#include "testutil.h"

#include "dp_config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *bin(void) {
    const char *b = getenv("DPTRAIN");
    return b ? b : "./dptrain";
}

static void test_comm_is_dptrain(void **state) {
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout)) _exit(126);
        execl(bin(), bin(), "train", "--dataset", "synthetic", "--shape", "1x28x28", "--samples", "100000", "--epochs",
              "50", "--threads", "1", "--workers", "0", "--no-progress", (char *)NULL);
        _exit(127);
    }
    char path[64], comm[64] = "", exe[4096] = "";
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    /* a re-exec would change comm to "exe" within the first milliseconds: look for a while */
    for (int i = 0; i < 20; i++) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        FILE *f = fopen(path, "r");
        if (!f) break;
        if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = '\0';
        fclose(f);
        if (strcmp(comm, "dptrain") != 0) break;
    }
    snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(path, exe, sizeof exe - 1);
    if (n > 0) exe[n] = '\0';
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    assert_string_equal(comm, "dptrain");
    assert_non_null(strstr(exe, "dptrain"));
}

static void test_valgrind_runs_it(void **state) {
    (void)state;
#ifdef __SANITIZE_ADDRESS__
    skip(); /* valgrind and AddressSanitizer cannot run one process together */
#endif
    char *out;
    if (tu_sh(&out, "command -v valgrind") != 0) {
        free(out);
        skip();
    }
    free(out);
    int rc = tu_sh(&out, "valgrind --error-exitcode=0 %s --version", bin());
    if (rc != 0 || !tu_contains(out, "dptrain ") || tu_contains(out, "unrecognised instruction"))
        fail_msg("valgrind exit %d:\n%s", rc, out);
    free(out);
}

static void test_spin_bound_reaches_libgomp(void **state) {
    (void)state;
    char *out;
    tu_sh(&out, "env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY OMP_DISPLAY_ENV=verbose %s --version", bin());
    if (!tu_contains(out, "OPENMP DISPLAY ENVIRONMENT")) {
        free(out);
        skip(); /* not libgomp */
    }
    if (!tu_contains(out, "GOMP_SPINCOUNT = '3000'")) fail_msg("the spin bound did not reach libgomp:\n%s", out);
    free(out);
    tu_sh(&out, "env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=777 OMP_DISPLAY_ENV=verbose %s --version", bin());
    if (!tu_contains(out, "GOMP_SPINCOUNT = '777'")) fail_msg("a user's GOMP_SPINCOUNT was overridden:\n%s", out);
    free(out);
}

/* The GPU libraries the CUDA build uses, loaded only with its plugin (backends/gpu_plugin.h). */
static const char *const gpu_libs[] = {"libcudart", "libcublas", "libcudnn", "libnccl", "dptrain_cuda.so"};

/* The libraries the dynamic loader opened for `dptrain args` (LD_DEBUG=files): the first GPU one
 * in its output, or NULL; *rc its exit code, *out everything it printed. */
static const char *gpu_lib_loaded(const char *args, int *rc, char **out) {
    *rc = tu_sh(out, "LD_DEBUG=files %s %s", bin(), args);
    if (!tu_contains(*out, "file=libc.so")) fail_msg("LD_DEBUG=files showed no libraries (exit %d):\n%s", *rc, *out);
    /* the loader's lines only ("file=NAME [0];  needed by ..."): --version names the plugin too */
    for (const char *line = *out; line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        const char *file = strstr(line, "file="), *end = strchr(line, '\n');
        if (!file || (end && file > end)) continue;
        const char *stop = strchr(file, ' ');
        for (size_t i = 0; i < sizeof gpu_libs / sizeof *gpu_libs; i++) {
            const char *at = strstr(file, gpu_libs[i]);
            if (at && (!stop || at < stop)) return gpu_libs[i];
        }
    }
    return NULL;
}

#define QUICK_TRAIN "train --dataset synthetic --shape 1x28x28 --samples 128 --batch-size 64 --epochs 1 --threads 1 " \
                    "--workers 0 --no-progress"

/* A CPU run maps no GPU library: --version (which still lists what was compiled in) and a short
 * training. Linked in, the CUDA runtime, cuBLAS, cuDNN and NCCL took ~230 MiB resident at every
 * start, and under a 96 MiB memory limit --version was killed. */
static void test_cpu_run_loads_no_gpu_library(void **state) {
    (void)state;
    const char *runs[] = {"--version", QUICK_TRAIN};
    for (int i = 0; i < 2; i++) {
        int rc;
        char *out;
        const char *lib = gpu_lib_loaded(runs[i], &rc, &out);
        if (rc != 0 || lib) fail_msg("dptrain %s: exit %d, %s loaded:\n%s", runs[i], rc, lib ? lib : "nothing", out);
        if (i == 0 && DP_HAVE_CUDA && !tu_contains(out, "cuda (cuBLAS"))
            fail_msg("--version does not list the CUDA device it was built with:\n%s", out);
        free(out);
    }
}

/* --device cuda loads the plugin, and on a machine without a GPU says so as it did when the CUDA
 * libraries were linked in (and on one with a GPU, trains). */
static void test_gpu_run_loads_the_plugin(void **state) {
    (void)state;
    if (!DP_HAVE_CUDA) skip();
    int rc;
    char *out;
    const char *lib = gpu_lib_loaded(QUICK_TRAIN " --device cuda", &rc, &out);
    if (!lib) fail_msg("--device cuda loaded no GPU library (exit %d):\n%s", rc, out);
    if (rc != 0 && !(rc == 1 && tu_contains(out, "dptrain: --device cuda: no CUDA device found (")))
        fail_msg("--device cuda: exit %d:\n%s", rc, out);
    free(out);
}

/* Without its plugin, or with a broken one, a CUDA build says which file it could not load and
 * why, for --device cuda and for --backend nccl; CPU runs go on. */
static void test_missing_plugin_is_named(void **state) {
    (void)state;
    if (!DP_HAVE_CUDA) skip();
    const char *dir = tu_path("noplugin");
    char *out;
    if (tu_sh(&out, "rm -rf %s && mkdir -p %s && cp %s %s/dptrain", dir, dir, bin(), dir) != 0)
        fail_msg("cannot copy dptrain: %s", out);
    free(out);
    static const char *const flags[] = {"--device cuda", "--backend nccl"};
    static const char *const instead[] = {"use --device cpu", "use --backend sim or mpi"};
    for (int i = 0; i < 2; i++) {
        int rc = tu_sh(&out, "%s/dptrain " QUICK_TRAIN " %s", dir, flags[i]);
        char want[256];
        snprintf(want, sizeof want, "dptrain: %s: cannot load the CUDA parts of this build: dptrain_cuda.so is "
                 "neither in %s nor in %s/", flags[i], dir, dir);
        if (rc != 1 || !tu_contains(out, want) || !tu_contains(out, instead[i]))
            fail_msg("no plugin, %s: exit %d:\n%s", flags[i], rc, out);
        free(out);
    }
    /* a file of that name that is no library: the dynamic loader's reason */
    tu_sh(&out, "echo not-a-library > %s/dptrain_cuda.so", dir);
    free(out);
    int rc = tu_sh(&out, "%s/dptrain " QUICK_TRAIN " --device cuda", dir);
    char want[256];
    snprintf(want, sizeof want, "dptrain: --device cuda: cannot load %s/dptrain_cuda.so: ", dir);
    if (rc != 1 || !tu_contains(out, want) || !tu_contains(out, "use --device cpu"))
        fail_msg("a broken plugin: exit %d:\n%s", rc, out);
    free(out);
    rc = tu_sh(&out, "%s/dptrain " QUICK_TRAIN, dir);
    if (rc != 0) fail_msg("a CPU run beside a broken plugin: exit %d:\n%s", rc, out);
    free(out);
    tu_sh(&out, "rm -rf %s", dir);
    free(out);
}

/* A plugin cut short (a copy interrupted by a full disk) is refused with a message: the dynamic
 * loader would map pages past its end and the first touch killed dptrain with SIGBUS. */
static void test_truncated_plugin_is_refused(void **state) {
    (void)state;
    if (!DP_HAVE_CUDA) skip();
    const char *dir = tu_path("cutplugin");
    char *out;
    static const long cuts[] = {200000, 1000000};
    static const char *const flags[] = {"--device cuda", "--backend nccl"};
    for (int c = 0; c < 2; c++) {
        if (tu_sh(&out, "rm -rf %s && mkdir -p %s && cp %s %s/dptrain && b=$(dirname %s)/dptrain_cuda.so && "
                  "test $(stat -c %%s $b) -gt %ld && head -c %ld $b > %s/dptrain_cuda.so", dir, dir, bin(), dir, bin(),
                  cuts[c], cuts[c], dir) != 0)
            fail_msg("cannot make a cut copy of the plugin: %s", out);
        free(out);
        for (int i = 0; i < 2; i++) {
            int rc = tu_sh(&out, "%s/dptrain " QUICK_TRAIN " %s", dir, flags[i]);
            char want[256];
            snprintf(want, sizeof want, "dptrain: %s: cannot load %s/dptrain_cuda.so: the file is cut short: %ld bytes",
                     flags[i], dir, cuts[c]);
            if (rc != 1 || !tu_contains(out, want) || !tu_contains(out, "install dptrain with it again"))
                fail_msg("a plugin cut at %ld bytes, %s: exit %d:\n%s", cuts[c], flags[i], rc, out);
            free(out);
        }
    }
    tu_sh(&out, "rm -rf %s", dir);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_comm_is_dptrain),
        cmocka_unit_test(test_valgrind_runs_it),
        cmocka_unit_test(test_spin_bound_reaches_libgomp),
        cmocka_unit_test(test_cpu_run_loads_no_gpu_library),
        cmocka_unit_test(test_gpu_run_loads_the_plugin),
        cmocka_unit_test(test_missing_plugin_is_named),
        cmocka_unit_test(test_truncated_plugin_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
