/* test_kernels_fwd: every forward CPU kernel against a naive double-precision reference, on
 * several shapes, batch sizes (1, odd, smaller than the thread count) and thread counts. */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "kernels/conv_algos.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/batchnorm.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/loss.h"
#include "kernels/cpu/pool.h"
#include "kernels/kernels.h"
#include "kernels_ref.h"
#include "testutil.h"

static const int threads[] = {1, 2, 3};
#define NTHREADS (int)(sizeof threads / sizeof *threads)

/* ---------------------------------------------------------------- conv2d */

typedef struct { int in_c, h, w, out_c, k, stride, pad, batch; } conv_case;

static const conv_case conv_cases[] = {
    {1, 28, 28, 6, 5, 1, 0, 5},   /* LeNet conv1 */
    {6, 12, 12, 16, 5, 1, 0, 3},  /* LeNet conv2 */
    {3, 32, 32, 6, 5, 1, 0, 2},   /* LeNet-BN conv1 (28x28 out: not a whole number of tiles) */
    {3, 9, 7, 8, 3, 2, 1, 3},     /* stride 2, pad 1, odd sizes */
    {5, 6, 5, 7, 1, 1, 0, 4},     /* 1x1 */
    {4, 7, 9, 10, 1, 2, 0, 3},    /* 1x1 stride 2 (ResNet downsample) */
    {2, 7, 11, 5, 5, 1, 2, 1},    /* pad 2, batch 1 */
    {3, 7, 12, 5, 5, 1, 0, 2},    /* out 3x8: an odd number of 8-wide output vectors */
    {4, 5, 8, 6, 3, 1, 1, 3},     /* out 5x8 with padding */
    {2, 9, 11, 4, 5, 1, 0, 3},    /* out 5x7: rows padded to whole vectors */
    {3, 7, 7, 5, 3, 1, 1, 2},     /* out 7x7 with padding */
    {20, 6, 6, 40, 3, 1, 1, 3},   /* many channels */
    {3, 13, 13, 9, 7, 2, 3, 2},   /* ResNet stem: 7x7 stride 2 pad 3 */
    {2, 3, 3, 4, 3, 1, 0, 7},     /* 1x1 output */
    {3, 5, 5, 1, 3, 1, 1, 2},     /* one output channel */
    {1, 4, 4, 3, 5, 2, 2, 3},     /* kernel larger than the input */
    {64, 4, 4, 70, 3, 1, 1, 5},   /* wide: the blas path groups samples */
};

static void conv_fwd_case(const conv_case *cc) {
    kr_rng r = {(uint64_t)(cc->in_c * 1000 + cc->h * 31 + cc->k)};
    dp_conv2d_dims d = {cc->in_c, cc->h, cc->w, cc->out_c, cc->k, cc->stride, cc->pad, 0, 0};
    assert_int_equal(dp_conv2d_dims_init(&d), 0);
    const int B = cc->batch;
    const size_t nx = (size_t)B * cc->in_c * cc->h * cc->w, nw = (size_t)cc->out_c * cc->in_c * cc->k * cc->k;
    const size_t ny = (size_t)B * cc->out_c * d.out_h * d.out_w;
    float *x = kr_floats(nx), *w = kr_floats(nw), *b = kr_floats((size_t)cc->out_c), *y = kr_floats(ny);
    float *y1 = kr_floats(ny);
    kr_fill(&r, x, nx, -1, 1);
    kr_fill(&r, w, nw, -0.5, 0.5);
    kr_fill(&r, b, (size_t)cc->out_c, -0.5, 0.5);
    double *xd = kr_to_double(x, nx), *wd = kr_to_double(w, nw), *bd = kr_to_double(b, (size_t)cc->out_c);
    double *yr = kr_doubles(ny), *yr0 = kr_doubles(ny);
    kr_conv_fwd(&d, B, xd, wd, bd, yr);
    kr_conv_fwd(&d, B, xd, wd, NULL, yr0);
    for (int path = 0; path <= 2; path++) {
        dp_conv2d_force_path = path;
        for (int t = 0; t < NTHREADS; t++) {
            const int nt = threads[t];
            const size_t nws = conv2d_workspace_floats(&d, B, nt);
            float *ws = kr_floats(nws); /* exact size: ASan sees overruns */
            kr_fill_nan(ws, nws);       /* scratch holds garbage from other layers */
            for (size_t i = 0; i < ny; i++) y[i] = NAN;
            conv2d_forward_cpu(&d, B, x, w, b, y, ws, nt);
            KR_CHECK(kr_rel_err(y, yr, ny), 1e-5, "conv %dx%dx%d -> %d k%d s%d p%d batch %d path %d threads %d",
                     cc->in_c, cc->h, cc->w, cc->out_c, cc->k, cc->stride, cc->pad, B, path, nt);
            if (t == 0 && path == 0) memcpy(y1, y, sizeof(float) * ny);
            else KR_CHECK(tu_rel_diff(y, y1, ny), 1e-6, "conv path %d threads %d vs 1 thread", path, nt);
            conv2d_forward_cpu(&d, B, x, w, NULL, y, ws, nt);
            KR_CHECK(kr_rel_err(y, yr0, ny), 1e-5, "conv without bias, path %d threads %d", path, nt);
            free(ws);
        }
    }
    dp_conv2d_force_path = 0;
    free(x), free(w), free(b), free(y), free(y1), free(xd), free(wd), free(bd), free(yr), free(yr0);
}

