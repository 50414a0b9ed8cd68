/* Data-parallel math is what it claims to be: N replicas give the parameters of one (DDP and
 * DP), overlap and bucket size change nothing, accumulation over K micro-batches equals a
 * bigger batch, SyncBN equals BN over the global batch. Synthetic LeNet-shaped data, 20 steps. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/trainer.h"

typedef struct {
    float *params;       /* replica 0's */
    size_t n;
    int all_equal;       /* every replica's parameters bitwise equal to replica 0's */
    double losses[64];
    int n_losses;
    dp_layout layout;    /* copy of the tensor table for per-tensor comparisons */
} run_result;

static void base_config(dp_config *c, const char *model) {
    dp_config_defaults(c);
    c->model = model;
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
    snprintf(log, sizeof log, "%s", tu_path("equiv.jsonl"));
    c->log_path = log;
    dp_trainer *t;
    dp_status s = dp_trainer_create(c, &t);
    if (s != DP_OK) fail_msg("create: %s", dp_last_error());
    s = dp_trainer_run(t);
    if (s != DP_OK) fail_msg("run: %s", dp_last_error());
    r.n = t->model.params.n;
    r.params = malloc(r.n * sizeof(float));
    memcpy(r.params, t->rep[0].params, r.n * sizeof(float));
    r.all_equal = 1;
    for (int i = 1; i < t->n_local; i++)
        if (memcmp(t->rep[i].params, t->rep[0].params, r.n * sizeof(float)) != 0) r.all_equal = 0;
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
    free(r->layout.tensors);
}

/* Per tensor: max |a-b| / max |b| <= tol; and the loss curves agree within tol. */
static void assert_close(const run_result *a, const run_result *b, double tol, const char *what) {
    assert_int_equal(a->n, b->n);
    for (int i = 0; i < a->layout.n_tensors; i++) {
        const dp_tensor_info *ti = &a->layout.tensors[i];
        double rel = tu_rel_diff(a->params + ti->s.offset, b->params + ti->s.offset, ti->s.count);
        if (rel > tol) fail_msg("%s: tensor %s differs by %.3g relative (tolerance %.1g)", what, ti->name, rel, tol);
    }
    assert_int_equal(a->n_losses, b->n_losses);
    for (int i = 0; i < a->n_losses; i++)
        if (fabs(a->losses[i] - b->losses[i]) > tol * fabs(b->losses[i]) + 1e-7)
            fail_msg("%s: step %d loss %.9g vs %.9g", what, i + 1, a->losses[i], b->losses[i]);
}

static void test_ddp_n_replicas_match_one(void **state) {
    (void)state;
    dp_config c;
    base_config(&c, "lenet");
    run_result one = run(&c);
    assert_int_equal(one.n_losses, 20);
    const int ns[] = {2, 3, 4, 8};
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
        base_config(&c, "lenet");
        c.replicas = ns[k];
        run_result r = run(&c);
        char what[64];
        snprintf(what, sizeof what, "DDP N=%d vs N=1", ns[k]);
        if (!r.all_equal) fail_msg("%s: replicas disagree", what);
        assert_close(&r, &one, 1e-5, what);
        free_result(&r);
    }
    free_result(&one);
}

static void test_ddp_uneven_batch(void **state) {
    (void)state;
    dp_config c;
    base_config(&c, "lenet");
    c.batch_size = 60; /* 8 replicas: 8,8,8,8,7,7,7,7 samples */
    run_result one = run(&c);
    base_config(&c, "lenet");
    c.batch_size = 60;
    c.replicas = 8;
    run_result r = run(&c);
    assert_true(r.all_equal);
    assert_close(&r, &one, 1e-5, "DDP N=8, batch 60");
    free_result(&r);
    free_result(&one);
}

static void test_dp_equals_ddp(void **state) {
    (void)state;
    dp_config c;
    base_config(&c, "lenet");
    c.replicas = 4;
    run_result ddp = run(&c);
    base_config(&c, "lenet");
    c.replicas = 4;
    c.mode = DP_MODE_DP;
    run_result dp = run(&c);
    assert_close(&dp, &ddp, 1e-6, "DP vs DDP, N=4");
    free_result(&dp);
    free_result(&ddp);
}

static void test_overlap_and_buckets_change_nothing(void **state) {
    (void)state;
    dp_config c;
    base_config(&c, "lenet");
    c.replicas = 3;
    run_result ref = run(&c);
    base_config(&c, "lenet");
    c.replicas = 3;
    c.overlap = 0;
    run_result no = run(&c);
    assert_memory_equal(no.params, ref.params, ref.n * sizeof(float));
    const double mbs[] = {0.001, 0.01, 0.1, 25};
    for (size_t k = 0; k < sizeof mbs / sizeof *mbs; k++) {
        base_config(&c, "lenet");
        c.replicas = 3;
        c.bucket_mb = mbs[k];
        run_result b = run(&c);
        if (memcmp(b.params, ref.params, ref.n * sizeof(float)) != 0)
            fail_msg("--bucket-mb %g changed the parameters", mbs[k]);
        free_result(&b);
    }
    free_result(&no);
    free_result(&ref);
}

