/* Data-parallel math is what it claims to be, to the bit: with the canonical summation order
 * (data/chunks.h), N = 1, 2, 4, 8 replicas, 1, 2 or 3 threads, any bucket size, overlap on or
 * off, --accumulate splits of the same global batch give bitwise the same parameters, momentum
 * and logged losses; lenet-bn with --sync-bn too. DP (contiguous blocks, as nn.DataParallel
 * scatters) is bitwise the same for every N, and equal to DDP within float rounding. Where the order cannot
 * hold (N = 3 does not divide the 8 chunks; the ring's own order) results agree within float
 * rounding. Synthetic LeNet-shaped data, 20 steps. DP_TEST_DEVICE=fakegpu runs it all on the test device
 * that behaves like a GPU (tests/fakegpu/; ctest test_equivalence_fakegpu); DP_TEST_PRECISION=bf16 runs it
 * under --precision bf16 (test_equivalence_bf16, test_equivalence_bf16_fakegpu). */
#include "testutil.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/trainer.h"
#include "trainrun.h"

static void base_config(dp_config *c, const char *model) { tr_base_config(c, model); }

typedef void (*tweak_fn)(dp_config *c, int arg);

/* Runs base (model, max_steps) with tweak(arg) and checks it against ref to the bit. */
static void check_same(const tr_result *ref, const char *model, long steps, tweak_fn tweak, int arg,
                       const char *what) {
    dp_config c;
    base_config(&c, model);
    c.max_steps = steps;
    tweak(&c, arg);
    tr_result r = tr_run(&c);
    char msg[128];
    snprintf(msg, sizeof msg, "%s %d", what, arg);
    if (!r.all_equal) fail_msg("%s: replicas disagree", msg);
    tr_assert_same(&r, ref, msg);
    tr_free(&r);
}

static void set_replicas(dp_config *c, int n) { c->replicas = n; }
static void set_replicas_dp(dp_config *c, int n) { c->replicas = n, c->mode = DP_MODE_DP; }
static void set_threads(dp_config *c, int n) { c->threads = n, c->replicas = 2; }
static void set_replicas_1_thread(dp_config *c, int n) { c->replicas = n, c->threads = 1; }
static void set_no_overlap(dp_config *c, int n) { c->replicas = n, c->overlap = 0; }
static void set_bucket_kb(dp_config *c, int kb) { c->replicas = 4, c->bucket_mb = kb / 1024.0; }
/* the same global batch of 64 as K micro-batches of 64 / K, over 2 replicas */
static void set_accumulate(dp_config *c, int k) { c->replicas = 2, c->accumulate = k, c->batch_size = 64 / k; }
static void set_sync_bn(dp_config *c, int n) { c->replicas = n, c->sync_bn = 1; }
static void set_chunks4(dp_config *c, int n) { c->replicas = n, c->chunks = 4; }

static void test_replica_counts_are_bitwise_equal(void **state) {
    (void)state;
    dp_config c;
    base_config(&c, "lenet");
    tr_result one = tr_run(&c);
    assert_int_equal(one.n_losses, 20);
    for (int n = 2; n <= 8; n *= 2) check_same(&one, "lenet", 20, set_replicas, n, "DDP N=");
    /* DataParallel scatters contiguous blocks as nn.DataParallel does (data/chunks.h): chunks of
       other samples than DistributedSampler's, so its own sums, bitwise the same for every N, and
       DDP's within rounding */
    base_config(&c, "lenet");
    c.mode = DP_MODE_DP;
    tr_result dp1 = tr_run(&c);
    for (int n = 2; n <= 8; n *= 2) check_same(&dp1, "lenet", 20, set_replicas_dp, n, "DP N=");
    tr_assert_close(&dp1, &one, tr_round_tol(1e-5), "DP vs DDP, N=1");
    tr_free(&dp1);
    for (int n = 1; n <= 8; n *= 4) check_same(&one, "lenet", 20, set_replicas_1_thread, n, "1 thread, N=");
    for (int n = 1; n <= 3; n++) check_same(&one, "lenet", 20, set_threads, n, "N=2, threads");
    tr_free(&one);
}