static void test_conv_forward(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof conv_cases / sizeof *conv_cases; i++) conv_fwd_case(&conv_cases[i]);
}

static void test_conv_dims(void **state) {
    (void)state;
    dp_conv2d_dims d = {1, 28, 28, 6, 5, 1, 0, 0, 0};
    assert_int_equal(dp_conv2d_dims_init(&d), 0);
    assert_int_equal(d.out_h, 24);
    assert_int_equal(d.out_w, 24);
    dp_conv2d_dims r = {3, 32, 30, 64, 7, 2, 3, 0, 0};
    assert_int_equal(dp_conv2d_dims_init(&r), 0);
    assert_int_equal(r.out_h, 16);
    assert_int_equal(r.out_w, 15);
    dp_conv2d_dims bad = {1, 4, 4, 6, 5, 1, 0, 0, 0}; /* kernel does not fit */
    assert_int_equal(dp_conv2d_dims_init(&bad), -1);
    dp_conv2d_dims bad2 = {1, 4, 4, 6, 3, 0, 0, 0, 0}; /* stride 0 */
    assert_int_equal(dp_conv2d_dims_init(&bad2), -1);
}

/* A workspace sized for a batch and a thread count also serves smaller ones. */
static void test_conv_workspace_smaller(void **state) {
    (void)state;
    kr_rng r = {7};
    for (int path = 1; path <= 2; path++) {
        dp_conv2d_force_path = path;
        dp_conv2d_dims d = {3, 9, 9, 5, 3, 1, 1, 0, 0};
        assert_int_equal(dp_conv2d_dims_init(&d), 0);
        const size_t big = conv2d_workspace_floats(&d, 8, 3);
        for (int B = 1; B <= 8; B++)
            for (int nt = 1; nt <= 3; nt++) assert_true(conv2d_workspace_floats(&d, B, nt) <= big);
        float *ws = kr_floats(big);
        kr_fill_nan(ws, big);
        const size_t nx = 5 * 3 * 81, ny = 5 * 5 * 81;
        float *x = kr_floats(nx), *w = kr_floats(135), *y = kr_floats(ny), *dy = kr_floats(ny);
        float *dx = kr_floats(nx), *dw = kr_floats(135);
        kr_fill(&r, x, nx, -1, 1);
        kr_fill(&r, w, 135, -1, 1);
        kr_fill(&r, dy, ny, -1, 1);
        double *xd = kr_to_double(x, nx), *wd = kr_to_double(w, 135), *yr = kr_doubles(ny);
        kr_conv_fwd(&d, 5, xd, wd, NULL, yr);
        conv2d_forward_cpu(&d, 5, x, w, NULL, y, ws, 2);
        KR_CHECK(kr_rel_err(y, yr, ny), 1e-5, "conv with a larger workspace, path %d", path);
        conv2d_backward_cpu(&d, 5, x, w, dy, dx, dw, NULL, ws, 2);
        free(ws), free(x), free(w), free(y), free(dy), free(dx), free(dw), free(xd), free(wd), free(yr);
    }
    dp_conv2d_force_path = 0;
}

/* ---------------------------------------------------------------- linear */

