/* The sim backend's collectives in the style of nccl-tests: seeded per-replica inputs with a
 * closed-form expected result, every element checked, N = 1..8, counts that do not divide N,
 * counts of 0 and 1. Inputs are small integers so the sums are exact in float. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "core/arena.h"

static const size_t counts[] = {0, 1, 2, 7, 8, 9, 1000, 4099, 65537};

static float input(int r, size_t i) { return (float)(r + 1) + (float)(i % 7); }
static float expected_sum(int n, size_t i) { return (float)(n * (n + 1) / 2) + (float)n * (float)(i % 7); }

static float **alloc_bufs(int n, size_t count) {
    float **b = calloc((size_t)n, sizeof *b);
    assert_non_null(b);
    for (int r = 0; r < n; r++) {
        b[r] = malloc((count ? count : 1) * sizeof(float));
        assert_non_null(b[r]);
        for (size_t i = 0; i < count; i++) b[r][i] = input(r, i);
    }
    return b;
}

static void free_bufs(float **b, int n) {
    for (int r = 0; r < n; r++) free(b[r]);
    free(b);
}

static dp_backend_t make_sim(int n, const char *algo, int threads) {
    dp_backend_config cfg = {.name = "sim", .replicas = n, .nthreads = threads, .algorithm = algo};
    dp_backend_t b;
    assert_int_equal(dp_backend_create(&cfg, &b), DP_OK);
    assert_int_equal(dp_backend_world(b), n);
    assert_int_equal(dp_backend_n_local(b), n);
    return b;
}

static long check_all(float **bufs, int n, size_t count, float (*expect)(int, size_t, int), int arg) {
    long wrong = 0;
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < count; i++)
            if (bufs[r][i] != expect(n, i, arg)) wrong++;
    return wrong;
}

static float e_sum(int n, size_t i, int arg) { (void)arg; return expected_sum(n, i); }
static float e_avg(int n, size_t i, int arg) { (void)arg; return expected_sum(n, i) / (float)n; }
static float e_root(int n, size_t i, int root) { (void)n; return input(root, i); }

static void run_allreduce(const char *algo, int threads) {
    for (int n = 1; n <= 8; n++) {
        dp_backend_t b = make_sim(n, algo, threads);
        for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
            float **bufs = alloc_bufs(n, counts[c]);
            assert_int_equal(dp_allreduce(b, bufs, counts[c], DP_SUM), DP_OK);
            long wrong = check_all(bufs, n, counts[c], e_sum, 0);
            if (wrong) fail_msg("%s allreduce N=%d count=%zu: %ld wrong elements", algo, n, counts[c], wrong);
            free_bufs(bufs, n);
            bufs = alloc_bufs(n, counts[c]);
            assert_int_equal(dp_allreduce(b, bufs, counts[c], DP_AVG), DP_OK);
            /* average: every replica must agree bitwise; the value within rounding of sum/N */
            for (int r = 1; r < n; r++)
                assert_memory_equal(bufs[r], bufs[0], counts[c] * sizeof(float));
            for (size_t i = 0; i < counts[c]; i++) assert_float_equal(bufs[0][i], e_avg(n, i, 0), 1e-5);
            free_bufs(bufs, n);
        }
        /* statistics: 2 calls per count, ring link bytes 2(N-1)/N per element */
        assert_int_equal(b->stats.calls[DP_COLL_ALLREDUCE], 2 * (long)(sizeof counts / sizeof *counts));
        dp_backend_destroy(b);
    }
}

static void test_ring_allreduce(void **state) { (void)state; run_allreduce("ring", 1); }
static void test_ring_allreduce_threads(void **state) { (void)state; run_allreduce("ring", 3); }
static void test_tree_allreduce(void **state) { (void)state; run_allreduce("tree", 2); }
static void test_ordered_allreduce(void **state) { (void)state; run_allreduce("ordered", 1); }
static void test_ordered_allreduce_threads(void **state) { (void)state; run_allreduce("ordered", 3); }

static void test_broadcast_reduce(void **state) {
    (void)state;
    for (int a = 0; a < 2; a++)
    for (int n = 1; n <= 8; n++) {
        dp_backend_t b = make_sim(n, a ? "ordered" : "ring", 2);
        for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
            for (int root = 0; root < n; root += (n > 3 ? n - 1 : 1)) {
                float **bufs = alloc_bufs(n, counts[c]);
                assert_int_equal(dp_broadcast(b, bufs, counts[c], root), DP_OK);
                long wrong = check_all(bufs, n, counts[c], e_root, root);
                if (wrong) fail_msg("broadcast N=%d count=%zu root=%d: %ld wrong", n, counts[c], root, wrong);
                free_bufs(bufs, n);
                bufs = alloc_bufs(n, counts[c]);
                assert_int_equal(dp_reduce(b, bufs, counts[c], DP_SUM, root), DP_OK);
                for (size_t i = 0; i < counts[c]; i++)
                    if (bufs[root][i] != expected_sum(n, i)) fail_msg("reduce N=%d count=%zu root=%d i=%zu", n, counts[c], root, i);
                free_bufs(bufs, n);
            }
        }
        dp_backend_destroy(b);
    }
}

