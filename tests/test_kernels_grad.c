/* test_kernels_grad: gradient checks. For each layer, the float kernel's backward on dy = r must
 * match central finite differences (in double, eps 1e-6) of L = sum(r * y) under the double
 * reference forward of kernels_ref.h. Large tensors are checked on a seeded subset of elements.
 * Also: weight and bias gradients accumulate, input gradients overwrite, thread counts agree. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/batchnorm.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/loss.h"
#include "kernels/cpu/pool.h"
#include "kernels_ref.h"
#include "testutil.h"

#define FD_EPS 1e-6
#define GRAD_TOL 1e-3 /* float kernels against double differences */
#define MAX_CHECKED 48

static const int threads[] = {1, 2, 3};
#define NTHREADS (int)(sizeof threads / sizeof *threads)

/* ---------------------------------------------------------------- finite differences */

typedef double (*loss_fn)(void *ctx);

/* The elements of a tensor of n that are checked: all if few, else a seeded sample with the ends. */
typedef struct {
    size_t idx[MAX_CHECKED];
    int n;
} picks;

static picks pick(size_t n, kr_rng *r) {
    picks p;
    p.n = 0;
    if (n <= MAX_CHECKED) {
        for (size_t i = 0; i < n; i++) p.idx[p.n++] = i;
        return p;
    }
    p.idx[p.n++] = 0;
    p.idx[p.n++] = n - 1;
    while (p.n < MAX_CHECKED) p.idx[p.n++] = (size_t)(kr_next(r) % n);
    return p;
}

/* ref[j] = dL/dv[idx_j] by central differences. */
static void fd_grad(loss_fn L, void *ctx, double *v, const picks *p, double *ref) {
    for (int j = 0; j < p->n; j++) {
        const size_t i = p->idx[j];
        const double old = v[i];
        v[i] = old + FD_EPS;
        const double lp = L(ctx);
        v[i] = old - FD_EPS;
        const double lm = L(ctx);
        v[i] = old;
        ref[j] = (lp - lm) / (2.0 * FD_EPS);
    }
}

/* max_j |g[idx_j] - ref[j]| / max_j |ref[j]| */
static double fd_err(const float *g, const picks *p, const double *ref) {
    double maxd = 0.0, maxr = 1e-30;
    for (int j = 0; j < p->n; j++) {
        const double d = fabs((double)g[p->idx[j]] - ref[j]);
        if (isnan(d)) return INFINITY;
        if (d > maxd) maxd = d;
        if (fabs(ref[j]) > maxr) maxr = fabs(ref[j]);
    }
    return maxd / maxr;
}