static void test_linear_forward(void **state) {
    (void)state;
    const int shapes[][3] = {{64, 256, 120}, {64, 120, 84}, {64, 84, 10}, {1, 7, 3}, {5, 33, 17}, {2, 5, 1}};
    kr_rng r = {11};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int B = shapes[s][0], NI = shapes[s][1], NO = shapes[s][2];
        float *x = kr_floats((size_t)B * NI), *w = kr_floats((size_t)NO * NI), *b = kr_floats(NO);
        float *y = kr_floats((size_t)B * NO), *y1 = kr_floats((size_t)B * NO);
        kr_fill(&r, x, (size_t)B * NI, -1, 1);
        kr_fill(&r, w, (size_t)NO * NI, -0.3, 0.3);
        kr_fill(&r, b, NO, -1, 1);
        double *xd = kr_to_double(x, (size_t)B * NI), *wd = kr_to_double(w, (size_t)NO * NI), *bd = kr_to_double(b, NO);
        double *yr = kr_doubles((size_t)B * NO), *yr0 = kr_doubles((size_t)B * NO);
        kr_linear_fwd(B, NI, NO, xd, wd, bd, yr);
        kr_linear_fwd(B, NI, NO, xd, wd, NULL, yr0);
        for (int t = 0; t < NTHREADS; t++) {
            linear_forward_cpu(B, NI, NO, x, w, b, y, threads[t]);
            KR_CHECK(kr_rel_err(y, yr, (size_t)B * NO), 1e-5, "linear %d x %d -> %d, %d threads", B, NI, NO,
                     threads[t]);
            if (t == 0) memcpy(y1, y, sizeof(float) * B * NO);
            else KR_CHECK(tu_rel_diff(y, y1, (size_t)B * NO), 1e-6, "linear threads %d vs 1", threads[t]);
            linear_forward_cpu(B, NI, NO, x, w, NULL, y, threads[t]);
            KR_CHECK(kr_rel_err(y, yr0, (size_t)B * NO), 1e-5, "linear without bias, %d threads", threads[t]);
        }
        free(x), free(w), free(b), free(y), free(y1), free(xd), free(wd), free(bd), free(yr), free(yr0);
    }
}

/* ---------------------------------------------------------------- pooling */

static void test_pool_out_size(void **state) {
    (void)state;
    assert_int_equal(dp_pool_out_size(24, 2, 2, 0), 12);
    assert_int_equal(dp_pool_out_size(25, 2, 2, 0), 12); /* floor mode */
    assert_int_equal(dp_pool_out_size(16, 3, 2, 1), 8);
    assert_int_equal(dp_pool_out_size(7, 3, 2, 1), 4);
    assert_int_equal(dp_pool_out_size(1, 2, 2, 0), 0);
}

static void maxpool_case(int B, int C, int h, int w, int k, int s, int p, int ties, uint64_t seed) {
    kr_rng r = {seed};
    const int oh = dp_pool_out_size(h, k, s, p), ow = dp_pool_out_size(w, k, s, p);
    assert_true(oh > 0 && ow > 0);
    const size_t nx = (size_t)B * C * h * w, ny = (size_t)B * C * oh * ow;
    float *x = kr_floats(nx), *y = kr_floats(ny);
    int32_t *am = calloc(ny, sizeof(int32_t)), *amr = calloc(ny, sizeof(int32_t));
    assert_non_null(am);
    assert_non_null(amr);
    for (size_t i = 0; i < nx; i++) /* ties: few distinct values; all negative so -inf padding matters */
        x[i] = ties ? (float)(int)kr_uniform(&r, -4, -1) : (float)kr_uniform(&r, -3, -0.1);
    double *xd = kr_to_double(x, nx), *yr = kr_doubles(ny);
    kr_maxpool_fwd(B * C, h, w, k, s, p, oh, ow, xd, yr, amr);
    for (int t = 0; t < NTHREADS; t++) {
        memset(am, 0xff, sizeof(int32_t) * ny);
        maxpool2d_forward_cpu(B, C, h, w, k, s, p, x, y, am, threads[t]);
        KR_CHECK(kr_rel_err(y, yr, ny), 0.0, "maxpool %dx%d k%d s%d p%d threads %d", h, w, k, s, p, threads[t]);
        for (size_t i = 0; i < ny; i++)
            if (am[i] != amr[i]) {
                print_error("maxpool %dx%d k%d s%d p%d ties %d: argmax[%zu] = %d, expected %d\n", h, w, k, s, p, ties,
                            i, am[i], amr[i]);
                fail();
            }
    }
    free(x), free(y), free(am), free(amr), free(xd), free(yr);
}

