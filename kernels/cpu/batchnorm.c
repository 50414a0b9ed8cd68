/* batchnorm.c: the phases of (Sync)BatchNorm. Threads split the channels, so each channel's sums
 * are taken by one thread in one fixed order: the same for every thread count. */
#include "kernels/cpu/variant.h" /* first: renames this variant's functions */
#include "kernels/cpu/batchnorm.h"

#include <math.h>

#include "kernels/cpu/cpu_common.h"

/* Sums of a channel: 16 double lanes (four vectors of 4, enough independent additions to hide
 * their latency), element i of a plane into lane i % 16, then the lanes added in order. Fixed
 * per channel, whatever the thread count. */
typedef double v4d __attribute__((vector_size(4 * sizeof(double))));
typedef float v4f __attribute__((vector_size(4 * sizeof(float)), aligned(4), may_alias));
#define LOAD4D(p) __builtin_convertvector(*(const v4f *)(const void *)(p), v4d)

static double lanes_sum(const v4d *a) {
    double s = 0.0;
    for (int v = 0; v < 4; v++)
        for (int l = 0; l < 4; l++) s += a[v][l];
    return s;
}

static int channel_threads(int batch, int c, int hw, int nthreads) {
    int nt = dp_eltwise_threads((size_t)batch * c * hw, nthreads);
    return nt > c ? c : nt;
}

#define CHANNELS(c, nt, CALL)                                             \
    do {                                                                  \
        if ((nt) <= 1) {                                                  \
            int c0 = 0, c1 = (c);                                         \
            CALL;                                                         \
        } else {                                                          \
            _Pragma("omp parallel for num_threads(nt) schedule(static)") \
            for (int t_ = 0; t_ < (nt); t_++) {                           \
                int c0, c1;                                               \
                dp_chunk((c), (nt), t_, &c0, &c1);                        \
                CALL;                                                     \
            }                                                             \
        }                                                                 \
    } while (0)

/* BatchNorm1d (hw = 1): rows of features; loop over samples outside so that the inner loop runs
 * over contiguous channels (each channel still summed over the samples in order). */
static void stats_rows(int c0, int c1, int batch, int c, const float *x, double *sum, double *sumsq) {
    for (int ch = c0; ch < c1; ch++) sum[ch] = sumsq[ch] = 0.0;
    for (int n = 0; n < batch; n++) {
        const float *r = x + (size_t)n * c;
        for (int ch = c0; ch < c1; ch++) {
            const double u = r[ch];
            sum[ch] += u, sumsq[ch] += u * u;
        }
    }
}

static void stats_range(int c0, int c1, int batch, int c, int hw, const float *x, double *sum, double *sumsq) {
    if (hw == 1) {
        stats_rows(c0, c1, batch, c, x, sum, sumsq);
        return;
    }
    for (int ch = c0; ch < c1; ch++) {
        v4d a[4] = {{0}}, q[4] = {{0}};
        double at = 0.0, qt = 0.0; /* plane tails (hw % 16) */
        for (int n = 0; n < batch; n++) {
            const float *p = x + ((size_t)n * c + ch) * hw; /* (hw) */
            int i = 0;
            for (; i + 16 <= hw; i += 16)
                for (int v = 0; v < 4; v++) {
                    const v4d u = LOAD4D(p + i + 4 * v);
                    a[v] += u, q[v] += u * u;
                }
            for (; i < hw; i++) {
                const double u = p[i];
                at += u, qt += u * u;
            }
        }
        sum[ch] = lanes_sum(a) + at;
        sumsq[ch] = lanes_sum(q) + qt;
    }
}

void batchnorm_stats_cpu(int batch, int c, int hw, const float *x, double *sum, double *sumsq, int nthreads) {
    if (c <= 0) return;
    if (batch <= 0 || hw <= 0) {
        for (int ch = 0; ch < c; ch++) sum[ch] = sumsq[ch] = 0.0;
        return;
    }
    const int nt = channel_threads(batch, c, hw, nthreads);
    CHANNELS(c, nt, stats_range(c0, c1, batch, c, hw, x, sum, sumsq));
}

