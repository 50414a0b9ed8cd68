/* The sampler's partition: replica r owns positions r, r+N, ... of each batch; the replicas' shares of global
 * batch b are exactly positions [bB, (b+1)B) of the order; padding covers every sample; epochs
 * reshuffle reproducibly; drop_last gives full batches; bad sizes are refused. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "data/sampler.h"

static void check_partition(int n, int N, int B, int shuffle, int drop_last) {
    dp_sampler s;
    assert_int_equal(dp_sampler_init(&s, n, N, B, shuffle, drop_last, 42), DP_OK);
    dp_sampler_set_epoch(&s, 3);
    const int total = drop_last ? n / N * N : (n + N - 1) / N * N;
    assert_int_equal(s.total, total);
    assert_int_equal(s.total % N, 0);
    assert_int_equal(s.n_batches, drop_last ? total / B : (total + B - 1) / B);
    const int ml = dp_sampler_max_local(&s);
    assert_int_equal(ml, (B + N - 1) / N);

    /* The first min(n, total) entries are distinct samples; padding repeats the start. */
    char *seen = calloc((size_t)n, 1);
    assert_non_null(seen);
    for (int p = 0; p < total && p < n; p++) {
        assert_in_range(s.order[p], 0, n - 1);
        assert_int_equal(seen[s.order[p]], 0);
        seen[s.order[p]] = 1;
    }
    for (int p = n; p < total; p++) assert_int_equal(s.order[p], s.order[p % n]);
    if (!shuffle)
        for (int p = 0; p < total; p++) assert_int_equal(s.order[p], p % n);

    int *idx = malloc((size_t)ml * sizeof *idx), *pos = malloc((size_t)ml * sizeof *pos);
    char *covered = calloc((size_t)total + 1, 1), *sample_seen = calloc((size_t)n, 1);
    assert_non_null(idx);
    assert_non_null(pos);
    assert_non_null(covered);
    assert_non_null(sample_seen);
    int next_pos = 0;
    for (int b = 0; b < s.n_batches; b++) {
        const int bs = dp_sampler_batch_size(&s, b);
        assert_true(bs >= 1 && bs <= B);
        if (drop_last || b < s.n_batches - 1) assert_int_equal(bs, B);
        int sum = 0;
        for (int r = 0; r < N; r++) {
            int cnt = dp_sampler_local(&s, b, r, idx, pos);
            assert_true(cnt >= 0 && cnt <= ml);
            if (B % N == 0 && bs == B) assert_int_equal(cnt, B / N);
            for (int j = 0; j < cnt; j++) {
                assert_int_equal((pos[j] - b * B) % N, r); /* replica r owns r, r+N, ... of the batch */
                if (j) assert_int_equal(pos[j], pos[j - 1] + N);
                assert_true(pos[j] >= b * B && pos[j] < b * B + bs);
                assert_int_equal(idx[j], s.order[pos[j]]);
                assert_int_equal(covered[pos[j]], 0);
                covered[pos[j]] = 1;
                sample_seen[idx[j]] = 1;
            }
            /* idx only (pos NULL) gives the same samples */
            int idx2[64];
            assert_true(ml <= 64);
            assert_int_equal(dp_sampler_local(&s, b, r, idx2, NULL), cnt);
            assert_memory_equal(idx2, idx, (size_t)cnt * sizeof *idx);
            sum += cnt;
        }
        /* the union of the shares is exactly positions [bB, bB + bs) */
        assert_int_equal(sum, bs);
        for (int p = b * B; p < b * B + bs; p++) assert_int_equal(covered[p], 1);
        next_pos = b * B + bs;
    }
    assert_int_equal(next_pos, drop_last ? s.n_batches * B : total);
    if (!drop_last)
        for (int i = 0; i < n; i++) assert_int_equal(sample_seen[i], 1); /* padding loses nothing */
    assert_int_equal(dp_sampler_local(&s, s.n_batches, 0, idx, pos), 0);
    assert_int_equal(dp_sampler_batch_size(&s, s.n_batches), 0);
    free(idx), free(pos), free(covered), free(sample_seen), free(seen);
    dp_sampler_free(&s);
}

static void test_partition(void **state) {
    (void)state;
    const int sizes[] = {7, 10, 33, 100, 101, 257};
    for (int N = 1; N <= 8; N++)
        for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
            const int bsz[] = {N, N + 1, 2 * N, 3 * N + 1, 16, 50};
            for (size_t bi = 0; bi < sizeof bsz / sizeof *bsz; bi++)
                for (int shuffle = 0; shuffle <= 1; shuffle++)
                    for (int drop = 0; drop <= 1; drop++) {
                        int n = sizes[si] < N ? N : sizes[si], B = bsz[bi];
                        if (B < N) continue;
                        check_partition(n, N, B, shuffle, drop);
                    }
        }
    check_partition(8, 8, 8, 1, 0); /* one sample per replica */
}