static void test_maxpool_forward(void **state) {
    (void)state;
    for (int ties = 0; ties <= 1; ties++) {
        maxpool_case(3, 6, 24, 24, 2, 2, 0, ties, 1); /* LeNet */
        maxpool_case(5, 2, 7, 9, 2, 2, 0, ties, 2);   /* odd sizes: last row / column dropped */
        maxpool_case(2, 2, 14, 22, 2, 2, 0, ties, 8); /* 11 outputs a row: 8 + an overlapping 4 */
        maxpool_case(2, 3, 6, 6, 2, 2, 0, ties, 9);   /* 3 outputs a row: scalar */
        maxpool_case(2, 3, 16, 16, 3, 2, 1, ties, 3); /* ResNet */
        maxpool_case(1, 2, 40, 70, 3, 2, 1, ties, 10); /* 35 outputs a row: 16-wide blocks and a partial one */
        maxpool_case(1, 2, 11, 41, 4, 2, 2, ties, 11); /* stride 2, wider window and padding */
        maxpool_case(1, 2, 7, 5, 3, 2, 1, ties, 4);
        maxpool_case(3, 1, 6, 6, 3, 1, 1, ties, 5);   /* overlapping */
        maxpool_case(2, 2, 9, 9, 4, 3, 2, ties, 6);
        maxpool_case(1, 1, 2, 2, 2, 2, 0, ties, 7);
    }
}

/* NaN propagates through max pooling, as in PyTorch. */
static void test_maxpool_nan(void **state) {
    (void)state;
    float x[16], y[4];
    int32_t am[4];
    for (int i = 0; i < 16; i++) x[i] = (float)i;
    x[5] = NAN;
    maxpool2d_forward_cpu(1, 1, 4, 4, 2, 2, 0, x, y, am, 1);
    assert_true(isnan(y[0]));
    assert_int_equal(am[0], 5);
    assert_true(y[1] == 7.0f && am[1] == 7);
    maxpool2d_forward_cpu(1, 1, 4, 4, 3, 2, 1, x, y, am, 1);
    assert_true(isnan(y[0]));
    assert_int_equal(am[0], 5);
    /* a window of -inf only: the maximum is -inf at the first element of the clipped window */
    for (int i = 0; i < 16; i++) x[i] = -INFINITY;
    maxpool2d_forward_cpu(1, 1, 4, 4, 3, 2, 1, x, y, am, 1);
    const int32_t first[4] = {0, 1, 4, 5};
    for (int q = 0; q < 4; q++) {
        assert_true(isinf(y[q]) && y[q] < 0);
        assert_int_equal(am[q], first[q]);
    }
    maxpool2d_forward_cpu(1, 1, 4, 4, 2, 2, 0, x, y, am, 1);
    assert_int_equal(am[3], 10);
}

/* Several NaN in a window: the last one is taken (PyTorch's rule: v > max or isnan(v)). */
static void test_maxpool_two_nan(void **state) {
    (void)state;
    float x[4] = {NAN, 1, NAN, 2}, y[1];
    int32_t am[1];
    maxpool2d_forward_cpu(1, 1, 2, 2, 2, 2, 0, x, y, am, 1);
    assert_true(isnan(y[0]));
    assert_int_equal(am[0], 2);
    maxpool2d_forward_cpu(1, 1, 2, 2, 2, 1, 0, x, y, am, 1); /* generic path */
    assert_int_equal(am[0], 2);
}

static void test_global_avgpool_forward(void **state) {
    (void)state;
    kr_rng r = {21};
    const int cases[][3] = {{4, 512, 1}, {3, 64, 16}, {5, 7, 49}, {1, 3, 9}};
    for (size_t s = 0; s < sizeof cases / sizeof *cases; s++) {
        const int B = cases[s][0], C = cases[s][1], hw = cases[s][2];
        const size_t nx = (size_t)B * C * hw;
        float *x = kr_floats(nx), *y = kr_floats((size_t)B * C);
        kr_fill(&r, x, nx, -2, 2);
        double *yr = kr_doubles((size_t)B * C);
        for (int q = 0; q < B * C; q++) {
            double acc = 0.0;
            for (int i = 0; i < hw; i++) acc += x[(size_t)q * hw + i];
            yr[q] = acc / hw;
        }
        for (int t = 0; t < NTHREADS; t++) {
            global_avgpool_forward_cpu(B, C, hw, x, y, threads[t]);
            KR_CHECK(kr_rel_err(y, yr, (size_t)B * C), 1e-6, "global avgpool %d %d %d", B, C, hw);
        }
        free(x), free(y), free(yr);
    }
}

/* ---------------------------------------------------------------- element-wise */