/* Threads started in this process: every pthread_create (libgomp's too) comes here first. */
static atomic_int threads_started;
int pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg) {
    static int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    if (!real) {
        void *sym = dlsym(RTLD_NEXT, "pthread_create");
        memcpy(&real, &sym, sizeof real);
    }
    atomic_fetch_add(&threads_started, 1);
    return real(t, a, fn, arg);
}

/* More threads than the step's lanes: the same bits, and on the CPU the OpenMP team is started
 * once, not per step (libgomp ends the threads a smaller team leaves out and starts them again for a larger
 * one: a step of regions of 12 and 8 threads started 4 threads a step). */
static void test_threads_beyond_the_lanes(void **state) {
    (void)state;
    dp_config c;
    base_config(&c, "lenet");
    tr_result one = tr_run(&c);
    for (int threads = 5; threads <= 12; threads += 7) {
        base_config(&c, "lenet");
        c.threads = threads;
        c.replicas = 2; /* 2 replicas x 4 lanes of the 8 chunks */
        const int on_cpu = !c.device || strcmp(c.device, "cpu") == 0;
        const int before = atomic_load(&threads_started);
        tr_result r = tr_run(&c);
        const int started = atomic_load(&threads_started) - before;
        char msg[64];
        snprintf(msg, sizeof msg, "N=2, %d threads", threads);
        tr_assert_same(&r, &one, msg);
        /* on the CPU; a device's streams are threads of their own, started per run */
        if (on_cpu && started > threads) fail_msg("%s: %d threads started in %d steps", msg, started, r.n_losses);
        tr_free(&r);
    }
    tr_free(&one);
}

static void test_overlap_buckets_accumulate_change_nothing(void **state) {
    (void)state;
    dp_config c;
    base_config(&c, "lenet");
    tr_result one = tr_run(&c);
    check_same(&one, "lenet", 20, set_no_overlap, 4, "--no-overlap, N=");
    const int kbs[] = {1, 10, 100, 25600};
    for (size_t k = 0; k < sizeof kbs / sizeof *kbs; k++)
        check_same(&one, "lenet", 20, set_bucket_kb, kbs[k], "N=4, --bucket-mb (KiB)");
    for (int k = 2; k <= 4; k *= 2) check_same(&one, "lenet", 20, set_accumulate, k, "N=2, batch 64/K, --accumulate");
    tr_free(&one);
    /* another --chunks is another order, the same for every replica count dividing it */
    base_config(&c, "lenet");
    c.chunks = 4;
    tr_result four = tr_run(&c);
    for (int n = 2; n <= 4; n *= 2) check_same(&four, "lenet", 20, set_chunks4, n, "--chunks 4, N=");
    tr_free(&four);
}

static void test_sync_bn_is_bitwise(void **state) {
    (void)state;
    dp_config c;
    base_config(&c, "lenet-bn");
    c.max_steps = 10, c.sync_bn = 1;
    tr_result one = tr_run(&c);
    for (int n = 2; n <= 8; n *= 2) check_same(&one, "lenet-bn", 10, set_sync_bn, n, "lenet-bn --sync-bn N=");
    /* without SyncBN the replicas normalise by their own shard's statistics: different */
    base_config(&c, "lenet-bn");
    c.max_steps = 10, c.replicas = 4;
    tr_result local = tr_run(&c);
    assert_true(local.all_equal);
    assert_true(tu_rel_diff(local.params, one.params, one.n) > 1e-4);
    tr_free(&one);
    tr_free(&local);
}

/* Where the canonical order cannot hold, within float rounding: N = 3 (does not divide the
 * chunks), a batch that splits unevenly, and the sim's ring and tree all-reduce. */