static void test_accumulate_matches_micro_batches(void **state) {
    (void)state;
    dp_config c;
    base_config(&c, "lenet");
    c.replicas = 2, c.accumulate = 2, c.batch_size = 64, c.max_steps = 10;
    run_result a = run(&c);
    base_config(&c, "lenet");
    c.replicas = 1, c.accumulate = 4, c.batch_size = 32, c.max_steps = 10;
    run_result b = run(&c);
    assert_close(&a, &b, 1e-5, "N=2 x K=2 vs N=1 x K=4");
    free_result(&a);
    free_result(&b);
}

static void test_sync_bn(void **state) {
    (void)state;
    dp_config c;
    base_config(&c, "lenet-bn");
    c.max_steps = 10;
    run_result one = run(&c);
    base_config(&c, "lenet-bn");
    c.max_steps = 10, c.replicas = 4, c.sync_bn = 1;
    run_result sync = run(&c);
    assert_true(sync.all_equal);
    assert_close(&sync, &one, 1e-5, "lenet-bn --sync-bn N=4 vs N=1");
    /* without SyncBN the replicas normalise by their own shard's statistics: different */
    base_config(&c, "lenet-bn");
    c.max_steps = 10, c.replicas = 4;
    run_result local = run(&c);
    assert_true(local.all_equal);
    assert_true(tu_rel_diff(local.params, one.params, one.n) > 1e-4);
    free_result(&one);
    free_result(&sync);
    free_result(&local);
}

/* What the difference is: a replica's BN output equals BN over its own shard alone. */
static void test_bn_uses_shard_statistics(void **state) {
    (void)state;
    dp_model m;
    assert_int_equal(dp_model_build("lenet-bn", (dp_shape){3, 32, 32}, 10, &m), DP_OK);
    float *p, *g, *b;
    assert_int_equal(dp_alloc_floats(&p, m.params.n, "p"), DP_OK);
    assert_int_equal(dp_alloc_floats(&g, m.params.n, "g"), DP_OK);
    assert_int_equal(dp_alloc_floats(&b, m.buffers.n, "b"), DP_OK);
    dp_rng rng;
    dp_rng_seed(&rng, 3, 3);
    dp_model_init_params(&m, p, b, &rng);
    const int B = 8, half = 4;
    size_t per = dp_shape_size(m.input);
    float *x = malloc((size_t)B * per * sizeof *x);
    for (size_t i = 0; i < (size_t)B * per; i++) x[i] = dp_rng_uniform(&rng);
    dp_acts full, shard;
    assert_int_equal(dp_acts_create(&m, B, 1, &full), DP_OK);
    assert_int_equal(dp_acts_create(&m, half, 1, &shard), DP_OK);
    dp_exec e = {.batch = B, .stat_batch = B, .training = 1, .update_stats = 1, .nthreads = 1, .params = p, .grads = g,
                 .buffers = b};
    assert_int_equal(dp_model_forward(&m, &full, &e, x), DP_OK);
    e.batch = e.stat_batch = half;
    assert_int_equal(dp_model_forward(&m, &shard, &e, x), DP_OK);
    int bn1 = 1; /* conv1, bn1 */
    assert_string_equal(m.nodes[bn1].ops->kind, "bn");
    size_t n = (size_t)half * dp_shape_size(m.nodes[bn1].out);
    /* the shard's normalised output has zero mean per channel over the shard; the full
     * batch's first half does not */
    assert_true(tu_rel_diff(shard.out[bn1], full.out[bn1], n) > 1e-3);
    double mean = 0;
    size_t hw = (size_t)m.nodes[bn1].out.h * m.nodes[bn1].out.w;
    for (int s = 0; s < half; s++)
        for (size_t i = 0; i < hw; i++) mean += shard.out[bn1][(size_t)s * 6 * hw + i];
    assert_true(fabs(mean / (half * hw)) < 1e-4);
    dp_acts_free(&full), dp_acts_free(&shard);
    dp_free(p), dp_free(g), dp_free(b);
    free(x);
    dp_model_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ddp_n_replicas_match_one),
        cmocka_unit_test(test_ddp_uneven_batch),
        cmocka_unit_test(test_dp_equals_ddp),
        cmocka_unit_test(test_overlap_and_buckets_change_nothing),
        cmocka_unit_test(test_accumulate_matches_micro_batches),
        cmocka_unit_test(test_sync_bn),
        cmocka_unit_test(test_bn_uses_shard_statistics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