static void apply_range(int c0, int c1, int batch, int c, int hw, const float *x, const float *mean,
                        const float *invstd, const float *gamma, const float *beta, float *y) {
    if (hw == 1) {
        for (int n = 0; n < batch; n++) {
            const float *r = x + (size_t)n * c;
            float *q = y + (size_t)n * c;
            for (int ch = c0; ch < c1; ch++) q[ch] = (r[ch] - mean[ch]) * (invstd[ch] * gamma[ch]) + beta[ch];
        }
        return;
    }
    for (int ch = c0; ch < c1; ch++) {
        const float m = mean[ch], sc = invstd[ch] * gamma[ch], sh = beta[ch];
        for (int n = 0; n < batch; n++) {
            const size_t off = ((size_t)n * c + ch) * hw;
            const float *p = x + off;
            float *q = y + off;
            for (int i = 0; i < hw; i++) q[i] = (p[i] - m) * sc + sh;
        }
    }
}

void batchnorm_apply_cpu(int batch, int c, int hw, const float *x, const float *mean, const float *invstd,
                         const float *gamma, const float *beta, float *y, int nthreads) {
    if (batch <= 0 || c <= 0 || hw <= 0) return;
    const int nt = channel_threads(batch, c, hw, nthreads);
    CHANNELS(c, nt, apply_range(c0, c1, batch, c, hw, x, mean, invstd, gamma, beta, y));
}

static void reduce_range(int c0, int c1, int batch, int c, int hw, const float *x, const float *dy,
                         const float *mean, const float *invstd, double *sum_dy, double *sum_dy_xhat) {
    if (hw == 1) {
        for (int ch = c0; ch < c1; ch++) sum_dy[ch] = sum_dy_xhat[ch] = 0.0;
        for (int n = 0; n < batch; n++) {
            const float *xr = x + (size_t)n * c, *gr = dy + (size_t)n * c;
            for (int ch = c0; ch < c1; ch++) {
                const double g = gr[ch];
                sum_dy[ch] += g, sum_dy_xhat[ch] += g * ((double)xr[ch] - mean[ch]);
            }
        }
        for (int ch = c0; ch < c1; ch++) sum_dy_xhat[ch] *= invstd[ch];
        return;
    }
    for (int ch = c0; ch < c1; ch++) {
        const double m = mean[ch];
        v4d a[4] = {{0}}, q[4] = {{0}};
        double at = 0.0, qt = 0.0;
        for (int n = 0; n < batch; n++) {
            const size_t off = ((size_t)n * c + ch) * hw;
            const float *xp = x + off, *gp = dy + off;
            int i = 0;
            for (; i + 16 <= hw; i += 16)
                for (int v = 0; v < 4; v++) {
                    const v4d g = LOAD4D(gp + i + 4 * v);
                    a[v] += g, q[v] += g * (LOAD4D(xp + i + 4 * v) - m);
                }
            for (; i < hw; i++) {
                const double g = gp[i];
                at += g, qt += g * ((double)xp[i] - m);
            }
        }
        sum_dy[ch] = lanes_sum(a) + at;
        sum_dy_xhat[ch] = (lanes_sum(q) + qt) * invstd[ch];
    }
}

void batchnorm_backward_reduce_cpu(int batch, int c, int hw, const float *x, const float *dy, const float *mean,
                                   const float *invstd, double *sum_dy, double *sum_dy_xhat, int nthreads) {
    if (c <= 0) return;
    if (batch <= 0 || hw <= 0) {
        for (int ch = 0; ch < c; ch++) sum_dy[ch] = sum_dy_xhat[ch] = 0.0;
        return;
    }
    const int nt = channel_threads(batch, c, hw, nthreads);
    CHANNELS(c, nt, reduce_range(c0, c1, batch, c, hw, x, dy, mean, invstd, sum_dy, sum_dy_xhat));
}

/* dx = k * (dy - a - (x - mean) * b) with k = gamma invstd, a = sum_dy / count,
 * b = invstd^2 sum_dy_xhat / count (xhat = (x - mean) invstd folded in). */