static double dot(const double *a, const double *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ---------------------------------------------------------------- conv2d */

typedef struct {
    const dp_conv2d_dims *d;
    int batch;
    double *x, *w, *b, *r, *y;
    size_t ny;
} conv_ctx;

static double conv_loss(void *p) {
    conv_ctx *c = p;
    kr_conv_fwd(c->d, c->batch, c->x, c->w, c->b, c->y);
    return dot(c->r, c->y, c->ny);
}

typedef struct { int in_c, h, w, out_c, k, stride, pad, batch; } conv_case;

static const conv_case conv_cases[] = {
    {1, 12, 12, 6, 5, 1, 0, 3},   /* LeNet conv1 shape, smaller image */
    {6, 12, 12, 16, 5, 1, 0, 2},  /* LeNet conv2 */
    {3, 9, 7, 8, 3, 2, 1, 3},     /* stride 2, pad 1, odd sizes */
    {4, 7, 9, 10, 1, 2, 0, 3},    /* 1x1 stride 2 */
    {2, 6, 6, 3, 1, 1, 0, 5},     /* 1x1 */
    {2, 7, 11, 5, 5, 1, 2, 1},    /* pad 2, batch 1 */
    {3, 7, 12, 5, 5, 1, 0, 2},    /* out 3x8: an odd number of 8-wide output vectors */
    {4, 5, 8, 6, 3, 1, 1, 3},     /* out 5x8 with padding */
    {2, 9, 11, 4, 5, 1, 0, 3},    /* out 5x7: rows padded to whole vectors */
    {3, 7, 7, 5, 3, 1, 1, 2},     /* out 7x7 with padding */
    {3, 5, 5, 1, 3, 1, 1, 2},     /* one output channel, batch below 3 threads */
    {3, 13, 13, 4, 7, 2, 3, 2},   /* 7x7 stride 2 pad 3 */
    {1, 4, 4, 3, 5, 2, 2, 3},     /* kernel larger than the input */
    {16, 4, 4, 40, 3, 1, 1, 3},   /* many channels: blas path, samples grouped */
};

static void conv_grad_case(const conv_case *cc) {
    kr_rng r = {(uint64_t)(cc->in_c * 7919 + cc->h * 17 + cc->k * 3 + cc->stride)};
    dp_conv2d_dims d = {cc->in_c, cc->h, cc->w, cc->out_c, cc->k, cc->stride, cc->pad, 0, 0};
    assert_int_equal(dp_conv2d_dims_init(&d), 0);
    const int B = cc->batch, O = cc->out_c;
    const size_t nx = (size_t)B * cc->in_c * cc->h * cc->w, nw = (size_t)O * cc->in_c * cc->k * cc->k;
    const size_t ny = (size_t)B * O * d.out_h * d.out_w;
    float *x = kr_floats(nx), *w = kr_floats(nw), *b = kr_floats(O), *dy = kr_floats(ny);
    float *dx = kr_floats(nx), *dw = kr_floats(nw), *db = kr_floats(O), *dw0 = kr_floats(nw), *db0 = kr_floats(O);
    float *dx1 = kr_floats(nx), *dw1 = kr_floats(nw);
    kr_fill(&r, x, nx, -1, 1);
    kr_fill(&r, w, nw, -0.5, 0.5);
    kr_fill(&r, b, O, -0.5, 0.5);
    kr_fill(&r, dy, ny, -1, 1);
    kr_fill(&r, dw0, nw, -1, 1); /* gradients already there: the kernel must add to them */
    kr_fill(&r, db0, O, -1, 1);
    conv_ctx c = {&d, B, kr_to_double(x, nx), kr_to_double(w, nw), kr_to_double(b, O), kr_to_double(dy, ny),
                  kr_doubles(ny), ny};
    const picks px = pick(nx, &r), pw = pick(nw, &r), pb = pick(O, &r);
    double gx[MAX_CHECKED], gw[MAX_CHECKED], gb[MAX_CHECKED];
    fd_grad(conv_loss, &c, c.x, &px, gx);
    fd_grad(conv_loss, &c, c.w, &pw, gw);
    fd_grad(conv_loss, &c, c.b, &pb, gb);

    for (int path = 0; path <= 2; path++) {
        dp_conv2d_force_path = path;
        for (int t = 0; t < NTHREADS; t++) {
            const int nt = threads[t];
            const size_t nws = conv2d_workspace_floats(&d, B, nt);
            float *ws = kr_floats(nws); /* exact size: ASan sees overruns */
            kr_fill_nan(ws, nws);       /* scratch holds garbage from other layers */
            kr_fill_nan(dx, nx);
            memset(dw, 0, sizeof(float) * nw);
            memset(db, 0, sizeof(float) * O);
            conv2d_backward_cpu(&d, B, x, w, dy, dx, dw, db, ws, nt);
            KR_CHECK(fd_err(dx, &px, gx), GRAD_TOL, "conv %dx%dx%d->%d k%d s%d p%d b%d path %d threads %d: dx",
                     cc->in_c, cc->h, cc->w, O, cc->k, cc->stride, cc->pad, B, path, nt);
            KR_CHECK(fd_err(dw, &pw, gw), GRAD_TOL, "conv path %d threads %d: dw", path, nt);
            KR_CHECK(fd_err(db, &pb, gb), GRAD_TOL, "conv path %d threads %d: db", path, nt);
            if (path == 0 && t == 0) {
                memcpy(dx1, dx, sizeof(float) * nx);
                memcpy(dw1, dw, sizeof(float) * nw);
            } else {
                KR_CHECK(tu_rel_diff(dx, dx1, nx), 1e-5, "conv path %d threads %d: dx vs 1 thread", path, nt);
                KR_CHECK(tu_rel_diff(dw, dw1, nw), 1e-5, "conv path %d threads %d: dw vs 1 thread", path, nt);
            }
            /* accumulate: starting from dw0 / db0, two calls add the gradient twice; dx overwrites */
            float *aw = kr_floats(nw), *ab = kr_floats(O);
            memcpy(aw, dw0, sizeof(float) * nw);
            memcpy(ab, db0, sizeof(float) * O);
            conv2d_backward_cpu(&d, B, x, w, dy, dx, aw, ab, ws, nt);
            conv2d_backward_cpu(&d, B, x, w, dy, dx, aw, ab, ws, nt);
            for (size_t i = 0; i < nw; i++) aw[i] = (aw[i] - dw0[i]) * 0.5f;
            for (int i = 0; i < O; i++) ab[i] = (ab[i] - db0[i]) * 0.5f;
            KR_CHECK(tu_rel_diff(aw, dw, nw), 1e-5, "conv %dx%dx%d->%d k%d path %d threads %d: dw does not accumulate",
                     cc->in_c, cc->h, cc->w, O, cc->k, path, nt);
            KR_CHECK(tu_rel_diff(ab, db, O), 1e-5, "conv path %d threads %d: db does not accumulate", path, nt);
            KR_CHECK(tu_rel_diff(dx, dx1, nx), 1e-5, "conv path %d threads %d: dx does not overwrite", path, nt);
            /* first layer: no dx, no bias */
            memset(aw, 0, sizeof(float) * nw);
            conv2d_backward_cpu(&d, B, x, w, dy, NULL, aw, NULL, ws, nt);
            KR_CHECK(tu_rel_diff(aw, dw, nw), 1e-5, "conv path %d threads %d: dw without dx and db", path, nt);
            free(aw), free(ab), free(ws);
        }
    }
    dp_conv2d_force_path = 0;
    free(x), free(w), free(b), free(dy), free(dx), free(dw), free(db), free(dw0), free(db0), free(dx1), free(dw1);
    free(c.x), free(c.w), free(c.b), free(c.r), free(c.y);
}

static void test_conv_grad(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof conv_cases / sizeof *conv_cases; i++) conv_grad_case(&conv_cases[i]);
}

