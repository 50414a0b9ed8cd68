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
#include "testutil.h"

#if DP_HAVE_NCCL

#define DATA "--dataset synthetic --samples 384 --batch-size 64 --seed 5 --threads 1 --epochs 1 --no-progress"

/* Two ranks with torchrun's variables, both on GPU 0, then the GPU sim's two replicas: the
 * checkpoints' tensors bitwise equal. */
static void two_ranks_on_gpu0_equal_the_sim(const char *tag, const char *flags) {
    const char *lib = getenv("DP_NCCL_DOUBLE"), *dptrain = getenv("DPTRAIN");
    assert_non_null(lib), assert_non_null(dptrain);
    char dir[512], *out = NULL;
    snprintf(dir, sizeof dir, "%s", tu_path(tag));
    tu_sh(&out,
          "mkdir -p %s && cd %s && pids= && for r in 0 1; do RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 "
          "MASTER_ADDR=127.0.0.1 MASTER_PORT=%d LD_PRELOAD=%s timeout -s KILL 300 %s train --backend nccl --device "
          "cuda --gpu 0 %s %s --save nccl.ckpt > rank$r.log 2>&1 & pids=\"$pids $!\"; done; r=0; for p in $pids; do "
          "wait $p; echo \"rank $r exit $?\"; r=$((r+1)); done",
          dir, dir, tu_free_port(), lib, dptrain, DATA, flags);
    if (!out || !strstr(out, "rank 0 exit 0") || !strstr(out, "rank 1 exit 0")) {
        char *logs = NULL;
        tu_sh(&logs, "cat %s/rank0.log %s/rank1.log", dir, dir);
        fail_msg("%s: two ranks on GPU 0: %s\n%s", tag, out ? out : "", logs ? logs : "");
    }
    free(out);
    const int rc = tu_run_dptrain(&out, "train --backend sim --device cuda --replicas 2 %s %s --save %s/sim.ckpt", DATA,
                                  flags, dir);
    if (rc != 0) fail_msg("%s: the GPU sim: exit %d:\n%s", tag, rc, out ? out : "");
    free(out);
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/nccl.ckpt", dir), snprintf(b, sizeof b, "%s/sim.ckpt", dir);
    const char *diff = tu_ckpt_diff(a, b);
    if (diff) fail_msg("%s: nccl on one GPU through the double against the GPU sim: %s", tag, diff);
}

/* One process driving two replicas on GPU 0 (`--gpus 0,1` under the test-only device map
 * DPTRAIN_TEST_DEVICE_MAP=0,0: two devices, each with its own streams, on one GPU) through the
 * double's device mode (DP_NCCL_DOUBLE_DEVICE=1: each send and receive a copy queued between the
 * two streams with events, nothing waited for on the host, as NCCL's kernels are queued), against
 * the GPU sim's two replicas: the checkpoints' tensors bitwise equal. A missing stream order in the
 * executor (a collective that does not wait for the compute before it, or compute that does not
 * wait for it) is then a race on the GPU, which the host-synchronous mode hides. */
static void gpus_on_gpu0_equal_the_sim(const char *tag, const char *flags) {
    const char *lib = getenv("DP_NCCL_DOUBLE"), *dptrain = getenv("DPTRAIN");
    assert_non_null(lib), assert_non_null(dptrain);
    char dir[512], *out = NULL;
    snprintf(dir, sizeof dir, "%s", tu_path(tag));
    const int rc = tu_sh(&out,
                         "mkdir -p %s && DPTRAIN_TEST_DEVICE_MAP=0,0 DP_NCCL_DOUBLE_DEVICE=1 LD_PRELOAD=%s timeout -s KILL "
                         "300 %s train --backend nccl --device cuda --gpus 0,1 %s %s --save %s/nccl.ckpt 2>&1",
                         dir, lib, dptrain, DATA, flags, dir);
    if (rc != 0 || !out || !strstr(out, "nccl test double: device mode"))
        fail_msg("%s: --gpus 0,1 on GPU 0 through the device double: exit %d (the device mode must be used):\n%s", tag,
                 rc, out ? out : "");
    free(out);
    const int sr = tu_run_dptrain(&out, "train --backend sim --device cuda --replicas 2 %s %s --save %s/sim.ckpt", DATA,
                                  flags, dir);
    if (sr != 0) fail_msg("%s: the GPU sim: exit %d:\n%s", tag, sr, out ? out : "");
    free(out);
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/nccl.ckpt", dir), snprintf(b, sizeof b, "%s/sim.ckpt", dir);
    const char *diff = tu_ckpt_diff(a, b);
    if (diff) fail_msg("%s: --gpus 0,1 on one GPU through the device double against the GPU sim: %s", tag, diff);
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
    dp_dev *d;
    if (dp_dev_open("cuda", 0, 0, &d) != DP_OK) {
        fprintf(stderr, "skipped: %s\n", dp_last_error());
        return 77;
    }
    fprintf(stderr, "device: %s\n", d->desc);
    dp_dev_close(d);
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
