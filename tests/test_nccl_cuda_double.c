/* test_nccl_cuda_double.c: `--backend nccl --device cuda` with two ranks on one GPU, through the
 * NCCL test double (tests/nccl_double/, LD_PRELOAD'ed), which stages CUDA memory through host
 * memory (nccl_double/cuda_stage.h): real NCCL refuses two ranks on one GPU, so this is how a
 * machine with one GPU runs the backend's multi-rank paths over real CUDA memory and streams.
 * Two ranks on GPU 0 end bitwise equal to `--backend sim --device cuda --replicas 2` (DDP, DP,
 * lenet-bn with --sync-bn); so does one process with `--gpus 0,1` mapped onto GPU 0 through the
 * double's device mode. Labels nccl and cuda; exits 77 (skipped) without a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/devices.h"
#include "kernels/device.h"
#include "dp_config.h"
#include "ranks.h"
#include "testutil.h"

#if DP_HAVE_NCCL

#define DATA "--dataset synthetic --samples 384 --batch-size 64 --seed 5 --threads 1 --epochs 1 --no-progress"

/* Two ranks with torchrun's variables, both on GPU 0, then the GPU sim's two replicas: the
 * checkpoints' tensors bitwise equal. */
static void two_ranks_on_gpu0_equal_the_sim(const char *tag, const char *flags) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tu_path(tag));
    int codes[2];
    const rk_launch l = {.dir = dir, .n = 2, .log = "rank", .timeout_s = 300};
    rk_run(&l, codes, "train --backend nccl --device cuda --gpu 0 %s %s --save nccl.ckpt", DATA, flags);
    rk_expect_all_ok(&l, codes);
    rk_expect_equal_to_sim(dir, tag, "--device cuda --replicas 2 %s %s", DATA, flags);
}

/* One process driving two replicas on GPU 0 (`--gpus 0,1` under the test-only device map
 * DPTRAIN_TEST_DEVICE_MAP=0,0: two devices, each with its own streams, on one GPU) through the
 * double's device mode (DP_NCCL_DOUBLE_DEVICE=1: each send and receive a copy queued between the
 * two streams with events, nothing waited for on the host, as NCCL's kernels are queued), against
 * the GPU sim's two replicas: the checkpoints' tensors bitwise equal. A missing stream order in the
 * executor (a collective that does not wait for the compute before it, or compute that does not
 * wait for it) is then a race on the GPU, which the host-synchronous mode hides. */
static void gpus_on_gpu0_equal_the_sim(const char *tag, const char *flags) {
    char dir[512], *out = NULL;
    snprintf(dir, sizeof dir, "%s", tu_path(tag));
    const int rc = tu_sh(&out,
                         "mkdir -p %s && DPTRAIN_TEST_DEVICE_MAP=0,0 DP_NCCL_DOUBLE_DEVICE=1 LD_PRELOAD=%s timeout -s KILL "
                         "300 %s train --backend nccl --device cuda --gpus 0,1 %s %s --save %s/nccl.ckpt 2>&1",
                         dir, rk_double(), getenv("DPTRAIN"), DATA, flags, dir);
    if (rc != 0 || !out || !strstr(out, "nccl test double: device mode"))
        fail_msg("%s: --gpus 0,1 on GPU 0 through the device double: exit %d (the device mode must be used):\n%s", tag,
                 rc, out ? out : "");
    free(out);
    rk_expect_equal_to_sim(dir, tag, "--device cuda --replicas 2 %s %s", DATA, flags);
}

static void test_device_double_ddp(void **state) {
    (void)state;
    gpus_on_gpu0_equal_the_sim("device-double-ddp", "");
}

static void test_device_double_dp(void **state) {
    (void)state;
    gpus_on_gpu0_equal_the_sim("device-double-dp", "--mode dp");
}

static void test_device_double_sync_bn(void **state) {
    (void)state;
    gpus_on_gpu0_equal_the_sim("device-double-syncbn", "--model lenet-bn --sync-bn");
}

static void test_ddp(void **state) {
    (void)state;
    two_ranks_on_gpu0_equal_the_sim("cuda-double-ddp", "");
}

static void test_dp(void **state) {
    (void)state;
    two_ranks_on_gpu0_equal_the_sim("cuda-double-dp", "--mode dp");
}

static void test_sync_bn(void **state) {
    (void)state;
    two_ranks_on_gpu0_equal_the_sim("cuda-double-syncbn", "--model lenet-bn --sync-bn");
}

int main(void) {
    if (!tu_have_gpu()) return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ddp),
        cmocka_unit_test(test_dp),
        cmocka_unit_test(test_sync_bn),
        cmocka_unit_test(test_device_double_ddp),
        cmocka_unit_test(test_device_double_dp),
        cmocka_unit_test(test_device_double_sync_bn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
int main(void) {
    fprintf(stderr, "test_nccl_cuda_double: this build has no NCCL\n");
    return 77;
}
#endif
