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

/* DataParallel over 4 replicas, its device part and optimizer step recorded as graphs where the
 * device records (the fake GPU does): the same as on the CPU. */
static void test_dp_gpu_matches_cpu(void **state) {
    (void)state;
    dp_config c;
    base_config(&c, "lenet-bn", "cpu");
    c.mode = DP_MODE_DP, c.replicas = 4;
    tr_result cpu = tr_run(&c);
    base_config(&c, "lenet-bn", GPU);
    c.mode = DP_MODE_DP, c.replicas = 4;
    tr_result gpu = tr_run(&c);
    if (fake()) tr_assert_same(&gpu, &cpu, "lenet-bn DP --replicas 4");
    else tr_assert_close(&gpu, &cpu, GPU_CPU_TOL, "lenet-bn DP --replicas 4");
    tr_free(&cpu), tr_free(&gpu);
}

/* --precision bf16 on the device against the CPU's bf16 reference: bitwise on the fake GPU (the CPU's
   kernels); on a GPU within BF16_GPU_TOL: the products are exact on both (TF32 holds bf16 values), but a
   sum in another order can land on the other side of a bf16 rounding boundary, one bf16 unit (2^-8)
   on that value, so the 20 steps drift further apart than fp32's GPU_CPU_TOL; 10x it, to be checked
   against the printed worst case on the first GPU run */
#define BF16_GPU_TOL (10 * GPU_CPU_TOL)

