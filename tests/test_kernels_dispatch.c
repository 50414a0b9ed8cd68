/* The portable build's three kernel variants (baseline x86-64, x86-64-v3 and x86-64-v4,
 * kernels/cpu/dispatch.c): the public functions run the best variant the CPU supports, and the
 * others, which the other kernel suites do not reach on such a machine, agree with the baseline
 * within float rounding (bitwise where no sum or multiply-add is involved). Variants the CPU
 * cannot run are skipped. Skipped in -march=native builds, which have one variant. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/pool.h"
#include "kernels/kernels.h"
#include "kernels_ref.h"

#define VARIANTS(name)                                                                                      \
    extern __typeof__(name) name##_base __attribute__((weak)), name##_v3 __attribute__((weak)),             \
        name##_v4 __attribute__((weak));
VARIANTS(conv2d_workspace_floats)
VARIANTS(conv2d_forward_cpu)
VARIANTS(conv2d_backward_cpu)
VARIANTS(linear_forward_cpu)
VARIANTS(linear_backward_cpu)
VARIANTS(maxpool2d_forward_cpu)
VARIANTS(relu_forward_cpu)

static int v3_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
           __builtin_cpu_supports("bmi2");
}

static int v4_supported(void) {
    __builtin_cpu_init();
    return v3_supported() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
}

/* Variant v (1: v3, 2: v4) of a function, or NULL where the CPU cannot run it. */
#define PICK(name, v) ((v) == 1 ? (v3_supported() ? name##_v3 : NULL) : (v4_supported() ? name##_v4 : NULL))

static int setup(void **state) {
    (void)state;
    if (!conv2d_forward_cpu_base || !conv2d_forward_cpu_v3 || !conv2d_forward_cpu_v4) {
        print_message("one kernel variant in this build (%s): nothing to compare\n", dp_cpu_kernel_variant());
        return -1;
    }
    return 0;
}

static void test_dispatch_picks_supported_variant(void **state) {
    (void)state;
    assert_true(tu_contains(dp_cpu_kernel_variant(), v4_supported()   ? "x86-64-v4"
                                                     : v3_supported() ? "x86-64-v3"
                                                                      : "baseline"));
}

/* LeNet's conv1 and conv2 shapes (the direct path), stride 1 with padding and odd widths (the
 * v4 variant's shifted planes), strided (im2col) and a wide one (the BLAS path), each variant
 * against the baseline. */
static void test_conv_variants_agree(void **state) {
    (void)state;
    const dp_conv2d_dims shapes[] = {{1, 28, 28, 6, 5, 1, 2, 0, 0}, {6, 14, 14, 16, 5, 1, 0, 0, 0},
                                     {1, 28, 28, 6, 5, 1, 0, 0, 0}, {6, 12, 12, 16, 5, 1, 0, 0, 0},
                                     {3, 9, 13, 5, 3, 1, 1, 0, 0},  {2, 7, 40, 20, 3, 1, 2, 0, 0},
                                     {3, 9, 9, 8, 3, 2, 1, 0, 0},   {64, 4, 4, 70, 3, 1, 1, 0, 0}};
    for (int v = 1; v <= 2; v++) {
        __typeof__(conv2d_workspace_floats) *wsf = PICK(conv2d_workspace_floats, v);
        __typeof__(conv2d_forward_cpu) *fwd = PICK(conv2d_forward_cpu, v);
        __typeof__(conv2d_backward_cpu) *bwd = PICK(conv2d_backward_cpu, v);
        if (!fwd) continue; /* the CPU cannot run it */
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            dp_conv2d_dims d = shapes[s];
            assert_int_equal(dp_conv2d_dims_init(&d), 0);
            const int B = 5, nt = 2;
            const size_t nx = (size_t)B * d.in_c * d.in_h * d.in_w, nw = (size_t)d.out_c * d.in_c * d.k * d.k;
            const size_t ny = (size_t)B * d.out_c * d.out_h * d.out_w;
            kr_rng r = {s + 1};
            float *x = kr_floats(nx), *w = kr_floats(nw), *b = kr_floats((size_t)d.out_c), *dy = kr_floats(ny);
            kr_fill(&r, x, nx, -1, 1), kr_fill(&r, w, nw, -0.5, 0.5), kr_fill(&r, b, (size_t)d.out_c, -0.5, 0.5);
            kr_fill(&r, dy, ny, -1, 1);
            float *y[2], *dx[2], *dw[2], *db[2];
            for (int k = 0; k < 2; k++) {
                float *ws = kr_floats((k ? wsf : conv2d_workspace_floats_base)(&d, B, nt));
                y[k] = kr_floats(ny), dx[k] = kr_floats(nx), dw[k] = kr_floats(nw), db[k] = kr_floats((size_t)d.out_c);
                memset(dw[k], 0, sizeof(float) * nw), memset(db[k], 0, sizeof(float) * (size_t)d.out_c);
                (k ? fwd : conv2d_forward_cpu_base)(&d, B, x, w, b, y[k], ws, nt);
                (k ? bwd : conv2d_backward_cpu_base)(&d, B, x, w, dy, dx[k], dw[k], db[k], ws, nt);
                free(ws);
            }
            double e[4] = {tu_rel_diff(y[0], y[1], ny), tu_rel_diff(dx[0], dx[1], nx), tu_rel_diff(dw[0], dw[1], nw),
                           tu_rel_diff(db[0], db[1], (size_t)d.out_c)};
            for (int k = 0; k < 4; k++)
                if (!(e[k] <= 1e-5))
                    fail_msg("conv shape %zu: output %d differs by %.3g between baseline and v%d", s, k, e[k], v + 2);
            for (int k = 0; k < 2; k++) free(y[k]), free(dx[k]), free(dw[k]), free(db[k]);
            free(x), free(w), free(b), free(dy);
        }
    }
}