static void input_range(int c0, int c1, int batch, int c, int hw, const float *x, const float *dy,
                        const float *mean, const float *invstd, const float *gamma, const double *sum_dy,
                        const double *sum_dy_xhat, double count, float *dx) {
    if (hw == 1) { /* coefficients of up to 64 channels at a time, then rows */
        for (int b0 = c0; b0 < c1; b0 += 64) {
            const int b1 = c1 - b0 < 64 ? c1 : b0 + 64;
            float kk[64], aa[64], bb[64];
            for (int ch = b0; ch < b1; ch++) {
                const double is = invstd[ch];
                kk[ch - b0] = (float)(gamma[ch] * is);
                aa[ch - b0] = (float)(sum_dy[ch] / count);
                bb[ch - b0] = (float)(sum_dy_xhat[ch] / count * is);
            }
            for (int n = 0; n < batch; n++) {
                const float *xr = x + (size_t)n * c + b0, *gr = dy + (size_t)n * c + b0, *mr = mean + b0;
                float *dr = dx + (size_t)n * c + b0;
                for (int j = 0; j < b1 - b0; j++) dr[j] = kk[j] * (gr[j] - aa[j] - (xr[j] - mr[j]) * bb[j]);
            }
        }
        return;
    }
    for (int ch = c0; ch < c1; ch++) {
        const double is = invstd[ch];
        const float m = mean[ch], k = (float)(gamma[ch] * is), a = (float)(sum_dy[ch] / count),
                    b = (float)(sum_dy_xhat[ch] / count * is);
        for (int n = 0; n < batch; n++) {
            const size_t off = ((size_t)n * c + ch) * hw;
            const float *xp = x + off, *gp = dy + off;
            float *dp = dx + off;
            for (int i = 0; i < hw; i++) dp[i] = k * (gp[i] - a - (xp[i] - m) * b);
        }
    }
}

void batchnorm_backward_input_cpu(int batch, int c, int hw, const float *x, const float *dy, const float *mean,
                                  const float *invstd, const float *gamma, const double *sum_dy,
                                  const double *sum_dy_xhat, double count, float *dx, int nthreads) {
    if (batch <= 0 || c <= 0 || hw <= 0 || !(count > 0)) return;
    const int nt = channel_threads(batch, c, hw, nthreads);
    CHANNELS(c, nt, input_range(c0, c1, batch, c, hw, x, dy, mean, invstd, gamma, sum_dy, sum_dy_xhat, count, dx));
}

void batchnorm_sums_cpu(int batch, int c, int hw, const float *x, float *sums, double *ws, int nthreads) {
    double *s = ws, *s2 = ws + c;
    if (batch > 0) {
        batchnorm_stats_cpu(batch, c, hw, x, s, s2, nthreads);
    } else {
        for (int i = 0; i < 2 * c; i++) ws[i] = 0;
    }
    for (int i = 0; i < c; i++) sums[i] = (float)s[i], sums[c + i] = (float)s2[i];
}

void batchnorm_finalize_cpu(int c, int training, const float *sums, double count, float eps, float momentum, int update,
                            float *mean, float *invstd, float *run_mean, float *run_var) {
    if (!training) {
        for (int i = 0; i < c; i++) {
            mean[i] = run_mean[i];
            invstd[i] = 1.0f / sqrtf(run_var[i] + eps);
        }
        return;
    }
    if (count <= 0) return;
    for (int i = 0; i < c; i++) {
        double m = sums[i] / count;
        double var = sums[c + i] / count - m * m;
        if (var < 0) var = 0; /* rounding in E[x^2] - m^2 */
        mean[i] = (float)m;
        invstd[i] = (float)(1.0 / sqrt(var + eps));
        if (!update) continue;
        double unbiased = count > 1 ? var * count / (count - 1) : var;
        run_mean[i] = (1 - momentum) * run_mean[i] + momentum * (float)m;
        run_var[i] = (1 - momentum) * run_var[i] + momentum * (float)unbiased;
    }
}

void batchnorm_backward_sums_cpu(int batch, int c, int hw, const float *x, const float *dy, const float *mean,
                                 const float *invstd, float *sums, double *ws, int nthreads) {
    double *s = ws, *s2 = ws + c;
    if (batch > 0) {
        batchnorm_backward_reduce_cpu(batch, c, hw, x, dy, mean, invstd, s, s2, nthreads);
    } else {
        for (int i = 0; i < 2 * c; i++) ws[i] = 0;
    }
    for (int i = 0; i < c; i++) sums[i] = (float)s[i], sums[c + i] = (float)s2[i];
}

void batchnorm_backward_cpu(int batch, int c, int hw, const float *x, const float *dy, const float *mean,
                            const float *invstd, const float *gamma, const float *local, const float *sums,
                            double count, float *dx, float *dgamma, float *dbeta, double *ws, int nthreads) {
    /* the parameter gradients use this call's own sums (DDP adds them over replicas later);
     * dx uses the sums the executor may have added over replicas */
    for (int i = 0; i < c; i++) {
        dbeta[i] += local[i];
        dgamma[i] += local[c + i];
    }
    if (!dx || batch == 0) return;
    double *s = ws, *s2 = ws + c;
    for (int i = 0; i < c; i++) s[i] = sums[i], s2[i] = sums[c + i];
    batchnorm_backward_input_cpu(batch, c, hw, x, dy, mean, invstd, gamma, s, s2, count, dx, nthreads);
}
