// pool.cu: max pooling (PyTorch's window rule and NaN propagation, argmax per output) and global
// average pooling on the GPU, twins of kernels/cpu/pool.c.
#include <math.h>
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/pool_index.h"

extern "C" {
#include "kernels/kcall.h"
}

// Output o = (plane, i, j) of a max pool, and its argmax.
__device__ __forceinline__ void maxpool_fwd_at(size_t o, int h, int w, int k, int s, int p, int oh, int ow,
                                               const float *x, float *y, int32_t *am) {
    const size_t pl = o / ((size_t)oh * ow);
    const int i = (int)(o / ow % oh), j = (int)(o % ow);
    const float *xp = x + pl * h * w;
    int h0 = i * s - p, h1 = h0 + k, w0 = j * s - p, w1 = w0 + k;
    h0 = h0 < 0 ? 0 : h0, w0 = w0 < 0 ? 0 : w0;
    h1 = h1 > h ? h : h1, w1 = w1 > w ? w : w1;
    float m = -INFINITY;
    int32_t idx = h0 * w + w0; // PyTorch: the first element of the clipped window
    for (int a = h0; a < h1; a++)
        for (int b = w0; b < w1; b++) {
            const float v = xp[a * w + b];
            if (v > m || v != v) m = v, idx = a * w + b;
        }
    y[o] = m;
    am[o] = idx;
}

__global__ void maxpool_fwd_k(size_t n, int h, int w, int k, int s, int p, int oh, int ow, const float *x, float *y,
                              int32_t *am) {
    DP_FOR(o, n) maxpool_fwd_at(o, h, w, k, s, p, oh, ow, x, y, am);
}

// One thread an input element: it gathers the gradients of the outputs whose window covers it
// and whose argmax it is, in output order, as the CPU's scatter adds them where windows overlap
// (kernels/pool_index.h; deterministic, no atomics, every element in parallel).
__device__ __forceinline__ void maxpool_bwd_at(size_t e, int h, int w, int k, int s, int p, int oh, int ow,
                                               const float *dy, const int32_t *am, float *dx) {
    const size_t pl = e / ((size_t)h * w); // e = (plane, a, b)
    const int rem = (int)(e - pl * (size_t)h * w);
    const size_t off = pl * (size_t)oh * ow;
    dx[e] = dp_pool_gather(rem / w, rem % w, w, k, s, p, oh, ow, dy + off, (const int *)(am + off));
}

__global__ void maxpool_bwd_k(size_t n, int h, int w, int k, int s, int p, int oh, int ow, const float *dy,
                              const int32_t *am, float *dx) {
    DP_FOR(e, n) maxpool_bwd_at(e, h, w, k, s, p, oh, ow, dy, am, dx);
}

// The lanes of one max pool call in one launch (lanes.cu): lane blockIdx.y, its own extent and
// pointers (forward: x, y, argmax; backward: dy, argmax, dx), the window the same for all.
struct pool_lanes {
    size_t n[DP_CUDA_LANES];
    const float *in[DP_CUDA_LANES];
    const int32_t *am_in[DP_CUDA_LANES];
    float *out[DP_CUDA_LANES];
    int32_t *am_out[DP_CUDA_LANES];
};
__global__ void maxpool_fwd_lanes_k(pool_lanes L, int h, int w, int k, int s, int p, int oh, int ow) {
    const int l = blockIdx.y;
    DP_FOR(o, L.n[l]) maxpool_fwd_at(o, h, w, k, s, p, oh, ow, L.in[l], L.out[l], L.am_out[l]);
}
__global__ void maxpool_bwd_lanes_k(pool_lanes L, int h, int w, int k, int s, int p, int oh, int ow) {
    const int l = blockIdx.y;
    DP_FOR(e, L.n[l]) maxpool_bwd_at(e, h, w, k, s, p, oh, ow, L.in[l], L.am_in[l], L.out[l]);
}

// Global average pooling: each plane summed in order in double, as the CPU does (the same bits).
// A block takes GAP_P consecutive planes (contiguous memory) and reads them GAP_CH columns at a
// time into shared memory, a warp per plane's 32 consecutive floats (coalesced, where one thread
// per plane striding by hw was not); then thread p adds its plane's columns in order.
#define GAP_P 64
#define GAP_CH 32
__global__ void gap_fwd_k(size_t planes, int hw, const float *x, float *y) {
    __shared__ float tile[GAP_P][GAP_CH + 1]; // +1: thread p reads row p without bank conflicts
    const int t = threadIdx.x;
    for (size_t pl0 = (size_t)blockIdx.x * GAP_P; pl0 < planes; pl0 += (size_t)gridDim.x * GAP_P) {
        const int np = planes - pl0 < GAP_P ? (int)(planes - pl0) : GAP_P;
        const float *xb = x + pl0 * hw;
        double acc = 0.0;
        for (int c0 = 0; c0 < hw; c0 += GAP_CH) {
            const int len = hw - c0 < GAP_CH ? hw - c0 : GAP_CH;
            for (int e = t; e < GAP_P * GAP_CH; e += blockDim.x) {
                const int p = e / GAP_CH, j = e % GAP_CH;
                if (p < np && j < len) tile[p][j] = xb[(size_t)p * hw + c0 + j];
            }
            __syncthreads();
            if (t < np)
                for (int j = 0; j < len; j++) acc += tile[t][j];
            __syncthreads();
        }
        if (t < np) y[pl0 + t] = (float)(acc / hw);
    }
}

