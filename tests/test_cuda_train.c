/* Training on a GPU (--device cuda) against the CPU and against itself: 20 steps of lenet and
 * lenet-bn on the GPU agree with the CPU within fp32 rounding (cuBLAS and OpenBLAS add in
 * different orders); the GPU sim with N = 2, 4, 8 replicas, DDP and DP, gives bitwise the
 * parameters, momentum and losses of one replica (the lanes and the ordered all-reduce are
 * the CPU's, so the same kernels run the same shapes); a GPU run repeats its own bits; a GPU
 * checkpoint holds the trained weights, and a run resumed from one is bitwise the run that was
 * never stopped. Synthetic data. Exits 77 (skipped) without a device. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/device.h"
#include "io/checkpoint.h"
#include "train/trainer.h"

typedef struct {
    float *params, *momentum;
    size_t n;
    int all_equal; /* every replica's parameters bitwise equal to replica 0's */
    double losses[64];
    int n_losses;
    dp_layout layout;
} run_result;

static void base_config(dp_config *c, const char *model, const char *device) {
    dp_config_defaults(c);
    c->model = model;
    c->device = device;
    c->data.name = "synthetic";
    c->data.dir = "";
    if (strcmp(model, "lenet") == 0) c->data.c = 1, c->data.h = 28, c->data.w = 28;
    else c->data.c = 3, c->data.h = 32, c->data.w = 32;
    c->data.n_classes = 10;
    c->data.samples = 64 * 24;
    c->data.seed = 5;
    c->seed = 7;
    c->epochs = 1;
    c->max_steps = 20;
    c->batch_size = 64;
    c->lr = 0.05f;
    c->momentum = 0.9f;
    c->weight_decay = 1e-4f;
    c->threads = 2;
    c->workers = 0;
    c->quiet = 1;
}

static void read_losses(const char *log, run_result *r) {
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    char line[4096];
    r->n_losses = 0;
    while (fgets(line, sizeof line, f)) {
        char *p = strstr(line, "\"event\":\"step\"");
        if (!p) continue;
        p = strstr(line, "\"loss\":");
        assert_non_null(p);
        if (r->n_losses < 64) r->losses[r->n_losses++] = strtod(p + 7, NULL);
    }
    fclose(f);
}

static run_result run(dp_config *c) {
    run_result r = {0};
    char log[600];
    snprintf(log, sizeof log, "%s", tu_path("cuda_train.jsonl"));
    c->log_path = log;
    dp_trainer *t;
    if (dp_trainer_create(c, &t) != DP_OK) fail_msg("create: %s", dp_last_error());
    if (dp_trainer_run(t) != DP_OK) fail_msg("run: %s", dp_last_error());
    r.n = t->model.params.n;
    r.params = malloc(r.n * sizeof(float));
    r.momentum = malloc(r.n * sizeof(float));
    float *other = malloc(r.n * sizeof(float));
    assert_non_null(r.params), assert_non_null(r.momentum), assert_non_null(other);
    const dp_dev *d = t->dev;
    assert_int_equal(d->download(d, r.params, t->rep[0].params, r.n * sizeof(float)), DP_OK);
    assert_int_equal(d->download(d, r.momentum, t->rep[0].momentum, r.n * sizeof(float)), DP_OK);
    r.all_equal = 1;
    for (int i = 1; i < t->n_local; i++) {
        assert_int_equal(d->download(d, other, t->rep[i].params, r.n * sizeof(float)), DP_OK);
        if (memcmp(other, r.params, r.n * sizeof(float)) != 0) r.all_equal = 0;
    }
    free(other);
    r.layout.n_tensors = t->model.params.n_tensors;
    r.layout.tensors = malloc((size_t)r.layout.n_tensors * sizeof *r.layout.tensors);
    memcpy(r.layout.tensors, t->model.params.tensors, (size_t)r.layout.n_tensors * sizeof *r.layout.tensors);
    dp_trainer_destroy(t);
    read_losses(log, &r);
    remove(log);
    return r;
}

static void free_result(run_result *r) {
    free(r->params);
    free(r->momentum);
    free(r->layout.tensors);
}