/* ---------------------------------------------------------------- linear */

typedef struct {
    int batch, in_f, out_f;
    double *x, *w, *b, *r, *y;
} lin_ctx;

static double lin_loss(void *p) {
    lin_ctx *c = p;
    kr_linear_fwd(c->batch, c->in_f, c->out_f, c->x, c->w, c->b, c->y);
    return dot(c->r, c->y, (size_t)c->batch * c->out_f);
}

static void test_linear_grad(void **state) {
    (void)state;
    const int shapes[][3] = {{5, 33, 17}, {64, 84, 10}, {1, 7, 3}, {64, 256, 120}, {2, 5, 1}, {3, 4, 40}};
    kr_rng r = {101};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int B = shapes[s][0], NI = shapes[s][1], NO = shapes[s][2];
        const size_t nx = (size_t)B * NI, nw = (size_t)NO * NI, ny = (size_t)B * NO;
        float *x = kr_floats(nx), *w = kr_floats(nw), *b = kr_floats(NO), *dy = kr_floats(ny);
        float *dx = kr_floats(nx), *dw = kr_floats(nw), *db = kr_floats(NO), *dw0 = kr_floats(nw), *db0 = kr_floats(NO);
        kr_fill(&r, x, nx, -1, 1);
        kr_fill(&r, w, nw, -0.3, 0.3);
        kr_fill(&r, b, NO, -1, 1);
        kr_fill(&r, dy, ny, -1, 1);
        kr_fill(&r, dw0, nw, -1, 1);
        kr_fill(&r, db0, NO, -1, 1);
        lin_ctx c = {B, NI, NO, kr_to_double(x, nx), kr_to_double(w, nw), kr_to_double(b, NO), kr_to_double(dy, ny),
                     kr_doubles(ny)};
        const picks px = pick(nx, &r), pw = pick(nw, &r), pb = pick(NO, &r);
        double gx[MAX_CHECKED], gw[MAX_CHECKED], gb[MAX_CHECKED];
        fd_grad(lin_loss, &c, c.x, &px, gx);
        fd_grad(lin_loss, &c, c.w, &pw, gw);
        fd_grad(lin_loss, &c, c.b, &pb, gb);
        for (int t = 0; t < NTHREADS; t++) {
            const int nt = threads[t];
            kr_fill_nan(dx, nx);
            memcpy(dw, dw0, sizeof(float) * nw);
            memcpy(db, db0, sizeof(float) * NO);
            linear_backward_cpu(B, NI, NO, x, w, dy, dx, dw, db, nt);
            KR_CHECK(fd_err(dx, &px, gx), GRAD_TOL, "linear %d x %d -> %d, %d threads: dx", B, NI, NO, nt);
            /* second call: dw - dw0 = 2 g */
            linear_backward_cpu(B, NI, NO, x, w, dy, dx, dw, db, nt);
            for (size_t i = 0; i < nw; i++) dw[i] = (dw[i] - dw0[i]) * 0.5f;
            for (int i = 0; i < NO; i++) db[i] = (db[i] - db0[i]) * 0.5f;
            KR_CHECK(fd_err(dx, &px, gx), GRAD_TOL, "linear %d threads: dx does not overwrite", nt);
            KR_CHECK(fd_err(dw, &pw, gw), GRAD_TOL, "linear %d x %d -> %d, %d threads: dw (accumulated twice)", B, NI,
                     NO, nt);
            KR_CHECK(fd_err(db, &pb, gb), GRAD_TOL, "linear %d threads: db (accumulated twice)", nt);
            memset(dw, 0, sizeof(float) * nw);
            linear_backward_cpu(B, NI, NO, x, w, dy, NULL, dw, NULL, nt); /* first layer: no dx, no bias */
            KR_CHECK(fd_err(dw, &pw, gw), GRAD_TOL, "linear %d threads: dw without dx and db", nt);
        }
        free(x), free(w), free(b), free(dy), free(dx), free(dw), free(db), free(dw0), free(db0);
        free(c.x), free(c.w), free(c.b), free(c.r), free(c.y);
    }
}