static void test_outside_the_order_within_rounding(void **state) {
    (void)state;
    dp_config c;
    base_config(&c, "lenet");
    tr_result one = tr_run(&c);
    base_config(&c, "lenet");
    c.replicas = 3;
    tr_result three = tr_run(&c);
    assert_true(three.all_equal);
    tr_assert_close(&three, &one, tr_round_tol(1e-5), "DDP N=3 vs N=1");
    const char *algos[] = {"ring", "tree"};
    /* the sim's ring and tree run on the CPU only (a device sums in the canonical order) */
    for (int k = 0; k < 2 && (!c.device || strcmp(c.device, "cpu") == 0); k++) {
        base_config(&c, "lenet");
        c.replicas = 4, c.allreduce_algo = algos[k];
        tr_result r = tr_run(&c);
        assert_true(r.all_equal);
        tr_assert_close(&r, &one, tr_round_tol(1e-5), algos[k]);
        tr_free(&r);
    }
    tr_free(&three);
    tr_free(&one);
    /* batch 60 over 8 replicas (8,8,8,8,7,7,7,7 samples): still the canonical chunks */
    base_config(&c, "lenet");
    c.batch_size = 60;
    tr_result b60 = tr_run(&c);
    base_config(&c, "lenet");
    c.batch_size = 60, c.replicas = 8;
    tr_result r = tr_run(&c);
    assert_true(r.all_equal);
    tr_assert_same(&r, &b60, "DDP N=8, batch 60");
    tr_free(&r);
    tr_free(&b60);
    /* DP: 60 in contiguous blocks (8, 7, 8, 7, ... for N=8; 15 each for N=4): the same chunks */
    base_config(&c, "lenet");
    c.batch_size = 60, c.mode = DP_MODE_DP;
    tr_result d60 = tr_run(&c);
    for (int n = 4; n <= 8; n *= 2) {
        base_config(&c, "lenet");
        c.batch_size = 60, c.mode = DP_MODE_DP, c.replicas = n;
        tr_result d = tr_run(&c);
        assert_true(d.all_equal);
        tr_assert_same(&d, &d60, "DP, batch 60");
        tr_free(&d);
    }
    tr_free(&d60);
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
    dp_exec e = {.batch = B, .stat_batch = B, .training = 1, .update_stats = 1, .kc.nthreads = 1, .params = p, .grads = g,
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

/* --precision bf16 trains the same model as fp32 does, to bf16's precision: over 20 steps of LeNet
 * every step's loss is within 1% of fp32's and the weights' 2-norm difference within 2% (bf16 keeps 8
 * significant bits: 0.4% per rounding), yet not on fp32's bits. */
static void test_bf16_close_to_fp32(void **state) {
    (void)state;
    dp_config c;
    base_config(&c, "lenet");
    c.precision = DP_PRECISION_FP32;
    tr_result fp32 = tr_run(&c);
    base_config(&c, "lenet");
    c.precision = DP_PRECISION_BF16;
    tr_result bf16 = tr_run(&c);
    assert_int_equal(bf16.n_losses, fp32.n_losses);
    double worst = 0;
    for (int i = 0; i < fp32.n_losses; i++) worst = fmax(worst, fabs(bf16.losses[i] / fp32.losses[i] - 1));
    double dd = 0, nn = 0; /* |bf16 - fp32| / |fp32| over all weights (the 2-norm) */
    for (size_t i = 0; i < fp32.n; i++)
        dd += ((double)bf16.params[i] - fp32.params[i]) * ((double)bf16.params[i] - fp32.params[i]),
            nn += (double)fp32.params[i] * fp32.params[i];
    const double w = sqrt(dd / nn);
    print_message("bf16 vs fp32, 20 steps: losses within %.3g relative, weights %.3g\n", worst, w);
    assert_true(worst < 1e-2);
    assert_true(w > 1e-4 && w < 2e-2);
    tr_free(&bf16);
    tr_free(&fp32);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replica_counts_are_bitwise_equal),
        cmocka_unit_test(test_threads_beyond_the_lanes),
        cmocka_unit_test(test_overlap_buckets_accumulate_change_nothing),
        cmocka_unit_test(test_sync_bn_is_bitwise),
        cmocka_unit_test(test_outside_the_order_within_rounding),
        cmocka_unit_test(test_bn_uses_shard_statistics),
        cmocka_unit_test(test_bf16_close_to_fp32),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