static void test_bf16_gpu_matches_cpu(void **state) {
    (void)state;
    dp_config c;
    base_config(&c, "lenet-bn", "cpu");
    c.precision = DP_PRECISION_BF16;
    tr_result cpu = tr_run(&c);
    base_config(&c, "lenet-bn", GPU);
    c.precision = DP_PRECISION_BF16;
    tr_result gpu = tr_run(&c);
    if (fake()) tr_assert_same(&gpu, &cpu, "bf16");
    else tr_assert_close(&gpu, &cpu, BF16_GPU_TOL, "bf16");
    tr_free(&cpu), tr_free(&gpu);
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

/* --steps-per-graph K (exec/launch.h): K DDP steps recorded once and replayed as one launch, their
 * metrics read once per launch. 2 replicas, 2 epochs of 10 batches (K 4: launches of 4, 4 and 2 a
 * epoch, the last recorded in the second; K 3: 3, 3, 3, 1), a warm-up whose learning rate changes
 * every step and a step down after the first epoch (each launch's key holds its rates, so the first
 * epoch's recordings are not replayed in the second): the parameters, momentum and every step's logged
 * loss are those of one step a launch, and on the fake GPU the CPU's bits; also with --accumulate 2
 * and a last step of fewer micro-steps. */
static void launch_config(dp_config *c, const char *model, const char *dev, int k) {
    base_config(c, model, dev);
    c->replicas = 2, c->data.samples = 64 * 10, c->epochs = 2, c->max_steps = 0, c->warmup_epochs = 0.5;
    c->lr_steps[0] = 1, c->n_lr_steps = 1, c->lr_gamma = 0.5f; /* the second epoch's launches at half the rate */
    c->steps_per_graph = k;
}

/* The run launched K steps at a time (its config line says so). */
static void assert_launched(const tr_result *r, int k) {
    char want[48];
    snprintf(want, sizeof want, "\"steps_per_launch\":%d", k);
    const char *at = strstr(r->config, want);
    if (!at || (at[strlen(want)] >= '0' && at[strlen(want)] <= '9'))
        fail_msg("no %s in the config line: %s", want, r->config);
}

static void same_as(const tr_result *gpu, const tr_result *cpu, const char *what) {
    if (fake()) tr_assert_same(gpu, cpu, what);
    else tr_assert_close(gpu, cpu, GPU_CPU_TOL, what);
}

static void test_steps_per_graph_bitwise(void **state) {
    (void)state;
    const char *models[] = {"lenet", "lenet-bn"};
    for (int m = 0; m < 2; m++) {
        dp_config c;
        launch_config(&c, models[m], "cpu", 1); /* the CPU refuses K > 1: it records no graphs */
        tr_result cpu = tr_run(&c);
        assert_launched(&cpu, 1);
        assert_int_equal(cpu.n_losses, 20);
        const int ks[] = {1, 3, 4};
        for (int i = 0; i < 3; i++) {
            launch_config(&c, models[m], GPU, ks[i]);
            tr_result gpu = tr_run(&c);
            char what[96];
            snprintf(what, sizeof what, "%s, --steps-per-graph %d", models[m], ks[i]);
            assert_launched(&gpu, ks[i]);
            same_as(&gpu, &cpu, what);
            tr_free(&gpu);
        }
        tr_free(&cpu);
    }
    /* --accumulate 2 over 11 batches: steps of 2 micro-steps and a last one of 1 (K 4: launches of 4
       steps in 8 micro-steps, then 2 in 3) */
    dp_config c;
    launch_config(&c, "lenet-bn", "cpu", 1);
    c.accumulate = 2, c.data.samples = 64 * 11;
    tr_result cpu = tr_run(&c);
    assert_int_equal(cpu.n_losses, 12);
    launch_config(&c, "lenet-bn", GPU, 4);
    c.accumulate = 2, c.data.samples = 64 * 11;
    tr_result gpu = tr_run(&c);
    assert_launched(&gpu, 4);
    same_as(&gpu, &cpu, "lenet-bn, --accumulate 2, --steps-per-graph 4");
    tr_free(&gpu), tr_free(&cpu);
}

/* A step that goes NaN/Inf inside a launch: the launch is undone and its steps run one at a time,
 * so --on-nan skip skips exactly that step and --on-nan stop stops there with the message of one
 * step a launch: a +Inf gradient at step 6 (the second launch's second step), and a loss that
 * overflows from the second step on (a learning rate of 1e30). */
static void test_steps_per_graph_nonfinite(void **state) {
    (void)state;
    for (int kind = 0; kind < 2; kind++) {
        dp_config c;
        for (int skip_it = 1; skip_it >= 0; skip_it--) {
            char cpu_msg[DP_ERROR_MAX] = "", gpu_msg[DP_ERROR_MAX] = "";
            tr_result cpu = {0};
            for (int dev = 0; dev < 2; dev++) {
                launch_config(&c, "lenet", dev ? GPU : "cpu", dev ? 4 : 1);
                c.on_nan_skip = skip_it;
                if (kind == 0) c.test.inf_grad_step = 6;
                else c.lr = 1e30f, c.warmup_epochs = 0;
                if (!skip_it) {
                    dp_status st = run_stopped(&c, dev ? gpu_msg : cpu_msg, DP_ERROR_MAX);
                    assert_int_equal(st, DP_ERR_NUMERIC);
                    continue;
                }
                tr_result r = tr_run(&c);
                if (!dev) {
                    cpu = r;
                    assert_int_equal(cpu.n_losses, kind == 0 ? 19 : 1); /* a skipped step logs no loss */
                    continue;
                }
                assert_launched(&r, 4);
                same_as(&r, &cpu, kind == 0 ? "+Inf gradient at step 6, --on-nan skip" : "overflow, --on-nan skip");
                tr_free(&r), tr_free(&cpu);
            }
            if (!skip_it && strcmp(gpu_msg, cpu_msg) != 0)
                fail_msg("--on-nan stop: \"%s\" with --steps-per-graph 4, \"%s\" on the CPU", gpu_msg, cpu_msg);
            if (!skip_it) print_message("--on-nan stop: %s\n", gpu_msg);
        }
    }
}

/* Stopped after step 7 (checkpoints every 3 steps cut the launches: 3, 3, 1) and resumed with
 * --steps-per-graph 4 from batch 7 (launches of 3, then 4, 4, 2): the bits of the uninterrupted
 * run on the CPU. */
static void test_steps_per_graph_resume(void **state) {
    (void)state;
    char dir[600], *o;
    snprintf(dir, sizeof dir, "%s", tu_path("launch_ck"));
    tu_sh(&o, "rm -rf %s", dir);
    free(o);
    dp_config c;
    launch_config(&c, "lenet-bn", "cpu", 1);
    tr_result whole = tr_run(&c);
    launch_config(&c, "lenet-bn", GPU, 4);
    c.max_steps = 7, c.checkpoint_dir = dir, c.save_every = 3;
    tr_result part = tr_run(&c);
    assert_int_equal(part.n_losses, 7);
    for (int i = 0; i < 7; i++)
        if (part.losses[i] != whole.losses[i] && fake()) fail_msg("step %d's loss differs before the stop", i + 1);
    tr_free(&part);
    launch_config(&c, "lenet-bn", GPU, 4);
    c.resume_path = dir, c.checkpoint_dir = dir;
    tr_result resumed = tr_run(&c);
    assert_launched(&resumed, 4);
    assert_int_equal(resumed.n, whole.n);
    if (fake() && memcmp(resumed.params, whole.params, whole.n * sizeof(float)) != 0) fail_msg("resumed parameters differ");
    if (fake() && memcmp(resumed.momentum, whole.momentum, whole.n * sizeof(float)) != 0) fail_msg("resumed momentum differs");
    tr_free(&resumed), tr_free(&whole);
    tu_sh(&o, "rm -rf %s", dir);
    free(o);
}

/* SIGTERM while step 6 runs (dp_test_hooks.sigterm_step): one step a launch stops after step 6;
 * four a launch stop after step 8, the end of the launch that held it (a step boundary: the state
 * the checkpoint holds), and the run resumed from there with four a launch ends with the bits of
 * the uninterrupted run on the CPU. */
static void test_steps_per_graph_sigterm(void **state) {
    (void)state;
    char dir[600], *o;
    snprintf(dir, sizeof dir, "%s", tu_path("launch_term"));
    dp_config c;
    launch_config(&c, "lenet-bn", "cpu", 1);
    tr_result whole = tr_run(&c);
    for (int k = 1; k <= 4; k += 3) {
        tu_sh(&o, "rm -rf %s", dir);
        free(o);
        launch_config(&c, "lenet-bn", GPU, k);
        c.test.sigterm_step = 6, c.checkpoint_dir = dir;
        tr_result part = tr_run(&c);
        assert_int_equal(part.n_losses, k == 1 ? 6 : 8);
        tr_free(&part);
        launch_config(&c, "lenet-bn", GPU, 4);
        c.resume_path = dir, c.checkpoint_dir = dir;
        tr_result resumed = tr_run(&c);
        assert_int_equal(resumed.n_losses, k == 1 ? 14 : 12);
        for (int i = 0; fake() && i < resumed.n_losses; i++)
            if (resumed.losses[i] != whole.losses[20 - resumed.n_losses + i])
                fail_msg("--steps-per-graph %d: the resumed run's loss at step %d differs", k, 21 - resumed.n_losses + i);
        if (fake() && memcmp(resumed.params, whole.params, whole.n * sizeof(float)) != 0)
            fail_msg("--steps-per-graph %d: resumed parameters differ", k);
        if (fake() && memcmp(resumed.momentum, whole.momentum, whole.n * sizeof(float)) != 0)
            fail_msg("--steps-per-graph %d: resumed momentum differs", k);
        tr_free(&resumed);
    }
    tr_free(&whole);
    tu_sh(&o, "rm -rf %s", dir);
    free(o);
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
        cmocka_unit_test(test_dp_gpu_matches_cpu),
        cmocka_unit_test(test_bf16_gpu_matches_cpu),
        cmocka_unit_test(test_augmented_batches_uploaded),
        cmocka_unit_test(test_gpu_sim_replicas_bitwise_ddp),
        cmocka_unit_test(test_gpu_sim_replicas_bitwise_dp),
        cmocka_unit_test(test_gpu_sim_sync_bn_bitwise),
        cmocka_unit_test(test_gpu_checkpoint),
        cmocka_unit_test(test_gpu_resume_is_exact),
        cmocka_unit_test(test_nonfinite_gradients_ddp),
        cmocka_unit_test(test_nonfinite_gradients_dp),
        cmocka_unit_test(test_steps_per_graph_bitwise),
        cmocka_unit_test(test_steps_per_graph_nonfinite),
        cmocka_unit_test(test_steps_per_graph_resume),
        cmocka_unit_test(test_steps_per_graph_sigterm),
        cmocka_unit_test(test_nccl_one_rank_ddp),
        cmocka_unit_test(test_nccl_one_rank_dp),
        cmocka_unit_test(test_nccl_launchers),
        cmocka_unit_test(test_gpu_profile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