/* ---------------------------------------------------------------- pooling */

typedef struct {
    int planes, h, w, k, s, p, oh, ow;
    double *x, *r, *y;
} pool_ctx;

static double maxpool_loss(void *p) {
    pool_ctx *c = p;
    kr_maxpool_fwd(c->planes, c->h, c->w, c->k, c->s, c->p, c->oh, c->ow, c->x, c->y, NULL);
    return dot(c->r, c->y, (size_t)c->planes * c->oh * c->ow);
}

static void maxpool_grad_case(int B, int C, int h, int w, int k, int s, int p, uint64_t seed) {
    kr_rng r = {seed};
    const int oh = dp_pool_out_size(h, k, s, p), ow = dp_pool_out_size(w, k, s, p);
    const size_t nx = (size_t)B * C * h * w, ny = (size_t)B * C * oh * ow;
    float *x = kr_floats(nx), *y = kr_floats(ny), *dy = kr_floats(ny), *dx = kr_floats(nx);
    int32_t *am = calloc(ny, sizeof(int32_t));
    assert_non_null(am);
    /* distinct values 0.01 apart (a shuffled ramp): no ties, and eps cannot change the argmax */
    for (size_t i = 0; i < nx; i++) x[i] = (float)(0.01 * ((double)i - (double)nx / 2));
    for (size_t i = nx; i > 1; i--) {
        const size_t j = (size_t)(kr_next(&r) % i);
        const float t = x[i - 1];
        x[i - 1] = x[j], x[j] = t;
    }
    kr_fill(&r, dy, ny, -1, 1);
    pool_ctx c = {B * C, h, w, k, s, p, oh, ow, kr_to_double(x, nx), kr_to_double(dy, ny), kr_doubles(ny)};
    const picks px = pick(nx, &r);
    double gx[MAX_CHECKED];
    fd_grad(maxpool_loss, &c, c.x, &px, gx);
    for (int t = 0; t < NTHREADS; t++) {
        maxpool2d_forward_cpu(B, C, h, w, k, s, p, x, y, am, threads[t]);
        kr_fill_nan(dx, nx);
        maxpool2d_backward_cpu(B, C, h, w, oh, ow, dy, am, dx, threads[t]);
        KR_CHECK(fd_err(dx, &px, gx), GRAD_TOL, "maxpool %dx%d k%d s%d p%d, %d threads: dx", h, w, k, s, p,
                 threads[t]);
        /* every element: dx is the sum of the dy whose argmax it is */
        double *ref = kr_doubles(nx);
        for (size_t q = 0; q < ny; q++) ref[(q / ((size_t)oh * ow)) * h * w + am[q]] += dy[q];
        KR_CHECK(kr_rel_err(dx, ref, nx), 1e-6, "maxpool %dx%d k%d s%d p%d: dx scatter", h, w, k, s, p);
        free(ref);
    }
    free(x), free(y), free(dy), free(dx), free(am), free(c.x), free(c.r), free(c.y);
}