static void test_allgather(void **state) {
    (void)state;
    for (int n = 1; n <= 8; n++) {
        dp_backend_t b = make_sim(n, "ring", 2);
        for (size_t c = 0; c < 6; c++) {
            size_t cnt = counts[c];
            float **send = alloc_bufs(n, cnt);
            float **recv = calloc((size_t)n, sizeof *recv);
            for (int r = 0; r < n; r++) recv[r] = calloc((size_t)n * cnt + 1, sizeof(float));
            assert_int_equal(dp_allgather(b, (const float *const *)send, recv, cnt), DP_OK);
            for (int r = 0; r < n; r++)
                for (int src = 0; src < n; src++)
                    for (size_t i = 0; i < cnt; i++) assert_true(recv[r][(size_t)src * cnt + i] == input(src, i));
            free_bufs(send, n);
            free_bufs(recv, n);
        }
        dp_backend_destroy(b);
    }
}

/* Random floats (so the order of additions shows): the all-reduce of a whole arena equals,
 * bitwise, the all-reduces of its pieces cut anywhere -- results do not depend on --bucket-mb;
 * and the reduce to a root gives the all-reduce's sums bitwise (DP equals DDP). For the ring
 * and for the ordered all-reduce. */
static void test_order_independent_of_cuts(void **state) {
    (void)state;
    const size_t n = 5000;
    for (int a = 0; a < 2; a++)
    for (int nr = 3; nr <= 8; nr++) {
        dp_backend_t b = make_sim(nr, a ? "ordered" : "ring", 2);
        float *whole[8], *cut[8], *red[8];
        for (int r = 0; r < nr; r++) {
            assert_int_equal(dp_alloc_floats(&whole[r], n, "t"), DP_OK);
            assert_int_equal(dp_alloc_floats(&cut[r], n, "t"), DP_OK);
            assert_int_equal(dp_alloc_floats(&red[r], n, "t"), DP_OK);
            uint64_t x = 12345 + (uint64_t)r;
            for (size_t i = 0; i < n; i++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                whole[r][i] = cut[r][i] = red[r][i] = (float)((double)(x >> 11) / 9007199254740992.0 - 0.5) * 3.7f;
            }
        }
        assert_int_equal(dp_allreduce(b, whole, n, DP_SUM), DP_OK);
        const size_t cuts[] = {0, 1, 17, 64, 1000, 1001, 3333, 5000};
        for (size_t k = 0; k + 1 < sizeof cuts / sizeof *cuts; k++) {
            float *piece[8];
            for (int r = 0; r < nr; r++) piece[r] = cut[r] + cuts[k];
            assert_int_equal(dp_allreduce(b, piece, cuts[k + 1] - cuts[k], DP_SUM), DP_OK);
        }
        assert_int_equal(dp_reduce(b, red, n, DP_SUM, 0), DP_OK);
        for (int r = 0; r < nr; r++) assert_memory_equal(cut[r], whole[0], n * sizeof(float));
        assert_memory_equal(red[0], whole[0], n * sizeof(float));
        for (int r = 0; r < nr; r++) dp_free(whole[r]), dp_free(cut[r]), dp_free(red[r]);
        dp_backend_destroy(b);
    }
}

static void test_bad_backend_names(void **state) {
    (void)state;
    dp_backend_t b;
    dp_backend_config cfg = {.name = "gloo", .replicas = 1};
    assert_int_equal(dp_backend_create(&cfg, &b), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "gloo"));
    cfg.name = "sim";
    cfg.replicas = 0;
    assert_int_equal(dp_backend_create(&cfg, &b), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "--replicas"));
    cfg.replicas = 2;
    cfg.algorithm = "butterfly";
    assert_int_equal(dp_backend_create(&cfg, &b), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "butterfly"));
    cfg.name = "nccl";
    cfg.algorithm = NULL;
    /* not built, no usable GPU, or (on a GPU machine) no CUDA executor yet: refused, naming it */
    const dp_status s = dp_backend_create(&cfg, &b);
    assert_true(s == DP_ERR_UNSUPPORTED || s == DP_ERR_BACKEND);
    assert_true(tu_contains(dp_last_error(), "nccl"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_allreduce),
        cmocka_unit_test(test_ring_allreduce_threads),
        cmocka_unit_test(test_tree_allreduce),
        cmocka_unit_test(test_ordered_allreduce),
        cmocka_unit_test(test_ordered_allreduce_threads),
        cmocka_unit_test(test_broadcast_reduce),
        cmocka_unit_test(test_allgather),
        cmocka_unit_test(test_order_independent_of_cuts),
        cmocka_unit_test(test_bad_backend_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
