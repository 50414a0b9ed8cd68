/* The canonical summation plan (data/chunks.h, core/treesum.h): for every N that divides C, a
 * replica's lanes are exactly the chunks r, r+N, ... and summing random partials lane by lane
 * then replica by replica gives bitwise the sum of one replica over all C chunks; micro-steps
 * partition the lanes; other N still cover every position once. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/treesum.h"
#include "data/chunks.h"

static void test_lanes_are_chunks(void **state) {
    (void)state;
    for (int C = 1; C <= 32; C *= 2)
        for (int N = 1; N <= 12; N++)
            for (int E = 1; E <= 70; E += 3) {
                dp_chunk_plan p;
                dp_chunk_plan_init(&p, N, C, 1, E, 0);
                assert_int_equal(p.canonical, C % N == 0);
                char *seen = calloc((size_t)E, 1);
                for (int r = 0; r < N; r++)
                    for (int i = 0; i < p.lanes; i++) {
                        const int n = dp_chunk_lane_count(&p, E, r, i);
                        assert_true(n <= dp_chunk_max_lane(&p));
                        for (int t = 0; t < n; t++) {
                            const int pos = dp_chunk_lane_pos(&p, E, r, i, t);
                            assert_in_range(pos, 0, E - 1);
                            assert_int_equal(pos % N, r); /* DistributedSampler's share */
                            if (p.canonical) assert_int_equal(pos % C, r + N * i); /* lane i is chunk r + N i */
                            assert_int_equal(seen[pos], 0);
                            seen[pos] = 1;
                        }
                    }
                for (int q = 0; q < E; q++) assert_int_equal(seen[q], 1);
                free(seen);
            }
}

/* DataParallel's plan: each replica's share is one contiguous block (replica 0 the first, the
 * blocks of torch.chunk when N divides E), every position once, and for N dividing C the chunk
 * in each tree place (label r + N i) holds the same positions whatever N is. */
static void test_dp_blocks_are_contiguous(void **state) {
    (void)state;
    for (int C = 1; C <= 32; C *= 2)
        for (int E = 1; E <= 70; E += 3) {
            int label_lo[32], label_n[32];
            for (int N = 1; N <= 12; N++) {
                dp_chunk_plan p;
                dp_chunk_plan_init(&p, N, C, 1, E, 1);
                char *seen = calloc((size_t)E, 1);
                for (int r = 0; r < N; r++) {
                    int lo = E, hi = -1, n_r = 0;
                    for (int i = 0; i < p.lanes; i++) {
                        const int n = dp_chunk_lane_count(&p, E, r, i);
                        assert_true(n <= dp_chunk_max_lane(&p));
                        for (int t = 0; t < n; t++) {
                            const int pos = dp_chunk_lane_pos(&p, E, r, i, t);
                            assert_in_range(pos, 0, E - 1);
                            assert_int_equal(seen[pos], 0);
                            seen[pos] = 1;
                            lo = pos < lo ? pos : lo, hi = pos > hi ? pos : hi, n_r++;
                        }
                        if (p.canonical && n) { /* the label's positions do not depend on N */
                            const int j = r + N * i, first = dp_chunk_lane_pos(&p, E, r, i, 0);
                            if (N == 1) label_lo[j] = first, label_n[j] = n;
                            else assert_int_equal(first, label_lo[j]), assert_int_equal(n, label_n[j]);
                        }
                    }
                    if (n_r) assert_int_equal(hi - lo + 1, n_r); /* contiguous */
                    if (r == 0 && n_r) assert_int_equal(lo, 0); /* the master's block is the first */
                    if (E % N == 0) assert_int_equal(n_r, E / N); /* torch.chunk's split */
                }
                for (int q = 0; q < E; q++) assert_int_equal(seen[q], 1);
                free(seen);
            }
        }
}

static void test_micro_steps_partition_lanes(void **state) {
    (void)state;
    dp_chunk_plan p;
    for (int K = 1; K <= 8; K++) {
        dp_chunk_plan_init(&p, 2, 8, K, 32, 0);
        for (int n_micro = 1; n_micro <= K; n_micro++) {
            int next = 0;
            for (int mu = 0; mu < n_micro; mu++) {
                int first, count;
                dp_chunk_micro_lanes(&p, mu, n_micro, &first, &count);
                assert_int_equal(first, next);
                next += count;
            }
            assert_int_equal(next, p.lanes);
        }
    }
}

/* The property itself on random numbers of every magnitude: N replicas, each summing its
 * lanes with the tree, then the tree over replicas, equal one replica's tree over C lanes. */
static void test_tree_split_is_bitwise(void **state) {
    (void)state;
    enum { C = 16, LEN = 257 };
    dp_rng rng;
    dp_rng_seed(&rng, 9, 9);
    float chunk[C][LEN];
    for (int j = 0; j < C; j++)
        for (int k = 0; k < LEN; k++) chunk[j][k] = (dp_rng_uniform(&rng) - 0.5f) * (float)(1 << (k % 24));
    float ref[C][LEN];
    memcpy(ref, chunk, sizeof ref);
    float *v[C];
    for (int j = 0; j < C; j++) v[j] = ref[j];
    dp_tree_sum(v, C, 0, LEN, 1);
    for (int j = 1; j < C; j++)
        for (int k = 0; k < LEN; k++) assert_true(ref[j][k] == 0.0f); /* cleared */
    for (int N = 2; N <= C; N *= 2) {
        float work[C][LEN];
        memcpy(work, chunk, sizeof work);
        float *reps[N];
        for (int r = 0; r < N; r++) {
            float *lanes[C / N];
            for (int i = 0; i < C / N; i++) lanes[i] = work[r + N * i];
            dp_tree_sum(lanes, C / N, 0, LEN, 0);
            reps[r] = lanes[0];
        }
        dp_tree_sum(reps, N, 0, LEN, 0);
        if (memcmp(reps[0], ref[0], sizeof ref[0]) != 0) fail_msg("N=%d: the split tree differs", N);
    }
    /* and a linear sum would not have been the same (the test can fail) */
    float lin[LEN] = {0};
    for (int j = 0; j < C; j++)
        for (int k = 0; k < LEN; k++) lin[k] += chunk[j][k];
    assert_true(memcmp(lin, ref[0], sizeof lin) != 0);
    float s[5] = {1e8f, 1.0f, -1e8f, 1.0f, 3.0f};
    /* n = 5: h = 3 pairs (0,3), (1,4); then (0,2); then (0,1) */
    assert_true(dp_tree_sum_scalars(s, 5, 1) == ((1e8f + 1.0f) + -1e8f) + (1.0f + 3.0f));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lanes_are_chunks),
        cmocka_unit_test(test_dp_blocks_are_contiguous),
        cmocka_unit_test(test_micro_steps_partition_lanes),
        cmocka_unit_test(test_tree_split_is_bitwise),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