__global__ void gap_bwd_k(size_t n, int hw, const float *dy, float *dx) {
    DP_FOR(i, n) dx[i] = __fdiv_rn(dy[i / hw], (float)hw);
}

static int out_size(int in, int k, int s, int p) { return (in + 2 * p - k) / s + 1; }

// Max pool forward or backward over n <= DP_CUDA_LANES lanes in one launch; 0 for another kind.
extern "C" int dp_cuda_lanes_pool(const dp_kctx *c, int n, const dp_kcall *const *calls) {
    const int kind = calls[0]->kind;
    if (kind != DP_KC_MAXPOOL_FWD && kind != DP_KC_MAXPOOL_BWD) return 0;
    const int *i = calls[0]->i; // batch, ch, h, w, k, stride, pad (, oh, ow): lane 0's for all but batch
    for (int l = 1; l < n; l++)
        if (memcmp(calls[l]->i + 1, i + 1, 8 * sizeof *i) != 0) return 0;
    const int fwd = kind == DP_KC_MAXPOOL_FWD;
    const int oh = fwd ? out_size(i[2], i[4], i[5], i[6]) : i[7], ow = fwd ? out_size(i[3], i[4], i[5], i[6]) : i[8];
    if (oh <= 0 || ow <= 0) return 1;
    pool_lanes L = {};
    size_t most = 0;
    for (int l = 0; l < n; l++) {
        const dp_kcall *a = calls[l];
        L.n[l] = (size_t)a->i[0] * i[1] * (fwd ? (size_t)oh * ow : (size_t)i[2] * i[3]);
        L.in[l] = (const float *)a->p[0];
        if (fwd) L.out[l] = (float *)a->p[1], L.am_out[l] = (int32_t *)a->p[2];
        else L.am_in[l] = (const int32_t *)a->p[1], L.out[l] = (float *)a->p[2];
        most = L.n[l] > most ? L.n[l] : most;
    }
    if (!most) return 1;
    const dim3 grid(dp_blocks(most), (unsigned)n);
    if (fwd) DP_LAUNCH(maxpool_fwd_lanes_k, grid, DP_CUDA_THREADS, 0, dp_stream(c))(L, i[2], i[3], i[4], i[5], i[6], oh, ow);
    else DP_LAUNCH(maxpool_bwd_lanes_k, grid, DP_CUDA_THREADS, 0, dp_stream(c))(L, i[2], i[3], i[4], i[5], i[6], oh, ow);
    DP_LAUNCHED(fwd ? "max pool forward lanes" : "max pool backward lanes");
    return 1;
}

extern "C" void dp_cuda_maxpool_forward(const dp_kctx *c, int batch, int ch, int h, int w, int k, int stride, int pad,
                                        const float *x, float *y, int32_t *argmax) {
    const int oh = out_size(h, k, stride, pad), ow = out_size(w, k, stride, pad);
    const size_t n = (size_t)batch * ch * oh * ow;
    if (!n || oh <= 0 || ow <= 0) return;
    DP_LAUNCH(maxpool_fwd_k, dp_blocks(n), DP_CUDA_THREADS, 0, dp_stream(c))(n, h, w, k, stride, pad, oh, ow, x, y, argmax);
    DP_LAUNCHED("max pool forward");
}
extern "C" void dp_cuda_maxpool_backward(const dp_kctx *c, int batch, int ch, int h, int w, int k, int stride, int pad,
                                         int oh, int ow, const float *dy, const int32_t *argmax, float *dx) {
    const size_t n = (size_t)batch * ch * h * w;
    if (!n || oh <= 0 || ow <= 0) return;
    DP_LAUNCH(maxpool_bwd_k, dp_blocks(n), DP_CUDA_THREADS, 0, dp_stream(c))(n, h, w, k, stride, pad, oh, ow, dy, argmax, dx);
    DP_LAUNCHED("max pool backward");
}
extern "C" void dp_cuda_avgpool_forward(const dp_kctx *c, int batch, int ch, int hw, const float *x, float *y) {
    const size_t planes = (size_t)batch * ch;
    if (!planes || hw <= 0) return;
    const size_t groups = (planes + GAP_P - 1) / GAP_P;
    const unsigned grid = (unsigned)(groups < 65535 * 32 ? groups : 65535 * 32);
    DP_LAUNCH(gap_fwd_k, grid, DP_CUDA_THREADS, 0, dp_stream(c))(planes, hw, x, y);
    DP_LAUNCHED("average pool forward");
}
extern "C" void dp_cuda_avgpool_backward(const dp_kctx *c, int batch, int ch, int hw, const float *dy, float *dx) {
    const size_t n = (size_t)batch * ch * hw;
    if (!n) return;
    DP_LAUNCH(gap_bwd_k, dp_blocks(n), DP_CUDA_THREADS, 0, dp_stream(c))(n, hw, dy, dx);
    DP_LAUNCHED("average pool backward");
}
