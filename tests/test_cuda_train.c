/* Training on a GPU (--device cuda) against the CPU and against itself: 20 steps of lenet and
 * lenet-bn on the GPU agree with the CPU within fp32 rounding (cuBLAS and OpenBLAS add in
 * different orders); the GPU sim with N = 2, 4, 8 replicas, DDP and DP, gives bitwise the
 * parameters, momentum and losses of one replica (the lanes and the ordered all-reduce are
 * the CPU's, so the same kernels run the same shapes); a GPU run repeats its own bits; a GPU
 * checkpoint holds the trained weights, and a run resumed from one is bitwise the run that was
 * never stopped; a NaN/Inf gradient with a finite loss is refused as on the CPU; the overhead
 * model's timing run times a GPU's nodes with events. Synthetic data.
 * Exits 77 (skipped) without a device.
 *
 * DP_TEST_GPU=fakegpu runs the same suite on the test device that behaves like a GPU on the CPU
 * (tests/fakegpu/: memory the host cannot read, streams run later by worker threads with random
 * delays, events, graphs): its kernels are the CPU's, so there it must equal the CPU bitwise, and
 * a missing wait or join in the executor shows up as a difference. The cases that start the
 * dptrain binary or NCCL need a real GPU and are skipped there. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/devices.h"
#include "kernels/device.h"
#include "fakegpu/fakegpu.h"
#include "io/checkpoint.h"
#include "train/trainer.h"
#include "trainrun.h"

/* the device under test: "cuda", or "fakegpu" (DP_TEST_GPU) */
static const char *GPU = "cuda";
static int fake(void) { return strcmp(GPU, "fakegpu") == 0; }

static void base_config(dp_config *c, const char *model, const char *device) {
    tr_base_config(c, model);
    c->device = device;
}

/* 20 SGD steps compound fp32 rounding differences of the matrix products' summation order;
   measured on an H100: see the printed worst case */
#define GPU_CPU_TOL 2e-3

static void gpu_vs_cpu(const char *model, int sync_bn) {
    dp_config c;
    base_config(&c, model, "cpu");
    c.sync_bn = sync_bn;
    tr_result cpu = tr_run(&c);
    base_config(&c, model, GPU);
    c.sync_bn = sync_bn;
    tr_result gpu = tr_run(&c);
    /* the training set lives on the device, which gathers each batch from its indices */
    assert_int_equal(gpu.data_on_device, 1);
    assert_int_equal(cpu.data_on_device, 0);
    if (fake()) tr_assert_same(&gpu, &cpu, model); /* the CPU's kernels, run as a GPU runs them */
    else tr_assert_close(&gpu, &cpu, GPU_CPU_TOL, model);
    tr_free(&cpu), tr_free(&gpu);
}

static void test_lenet_gpu_matches_cpu(void **state) {
    (void)state;
    gpu_vs_cpu("lenet", 0);
}

static void test_lenet_bn_gpu_matches_cpu(void **state) {
    (void)state;
    gpu_vs_cpu("lenet-bn", 0);
}

/* With --augment the host's loader makes the batches and they go up through the pinned staging
 * (the data set stays on the host): the same against the CPU, over 2 replicas. */
static void test_augmented_batches_uploaded(void **state) {
    (void)state;
    dp_config c;
    base_config(&c, "lenet-bn", "cpu");
    c.augment = 1, c.replicas = 2;
    tr_result cpu = tr_run(&c);
    base_config(&c, "lenet-bn", GPU);
    c.augment = 1, c.replicas = 2;
    tr_result gpu = tr_run(&c);
    assert_int_equal(gpu.data_on_device, 0);
    if (fake()) tr_assert_same(&gpu, &cpu, "--augment");
    else tr_assert_close(&gpu, &cpu, GPU_CPU_TOL, "--augment");
    tr_free(&cpu), tr_free(&gpu);
}

static void replicas_bitwise(const char *model, int dp_semantics, int sync_bn) {
    dp_config c;
    base_config(&c, model, GPU);
    c.sync_bn = sync_bn;
    /* DP against DP with one replica: DP scatters contiguous blocks, as nn.DataParallel does, so its
       bits equal DP's at every replica count, not DDP's */
    if (dp_semantics) c.mode = DP_MODE_DP;
    tr_result one = tr_run(&c);
    tr_result again = tr_run(&c);
    tr_assert_same(&again, &one, "the same GPU run twice");
    tr_free(&again);
    for (int n = 2; n <= 8; n *= 2) {
        base_config(&c, model, GPU);
        c.replicas = n;
        c.sync_bn = sync_bn;
        if (dp_semantics) c.mode = DP_MODE_DP;
        tr_result r = tr_run(&c);
        char what[96];
        snprintf(what, sizeof what, "%s %s --replicas %d --device %s", model, dp_semantics ? "DP" : "DDP", n, GPU);
        if (!r.all_equal) fail_msg("%s: the replicas' parameters disagree", what);
        tr_assert_same(&r, &one, what);
        tr_free(&r);
    }
    tr_free(&one);
}