static void test_maxpool_grad(void **state) {
    (void)state;
    maxpool_grad_case(2, 3, 8, 8, 2, 2, 0, 1);   /* LeNet */
    maxpool_grad_case(3, 2, 7, 9, 2, 2, 0, 2);   /* odd: the last row and column get no gradient */
    maxpool_grad_case(2, 2, 14, 22, 2, 2, 0, 8); /* 11 outputs a row: 8 + an overlapping 4 */
    maxpool_grad_case(2, 3, 6, 7, 2, 2, 0, 9);   /* 3 outputs a row: scalar */
    maxpool_grad_case(2, 2, 8, 8, 3, 2, 1, 3);   /* ResNet: output h/2 x w/2 but overlapping windows */
    maxpool_grad_case(1, 3, 7, 7, 3, 2, 1, 4);
    maxpool_grad_case(2, 1, 6, 5, 3, 1, 1, 5);   /* stride 1: heavy overlap */
    maxpool_grad_case(1, 2, 9, 9, 4, 3, 2, 6);
    maxpool_grad_case(5, 1, 4, 4, 2, 1, 0, 7);   /* batch above 3 threads, tiny planes */
}

/* 3x3 stride 2 pad 1 with every maximum inside its own 2x2 block, then one outside: both ways
 * through the block-wise backward. */
static void test_maxpool_grad_blocks(void **state) {
    (void)state;
    enum { H = 4, W = 4, OH = 2, OW = 2 };
    float x[H * W], y[OH * OW], dy[OH * OW] = {1, 2, 3, 4}, dx[H * W];
    int32_t am[OH * OW];
    for (int i = 0; i < H * W; i++) /* each window's maximum at the top-left of its 2x2 block */
        x[i] = (i / W) % 2 == 0 && (i % W) % 2 == 0 ? 10.0f - 0.1f * (float)i : -(float)i;
    maxpool2d_forward_cpu(1, 1, H, W, 3, 2, 1, x, y, am, 1);
    kr_fill_nan(dx, H * W);
    maxpool2d_backward_cpu(1, 1, H, W, OH, OW, dy, am, dx, 1);
    for (int q = 0; q < OH * OW; q++) assert_int_equal(am[q], (q / OW) * 2 * W + (q % OW) * 2);
    for (int i = 0; i < H * W; i++) {
        float e = 0.0f;
        for (int q = 0; q < OH * OW; q++)
            if (am[q] == i) e += dy[q];
        assert_true(dx[i] == e);
    }
    x[1 * W + 1] = 100.0f; /* inside every window: argmax (1,1) for all four outputs */
    maxpool2d_forward_cpu(1, 1, H, W, 3, 2, 1, x, y, am, 1);
    for (int q = 0; q < 4; q++) assert_int_equal(am[q], 1 * W + 1);
    kr_fill_nan(dx, H * W);
    maxpool2d_backward_cpu(1, 1, H, W, OH, OW, dy, am, dx, 1);
    for (int i = 0; i < H * W; i++) assert_true(dx[i] == (i == 1 * W + 1 ? 10.0f : 0.0f));
}

