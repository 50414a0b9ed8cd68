// batchnorm.cu: the phases of (Sync)BatchNorm on the GPU, twins of kernels/cpu/batchnorm.c:
// per-channel sums in double over slices of a channel, added in a fixed order (the same bits
// every run), statistics and running estimates, normalise, gradient sums, gradients.
// x is (batch, ch, hw). __fmul_rn / __fadd_rn keep the element arithmetic unfused, as the CPU's.
#include "kernels/cuda/common.cuh"

// The per-channel sums in two passes, so that a channel's values are read by many blocks at
// once (one block a channel left most of the GPU idle: ResNet-18's first batch norm has 64
// channels of 401,408 values a 32-sample lane): pass 1, block (s, ch) sums slice s of the
// channel's batch * hw values in double into part[ch][s]; pass 2 adds a channel's slices in slice
// order. The slice count is a function of the shape alone, so the bits are the same every run.
static int bn_slices(int batch, int hw) {
    const size_t per = (size_t)batch * (size_t)hw, want = (per + 8191) / 8192;
    return (int)(want < 1 ? 1 : want > 64 ? 64 : want);
}

// 32-bit index math where the tensor allows it: a 64-bit division costs several times a 32-bit one.
template <typename I>
__global__ void sums_part_k(int C, I hw, I per, int slices, const float *x, const float *dy, const float *mean,
                            double *part, const float *invstd, float *out) {
    const int ch = blockIdx.y, s = blockIdx.x;
    const I lo = (I)((size_t)per * s / slices), hi = (I)((size_t)per * (s + 1) / slices);
    const double m = dy ? (double)mean[ch] : 0.0;
    double a = 0.0, q = 0.0;
    for (I e = lo + threadIdx.x; e < hi; e += blockDim.x) {
        const I n = e / hw;
        const I off = (n * (I)C + (I)ch) * hw + (e - n * hw);
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
    if (threadIdx.x == 0 && out) { /* one slice: the final sums at once, without a second launch */
        out[ch] = (float)a;
        out[C + ch] = (float)(invstd ? q * invstd[ch] : q);
    } else if (threadIdx.x == 0) {
        part[((size_t)ch * slices + s) * 2] = a;
        part[((size_t)ch * slices + s) * 2 + 1] = q;
    }
}

// sums[ch] = sum x (or dy), sums[C + ch] = sum x^2 (or dy (x - mean) invstd)
__global__ void sums_final_k(int C, int slices, const double *part, const float *invstd, float *sums) {
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= C) return;
    double a = 0.0, q = 0.0;
    for (int s = 0; s < slices; s++) a += part[((size_t)ch * slices + s) * 2], q += part[((size_t)ch * slices + s) * 2 + 1];
    sums[ch] = (float)a;
    sums[C + ch] = (float)(invstd ? q * invstd[ch] : q);
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

template <typename I>
__global__ void apply_k(I n, I C, I hw, const float *x, const float *mean, const float *invstd,
                        const float *gamma, const float *beta, float *y) {
    for (I e = blockIdx.x * (I)blockDim.x + threadIdx.x; e < n; e += (I)gridDim.x * blockDim.x) {
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

template <typename I>
__global__ void input_grad_k(I n, I C, I hw, const float *x, const float *dy, const float *mean,
                             const float *invstd, const float *gamma, const float *sums, double count, float *dx) {
    for (I e = blockIdx.x * (I)blockDim.x + threadIdx.x; e < n; e += (I)gridDim.x * blockDim.x) {
        const int ch = (int)(e / hw % C);
        const double is = invstd[ch];
        const float k = (float)(gamma[ch] * is), a = (float)((double)sums[ch] / count),
                    b = (float)((double)sums[C + ch] / count * is);
        const float t = __fadd_rn(__fadd_rn(dy[e], -a), -__fmul_rn(__fadd_rn(x[e], -mean[ch]), b));
        dx[e] = __fmul_rn(k, t);
    }
}

static unsigned per_channel(int C) { return (unsigned)((C + DP_CUDA_THREADS - 1) / DP_CUDA_THREADS); }

// Whether every index of a (batch, ch, hw) tensor, plus a grid stride, fits in 32 bits.
static bool fits32(int batch, int ch, int hw) { return (size_t)batch * ch * hw < (size_t)INT32_MAX; }

// The partial sums: 2 doubles per channel and slice, plus 2 floats to align them to 8 bytes.
extern "C" size_t dp_cuda_bn_workspace_floats(int batch, int ch, int hw) {
    return 4 * (size_t)(ch > 0 ? ch : 0) * (size_t)bn_slices(batch, hw) + 2;
}

static void sums(const dp_kctx *c, int batch, int ch, int hw, const float *x, const float *dy, const float *mean,
                 const float *invstd, float *out, float *ws, const char *what) {
    if (ch <= 0) return;
    double *part = (double *)(((uintptr_t)ws + 7) & ~(uintptr_t)7);
    const int slices = bn_slices(batch, hw);
    const dim3 grid((unsigned)slices, (unsigned)ch);
    const size_t per = (size_t)batch * hw;
    float *direct = slices == 1 ? out : nullptr;
    if (fits32(batch, ch, hw))
        DP_LAUNCH(sums_part_k<uint32_t>, grid, DP_CUDA_THREADS, 0, dp_stream(c))(ch, (uint32_t)hw, (uint32_t)per, slices, x,
                                                                          dy, mean, part, invstd, direct);
    else
        DP_LAUNCH(sums_part_k<size_t>, grid, DP_CUDA_THREADS, 0, dp_stream(c))(ch, (size_t)hw, per, slices, x, dy, mean, part,
                                                                        invstd, direct);
    DP_LAUNCHED(what);
    if (direct) return;
    DP_LAUNCH(sums_final_k, per_channel(ch), DP_CUDA_THREADS, 0, dp_stream(c))(ch, slices, part, invstd, out);
    DP_LAUNCHED(what);
}

extern "C" void dp_cuda_bn_sums(const dp_kctx *c, int batch, int ch, int hw, const float *x, float *out, float *ws) {
    sums(c, batch, ch, hw, x, nullptr, nullptr, nullptr, out, ws, "batch norm sums");
}
extern "C" void dp_cuda_bn_stats(const dp_kctx *c, int ch, int training, const float *sums, double count, float eps,
                                 float momentum, int update, float *mean, float *invstd, float *run_mean,
                                 float *run_var) {
    if (ch <= 0 || (training && count <= 0)) return;
    DP_LAUNCH(stats_k, per_channel(ch), DP_CUDA_THREADS, 0, dp_stream(c))(ch, training, sums, count, eps, momentum, update,
                                                                     mean, invstd, run_mean, run_var);
    DP_LAUNCHED("batch norm statistics");
}
extern "C" void dp_cuda_bn_apply(const dp_kctx *c, int batch, int ch, int hw, const float *x, const float *mean,
                                 const float *invstd, const float *gamma, const float *beta, float *y) {
    const size_t n = (size_t)batch * ch * hw;
    if (!n) return;
    if (fits32(batch, ch, hw))
        DP_LAUNCH(apply_k<uint32_t>, dp_blocks(n), DP_CUDA_THREADS, 0, dp_stream(c))((uint32_t)n, (uint32_t)ch, (uint32_t)hw,
                                                                             x, mean, invstd, gamma, beta, y);
    else
        DP_LAUNCH(apply_k<size_t>, dp_blocks(n), DP_CUDA_THREADS, 0, dp_stream(c))(n, (size_t)ch, (size_t)hw, x, mean, invstd,
                                                                           gamma, beta, y);
    DP_LAUNCHED("batch norm apply");
}
extern "C" void dp_cuda_bn_backward_sums(const dp_kctx *c, int batch, int ch, int hw, const float *x, const float *dy,
                                         const float *mean, const float *invstd, float *out, float *ws) {
    sums(c, batch, ch, hw, x, dy, mean, invstd, out, ws, "batch norm gradient sums");
}
extern "C" void dp_cuda_bn_backward(const dp_kctx *c, int batch, int ch, int hw, const float *x, const float *dy,
                                    const float *mean, const float *invstd, const float *gamma, const float *local,
                                    const float *sums, double count, float *dx, float *dgamma, float *dbeta,
                                    float *ws) {
    (void)ws;
    if (ch <= 0) return;
    DP_LAUNCH(param_grads_k, per_channel(ch), DP_CUDA_THREADS, 0, dp_stream(c))(ch, local, dgamma, dbeta);
    DP_LAUNCHED("batch norm parameter gradients");
    const size_t n = (size_t)batch * ch * hw;
    if (!dx || !n || !(count > 0)) return;
    if (fits32(batch, ch, hw))
        DP_LAUNCH(input_grad_k<uint32_t>, dp_blocks(n), DP_CUDA_THREADS, 0, dp_stream(c))(
            (uint32_t)n, (uint32_t)ch, (uint32_t)hw, x, dy, mean, invstd, gamma, sums, count, dx);
    else
        DP_LAUNCH(input_grad_k<size_t>, dp_blocks(n), DP_CUDA_THREADS, 0, dp_stream(c))(n, (size_t)ch, (size_t)hw, x, dy, mean,
                                                                                invstd, gamma, sums, count, dx);
    DP_LAUNCHED("batch norm input gradient");
}
