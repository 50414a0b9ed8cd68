/* SGD and the LR schedule against values computed by hand (torch.optim.SGD semantics). */
#include "testutil.h"

#include <math.h>
#include <string.h>

#include "optim/schedule.h"
#include "optim/sgd.h"

static dp_layout one_tensor(size_t n, int flags) {
    dp_layout L = {0};
    assert_int_equal(dp_layout_add(&L, "w", n, flags, NULL), DP_OK);
    return L;
}

/* p = 1, g = 0.5, lr 0.1, momentum 0.9, wd 0.01:
 * step 1: d = 0.5 + 0.01*1 = 0.51, buf = 0.51, p = 1 - 0.051 = 0.949
 * step 2: d = 0.5 + 0.00949 = 0.50949, buf = 0.9*0.51 + 0.50949 = 0.96849, p = 0.949 - 0.096849 = 0.852151 */
static void test_sgd_momentum_weight_decay(void **state) {
    (void)state;
    dp_layout L = one_tensor(1, 0);
    float p[16] = {1.0f}, g[16] = {0.5f}, b[16] = {0};
    dp_sgd o = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f};
    dp_sgd_step(&o, &L, p, g, b, o.lr);
    assert_float_equal(p[0], 0.949f, 1e-6);
    assert_float_equal(b[0], 0.51f, 1e-6);
    dp_sgd_step(&o, &L, p, g, b, o.lr);
    assert_float_equal(b[0], 0.96849f, 1e-6);
    assert_float_equal(p[0], 0.852151f, 1e-6);
    dp_layout_free(&L);
}

/* nesterov: step 1: d = 0.5, buf = 0.5, update = d + 0.9*buf = 0.95, p = 1 - 0.095 = 0.905
 * step 2: buf = 0.45 + 0.5 = 0.95, update = 0.5 + 0.855 = 1.355, p = 0.905 - 0.1355 = 0.7695 */
static void test_sgd_nesterov(void **state) {
    (void)state;
    dp_layout L = one_tensor(1, 0);
    float p[16] = {1.0f}, g[16] = {0.5f}, b[16] = {0};
    dp_sgd o = {.lr = 0.1f, .momentum = 0.9f, .nesterov = 1};
    dp_sgd_step(&o, &L, p, g, b, o.lr);
    assert_float_equal(p[0], 0.905f, 1e-6);
    dp_sgd_step(&o, &L, p, g, b, o.lr);
    assert_float_equal(p[0], 0.7695f, 1e-6);
    dp_layout_free(&L);
}

static void test_sgd_plain_and_no_decay_flag(void **state) {
    (void)state;
    dp_layout L = {0};
    assert_int_equal(dp_layout_add(&L, "w", 3, 0, NULL), DP_OK);
    assert_int_equal(dp_layout_add(&L, "b", 2, DP_TENSOR_NO_DECAY, NULL), DP_OK);
    assert_int_equal(L.tensors[1].s.offset % DP_ARENA_ALIGN_FLOATS, 0);
    float p[32], g[32];
    for (int i = 0; i < 32; i++) p[i] = 2.0f, g[i] = 1.0f;
    dp_sgd o = {.lr = 0.5f, .momentum = 0.0f, .weight_decay = 0.1f};
    dp_sgd_step(&o, &L, p, g, NULL, o.lr);
    assert_float_equal(p[0], 2.0f - 0.5f * (1.0f + 0.2f), 1e-6); /* decayed */
    size_t b0 = L.tensors[1].s.offset;
    assert_float_equal(p[b0], 2.0f - 0.5f * 1.0f, 1e-6);          /* not decayed */
    assert_float_equal(p[3], 2.0f, 0);                            /* padding untouched */
    dp_layout_free(&L);
}

/* Who reads the gradients for NaN/Inf is decided by where they live, not by which kernel table
 * runs the step: a table other than the CPU's (here a copy of it, as a device over host memory
 * would have) over host memory is checked here and refused; over a device's own memory the step
 * leaves the check to the step's metrics and applies what it is given. */