static void test_gpu_sim_replicas_bitwise_ddp(void **state) {
    (void)state;
    replicas_bitwise("lenet", 0, 0);
}

static void test_gpu_sim_replicas_bitwise_dp(void **state) {
    (void)state;
    replicas_bitwise("lenet", 1, 0);
}

static void test_gpu_sim_sync_bn_bitwise(void **state) {
    (void)state;
    replicas_bitwise("lenet-bn", 0, 1);
}

/* A checkpoint written from the GPU holds the GPU's weights (they travel through the host copy). */
static void test_gpu_checkpoint(void **state) {
    (void)state;
    dp_config c;
    base_config(&c, "lenet-bn", GPU);
    char path[600];
    snprintf(path, sizeof path, "%s", tu_path("gpu.safetensors"));
    c.save_path = path;
    c.replicas = 2;
    tr_result r = tr_run(&c);
    dp_model m;
    assert_int_equal(dp_model_build("lenet-bn", (dp_shape){3, 32, 32}, 10, &m), DP_OK);
    assert_int_equal(m.params.n, r.n);
    float *p = calloc(m.params.n, sizeof *p), *b = calloc(m.buffers.n + 1, sizeof *b);
    assert_non_null(p), assert_non_null(b);
    if (dp_checkpoint_load_weights("--load", path, &m, p, b, NULL) != DP_OK) fail_msg("%s", dp_last_error());
    for (int i = 0; i < m.params.n_tensors; i++) {
        const dp_tensor_info *ti = &m.params.tensors[i];
        if (memcmp(p + ti->s.offset, r.params + ti->s.offset, ti->s.count * sizeof(float)) != 0)
            fail_msg("checkpoint tensor %s differs from the GPU's", ti->name);
    }
    free(p), free(b);
    dp_model_free(&m);
    remove(path);
    tr_free(&r);
}

/* Exact resume on the GPU: 9 steps, checkpoints, then a resumed run to step 20 gives the bits of
 * 20 uninterrupted steps (the arenas go through the host copies both ways). */
static void test_gpu_resume_is_exact(void **state) {
    (void)state;
    dp_config c;
    base_config(&c, "lenet-bn", GPU);
    c.replicas = 2;
    tr_result whole = tr_run(&c);
    char dir[600];
    snprintf(dir, sizeof dir, "%s", tu_path("gpu_ck"));
    char *o;
    tu_sh(&o, "rm -rf %s", dir);
    free(o);
    base_config(&c, "lenet-bn", GPU);
    c.replicas = 2;
    c.max_steps = 9;
    c.checkpoint_dir = dir;
    c.save_every = 1;
    tr_result part = tr_run(&c);
    tr_free(&part);
    base_config(&c, "lenet-bn", GPU);
    c.replicas = 2;
    c.resume_path = dir;
    c.checkpoint_dir = dir;
    tr_result resumed = tr_run(&c);
    /* the losses of the resumed run are steps 10..20 only: compare the parameters and momentum */
    assert_int_equal(resumed.n, whole.n);
    if (memcmp(resumed.params, whole.params, whole.n * sizeof(float)) != 0) fail_msg("resumed parameters differ");
    if (memcmp(resumed.momentum, whole.momentum, whole.n * sizeof(float)) != 0) fail_msg("resumed momentum differs");
    tr_free(&resumed), tr_free(&whole);
    tu_sh(&o, "rm -rf %s", dir);
    free(o);
}

/* A run expected to stop: its status, and its message into msg. */
static dp_status run_stopped(dp_config *c, char *msg, size_t n) {
    char log[600];
    snprintf(log, sizeof log, "%s", tu_path("stopped.jsonl"));
    c->log_path = log;
    dp_trainer *t;
    if (dp_trainer_create(c, &t) != DP_OK) fail_msg("create: %s", dp_last_error());
    const dp_status s = dp_trainer_run(t);
    snprintf(msg, n, "%s", dp_last_error());
    dp_trainer_destroy(t);
    remove(log);
    return s;
}

/* A gradient made +Inf at step 3 while the loss stays finite (dp_test_hooks.inf_grad_step): the
 * device checks the gradients where they are, in the step's metrics, and the run ends as the
 * CPU's, whose SGD step checks them: with --on-nan skip the step is skipped (on the fake GPU the
 * parameters, momentum and losses are bitwise the CPU's), without it the run stops with the CPU's
 * message. 2 replicas, DDP and DP (only the master steps). On the fake GPU the check waits for
 * nothing: a run with the fault makes as many host round trips as one without. */