static void test_relu_add_forward(void **state) {
    (void)state;
    kr_rng r = {31};
    const size_t sizes[] = {1, 7, 100, 221184, 65537};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        const size_t n = sizes[s];
        float *x = kr_floats(n), *b = kr_floats(n), *y = kr_floats(n);
        kr_fill(&r, x, n, -1, 1);
        kr_fill(&r, b, n, -1, 1);
        x[0] = 0.0f;
        if (n > 3) x[3] = NAN;
        for (int t = 0; t < NTHREADS; t++) {
            relu_forward_cpu(n, x, y, threads[t]);
            for (size_t i = 0; i < n; i++) {
                if (isnan(x[i])) assert_true(isnan(y[i])); /* PyTorch keeps NaN */
                else assert_true(y[i] == (x[i] > 0 ? x[i] : 0.0f));
            }
            add_forward_cpu(n, x, b, y, threads[t]);
            for (size_t i = 0; i < n; i++)
                if (!isnan(x[i])) assert_true(y[i] == x[i] + b[i]);
        }
        memcpy(y, x, sizeof(float) * n); /* in place */
        relu_forward_cpu(n, y, y, 2);
        for (size_t i = 0; i < n; i++)
            if (!isnan(x[i])) assert_true(y[i] == (x[i] > 0 ? x[i] : 0.0f));
        free(x), free(b), free(y);
    }
    relu_forward_cpu(0, NULL, NULL, 2); /* empty batch */
}

/* ---------------------------------------------------------------- batchnorm */

static void bn_case(int B, int C, int hw, uint64_t seed) {
    kr_rng r = {seed};
    const size_t n = (size_t)B * C * hw;
    const double eps = 1e-5, cnt = (double)B * hw;
    float *x = kr_floats(n), *y = kr_floats(n), *gamma = kr_floats(C), *beta = kr_floats(C);
    float *mean = kr_floats(C), *invstd = kr_floats(C);
    for (size_t i = 0; i < n; i++) x[i] = (float)(kr_uniform(&r, -1, 1) * 2.0 + 0.7); /* mean far from 0 */
    kr_fill(&r, gamma, C, 0.5, 1.5);
    kr_fill(&r, beta, C, -1, 1);
    double *s = kr_doubles(C), *s2 = kr_doubles(C), *rs = kr_doubles(C), *rs2 = kr_doubles(C);
    for (int n_ = 0; n_ < B; n_++)
        for (int ch = 0; ch < C; ch++)
            for (int i = 0; i < hw; i++) {
                const double v = x[((size_t)n_ * C + ch) * hw + i];
                rs[ch] += v, rs2[ch] += v * v;
            }
    double *xd = kr_to_double(x, n), *gd = kr_to_double(gamma, C), *bd = kr_to_double(beta, C), *yr = kr_doubles(n);
    kr_bn_fwd(B, C, hw, xd, gd, bd, eps, yr);
    for (int t = 0; t < NTHREADS; t++) {
        batchnorm_stats_cpu(B, C, hw, x, s, s2, threads[t]);
        for (int ch = 0; ch < C; ch++) {
            assert_true(fabs(s[ch] - rs[ch]) <= 1e-10 * (1.0 + fabs(rs[ch])));
            assert_true(fabs(s2[ch] - rs2[ch]) <= 1e-10 * (1.0 + fabs(rs2[ch])));
            const double m = s[ch] / cnt, v = s2[ch] / cnt - m * m;
            mean[ch] = (float)m;
            invstd[ch] = (float)(1.0 / sqrt(v + eps));
        }
        batchnorm_apply_cpu(B, C, hw, x, mean, invstd, gamma, beta, y, threads[t]);
        KR_CHECK(kr_rel_err(y, yr, n), 2e-5, "batchnorm %d x %d x %d, %d threads", B, C, hw, threads[t]);
    }
    /* the statistics of a batch split in two add up to those of the whole batch (SyncBN) */
    if (B >= 2) {
        const int h1 = B / 2;
        double *a = kr_doubles(C), *a2 = kr_doubles(C), *b = kr_doubles(C), *b2 = kr_doubles(C);
        batchnorm_stats_cpu(h1, C, hw, x, a, a2, 2);
        batchnorm_stats_cpu(B - h1, C, hw, x + (size_t)h1 * C * hw, b, b2, 1);
        for (int ch = 0; ch < C; ch++) {
            assert_true(fabs(a[ch] + b[ch] - rs[ch]) <= 1e-10 * (1.0 + fabs(rs[ch])));
            assert_true(fabs(a2[ch] + b2[ch] - rs2[ch]) <= 1e-10 * (1.0 + fabs(rs2[ch])));
        }
        free(a), free(a2), free(b), free(b2);
    }
    free(x), free(y), free(gamma), free(beta), free(mean), free(invstd), free(s), free(s2), free(rs), free(rs2);
    free(xd), free(gd), free(bd), free(yr);
}

