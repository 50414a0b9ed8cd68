// elementwise.cu: ReLU, add, copy, the SGD step and the fixed-order tree sum on the GPU; the
// arithmetic of each element is the CPU twin's (kernels/cpu/activation.c, sgd.c, core/treesum.c).
#include "kernels/cuda/common.cuh"

extern "C" {
#include "kernels/kcall.h"
}

__global__ void relu_fwd_k(size_t n, const float *x, float *y) {
    DP_FOR(i, n) y[i] = x[i] < 0.0f ? 0.0f : x[i]; // keeps NaN and -0, as the CPU twin and PyTorch
}
__global__ void relu_bwd_k(size_t n, const float *y, const float *dy, float *dx) {
    DP_FOR(i, n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}
__global__ void add_k(size_t n, const float *a, const float *b, float *y) {
    DP_FOR(i, n) y[i] = a[i] + b[i];
}

// The lanes of one element-wise call in one launch (lanes.cu): lane blockIdx.y, its own extent
// and pointers, each element's arithmetic the one-lane kernel's.
struct ew_lanes {
    size_t n[DP_CUDA_LANES];
    const float *a[DP_CUDA_LANES], *b[DP_CUDA_LANES];
    float *y[DP_CUDA_LANES];
};
__global__ void relu_fwd_lanes_k(ew_lanes L) {
    const int l = blockIdx.y;
    const float *x = L.a[l];
    DP_FOR(i, L.n[l]) L.y[l][i] = x[i] < 0.0f ? 0.0f : x[i];
}
__global__ void relu_bwd_lanes_k(ew_lanes L) {
    const int l = blockIdx.y;
    DP_FOR(i, L.n[l]) L.y[l][i] = L.a[l][i] > 0.0f ? L.b[l][i] : 0.0f;
}
__global__ void add_lanes_k(ew_lanes L) {
    const int l = blockIdx.y;
    DP_FOR(i, L.n[l]) L.y[l][i] = L.a[l][i] + L.b[l][i];
}
__global__ void copy_lanes_k(ew_lanes L) {
    const int l = blockIdx.y;
    DP_FOR(i, L.n[l]) L.y[l][i] = L.a[l][i];
}

// relu forward and backward, add and copy over n <= DP_CUDA_LANES lanes in one launch; 0 for
// another kind. Pointers by the entries' order: relu_forward (x, y), relu_backward (y, dy, dx),
// add (a, b, y), copy (x, y).
extern "C" int dp_cuda_lanes_elementwise(const dp_kctx *c, int n, const dp_kcall *const *calls) {
    const int kind = calls[0]->kind;
    if (kind != DP_KC_RELU_FWD && kind != DP_KC_RELU_BWD && kind != DP_KC_ADD && kind != DP_KC_COPY) return 0;
    const int three = kind == DP_KC_RELU_BWD || kind == DP_KC_ADD;
    ew_lanes L = {};
    size_t most = 0;
    for (int l = 0; l < n; l++) {
        const dp_kcall *a = calls[l];
        L.n[l] = a->z, L.a[l] = (const float *)a->p[0];
        L.b[l] = three ? (const float *)a->p[1] : NULL, L.y[l] = (float *)a->p[three ? 2 : 1];
        most = a->z > most ? a->z : most;
    }
    if (!most) return 1;
    const dim3 grid(dp_blocks(most), (unsigned)n);
    cudaStream_t s = dp_stream(c);
    if (kind == DP_KC_RELU_FWD) DP_LAUNCH(relu_fwd_lanes_k, grid, DP_CUDA_THREADS, 0, s)(L);
    else if (kind == DP_KC_RELU_BWD) DP_LAUNCH(relu_bwd_lanes_k, grid, DP_CUDA_THREADS, 0, s)(L);
    else if (kind == DP_KC_ADD) DP_LAUNCH(add_lanes_k, grid, DP_CUDA_THREADS, 0, s)(L);
    else DP_LAUNCH(copy_lanes_k, grid, DP_CUDA_THREADS, 0, s)(L);
    DP_LAUNCHED("element-wise lanes");
    return 1;
}

extern "C" void dp_cuda_relu_forward(const dp_kctx *c, size_t n, const float *x, float *y) {
    if (!n) return;
    DP_LAUNCH(relu_fwd_k, dp_blocks(n), DP_CUDA_THREADS, 0, dp_stream(c))(n, x, y);
    DP_LAUNCHED("relu forward");
}
extern "C" void dp_cuda_relu_backward(const dp_kctx *c, size_t n, const float *y, const float *dy, float *dx) {
    if (!n) return;
    DP_LAUNCH(relu_bwd_k, dp_blocks(n), DP_CUDA_THREADS, 0, dp_stream(c))(n, y, dy, dx);
    DP_LAUNCHED("relu backward");
}
extern "C" void dp_cuda_add(const dp_kctx *c, size_t n, const float *a, const float *b, float *y) {
    if (!n) return;
    DP_LAUNCH(add_k, dp_blocks(n), DP_CUDA_THREADS, 0, dp_stream(c))(n, a, b, y);
    DP_LAUNCHED("add");
}
extern "C" void dp_cuda_copy(const dp_kctx *c, size_t n, const float *x, float *y) {
    if (!n || x == y) return;
    DP_CUDA_NOTE(cudaMemcpyAsync(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice, dp_stream(c)));
}

// __fmul_rn / __fadd_rn: no contraction into FMA, so each element rounds as the CPU's does
// (ISO C there: -ffp-contract=off).
__global__ void sgd_k(size_t n, float *p, const float *g, float *buf, float lr, float mom, float wd, int nesterov) {
    DP_FOR(i, n) {
        float d = __fadd_rn(g[i], __fmul_rn(wd, p[i]));
        if (mom == 0.0f) {
            p[i] = __fadd_rn(p[i], -__fmul_rn(lr, d));
            continue;
        }
        float b = __fadd_rn(__fmul_rn(mom, buf[i]), d);
        buf[i] = b;
        float step = nesterov ? __fadd_rn(d, __fmul_rn(mom, b)) : b;
        p[i] = __fadd_rn(p[i], -__fmul_rn(lr, step));
    }
}
extern "C" void dp_cuda_sgd(const dp_kctx *c, size_t n, float *p, const float *g, float *buf, float lr, float momentum,
                            float wd, int nesterov) {
    if (!n) return;
    DP_LAUNCH(sgd_k, dp_blocks(n), DP_CUDA_THREADS, 0, dp_stream(c))(n, p, g, buf, lr, momentum, wd, nesterov);
    DP_LAUNCHED("sgd");
}

// Any NaN or Inf among x[0..n) sets *flag (the exponent's bits all ones, as the CPU twin's integer
// test, kernels/cpu/sgd.c); each block reports once. Nothing writes 0: the caller zeroed the flag.
__global__ void nonfinite_k(size_t n, const float *x, float *flag) {
    int bad = 0;
    DP_FOR(i, n) bad |= (__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u;
    if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1.0f;
}
extern "C" void dp_cuda_nonfinite(const dp_kctx *c, size_t n, const float *x, float *flag) {
    if (!n) return;
    DP_LAUNCH(nonfinite_k, dp_blocks(n), DP_CUDA_THREADS, 0, dp_stream(c))(n, x, flag);
    DP_LAUNCHED("nonfinite");
}

// One level of the tree: a += b (and b = 0 with clear), element-wise.
__global__ void tree_level_k(size_t n, float *a, float *b, int clear) {
    DP_FOR(i, n) {
        a[i] = __fadd_rn(a[i], b[i]);
        if (clear) b[i] = 0.0f;
    }
}
extern "C" void dp_cuda_tree_sum(const dp_kctx *c, float *const *v, int n, size_t lo, size_t count, int clear) {
    if (!count) return;
    for (int m = n; m > 1;) { // the order of core/treesum.c
        const int h = (m + 1) / 2;
        for (int i = 0; i < m - h; i++)
            DP_LAUNCH(tree_level_k, dp_blocks(count), DP_CUDA_THREADS, 0, dp_stream(c))(count, v[i] + lo, v[i + h] + lo, clear);
        m = h;
    }
    DP_LAUNCHED("tree sum");
}