static void assert_same(const run_result *a, const run_result *b, const char *what) {
    assert_int_equal(a->n, b->n);
    for (int i = 0; i < a->layout.n_tensors; i++) {
        const dp_tensor_info *ti = &a->layout.tensors[i];
        if (memcmp(a->params + ti->s.offset, b->params + ti->s.offset, ti->s.count * sizeof(float)))
            fail_msg("%s: tensor %s differs (%.3g relative)", what, ti->name,
                     tu_rel_diff(a->params + ti->s.offset, b->params + ti->s.offset, ti->s.count));
    }
    if (memcmp(a->momentum, b->momentum, a->n * sizeof(float)) != 0) fail_msg("%s: the momentum differs", what);
    assert_int_equal(a->n_losses, b->n_losses);
    for (int i = 0; i < a->n_losses; i++)
        if (a->losses[i] != b->losses[i]) fail_msg("%s: step %d loss %.9g vs %.9g", what, i + 1, a->losses[i], b->losses[i]);
}

/* GPU against CPU: per tensor max |a-b| / max |b| <= tol, and the loss curves within tol. */
static void assert_close(const run_result *a, const run_result *b, double tol, const char *what) {
    assert_int_equal(a->n, b->n);
    double worst = 0;
    for (int i = 0; i < a->layout.n_tensors; i++) {
        const dp_tensor_info *ti = &a->layout.tensors[i];
        double rel = tu_rel_diff(a->params + ti->s.offset, b->params + ti->s.offset, ti->s.count);
        if (rel > worst) worst = rel;
        if (rel > tol) fail_msg("%s: tensor %s differs by %.3g relative (tolerance %.1g)", what, ti->name, rel, tol);
    }
    assert_int_equal(a->n_losses, b->n_losses);
    for (int i = 0; i < a->n_losses; i++)
        if (fabs(a->losses[i] - b->losses[i]) > tol * fabs(b->losses[i]))
            fail_msg("%s: step %d loss %.9g vs %.9g", what, i + 1, a->losses[i], b->losses[i]);
    print_message("%s: worst tensor %.3g relative, last loss %.9g vs %.9g\n", what, worst,
                  a->losses[a->n_losses - 1], b->losses[b->n_losses - 1]);
}

/* 20 SGD steps compound fp32 rounding differences of the matrix products' summation order;
   measured on an H100: see the printed worst case */
#define GPU_CPU_TOL 2e-3

static void gpu_vs_cpu(const char *model, int sync_bn) {
    dp_config c;
    base_config(&c, model, "cpu");
    c.sync_bn = sync_bn;
    run_result cpu = run(&c);
    base_config(&c, model, "cuda");
    c.sync_bn = sync_bn;
    run_result gpu = run(&c);
    assert_close(&gpu, &cpu, GPU_CPU_TOL, model);
    free_result(&cpu), free_result(&gpu);
}

static void test_lenet_gpu_matches_cpu(void **state) {
    (void)state;
    gpu_vs_cpu("lenet", 0);
}

static void test_lenet_bn_gpu_matches_cpu(void **state) {
    (void)state;
    gpu_vs_cpu("lenet-bn", 0);
}

static void replicas_bitwise(const char *model, int dp_semantics, int sync_bn) {
    dp_config c;
    base_config(&c, model, "cuda");
    c.sync_bn = sync_bn;
    run_result one = run(&c);
    run_result again = run(&c);
    assert_same(&again, &one, "the same GPU run twice");
    free_result(&again);
    for (int n = 2; n <= 8; n *= 2) {
        base_config(&c, model, "cuda");
        c.replicas = n;
        c.sync_bn = sync_bn;
        if (dp_semantics) c.mode = DP_MODE_DP;
        run_result r = run(&c);
        char what[96];
        snprintf(what, sizeof what, "%s %s --replicas %d --device cuda", model, dp_semantics ? "DP" : "DDP", n);
        if (!r.all_equal) fail_msg("%s: the replicas' parameters disagree", what);
        assert_same(&r, &one, what);
        free_result(&r);
    }
    free_result(&one);
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
    base_config(&c, "lenet-bn", "cuda");
    char path[600];
    snprintf(path, sizeof path, "%s", tu_path("gpu.safetensors"));
    c.save_path = path;
    c.replicas = 2;
    run_result r = run(&c);
    dp_model m;
    assert_int_equal(dp_model_build("lenet-bn", (dp_shape){3, 32, 32}, 10, &m), DP_OK);
    assert_int_equal(m.params.n, r.n);
    float *p = calloc(m.params.n, sizeof *p), *b = calloc(m.buffers.n + 1, sizeof *b);
    assert_non_null(p), assert_non_null(b);
    if (dp_checkpoint_load_weights("--load", path, &m, p, b) != DP_OK) fail_msg("%s", dp_last_error());
    for (int i = 0; i < m.params.n_tensors; i++) {
        const dp_tensor_info *ti = &m.params.tensors[i];
        if (memcmp(p + ti->s.offset, r.params + ti->s.offset, ti->s.count * sizeof(float)) != 0)
            fail_msg("checkpoint tensor %s differs from the GPU's", ti->name);
    }
    free(p), free(b);
    dp_model_free(&m);
    remove(path);
    free_result(&r);
}