static void nonfinite_gradients_like_cpu(int dp_semantics) {
    const char *what = dp_semantics ? "DP" : "DDP";
    dp_config c;
    unsigned long waits[2] = {0, 0};
    for (int fault = 0; fault < 2; fault++) { /* the same run, without and with the fault */
        base_config(&c, "lenet", "cpu");
        c.test.inf_grad_step = fault ? 3 : 0;
        c.replicas = 2, c.max_steps = 6, c.on_nan_skip = 1, c.mode = dp_semantics ? DP_MODE_DP : DP_MODE_DDP;
        tr_result cpu = tr_run(&c);
        c.device = GPU;
        const unsigned long before = dp_fakegpu_host_waits();
        tr_result gpu = tr_run(&c);
        waits[fault] = dp_fakegpu_host_waits() - before;
        char label[96];
        snprintf(label, sizeof label, "%s, --on-nan skip, %s", what, fault ? "+Inf gradient at step 3" : "no fault");
        if (fake()) tr_assert_same(&gpu, &cpu, label);
        else tr_assert_close(&gpu, &cpu, GPU_CPU_TOL, label);
        for (size_t i = 0; i < gpu.n; i++)
            if (!isfinite(gpu.params[i])) fail_msg("%s: parameter %zu is %g: the gradient was applied", label, i,
                                                   gpu.params[i]);
        assert_int_equal(gpu.n_losses, fault ? 5 : 6); /* the skipped step logs no loss */
        tr_free(&cpu), tr_free(&gpu);
    }
    if (fake() && waits[1] != waits[0])
        fail_msg("%s: %lu host waits with the fault, %lu without: the check waited", what, waits[1], waits[0]);
    char cpu_msg[DP_ERROR_MAX], gpu_msg[DP_ERROR_MAX];
    base_config(&c, "lenet", "cpu");
    c.replicas = 2, c.max_steps = 6, c.mode = dp_semantics ? DP_MODE_DP : DP_MODE_DDP, c.test.inf_grad_step = 3;
    const dp_status cs = run_stopped(&c, cpu_msg, sizeof cpu_msg);
    c.device = GPU;
    const dp_status gs = run_stopped(&c, gpu_msg, sizeof gpu_msg);
    if (cs != DP_ERR_NUMERIC || !strstr(cpu_msg, "step 3: the all-reduced gradients hold NaN or Inf"))
        fail_msg("%s, the CPU: status %d: %s", what, (int)cs, cpu_msg);
    if (gs != cs || strcmp(gpu_msg, cpu_msg) != 0)
        fail_msg("%s, --on-nan stop: the device ends with status %d \"%s\", the CPU with %d \"%s\"", what, (int)gs,
                 gpu_msg, (int)cs, cpu_msg);
}

static void test_nonfinite_gradients_ddp(void **state) {
    (void)state;
    nonfinite_gradients_like_cpu(0);
}

static void test_nonfinite_gradients_dp(void **state) {
    (void)state;
    nonfinite_gradients_like_cpu(1);
}

/* --backend nccl with one rank (the lent machine has one GPU) trains to the bits of the GPU sim
 * with one replica, DDP and DP: the same kernels, the same lanes, and collectives that move
 * nothing; launched plainly, with torchrun's variables, and under mpirun -np 1. */
static void nccl_one_rank(int dp_semantics) {
    if (fake()) skip(); /* NCCL needs a CUDA device */
    dp_config c;
    base_config(&c, "lenet", GPU);
    if (dp_semantics) c.mode = DP_MODE_DP;
    tr_result sim = tr_run(&c);
    base_config(&c, "lenet", NULL);
    c.backend = "nccl";
    if (dp_semantics) c.mode = DP_MODE_DP;
    tr_result nccl = tr_run(&c);
    tr_assert_same(&nccl, &sim, dp_semantics ? "nccl DP, one rank" : "nccl DDP, one rank");
    tr_free(&sim), tr_free(&nccl);
}

static void test_nccl_one_rank_ddp(void **state) {
    (void)state;
    nccl_one_rank(0);
}

static void test_nccl_one_rank_dp(void **state) {
    (void)state;
    nccl_one_rank(1);
}