static void test_padding_wraps(void **state) {
    (void)state;
    dp_sampler s;
    assert_int_equal(dp_sampler_init(&s, 3, 8, 8, 0, 0, 1), DP_ERR_USAGE); /* fewer samples than replicas */
    assert_true(tu_contains(dp_last_error(), "--replicas"));
    assert_int_equal(dp_sampler_init(&s, 10, 4, 4, 0, 0, 1), DP_OK);
    const int want[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1};
    assert_int_equal(s.total, 12);
    for (int p = 0; p < 12; p++) assert_int_equal(s.order[p], want[p]);
    dp_sampler_free(&s);
}

static void test_epochs(void **state) {
    (void)state;
    dp_sampler a, b;
    const int n = 1000;
    assert_int_equal(dp_sampler_init(&a, n, 3, 30, 1, 0, 7), DP_OK);
    assert_int_equal(dp_sampler_init(&b, n, 5, 30, 1, 0, 7), DP_OK);
    int *e0 = malloc(n * sizeof *e0);
    assert_non_null(e0);
    dp_sampler_set_epoch(&a, 0);
    memcpy(e0, a.order, n * sizeof *e0);
    int identity = 1;
    for (int i = 0; i < n; i++) identity &= e0[i] == i;
    assert_false(identity);
    dp_sampler_set_epoch(&a, 1);
    assert_true(memcmp(e0, a.order, n * sizeof *e0) != 0); /* another epoch, another permutation */
    dp_sampler_set_epoch(&a, 0);
    assert_memory_equal(e0, a.order, n * sizeof *e0);      /* the same epoch, the same one */
    dp_sampler_set_epoch(&b, 0);
    assert_memory_equal(e0, b.order, n * sizeof *e0);      /* independent of the replica count */
    dp_sampler_free(&b);
    assert_int_equal(dp_sampler_init(&b, n, 3, 30, 1, 0, 8), DP_OK);
    assert_true(memcmp(e0, b.order, n * sizeof *e0) != 0); /* another seed, another permutation */
    dp_sampler_free(&a), dp_sampler_free(&b);
    free(e0);
}

static void test_drop_last(void **state) {
    (void)state;
    dp_sampler s;
    /* 103 samples, 4 replicas, batch 10: cut to 100, then 10 full batches */
    assert_int_equal(dp_sampler_init(&s, 103, 4, 10, 1, 1, 3), DP_OK);
    assert_int_equal(s.total, 100);
    assert_int_equal(s.n_batches, 10);
    for (int b = 0; b < 10; b++) assert_int_equal(dp_sampler_batch_size(&s, b), 10);
    dp_sampler_free(&s);
    /* batch 16: 96 positions in 6 full batches, the last 4 dropped */
    assert_int_equal(dp_sampler_init(&s, 103, 4, 16, 1, 1, 3), DP_OK);
    assert_int_equal(s.n_batches, 6);
    dp_sampler_free(&s);
    /* without drop_last: padded to 104, last batch short */
    assert_int_equal(dp_sampler_init(&s, 103, 4, 16, 1, 0, 3), DP_OK);
    assert_int_equal(s.total, 104);
    assert_int_equal(s.n_batches, 7);
    assert_int_equal(dp_sampler_batch_size(&s, 6), 8);
    dp_sampler_free(&s);
    /* fewer samples than one batch: no batch at all (the trainer reports it) */
    assert_int_equal(dp_sampler_init(&s, 5, 1, 8, 0, 1, 3), DP_OK);
    assert_int_equal(s.n_batches, 0);
    dp_sampler_free(&s);
}

static void test_refusals(void **state) {
    (void)state;
    dp_sampler s;
    assert_int_equal(dp_sampler_init(&s, 100, 4, 3, 1, 0, 1), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "--batch-size"));
    assert_null(s.order);
    assert_int_equal(dp_sampler_init(&s, 100, 0, 3, 1, 0, 1), DP_ERR_USAGE);
    assert_int_equal(dp_sampler_init(&s, 0, 1, 3, 1, 0, 1), DP_ERR_USAGE);
    dp_sampler_free(&s);
    dp_sampler_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_partition),   cmocka_unit_test(test_padding_wraps), cmocka_unit_test(test_epochs),
        cmocka_unit_test(test_drop_last),   cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
