// batchnorm.cu: the phases of (Sync)BatchNorm on the GPU, twins of kernels/cpu/batchnorm.c:
// per-channel sums in double with one block a channel (a fixed tree over the threads, so the
// same bits every run), statistics and running estimates, normalise, gradient sums, gradients.
// x is (batch, ch, hw). __fmul_rn / __fadd_rn keep the element arithmetic unfused, as the CPU's.
#include "kernels/cuda/common.cuh"

// sums[ch] = sum x (or dy), sums[C + ch] = sum x^2 (or dy (x - mean) invstd), one block a channel.
__global__ void sums_k(int batch, int C, int hw, const float *x, const float *dy, const float *mean,
                       const float *invstd, float *sums) {
    const int ch = blockIdx.x;
    const size_t per = (size_t)batch * hw;
    const double m = dy ? (double)mean[ch] : 0.0;
    double a = 0.0, q = 0.0;
    for (size_t e = threadIdx.x; e < per; e += blockDim.x) {
        const size_t off = ((e / hw) * C + ch) * hw + e % hw;
        if (dy) {
            const double g = dy[off];
            a += g, q += g * ((double)x[off] - m);
        } else {
            const double u = x[off];
            a += u, q += u * u;
        }
    }
    a = dp_block_sum(a);
    q = dp_block_sum(q);
    if (threadIdx.x == 0) {
        sums[ch] = (float)a;
        sums[C + ch] = (float)(dy ? q * invstd[ch] : q);
    }
}

__global__ void stats_k(int C, int training, const float *sums, double count, float eps, float mom, int update,
                        float *mean, float *invstd, float *rmean, float *rvar) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= C) return;
    if (!training) {
        mean[i] = rmean[i];
        invstd[i] = __fdiv_rn(1.0f, sqrtf(__fadd_rn(rvar[i], eps)));
        return;
    }
    const double m = sums[i] / count;
    double var = __dadd_rn(sums[C + i] / count, -__dmul_rn(m, m));
    if (var < 0) var = 0;
    mean[i] = (float)m;
    invstd[i] = (float)(1.0 / sqrt(var + eps));
    if (!update) return;
    const double unbiased = count > 1 ? var * count / (count - 1) : var;
    const float keep = 1 - mom;
    rmean[i] = __fadd_rn(__fmul_rn(keep, rmean[i]), __fmul_rn(mom, (float)m));
    rvar[i] = __fadd_rn(__fmul_rn(keep, rvar[i]), __fmul_rn(mom, (float)unbiased));
}

__global__ void apply_k(size_t n, int C, int hw, const float *x, const float *mean, const float *invstd,
                        const float *gamma, const float *beta, float *y) {
    DP_FOR(e, n) {
        const int ch = (int)(e / hw % C);
        const float sc = __fmul_rn(invstd[ch], gamma[ch]);
        y[e] = __fadd_rn(__fmul_rn(__fadd_rn(x[e], -mean[ch]), sc), beta[ch]);
    }
}

__global__ void param_grads_k(int C, const float *local, float *dgamma, float *dbeta) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= C) return;
    dbeta[i] = __fadd_rn(dbeta[i], local[i]);
    dgamma[i] = __fadd_rn(dgamma[i], local[C + i]);
}

__global__ void input_grad_k(size_t n, int C, int hw, const float *x, const float *dy, const float *mean,
                             const float *invstd, const float *gamma, const float *sums, double count, float *dx) {
    DP_FOR(e, n) {
        const int ch = (int)(e / hw % C);
        const double is = invstd[ch];
        const float k = (float)(gamma[ch] * is), a = (float)((double)sums[ch] / count),
                    b = (float)((double)sums[C + ch] / count * is);
        const float t = __fadd_rn(__fadd_rn(dy[e], -a), -__fmul_rn(__fadd_rn(x[e], -mean[ch]), b));
        dx[e] = __fmul_rn(k, t);
    }
}

static unsigned per_channel(int C) { return (unsigned)((C + DP_CUDA_THREADS - 1) / DP_CUDA_THREADS); }

extern "C" void dp_cuda_bn_sums(const dp_kctx *c, int batch, int ch, int hw, const float *x, float *sums, float *ws) {
    (void)ws;
    if (ch <= 0) return;
    sums_k<<<ch, DP_CUDA_THREADS, 0, dp_stream(c)>>>(batch, ch, hw, x, nullptr, nullptr, nullptr, sums);
    DP_LAUNCHED("batch norm sums");
}
extern "C" void dp_cuda_bn_stats(const dp_kctx *c, int ch, int training, const float *sums, double count, float eps,
                                 float momentum, int update, float *mean, float *invstd, float *run_mean,
                                 float *run_var) {
    if (ch <= 0 || (training && count <= 0)) return;
    stats_k<<<per_channel(ch), DP_CUDA_THREADS, 0, dp_stream(c)>>>(ch, training, sums, count, eps, momentum, update,
                                                                     mean, invstd, run_mean, run_var);
    DP_LAUNCHED("batch norm statistics");
}
extern "C" void dp_cuda_bn_apply(const dp_kctx *c, int batch, int ch, int hw, const float *x, const float *mean,
                                 const float *invstd, const float *gamma, const float *beta, float *y) {
    const size_t n = (size_t)batch * ch * hw;
    if (!n) return;
    apply_k<<<dp_blocks(n), DP_CUDA_THREADS, 0, dp_stream(c)>>>(n, ch, hw, x, mean, invstd, gamma, beta, y);
    DP_LAUNCHED("batch norm apply");
}
extern "C" void dp_cuda_bn_backward_sums(const dp_kctx *c, int batch, int ch, int hw, const float *x, const float *dy,
                                         const float *mean, const float *invstd, float *sums, float *ws) {
    (void)ws;
    if (ch <= 0) return;
    sums_k<<<ch, DP_CUDA_THREADS, 0, dp_stream(c)>>>(batch, ch, hw, x, dy, mean, invstd, sums);
    DP_LAUNCHED("batch norm gradient sums");
}
extern "C" void dp_cuda_bn_backward(const dp_kctx *c, int batch, int ch, int hw, const float *x, const float *dy,
                                    const float *mean, const float *invstd, const float *gamma, const float *local,
                                    const float *sums, double count, float *dx, float *dgamma, float *dbeta,
                                    float *ws) {
    (void)ws;
    if (ch <= 0) return;
    param_grads_k<<<per_channel(ch), DP_CUDA_THREADS, 0, dp_stream(c)>>>(ch, local, dgamma, dbeta);
    DP_LAUNCHED("batch norm parameter gradients");
    const size_t n = (size_t)batch * ch * hw;
    if (!dx || !n || !(count > 0)) return;
    input_grad_k<<<dp_blocks(n), DP_CUDA_THREADS, 0, dp_stream(c)>>>(n, ch, hw, x, dy, mean, invstd, gamma, sums,
                                                                       count, dx);
    DP_LAUNCHED("batch norm input gradient");
}
