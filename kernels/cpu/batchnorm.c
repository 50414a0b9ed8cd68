/* batchnorm.c: the phases of (Sync)BatchNorm. Threads split the channels, so each channel's sums
 * are taken by one thread in one fixed order: the same for every thread count. Sums use eight
 * double lanes per channel, which the compiler vectorises. */
#include "kernels/cpu/batchnorm.h"

#include "kernels/cpu/cpu_common.h"

#define LANES 8

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

static double lanes_sum(const double *a) {
    double s = 0.0;
    for (int l = 0; l < LANES; l++) s += a[l];
    return s;
}

static void stats_range(int c0, int c1, int batch, int c, int hw, const float *x, double *sum, double *sumsq) {
    for (int ch = c0; ch < c1; ch++) {
        double a[LANES] = {0}, q[LANES] = {0};
        for (int n = 0; n < batch; n++) {
            const float *p = x + ((size_t)n * c + ch) * hw; /* (hw) */
            int i = 0;
            for (; i + LANES <= hw; i += LANES)
                for (int l = 0; l < LANES; l++) {
                    const double v = p[i + l];
                    a[l] += v;
                    q[l] += v * v;
                }
            for (; i < hw; i++) {
                const double v = p[i];
                a[i % LANES] += v;
                q[i % LANES] += v * v;
            }
        }
        sum[ch] = lanes_sum(a);
        sumsq[ch] = lanes_sum(q);
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
    for (int ch = c0; ch < c1; ch++) {
        const double m = mean[ch];
        double a[LANES] = {0}, q[LANES] = {0};
        for (int n = 0; n < batch; n++) {
            const size_t off = ((size_t)n * c + ch) * hw;
            const float *xp = x + off, *gp = dy + off;
            int i = 0;
            for (; i + LANES <= hw; i += LANES)
                for (int l = 0; l < LANES; l++) {
                    const double g = gp[i + l];
                    a[l] += g;
                    q[l] += g * ((double)xp[i + l] - m);
                }
            for (; i < hw; i++) {
                const double g = gp[i];
                a[i % LANES] += g;
                q[i % LANES] += g * ((double)xp[i] - m);
            }
        }
        sum_dy[ch] = lanes_sum(a);
        sum_dy_xhat[ch] = lanes_sum(q) * invstd[ch];
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