typedef struct {
    int planes, hw;
    double *x, *r, *y;
} gap_ctx;

static double gap_loss(void *p) {
    gap_ctx *c = p;
    for (int q = 0; q < c->planes; q++) {
        double a = 0.0;
        for (int i = 0; i < c->hw; i++) a += c->x[(size_t)q * c->hw + i];
        c->y[q] = a / c->hw;
    }
    return dot(c->r, c->y, (size_t)c->planes);
}

static void test_global_avgpool_grad(void **state) {
    (void)state;
    kr_rng r = {111};
    const int cases[][3] = {{3, 8, 16}, {2, 5, 1}, {4, 3, 49}};
    for (size_t s = 0; s < sizeof cases / sizeof *cases; s++) {
        const int B = cases[s][0], C = cases[s][1], hw = cases[s][2];
        const size_t nx = (size_t)B * C * hw;
        float *x = kr_floats(nx), *dy = kr_floats((size_t)B * C), *dx = kr_floats(nx);
        kr_fill(&r, x, nx, -1, 1);
        kr_fill(&r, dy, (size_t)B * C, -1, 1);
        gap_ctx c = {B * C, hw, kr_to_double(x, nx), kr_to_double(dy, (size_t)B * C), kr_doubles((size_t)B * C)};
        const picks px = pick(nx, &r);
        double gx[MAX_CHECKED];
        fd_grad(gap_loss, &c, c.x, &px, gx);
        for (int t = 0; t < NTHREADS; t++) {
            kr_fill_nan(dx, nx);
            global_avgpool_backward_cpu(B, C, hw, dy, dx, threads[t]);
            KR_CHECK(fd_err(dx, &px, gx), GRAD_TOL, "global avgpool %d %d %d: dx", B, C, hw);
        }
        free(x), free(dy), free(dx), free(c.x), free(c.r), free(c.y);
    }
}

/* ---------------------------------------------------------------- relu */

typedef struct {
    size_t n;
    double *x, *r;
} relu_ctx;

static double relu_loss(void *p) {
    relu_ctx *c = p;
    double s = 0.0;
    for (size_t i = 0; i < c->n; i++) s += c->r[i] * (c->x[i] > 0 ? c->x[i] : 0.0);
    return s;
}

static void test_relu_grad(void **state) {
    (void)state;
    kr_rng r = {121};
    const size_t sizes[] = {5, 1000, 100000};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        const size_t n = sizes[s];
        float *x = kr_floats(n), *y = kr_floats(n), *dy = kr_floats(n), *dx = kr_floats(n);
        kr_fill(&r, x, n, -1, 1);
        for (size_t i = 0; i < n; i++) /* keep eps away from the kink */
            if (fabsf(x[i]) < 0.01f) x[i] = x[i] < 0 ? -0.01f : 0.01f;
        kr_fill(&r, dy, n, -1, 1);
        relu_ctx c = {n, kr_to_double(x, n), kr_to_double(dy, n)};
        const picks px = pick(n, &r);
        double gx[MAX_CHECKED];
        fd_grad(relu_loss, &c, c.x, &px, gx);
        for (int t = 0; t < NTHREADS; t++) {
            relu_forward_cpu(n, x, y, threads[t]);
            kr_fill_nan(dx, n);
            relu_backward_cpu(n, y, dy, dx, threads[t]);
            KR_CHECK(fd_err(dx, &px, gx), GRAD_TOL, "relu %zu, %d threads: dx", n, threads[t]);
            for (size_t i = 0; i < n; i++) assert_true(dx[i] == (x[i] > 0 ? dy[i] : 0.0f));
        }
        free(x), free(y), free(dy), free(dx), free(c.x), free(c.r);
    }
}

/* ---------------------------------------------------------------- batchnorm (training mode) */

#define BN_EPS 1e-5

typedef struct {
    int batch, c, hw;
    double *x, *gamma, *beta, *r, *y;
} bn_ctx;

static double bn_loss(void *p) {
    bn_ctx *c = p;
    kr_bn_fwd(c->batch, c->c, c->hw, c->x, c->gamma, c->beta, BN_EPS, c->y);
    return dot(c->r, c->y, (size_t)c->batch * c->c * c->hw);
}