static void test_batchnorm_forward(void **state) {
    (void)state;
    bn_case(64, 6, 576, 41);  /* LeNet-BN bn1 */
    bn_case(64, 120, 1, 42);  /* BatchNorm1d */
    bn_case(256, 160, 1, 46); /* BatchNorm1d large enough for threads */
    bn_case(3, 5, 13, 43);    /* odd sizes */
    bn_case(1, 2, 7, 44);     /* batch 1 */
    bn_case(2, 1, 9, 45);     /* one channel, fewer than the threads */
}

/* ---------------------------------------------------------------- softmax cross-entropy */

static void test_softmax_xent_forward(void **state) {
    (void)state;
    kr_rng r = {51};
    enum { B = 17, K = 10 };
    float z[B * K], g[B * K];
    int32_t lab[B];
    double zd[B * K];
    for (int scale = 0; scale < 3; scale++) {
        const double mag = scale == 0 ? 3.0 : scale == 1 ? 80.0 : 1e4; /* 1e4: exp overflows without the shift */
        for (int i = 0; i < B * K; i++) zd[i] = z[i] = (float)(kr_uniform(&r, -1, 1) * mag + (scale == 2 ? 3e4 : 0));
        for (int n = 0; n < B; n++) lab[n] = (int32_t)(kr_next(&r) % K);
        int correct = -1, expect = 0;
        for (int n = 0; n < B; n++) {
            int am = 0;
            for (int j = 1; j < K; j++)
                if (zd[n * K + j] > zd[n * K + am]) am = j;
            expect += am == lab[n];
        }
        const double ref = kr_xent(B, K, zd, lab);
        const double loss = softmax_xent_cpu(B, K, z, lab, 1.0f / B, g, &correct);
        assert_true(isfinite(loss));
        assert_true(fabs(loss - ref) <= 1e-5 * (fabs(ref) + 1.0));
        assert_int_equal(correct, expect);
        /* the gradient's reference: (softmax - onehot) / B */
        double gr[B * K];
        for (int n = 0; n < B; n++) {
            double mx = zd[n * K], se = 0.0;
            for (int j = 1; j < K; j++) mx = fmax(mx, zd[n * K + j]);
            for (int j = 0; j < K; j++) se += exp(zd[n * K + j] - mx);
            for (int j = 0; j < K; j++) gr[n * K + j] = (exp(zd[n * K + j] - mx) / se - (j == lab[n])) / B;
        }
        KR_CHECK(kr_rel_err(g, gr, B * K), 1e-5, "softmax xent gradient, magnitude %g", mag);
        /* evaluation: no gradient, no count */
        assert_true(softmax_xent_cpu(B, K, z, lab, 1.0f, NULL, NULL) == loss);
    }
    /* ties: the first maximum is the prediction */
    float t[2 * 3] = {1, 1, 1, 0, 2, 2};
    int32_t tl[2] = {0, 1};
    int correct = -1;
    const double l = softmax_xent_cpu(2, 3, t, tl, 0.5f, NULL, &correct);
    assert_int_equal(correct, 2);
    assert_true(fabs(l - (log(3.0) + (log(1.0 + 2.0 * exp(2.0)) - 2.0))) < 1e-6);
}

/* The convolution algorithm record (kernels/conv_algos.h): what the CUDA table notes as it plans
 * shapes comes back as one line, which parses to the same choices and, pinned, is what a replaying
 * process looks up; text that is not a record is refused, naming the entry. */