static void test_other_variants_agree(void **state) {
    (void)state;
    for (int v = 1; v <= 2; v++) {
        __typeof__(linear_forward_cpu) *lin = PICK(linear_forward_cpu, v);
        __typeof__(linear_backward_cpu) *linb = PICK(linear_backward_cpu, v);
        __typeof__(relu_forward_cpu) *relu = PICK(relu_forward_cpu, v);
        __typeof__(maxpool2d_forward_cpu) *pool = PICK(maxpool2d_forward_cpu, v);
        if (!lin) continue;
        const int B = 7, in_f = 400, out_f = 120, nt = 2;
        kr_rng r = {42};
        const size_t nx = (size_t)B * in_f, ny = (size_t)B * out_f, nw = (size_t)out_f * in_f;
        float *x = kr_floats(nx), *w = kr_floats(nw), *b = kr_floats(out_f), *dy = kr_floats(ny);
        float *y0 = kr_floats(ny), *y1 = kr_floats(ny), *dx0 = kr_floats(nx), *dx1 = kr_floats(nx);
        float *dw0 = kr_floats(nw), *dw1 = kr_floats(nw), *db0 = kr_floats(out_f), *db1 = kr_floats(out_f);
        kr_fill(&r, x, nx, -1, 1), kr_fill(&r, w, nw, -0.1, 0.1), kr_fill(&r, b, out_f, -1, 1);
        kr_fill(&r, dy, ny, -1, 1);
        linear_forward_cpu_base(B, in_f, out_f, x, w, b, y0, nt);
        lin(B, in_f, out_f, x, w, b, y1, nt);
        assert_true(tu_rel_diff(y0, y1, ny) <= 1e-5);
        memset(dw0, 0, sizeof(float) * nw), memset(dw1, 0, sizeof(float) * nw);
        memset(db0, 0, sizeof(float) * out_f), memset(db1, 0, sizeof(float) * out_f);
        linear_backward_cpu_base(B, in_f, out_f, x, w, dy, dx0, dw0, db0, nt);
        linb(B, in_f, out_f, x, w, dy, dx1, dw1, db1, nt);
        assert_true(tu_rel_diff(dx0, dx1, nx) <= 1e-5);
        assert_true(tu_rel_diff(dw0, dw1, nw) <= 1e-5);
        assert_true(tu_rel_diff(db0, db1, out_f) <= 1e-5);
        /* no arithmetic: bitwise */
        const int C = 6, H = 24, W = 24;
        const size_t n = (size_t)B * C * H * W, no = (size_t)B * C * (H / 2) * (W / 2);
        float *p = kr_floats(n), *q0 = kr_floats(n), *q1 = kr_floats(n);
        kr_fill(&r, p, n, -1, 1);
        p[5] = p[700] = NAN; /* max pooling propagates NaN: the same in every variant */
        relu_forward_cpu_base(n, p, q0, nt);
        relu(n, p, q1, nt);
        assert_memory_equal(q0, q1, n * sizeof(float));
        int32_t *a0 = calloc(no, sizeof *a0), *a1 = calloc(no, sizeof *a1);
        maxpool2d_forward_cpu_base(B, C, H, W, 2, 2, 0, p, q0, a0, nt);
        pool(B, C, H, W, 2, 2, 0, p, q1, a1, nt);
        assert_memory_equal(q0, q1, no * sizeof(float));
        assert_memory_equal(a0, a1, no * sizeof(int32_t));
        free(x), free(w), free(b), free(dy), free(y0), free(y1), free(dx0), free(dx1), free(dw0), free(dw1);
        free(db0), free(db1), free(p), free(q0), free(q1), free(a0), free(a1);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dispatch_picks_supported_variant),
        cmocka_unit_test(test_conv_variants_agree),
        cmocka_unit_test(test_other_variants_agree),
    };
    if (setup(NULL) != 0) return 77;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