static void test_sgd_nonfinite_by_memory(void **state) {
    (void)state;
    dp_layout L = one_tensor(4, 0);
    const dp_kernels other = dp_cpu_kernels;
    atomic_int bad = 0;
    float p[16] = {1.0f, 1.0f, 1.0f, 1.0f}, g[16] = {0.5f, NAN, 0.5f, 0.5f}, b[16] = {0};
    dp_sgd o = {.lr = 0.1f, .momentum = 0.9f, .k = &other, .nonfinite = &bad};
    dp_sgd_step(&o, &L, p, g, b, o.lr);
    assert_int_equal(atomic_load(&bad), 1);
    for (int i = 0; i < 4; i++) assert_float_equal(p[i], 1.0f, 0), assert_float_equal(b[i], 0.0f, 0);
    atomic_store(&bad, 0);
    o.device_memory = 1;
    dp_sgd_step(&o, &L, p, g, b, o.lr);
    assert_int_equal(atomic_load(&bad), 0);
    assert_float_equal(p[0], 0.95f, 1e-6);
    assert_true(isnan(p[1]));
    dp_layout_free(&L);
}

static void test_schedule(void **state) {
    (void)state;
    dp_schedule s = {.lr = 0.1f, .gamma = 0.1f, .milestones = {10, 20}, .n_milestones = 2};
    assert_float_equal(dp_schedule_lr(&s, 1, 0), 0.1f, 1e-7);
    assert_float_equal(dp_schedule_lr(&s, 10, 0), 0.1f, 1e-7);
    assert_float_equal(dp_schedule_lr(&s, 11, 0), 0.01f, 1e-7);
    assert_float_equal(dp_schedule_lr(&s, 21, 0), 0.001f, 1e-8);
    s.scale_linear = 1, s.ref_batch = 64, s.global_batch = 256;
    assert_float_equal(dp_schedule_lr(&s, 1, 0), 0.4f, 1e-6);
    s.warmup_steps = 4;
    assert_float_equal(dp_schedule_lr(&s, 1, 0), 0.1f, 1e-6);
    assert_float_equal(dp_schedule_lr(&s, 1, 1), 0.2f, 1e-6);
    assert_float_equal(dp_schedule_lr(&s, 1, 3), 0.4f, 1e-6);
    assert_float_equal(dp_schedule_lr(&s, 1, 100), 0.4f, 1e-6);
}

static void test_buckets(void **state) {
    (void)state;
    dp_layout L = {0};
    size_t sizes[5] = {100, 16, 3000, 10, 50};
    for (int i = 0; i < 5; i++) assert_int_equal(dp_layout_add(&L, "t", sizes[i], 0, NULL), DP_OK);
    /* one bucket when everything fits */
    assert_int_equal(dp_layout_make_buckets(&L, 1 << 20), DP_OK);
    assert_int_equal(L.n_buckets, 1);
    assert_int_equal(L.buckets[0].offset, 0);
    assert_int_equal(L.buckets[0].count, L.n);
    /* small cap: every tensor alone, from the last tensor backwards, covering the arena */
    assert_int_equal(dp_layout_make_buckets(&L, 4), DP_OK);
    assert_int_equal(L.n_buckets, 5);
    size_t covered = 0;
    for (int b = 0; b < L.n_buckets; b++) {
        assert_int_equal(L.bucket_first_tensor[b], 4 - b);
        assert_int_equal(L.buckets[b].offset, L.tensors[4 - b].s.offset);
        covered += L.buckets[b].count;
        if (b) assert_int_equal(L.buckets[b].offset + L.buckets[b].count, L.buckets[b - 1].offset);
    }
    assert_int_equal(covered, L.n);
    /* 1000 floats: {4,3} -> [3000] alone? 3000 > cap, so tensors 3,4 share, 2 alone, 0,1 share */
    assert_int_equal(dp_layout_make_buckets(&L, 1000 * sizeof(float)), DP_OK);
    assert_int_equal(L.n_buckets, 3);
    assert_int_equal(L.bucket_first_tensor[0], 3);
    assert_int_equal(L.bucket_first_tensor[1], 2);
    assert_int_equal(L.bucket_first_tensor[2], 0);
    dp_layout_free(&L);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_momentum_weight_decay),
        cmocka_unit_test(test_sgd_nesterov),
        cmocka_unit_test(test_sgd_plain_and_no_decay_flag),
        cmocka_unit_test(test_sgd_nonfinite_by_memory),
        cmocka_unit_test(test_schedule),
        cmocka_unit_test(test_buckets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
