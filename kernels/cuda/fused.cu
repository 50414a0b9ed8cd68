// fused.cu: the CUDA table's fused entries (kernels/kernels.h), each bitwise the sequence of CUDA
// entries it stands for, and so equal to its CPU twin (kernels/cpu/fused.c) wherever those entries
// equal theirs. The convolution is the table's own (cuDNN or im2col + cuBLAS: the same algorithm,
// the same bits); what is fused is what follows it. Every buffer of the sequence is written.
//   conv2d_relu_forward:   convolution, then one kernel: ReLU of each output and, with a pool, each
//                          pooled output and its argmax from the ReLU of its window (two launches
//                          instead of three; one less without the pool)
//   bn_apply_relu:         one kernel writing the normalised value and its ReLU (one instead of two)
//   maxpool_relu_backward: one kernel: the pool's gradient gather and the ReLU mask (one instead of two)
// The arithmetic of each element is that of the kernels it replaces (elementwise.cu's relu, pool.cu's
// window rule and gather, batchnorm.cu's apply).
#include <math.h>

#include "kernels/cuda/common.cuh"
#include "kernels/pool_index.h"

extern "C" void dp_cuda_conv2d_forward(const dp_kctx *, const dp_conv2d_dims *, int, const float *, const float *,
                                       const float *, float *, float *);

__device__ __forceinline__ float relu_of(float v) { return v < 0.0f ? 0.0f : v; } // elementwise.cu's relu_fwd_k

static int pool_out(int in, int k, int s, int p) { return (in + 2 * p - k) / s + 1; }

// Thread e: r[e] = relu(y[e]) for e < n, and pooled output e (< np) over the ReLU of its window, by
// pool.cu's rule (PyTorch's clipped window, NaN taken, the first maximum's index).
__global__ void relu_pool_k(size_t n, size_t np, int h, int w, int k, int s, int p, int oh, int ow, const float *y,
                            float *r, float *pooled, int32_t *am) {
    DP_FOR(e, n > np ? n : np) {
        if (e < n) r[e] = relu_of(y[e]);
        if (e >= np) continue;
        const size_t pl = e / ((size_t)oh * ow);
        const int i = (int)(e / ow % oh), j = (int)(e % ow);
        const float *yp = y + pl * h * w;
        int h0 = i * s - p, h1 = h0 + k, w0 = j * s - p, w1 = w0 + k;
        h0 = h0 < 0 ? 0 : h0, w0 = w0 < 0 ? 0 : w0;
        h1 = h1 > h ? h : h1, w1 = w1 > w ? w : w1;
        float m = -INFINITY;
        int32_t idx = h0 * w + w0;
        for (int a = h0; a < h1; a++)
            for (int b = w0; b < w1; b++) {
                const float v = relu_of(yp[a * w + b]);
                if (v > m || v != v) m = v, idx = a * w + b;
            }
        pooled[e] = m;
        am[e] = idx;
    }
}

extern "C" void dp_cuda_conv2d_relu_forward(const dp_kctx *c, const dp_conv2d_dims *d, int batch, const float *x,
                                            const float *w, const float *b, float *y, float *ws, float *r, int pool_k,
                                            int pool_stride, int pool_pad, float *pooled, int32_t *argmax) {
    if (batch <= 0) return;
    dp_cuda_conv2d_forward(c, d, batch, x, w, b, y, ws);
    const size_t n = (size_t)batch * d->out_c * d->out_h * d->out_w;
    int oh = 0, ow = 0;
    if (pool_k > 0)
        oh = pool_out(d->out_h, pool_k, pool_stride, pool_pad), ow = pool_out(d->out_w, pool_k, pool_stride, pool_pad);
    const size_t np = pool_k > 0 && oh > 0 && ow > 0 ? (size_t)batch * d->out_c * oh * ow : 0;
    DP_LAUNCH(relu_pool_k, dp_blocks(n > np ? n : np), DP_CUDA_THREADS, 0, dp_stream(c))(
        n, np, d->out_h, d->out_w, pool_k, pool_stride, pool_pad, oh, ow, y, r, pooled, argmax);
    DP_LAUNCHED(np ? "conv2d relu max pool" : "conv2d relu");
}

// batchnorm.cu's apply_k, and the ReLU of what it writes
__global__ void apply_relu_k(size_t n, size_t C, size_t hw, const float *x, const float *mean, const float *invstd,
                             const float *gamma, const float *beta, float *y, float *r) {
    DP_FOR(e, n) {
        const int ch = (int)(e / hw % C);
        const float sc = __fmul_rn(invstd[ch], gamma[ch]);
        const float v = __fadd_rn(__fmul_rn(__fadd_rn(x[e], -mean[ch]), sc), beta[ch]);
        y[e] = v;
        r[e] = relu_of(v);
    }
}

extern "C" void dp_cuda_bn_apply_relu(const dp_kctx *c, int batch, int ch, int hw, const float *x, const float *mean,
                                      const float *invstd, const float *gamma, const float *beta, float *y, float *r) {
    const size_t n = (size_t)batch * ch * hw;
    if (!n) return;
    DP_LAUNCH(apply_relu_k, dp_blocks(n), DP_CUDA_THREADS, 0, dp_stream(c))(n, (size_t)ch, (size_t)hw, x, mean, invstd, gamma,
                                                                     beta, y, r);
    DP_LAUNCHED("batch norm apply relu");
}

// pool.cu's maxpool_bwd_at into dpool, then elementwise.cu's relu_bwd_k of it into dx
__global__ void pool_relu_bwd_k(size_t n, int h, int w, int k, int s, int p, int oh, int ow, const float *dy,
                                const int32_t *am, const float *y, float *dpool, float *dx) {
    DP_FOR(e, n) {
        const size_t pl = e / ((size_t)h * w);
        const int rem = (int)(e - pl * (size_t)h * w);
        const size_t off = pl * (size_t)oh * ow;
        const float g = dp_pool_gather(rem / w, rem % w, w, k, s, p, oh, ow, dy + off, (const int *)(am + off));
        dpool[e] = g;
        dx[e] = y[e] > 0.0f ? g : 0.0f;
    }
}

extern "C" void dp_cuda_maxpool_relu_backward(const dp_kctx *c, int batch, int ch, int h, int w, int k, int stride,
                                              int pad, int oh, int ow, const float *dy, const int32_t *argmax,
                                              const float *y, float *dpool, float *dx) {
    const size_t n = (size_t)batch * ch * h * w;
    if (!n || oh <= 0 || ow <= 0) return;
    DP_LAUNCH(pool_relu_bwd_k, dp_blocks(n), DP_CUDA_THREADS, 0, dp_stream(c))(n, h, w, k, stride, pad, oh, ow, dy, argmax, y,
                                                                        dpool, dx);
    DP_LAUNCHED("max pool relu backward");
}