/* Exact resume on the GPU: 9 steps, checkpoints, then a resumed run to step 20 gives the bits of
 * 20 uninterrupted steps (the arenas go through the host copies both ways). */
static void test_gpu_resume_is_exact(void **state) {
    (void)state;
    dp_config c;
    base_config(&c, "lenet-bn", "cuda");
    c.replicas = 2;
    run_result whole = run(&c);
    char dir[600];
    snprintf(dir, sizeof dir, "%s", tu_path("gpu_ck"));
    char *o;
    tu_sh(&o, "rm -rf %s", dir);
    free(o);
    base_config(&c, "lenet-bn", "cuda");
    c.replicas = 2;
    c.max_steps = 9;
    c.checkpoint_dir = dir;
    c.save_every = 1;
    run_result part = run(&c);
    free_result(&part);
    base_config(&c, "lenet-bn", "cuda");
    c.replicas = 2;
    c.resume_path = dir;
    c.checkpoint_dir = dir;
    run_result resumed = run(&c);
    /* the losses of the resumed run are steps 10..20 only: compare the parameters and momentum */
    assert_int_equal(resumed.n, whole.n);
    if (memcmp(resumed.params, whole.params, whole.n * sizeof(float)) != 0) fail_msg("resumed parameters differ");
    if (memcmp(resumed.momentum, whole.momentum, whole.n * sizeof(float)) != 0) fail_msg("resumed momentum differs");
    free_result(&resumed), free_result(&whole);
    tu_sh(&o, "rm -rf %s", dir);
    free(o);
}

/* --backend nccl with one rank (the lent machine has one GPU) trains to the bits of the GPU sim
 * with one replica, DDP and DP: the same kernels, the same lanes, and collectives that move
 * nothing; launched plainly, with torchrun's variables, and under mpirun -np 1. */
static void nccl_one_rank(int dp_semantics) {
    dp_config c;
    base_config(&c, "lenet", "cuda");
    if (dp_semantics) c.mode = DP_MODE_DP;
    run_result sim = run(&c);
    base_config(&c, "lenet", NULL);
    c.backend = "nccl";
    if (dp_semantics) c.mode = DP_MODE_DP;
    run_result nccl = run(&c);
    assert_same(&nccl, &sim, dp_semantics ? "nccl DP, one rank" : "nccl DDP, one rank");
    free_result(&sim), free_result(&nccl);
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

int main(void) {
    dp_dev *d;
    if (dp_dev_open("cuda", 0, 0, &d) != DP_OK) {
        fprintf(stderr, "skipped: %s\n", dp_last_error());
        return 77;
    }
    fprintf(stderr, "device: %s\n", d->desc);
    dp_dev_close(d);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lenet_gpu_matches_cpu),
        cmocka_unit_test(test_lenet_bn_gpu_matches_cpu),
        cmocka_unit_test(test_gpu_sim_replicas_bitwise_ddp),
        cmocka_unit_test(test_gpu_sim_replicas_bitwise_dp),
        cmocka_unit_test(test_gpu_sim_sync_bn_bitwise),
        cmocka_unit_test(test_gpu_checkpoint),
        cmocka_unit_test(test_gpu_resume_is_exact),
        cmocka_unit_test(test_nccl_one_rank_ddp),
        cmocka_unit_test(test_nccl_one_rank_dp),
        cmocka_unit_test(test_nccl_launchers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