static void test_conv_algo_record(void **state) {
    (void)state;
    dp_conv_algos_reset();
    char buf[512], why[160];
    assert_int_equal(dp_conv_algos_current(buf, sizeof buf), 0);
    dp_conv_algo a[3] = {{{64, 56, 56, 64, 3, 1, 1, 0, 0}, 256, 0, 1, 0, -1},
                         {{3, 224, 224, 64, 7, 2, 3, 0, 0}, 256, 1, 6, 1, 5},
                         {{64, 56, 56, 64, 3, 1, 1, 0, 0}, 256, 0, 7, 7, 7}}; /* the first shape again */
    for (int i = 0; i < 3; i++) assert_int_equal(dp_conv2d_dims_init(&a[i].d), 0), dp_conv_algos_note(&a[i]);
    const size_t len = dp_conv_algos_current(buf, sizeof buf);
    assert_string_equal(buf, "64,56,56,64,3,1,1,256,0:1,0,-1;3,224,224,64,7,2,3,256,1:6,1,5");
    assert_int_equal(len, strlen(buf));
    assert_int_equal(dp_conv_algos_current(buf, 8), len); /* the length it needs, cut to fit */
    assert_int_equal(strlen(buf), 7);
    dp_conv_algo back[4];
    dp_conv_algos_current(buf, sizeof buf);
    assert_int_equal(dp_conv_algos_parse(buf, back, 4, why, sizeof why), 2);
    assert_memory_equal(&back[0], &a[0], sizeof a[0]);
    assert_memory_equal(&back[1], &a[1], sizeof a[1]);
    assert_int_equal(dp_conv_algos_pin(buf, why, sizeof why), 0);
    dp_conv_algo got;
    assert_int_equal(dp_conv_algos_pinned(&a[1].d, 256, 1, &got), 1);
    assert_int_equal(got.fwd, 6), assert_int_equal(got.filter, 5);
    assert_int_equal(dp_conv_algos_pinned(&a[1].d, 256, 0, &got), 0); /* another math mode */
    assert_int_equal(dp_conv_algos_pinned(&a[1].d, 128, 1, &got), 0); /* another batch */
    const char *bad[] = {"64,56,56,64,3,1,1,256,0:1,0", "64,56,56,64,3,1,1,256,0:1,0,-1;x", "1,4,4,2,9,1,0,8,0:1,1,1",
                         "64,56,56,64,3,1,1,256,2:1,0,-1", "64,56,56,64,3,1,1,256,0:1,0,-1 "};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        why[0] = '\0';
        assert_int_equal(dp_conv_algos_parse(bad[i], back, 4, why, sizeof why), -1);
        assert_true(strstr(why, "entry ") != NULL);
    }
    /* each field a plain decimal in its range, as every number a user types (core/parse_num.h): no
       wrap (4294967297 was stored as 1), blank, '+', and no int overflow in the shape (pad 2^31-1
       wrapped to a "valid" 2x2 output; 2^30 overflowed, UB) */
    const char *strict[] = {"4294967297,28,28,6,5,1,2,64,0:0,0,0", " 1,28,28,6,5,1,2,64,0:0,0,0",
                            "1, 28,28,6,5,1,2,64,0:0,0,0",         "+1,28,28,6,5,1,2,64,0:0,0,0",
                            "1,5,5,1,1,1,2147483647,1,0:0,0,0",    "1,1,1,1,1,1,1073741824,1,0:0,0,0",
                            "1,2147483647,1,1,1,1,1,1,0:0,0,0",    "1,28,28,6,5,1,2,64,0:0,0,100",
                            "1,28,28,6,5,1,2,64,0:-2,0,0",         "1,28,28,6,5,1,2,64,0:0,0,0;",
                            "1,28,28,6,5,1,2,64,0:0x1,0,0",        "1,28,28,6,5,0,2,64,0:0,0,0",
                            "1,28,28,6,5,1,2,64,0:0,0,0,0",        "1,28,28,6,5,1,2,64:0,0,0",
                            "1,28,28,6,5,1,2,1048577,0:0,0,0",     ";1,28,28,6,5,1,2,64,0:0,0,0"};
    for (size_t i = 0; i < sizeof strict / sizeof *strict; i++) {
        why[0] = '\0';
        if (dp_conv_algos_parse(strict[i], back, 4, why, sizeof why) != -1 || !strstr(why, "entry "))
            fail_msg("'%s' accepted (%s)", strict[i], why);
    }
    assert_int_equal(dp_conv_algos_parse("4294967297,28,28,6,5,1,2,64,0:0,0,0", back, 4, why, sizeof why), -1);
    assert_string_equal(why, "entry 1: in_c is '4294967297', expected an integer in 1..65536");
    /* every field at its bound parses, and its shape is computed without overflow */
    assert_int_equal(dp_conv_algos_parse("65536,65536,65536,65536,1,1,65536,1048576,1:99,-1,0", back, 4, why,
                                         sizeof why), 1);
    assert_int_equal(back[0].d.out_h, 65536 + 2 * 65536);
    dp_conv2d_dims big = {1, INT_MAX, INT_MAX, 1, 1, 1, INT_MAX, 0, 0};
    assert_int_equal(dp_conv2d_dims_init(&big), -1); /* an output beyond an int */
    big.stride = 4;
    assert_int_equal(dp_conv2d_dims_init(&big), 0);
    assert_int_equal(big.out_h, (int)(((long long)INT_MAX * 3 - 1) / 4 + 1));
    assert_int_equal(dp_pool_out_size(INT_MAX, 1, 1, INT_MAX), 0);
    assert_int_equal(dp_conv_algos_pin(bad[1], why, sizeof why), -1);
    assert_int_equal(dp_conv_algos_pinned(&a[1].d, 256, 1, &got), 1); /* a bad record leaves the pinned one */
    assert_int_equal(dp_conv_algos_parse(buf, back, 1, why, sizeof why), -1);
    dp_conv_algos_reset();
}

