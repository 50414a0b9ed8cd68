/* Synthetic data: the same seed gives the same bytes, another seed others; shapes, label
 * range, the test split (a fifth, its own stream); bad sizes refused. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "data/dataset.h"

static void test_deterministic(void **state) {
    (void)state;
    dp_dataset a, b, c;
    assert_int_equal(dp_synthetic_make(3, 5, 7, 13, 101, 42, &a), DP_OK);
    assert_int_equal(dp_synthetic_make(3, 5, 7, 13, 101, 42, &b), DP_OK);
    assert_int_equal(dp_synthetic_make(3, 5, 7, 13, 101, 43, &c), DP_OK);
    assert_int_equal(a.n, 101);
    assert_int_equal(a.c, 3);
    assert_int_equal(a.h, 5);
    assert_int_equal(a.w, 7);
    assert_int_equal(a.n_classes, 13);
    assert_string_equal(a.name, "synthetic");
    const size_t bytes = 101 * 3 * 5 * 7;
    assert_memory_equal(a.pixels, b.pixels, bytes);
    assert_memory_equal(a.labels, b.labels, 101);
    assert_true(memcmp(a.pixels, c.pixels, bytes) != 0);
    assert_true(memcmp(a.labels, c.labels, 101) != 0);
    /* labels cover the range and stay inside it; pixels look uniform */
    int hist[13] = {0};
    for (int i = 0; i < a.n; i++) {
        assert_true(a.labels[i] < 13);
        hist[a.labels[i]]++;
    }
    int used = 0;
    for (int k = 0; k < 13; k++) used += hist[k] > 0;
    assert_true(used >= 10);
    double sum = 0;
    for (size_t i = 0; i < bytes; i++) sum += a.pixels[i];
    assert_float_equal(sum / bytes, 127.5, 8.0);
    for (int ch = 0; ch < 3; ch++) {
        assert_float_equal(a.mean[ch], 0.5f, 1e-6);
        assert_float_equal(a.std[ch], 0.2887f, 1e-6);
    }
    assert_null(a.class_names);
    dp_dataset_free(&a), dp_dataset_free(&b), dp_dataset_free(&c);
}

static void test_splits(void **state) {
    (void)state;
    dp_data_spec spec = {.name = "synthetic", .c = 1, .h = 8, .w = 8, .n_classes = 256, .samples = 53, .seed = 9};
    dp_dataset tr, te, tr2;
    assert_int_equal(dp_dataset_load(&spec, 1, &tr), DP_OK);
    assert_int_equal(dp_dataset_load(&spec, 0, &te), DP_OK);
    assert_int_equal(tr.n, 53);
    assert_int_equal(te.n, 10);
    assert_int_equal(te.c, 1);
    assert_int_equal(te.n_classes, 256);
    assert_true(memcmp(tr.pixels, te.pixels, 10 * 64) != 0); /* another stream, not a prefix */
    assert_int_equal(dp_dataset_load(&spec, 1, &tr2), DP_OK);
    assert_memory_equal(tr.pixels, tr2.pixels, 53 * 64);
    dp_dataset_free(&tr), dp_dataset_free(&te), dp_dataset_free(&tr2);
    spec.samples = 3; /* the test split keeps at least one sample */
    assert_int_equal(dp_dataset_load(&spec, 0, &te), DP_OK);
    assert_int_equal(te.n, 1);
    dp_dataset_free(&te);
}

static void test_bad_args(void **state) {
    (void)state;
    dp_dataset d;
    struct { int c, h, w, k, n; const char *needle; } cases[] = {
        {0, 8, 8, 10, 10, "--shape"},   {4, 8, 8, 10, 10, "--shape"},   {1, 0, 8, 10, 10, "--shape"},
        {1, 8, -1, 10, 10, "--shape"},  {1, 8, 8, 1, 10, "--classes"},  {1, 8, 8, 257, 10, "--classes"},
        {1, 8, 8, 10, 0, "--samples"},  {3, 1024, 1024, 10, 3000, "8 GiB"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dp_status s = dp_synthetic_make(cases[i].c, cases[i].h, cases[i].w, cases[i].k, cases[i].n, 1, &d);
        if (s != DP_ERR_USAGE || !tu_contains(dp_last_error(), cases[i].needle))
            fail_msg("case %zu: %s '%s'", i, dp_status_name(s), dp_last_error());
        assert_null(d.pixels);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_splits),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