static void test_nccl_launchers(void **state) {
    (void)state;
    if (fake()) skip(); /* the dptrain binary has no test device */
    char a[600], b[600], m[600];
    snprintf(a, sizeof a, "%s", tu_path("nccl_sim.safetensors"));
    snprintf(b, sizeof b, "%s", tu_path("nccl_torchrun.safetensors"));
    snprintf(m, sizeof m, "%s", tu_path("nccl_mpirun.safetensors"));
    const char *args = "train --dataset synthetic --shape 1x28x28 --samples 1024 --epochs 1 --quiet";
    char *o;
    int rc = tu_run_dptrain(&o, "%s --device cuda --save %s", args, a);
    if (rc) fail_msg("sim: rc %d:\n%s", rc, o);
    free(o);
    rc = tu_sh(&o, "RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 %s %s --backend nccl "
               "--save %s", getenv("DPTRAIN") ? getenv("DPTRAIN") : "./dptrain", args, b);
    if (rc) fail_msg("torchrun-style: rc %d:\n%s", rc, o);
    free(o);
    const char *diff = tu_ckpt_diff(a, b);
    if (diff) fail_msg("torchrun-style nccl against the sim: %s", diff);
    rc = tu_sh(&o, "command -v mpirun >/dev/null || exit 77; OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
               "mpirun -np 1 %s %s --backend nccl --save %s", getenv("DPTRAIN") ? getenv("DPTRAIN") : "./dptrain",
               args, m);
    if (rc != 77) {
        if (rc) fail_msg("mpirun -np 1: rc %d:\n%s", rc, o);
        diff = tu_ckpt_diff(a, m);
        if (diff) fail_msg("mpirun nccl against the sim: %s", diff);
    }
    free(o);
    remove(a), remove(b), remove(m);
}

/* The overhead model's compute on a GPU: the timing run's events give every node a positive
 * forward and backward time, the profile names the GPU, and a topology of CPU processes is
 * refused (a GPU's node times cannot stand for them). */
static void test_gpu_profile(void **state) {
    (void)state;
    if (fake()) skip(); /* the dptrain binary has no test device */
    char prof[600];
    snprintf(prof, sizeof prof, "%s", tu_path("gpu.profile"));
    char *o;
    /* synthetic data: the GPU machine has no data set */
    int rc = tu_run_dptrain(&o, "predict --device cuda --model lenet --dataset synthetic --shape 1x28x28 "
                                "--samples 640 --batch-size 64 --topology nvlink4 --save-profile %s", prof);
    if (rc) fail_msg("predict --device cuda: rc %d:\n%s", rc, o);
    free(o);
    FILE *f = fopen(prof, "r");
    assert_non_null(f);
    char line[256], device[64] = "";
    int times = 0, positive = 0;
    while (fgets(line, sizeof line, f)) {
        int i;
        double fwd, bwd;
        if (sscanf(line, "device %63s", device) == 1) continue;
        if (sscanf(line, "time %d %lf %lf", &i, &fwd, &bwd) == 3) times++, positive += fwd > 0 && bwd > 0;
    }
    fclose(f);
    if (strncmp(device, "cpu", 3) == 0 || !device[0]) fail_msg("the profile's device is '%s', not the GPU", device);
    if (times == 0 || positive != times) fail_msg("%d of %d node times positive", positive, times);
    rc = tu_run_dptrain(&o, "predict --device cuda --model lenet --dataset synthetic --shape 1x28x28 --samples 640 "
                            "--batch-size 64 --topology host");
    if (rc == 0 || !strstr(o, "CPU processes")) fail_msg("--topology host on a GPU: rc %d:\n%s", rc, o);
    free(o);
    remove(prof);
}

int main(void) {
    const char *gpu = getenv("DP_TEST_GPU");
    if (gpu && *gpu) GPU = gpu;
    if (fake() && dp_fakegpu_register() != DP_OK) {
        fprintf(stderr, "%s\n", dp_last_error());
        return 1;
    }
    dp_dev *d;
    if (dp_dev_open(GPU, 0, 0, NULL, &d) != DP_OK) {
        fprintf(stderr, "skipped: %s\n", dp_last_error());
        return 77;
    }
    fprintf(stderr, "device: %s\n", d->desc);
    dp_dev_close(d);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lenet_gpu_matches_cpu),
        cmocka_unit_test(test_lenet_bn_gpu_matches_cpu),
        cmocka_unit_test(test_augmented_batches_uploaded),
        cmocka_unit_test(test_gpu_sim_replicas_bitwise_ddp),
        cmocka_unit_test(test_gpu_sim_replicas_bitwise_dp),
        cmocka_unit_test(test_gpu_sim_sync_bn_bitwise),
        cmocka_unit_test(test_gpu_checkpoint),
        cmocka_unit_test(test_gpu_resume_is_exact),
        cmocka_unit_test(test_nonfinite_gradients_ddp),
        cmocka_unit_test(test_nonfinite_gradients_dp),
        cmocka_unit_test(test_nccl_one_rank_ddp),
        cmocka_unit_test(test_nccl_one_rank_dp),
        cmocka_unit_test(test_nccl_launchers),
        cmocka_unit_test(test_gpu_profile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