/* --precision bf16's rounding (the CPU table's round_bf16, kernels/bf16.h) against kr_bf16, the
 * arithmetic reference: ties, both ends of every binade, subnormals, overflow, NaN, and random
 * bit patterns over the whole fp32 range. */
static void check_bf16(const float *x, size_t n) {
    float *y = kr_floats(n);
    const dp_kctx c = {.nthreads = 2};
    dp_cpu_kernels.round_bf16(&c, n, x, y);
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &y[i], sizeof u);
        if ((u & 0xffffu) != 0) fail_msg("round_bf16(%a) = %a keeps low bits", (double)x[i], (double)y[i]);
        const double ref = kr_bf16((double)x[i]);
        if (isnan(ref)) {
            uint32_t ux;
            memcpy(&ux, &x[i], sizeof ux);
            if (!isnan(y[i]) || (u >> 31) != (ux >> 31)) fail_msg("round_bf16(NaN 0x%08x) = 0x%08x", ux, u);
        } else if ((double)y[i] != ref || !signbit(y[i]) != !signbit(ref)) {
            fail_msg("round_bf16(%a) = %a, the nearest bf16 (ties to even) is %a", (double)x[i], (double)y[i], ref);
        }
    }
    /* in place: the same values */
    float *z = kr_floats(n);
    memcpy(z, x, n * sizeof *z);
    dp_cpu_kernels.round_bf16(&c, n, z, z);
    assert_memory_equal(z, y, n * sizeof *z);
    free(y), free(z);
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void test_round_bf16(void **state) {
    (void)state;
    static const uint32_t edge[] = {
        0x3f808000u, /* 1 + 2^-8: a tie, kept LSB even: down to 1 */
        0x3f818000u, /* 1 + 3 2^-8: a tie, kept LSB odd: up */
        0x3f808001u, /* just above the tie: up */
        0x3f807fffu, /* just below: down */
        0xbf808000u, 0xbf818000u, /* negative ties */
        0x7f7f7fffu, /* below the largest bf16's rounding limit: the largest bf16 */
        0x7f7f8000u, /* the tie above the largest bf16: to even, an infinity */
        0x7f7fffffu, 0xff7fffffu, /* FLT_MAX: infinities */
        0x7f800000u, 0xff800000u, 0x00000000u, 0x80000000u, /* infinities and zeros stay */
        0x00000001u, 0x00008000u, 0x00008001u, 0x00018000u, 0x807fffffu, 0x007f8000u, /* subnormals */
        0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fbfffffu, /* NaNs, payloads in the low half */
    };
    float e[sizeof edge / sizeof *edge];
    for (size_t i = 0; i < sizeof edge / sizeof *edge; i++) e[i] = from_bits(edge[i]);
    check_bf16(e, sizeof edge / sizeof *edge);
    /* the tie cases round as the comments say */
    const dp_kctx c = {.nthreads = 1};
    float y[4];
    dp_cpu_kernels.round_bf16(&c, 4, e, y);
    assert_true(y[0] == 1.0f && y[1] == from_bits(0x3f820000u) && y[2] == from_bits(0x3f810000u) && y[3] == 1.0f);
    enum { N = 1 << 16 };
    float *x = kr_floats(N);
    kr_rng r = {77};
    for (size_t i = 0; i < N; i++) x[i] = from_bits((uint32_t)kr_next(&r));
    check_bf16(x, N);
    for (size_t i = 0; i < N; i++) x[i] = (float)kr_uniform(&r, -4, 4); /* the values a network holds */
    check_bf16(x, N);
    free(x);
}

int main(void) {
    openblas_set_num_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_dims),
        cmocka_unit_test(test_conv_forward),
        cmocka_unit_test(test_conv_workspace_smaller),
        cmocka_unit_test(test_linear_forward),
        cmocka_unit_test(test_pool_out_size),
        cmocka_unit_test(test_maxpool_forward),
        cmocka_unit_test(test_maxpool_nan),
        cmocka_unit_test(test_maxpool_two_nan),
        cmocka_unit_test(test_global_avgpool_forward),
        cmocka_unit_test(test_relu_add_forward),
        cmocka_unit_test(test_batchnorm_forward),
        cmocka_unit_test(test_softmax_xent_forward),
        cmocka_unit_test(test_conv_algo_record),
        cmocka_unit_test(test_round_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
