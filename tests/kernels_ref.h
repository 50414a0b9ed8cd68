/* kernels_ref.h: naive double-precision references of the CPU kernels (PyTorch semantics, NCHW)
 * and a seeded random generator, shared by test_kernels_fwd.c and test_kernels_grad.c. */
#ifndef DP_TEST_KERNELS_REF_H
#define DP_TEST_KERNELS_REF_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cpu/conv2d.h"
#include "testutil.h"

/* ---------------------------------------------------------------- random numbers (splitmix64) */

typedef struct { uint64_t s; } kr_rng;

static inline uint64_t kr_next(kr_rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in [lo, hi) */
static inline double kr_uniform(kr_rng *r, double lo, double hi) {
    return lo + (hi - lo) * (double)(kr_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

static inline void kr_fill(kr_rng *r, float *p, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) p[i] = (float)kr_uniform(r, lo, hi);
}

/* ---------------------------------------------------------------- buffers */

static inline float *kr_floats(size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    assert_non_null(p);
    return p;
}

static inline double *kr_doubles(size_t n) {
    double *p = calloc(n ? n : 1, sizeof(double));
    assert_non_null(p);
    return p;
}

static inline void kr_fill_nan(float *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = NAN;
}

static inline double *kr_to_double(const float *p, size_t n) {
    double *d = kr_doubles(n);
    for (size_t i = 0; i < n; i++) d[i] = p[i];
    return d;
}

/* max |a - b| / max(max |b|, 1e-30); NaN anywhere gives +inf. */
static inline double kr_rel_err(const float *a, const double *b, size_t n) {
    double maxd = 0.0, maxb = 1e-30;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]);
        if (isnan(d)) return INFINITY;
        if (d > maxd) maxd = d;
        if (fabs(b[i]) > maxb) maxb = fabs(b[i]);
    }
    return maxd / maxb;
}

/* Fails the test with a message when err > tol. */
#define KR_CHECK(err, tol, ...)                                                        \
    do {                                                                               \
        const double kr_e_ = (err);                                                    \
        if (!(kr_e_ <= (tol))) {                                                       \
            print_error(__VA_ARGS__);                                                  \
            print_error(": relative error %.3g > %.3g\n", kr_e_, (double)(tol));       \
            fail();                                                                    \
        }                                                                              \
    } while (0)

/* ---------------------------------------------------------------- references */

/* y (batch, out_c, out_h, out_w) = conv(x, w) + b (b may be NULL). */
static inline void kr_conv_fwd(const dp_conv2d_dims *d, int batch, const double *x, const double *w,
                               const double *b, double *y) {
    const int C = d->in_c, H = d->in_h, W = d->in_w, O = d->out_c, k = d->k, s = d->stride, p = d->pad;
    const int OH = d->out_h, OW = d->out_w;
    for (int n = 0; n < batch; n++)
        for (int o = 0; o < O; o++)
            for (int i = 0; i < OH; i++)
                for (int j = 0; j < OW; j++) {
                    double acc = b ? b[o] : 0.0;
                    for (int c = 0; c < C; c++)
                        for (int kh = 0; kh < k; kh++)
                            for (int kw = 0; kw < k; kw++) {
                                const int ih = i * s - p + kh, iw = j * s - p + kw;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                acc += w[((o * C + c) * k + kh) * k + kw] * x[((n * C + c) * H + ih) * W + iw];
                            }
                    y[((n * O + o) * OH + i) * OW + j] = acc;
                }
}

/* y (batch, out_f) = x W^T + b */
static inline void kr_linear_fwd(int batch, int in_f, int out_f, const double *x, const double *w, const double *b,
                                 double *y) {
    for (int n = 0; n < batch; n++)
        for (int o = 0; o < out_f; o++) {
            double acc = b ? b[o] : 0.0;
            for (int i = 0; i < in_f; i++) acc += x[n * in_f + i] * w[o * in_f + i];
            y[n * out_f + o] = acc;
        }
}

/* PyTorch MaxPool2d: padding is -inf, the first maximum wins, NaN propagates. argmax may be NULL. */
static inline void kr_maxpool_fwd(int planes, int h, int w, int k, int s, int p, int oh, int ow, const double *x,
                                  double *y, int32_t *argmax) {
    for (int pl = 0; pl < planes; pl++)
        for (int i = 0; i < oh; i++)
            for (int j = 0; j < ow; j++) {
                double m = -INFINITY;
                int idx = -1;
                for (int a = i * s - p; a < i * s - p + k; a++)
                    for (int b = j * s - p; b < j * s - p + k; b++) {
                        if (a < 0 || a >= h || b < 0 || b >= w) continue;
                        const double v = x[(size_t)pl * h * w + a * w + b];
                        if (idx < 0) idx = a * w + b;
                        if (v > m || isnan(v)) m = v, idx = a * w + b;
                    }
                y[(size_t)pl * oh * ow + i * ow + j] = m;
                if (argmax) argmax[(size_t)pl * oh * ow + i * ow + j] = idx;
            }
}

/* BatchNorm in training mode: batch statistics (biased variance), x (batch, c, hw). */
static inline void kr_bn_fwd(int batch, int c, int hw, const double *x, const double *gamma, const double *beta,
                             double eps, double *y) {
    const double cnt = (double)batch * hw;
    for (int ch = 0; ch < c; ch++) {
        double m = 0.0, v = 0.0;
        for (int n = 0; n < batch; n++)
            for (int i = 0; i < hw; i++) m += x[((size_t)n * c + ch) * hw + i];
        m /= cnt;
        for (int n = 0; n < batch; n++)
            for (int i = 0; i < hw; i++) {
                const double t = x[((size_t)n * c + ch) * hw + i] - m;
                v += t * t;
            }
        v /= cnt;
        const double is = 1.0 / sqrt(v + eps);
        for (int n = 0; n < batch; n++)
            for (int i = 0; i < hw; i++) {
                const size_t q = ((size_t)n * c + ch) * hw + i;
                y[q] = (x[q] - m) * is * gamma[ch] + beta[ch];
            }
    }
}

/* Sum over the batch of logsumexp(z) - z[label]. */
static inline double kr_xent(int batch, int classes, const double *z, const int32_t *labels) {
    double total = 0.0;
    for (int n = 0; n < batch; n++) {
        const double *r = z + (size_t)n * classes;
        double mx = r[0], se = 0.0;
        for (int j = 1; j < classes; j++)
            if (r[j] > mx) mx = r[j];
        for (int j = 0; j < classes; j++) se += exp(r[j] - mx);
        total += mx + log(se) - r[labels[n]];
    }
    return total;
}


/* The bf16 value nearest to x, by arithmetic rather than kernels/bf16.h's bit trick: the unit in
 * the last place of x's binade (8 significant bits; subnormals share the smallest normal binade's
 * exponent), rint's ties to even, past the largest bf16 an infinity; NaN stays NaN. */
static inline double kr_bf16(double x) {
    if (isnan(x) || isinf(x) || x == 0.0) return x;
    int e;
    (void)frexp(x, &e); /* |x| = m 2^e, 0.5 <= m < 1: the binade [2^(e-1), 2^e) */
    if (e - 1 < -126) e = -125;
    const double ulp = ldexp(1.0, e - 1 - 7), r = rint(x / ulp) * ulp;
    const double max = ldexp(255.0, 127 - 7); /* (2 - 2^-7) 2^127 */
    return fabs(r) > max ? copysign(INFINITY, x) : r;
}

#endif