/* The layer's sequence: stats -> mean, invstd -> reduce -> dgamma, dbeta -> input gradient. Rows
 * [0, split) and [split, batch) are separate replicas whose sums are added (SyncBN); split = batch: one. */
static void bn_backward(int B, int C, int hw, int split, const float *x, const float *gamma, const float *dy,
                        float *dx, float *dgamma, float *dbeta, int nt) {
    double *s = kr_doubles(C), *s2 = kr_doubles(C), *t = kr_doubles(C), *t2 = kr_doubles(C);
    float *mean = kr_floats(C), *invstd = kr_floats(C);
    const double cnt = (double)B * hw;
    const int parts[2][2] = {{0, split}, {split, B}};
    for (int q = 0; q < 2; q++) {
        const int n = parts[q][1] - parts[q][0];
        batchnorm_stats_cpu(n, C, hw, x + (size_t)parts[q][0] * C * hw, t, t2, nt);
        for (int ch = 0; ch < C; ch++) s[ch] += t[ch], s2[ch] += t2[ch];
    }
    for (int ch = 0; ch < C; ch++) {
        const double m = s[ch] / cnt, v = s2[ch] / cnt - m * m;
        mean[ch] = (float)m;
        invstd[ch] = (float)(1.0 / sqrt(v + BN_EPS));
        s[ch] = s2[ch] = 0.0;
    }
    for (int q = 0; q < 2; q++) {
        const size_t off = (size_t)parts[q][0] * C * hw;
        batchnorm_backward_reduce_cpu(parts[q][1] - parts[q][0], C, hw, x + off, dy + off, mean, invstd, t, t2, nt);
        for (int ch = 0; ch < C; ch++) s[ch] += t[ch], s2[ch] += t2[ch];
    }
    for (int ch = 0; ch < C; ch++) dbeta[ch] = (float)s[ch], dgamma[ch] = (float)s2[ch];
    for (int q = 0; q < 2; q++) {
        const size_t off = (size_t)parts[q][0] * C * hw;
        batchnorm_backward_input_cpu(parts[q][1] - parts[q][0], C, hw, x + off, dy + off, mean, invstd, gamma, s, s2,
                                     cnt, dx + off, nt);
    }
    free(s), free(s2), free(t), free(t2), free(mean), free(invstd);
}

static void bn_grad_case(int B, int C, int hw, uint64_t seed) {
    kr_rng r = {seed};
    const size_t n = (size_t)B * C * hw;
    float *x = kr_floats(n), *dy = kr_floats(n), *dx = kr_floats(n), *dx1 = kr_floats(n), *gamma = kr_floats(C),
          *beta = kr_floats(C), *dg = kr_floats(C), *dbt = kr_floats(C);
    for (size_t i = 0; i < n; i++) x[i] = (float)(kr_uniform(&r, -1, 1) * 1.5 + 0.4);
    kr_fill(&r, dy, n, -1, 1);
    kr_fill(&r, gamma, C, 0.5, 1.5);
    kr_fill(&r, beta, C, -1, 1);
    bn_ctx c = {B, C, hw, kr_to_double(x, n), kr_to_double(gamma, C), kr_to_double(beta, C), kr_to_double(dy, n),
                kr_doubles(n)};
    const picks px = pick(n, &r), pc = pick(C, &r);
    double gx[MAX_CHECKED], gg[MAX_CHECKED], gb[MAX_CHECKED];
    fd_grad(bn_loss, &c, c.x, &px, gx);
    fd_grad(bn_loss, &c, c.gamma, &pc, gg);
    fd_grad(bn_loss, &c, c.beta, &pc, gb);
    for (int t = 0; t < NTHREADS; t++) {
        kr_fill_nan(dx, n);
        bn_backward(B, C, hw, B, x, gamma, dy, dx, dg, dbt, threads[t]);
        KR_CHECK(fd_err(dx, &px, gx), GRAD_TOL, "batchnorm %d x %d x %d, %d threads: dx", B, C, hw, threads[t]);
        KR_CHECK(fd_err(dg, &pc, gg), GRAD_TOL, "batchnorm %d x %d x %d: dgamma", B, C, hw);
        KR_CHECK(fd_err(dbt, &pc, gb), GRAD_TOL, "batchnorm %d x %d x %d: dbeta", B, C, hw);
        if (t == 0) memcpy(dx1, dx, sizeof(float) * n);
        else KR_CHECK(tu_rel_diff(dx, dx1, n), 1e-5, "batchnorm dx, %d threads vs 1", threads[t]);
        if (B >= 2) { /* two replicas with summed statistics give the whole batch's gradient */
            kr_fill_nan(dx, n);
            bn_backward(B, C, hw, B / 2, x, gamma, dy, dx, dg, dbt, threads[t]);
            KR_CHECK(tu_rel_diff(dx, dx1, n), 1e-5, "batchnorm dx over two replicas");
            KR_CHECK(fd_err(dg, &pc, gg), GRAD_TOL, "batchnorm dgamma over two replicas");
        }
    }
    free(x), free(dy), free(dx), free(dx1), free(gamma), free(beta), free(dg), free(dbt);
    free(c.x), free(c.gamma), free(c.beta), free(c.r), free(c.y);
}

static void test_batchnorm_grad(void **state) {
    (void)state;
    bn_grad_case(4, 3, 10, 131);  /* BatchNorm2d */
    bn_grad_case(8, 6, 1, 132);   /* BatchNorm1d */
    bn_grad_case(256, 160, 1, 136); /* BatchNorm1d large enough for threads, sampled */
    bn_grad_case(3, 2, 25, 133);  /* odd sizes, more than 8 lanes */
    bn_grad_case(2, 5, 3, 134);
    bn_grad_case(64, 16, 64, 135); /* LeNet-BN bn2, sampled */
}

/* ---------------------------------------------------------------- softmax cross-entropy */

typedef struct {
    int batch, classes;
    double *z;
    const int32_t *labels;
} xent_ctx;

static double xent_mean_loss(void *p) {
    xent_ctx *c = p;
    return kr_xent(c->batch, c->classes, c->z, c->labels) / c->batch;
}

static void test_softmax_xent_grad(void **state) {
    (void)state;
    kr_rng r = {141};
    const int cases[][2] = {{5, 7}, {64, 10}, {1, 3}, {3, 1}};
    for (size_t s = 0; s < sizeof cases / sizeof *cases; s++) {
        const int B = cases[s][0], K = cases[s][1];
        const size_t n = (size_t)B * K;
        float *z = kr_floats(n), *g = kr_floats(n);
        int32_t *lab = calloc((size_t)B, sizeof(int32_t));
        assert_non_null(lab);
        kr_fill(&r, z, n, -4, 4);
        for (int i = 0; i < B; i++) lab[i] = (int32_t)(kr_next(&r) % K);
        xent_ctx c = {B, K, kr_to_double(z, n), lab};
        const picks pz = pick(n, &r);
        double gz[MAX_CHECKED];
        fd_grad(xent_mean_loss, &c, c.z, &pz, gz);
        kr_fill_nan(g, n);
        const double loss = softmax_xent_cpu(B, K, z, lab, 1.0f / B, g, NULL);
        assert_true(fabs(loss / B - xent_mean_loss(&c)) < 1e-5);
        if (K == 1) { /* one class: loss 0, gradient 0 */
            for (size_t i = 0; i < n; i++) assert_true(g[i] == 0.0f);
        } else {
            KR_CHECK(fd_err(g, &pz, gz), GRAD_TOL, "softmax xent %d x %d: dlogits", B, K);
        }
        free(z), free(g), free(lab), free(c.z);
    }
}

int main(void) {
    openblas_set_num_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_grad),
        cmocka_unit_test(test_linear_grad),
        cmocka_unit_test(test_maxpool_grad),
        cmocka_unit_test(test_maxpool_grad_blocks),
        cmocka_unit_test(test_global_avgpool_grad),
        cmocka_unit_test(test_relu_grad),
        cmocka_unit_test(test_batchnorm_grad),
        cmocka_unit_test(test_softmax_xent_grad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
