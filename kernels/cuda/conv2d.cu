// conv2d.cu: 2-D convolution on the GPU as explicit GEMMs over im2col columns (cuBLAS, fp32),
// the same layout and results (within rounding) as kernels/cpu/conv2d.c. Deterministic: the
// column scatter back to dx is a gather (each input element adds its window positions in a
// fixed order), and the bias gradient is a fixed-tree block sum; no atomics.
//   col (K, batch * P):  K = in_c * k * k, P = out_h * out_w, column n * P + p
//   forward:  t (M, batch * P) = w (M, K) col;  y[n][m][p] = t[m][n P + p] + b[m]
//   backward: dw += dyt (M, batch P) col^T;  dcol (K, batch P) = w^T dyt;  dx = col2im(dcol)
#include "kernels/cuda/common.cuh"

__global__ void im2col_k(size_t n, int C, int H, int W, int k, int s, int pad, int OH, int OW, int batch,
                         const float *x, float *col) {
    const size_t P = (size_t)OH * OW, cols = (size_t)batch * P;
    DP_FOR(e, n) { // e = row * cols + column
        const size_t row = e / cols, colm = e % cols;
        const int kw = (int)(row % k), kh = (int)(row / k % k), ci = (int)(row / ((size_t)k * k));
        const size_t nn = colm / P, p = colm % P;
        const int oh = (int)(p / OW), ow = (int)(p % OW);
        const int ih = oh * s - pad + kh, iw = ow * s - pad + kw;
        col[e] = (ih >= 0 && ih < H && iw >= 0 && iw < W) ? x[((nn * C + ci) * H + ih) * W + iw] : 0.0f;
    }
}

// dx[n][ci][ih][iw] = sum over (kh, kw) in order of dcol[(ci, kh, kw)][n P + (oh, ow)] where the
// window position lands on (ih, iw).
__global__ void col2im_k(size_t n, int C, int H, int W, int k, int s, int pad, int OH, int OW, int batch,
                         const float *dcol, float *dx) {
    const size_t P = (size_t)OH * OW, cols = (size_t)batch * P;
    DP_FOR(e, n) {
        const int iw = (int)(e % W), ih = (int)(e / W % H), ci = (int)(e / ((size_t)W * H) % C);
        const size_t nn = e / ((size_t)W * H * C);
        float acc = 0.0f;
        for (int kh = 0; kh < k; kh++) {
            const int th = ih + pad - kh;
            if (th < 0 || th % s) continue;
            const int oh = th / s;
            if (oh >= OH) continue;
            for (int kw = 0; kw < k; kw++) {
                const int tw = iw + pad - kw;
                if (tw < 0 || tw % s) continue;
                const int ow = tw / s;
                if (ow >= OW) continue;
                const size_t row = ((size_t)ci * k + kh) * k + kw;
                acc = __fadd_rn(acc, dcol[row * cols + nn * P + (size_t)oh * OW + ow]);
            }
        }
        dx[e] = acc;
    }
}

// (M, batch P) <-> (batch, M, P)
__global__ void to_nchw_k(size_t n, int M, size_t P, int batch, const float *t, const float *b, float *y) {
    DP_FOR(e, n) { // e over y: (nn, m, p)
        const size_t p = e % P, m = e / P % M, nn = e / (P * M);
        const float v = t[m * (batch * P) + nn * P + p];
        y[e] = b ? __fadd_rn(v, b[m]) : v;
    }
}
__global__ void from_nchw_k(size_t n, int M, size_t P, int batch, const float *dy, float *t) {
    DP_FOR(e, n) { // e over t: (m, nn, p)
        const size_t p = e % P, nn = e / P % batch, m = e / (P * batch);
        t[e] = dy[(nn * M + m) * P + p];
    }
}

__global__ void conv_bias_grad_k(int M, size_t cols, const float *dyt, float *db) {
    const int m = blockIdx.x;
    double acc = 0.0;
    for (size_t e = threadIdx.x; e < cols; e += blockDim.x) acc += dyt[(size_t)m * cols + e];
    acc = dp_block_sum(acc);
    if (threadIdx.x == 0) db[m] = __fadd_rn(db[m], (float)acc);
}

static size_t col_rows(const dp_conv2d_dims *d) { return (size_t)d->in_c * d->k * d->k; }
static size_t cols_of(const dp_conv2d_dims *d, int batch) { return (size_t)batch * d->out_h * d->out_w; }

// col (K, cols) + dyt or t (M, cols) + dcol (K, cols)
extern "C" size_t dp_cuda_conv2d_workspace_floats(const dp_conv2d_dims *d, int batch, int nthreads) {
    (void)nthreads;
    const size_t cols = cols_of(d, batch);
    return 2 * col_rows(d) * cols + (size_t)d->out_c * cols;
}

static void im2col(const dp_kctx *c, const dp_conv2d_dims *d, int batch, const float *x, float *col) {
    const size_t n = col_rows(d) * cols_of(d, batch);
    DP_LAUNCH(im2col_k, dp_blocks(n), DP_CUDA_THREADS, 0, dp_stream(c))(n, d->in_c, d->in_h, d->in_w, d->k, d->stride, d->pad,
                                                                  d->out_h, d->out_w, batch, x, col);
    DP_LAUNCHED("conv2d im2col");
}

void dp_cuda_conv2d_forward_gemm(const dp_kctx *c, const dp_conv2d_dims *d, int batch, const float *x,
                                       const float *w, const float *b, float *y, float *ws) {
    if (batch <= 0) return;
    const int K = (int)col_rows(d), M = d->out_c;
    const size_t cols = cols_of(d, batch), P = (size_t)d->out_h * d->out_w;
    float *col = ws, *t = ws + (size_t)K * cols;
    im2col(c, d, batch, x, col);
    dp_cuda_gemm(c, 0, 0, M, (int)cols, K, 1.0f, w, K, col, (int)cols, 0.0f, t, (int)cols);
    const size_t n = (size_t)batch * M * P;
    DP_LAUNCH(to_nchw_k, dp_blocks(n), DP_CUDA_THREADS, 0, dp_stream(c))(n, M, P, batch, t, b, y);
    DP_LAUNCHED("conv2d output layout");
}

void dp_cuda_conv2d_backward_gemm(const dp_kctx *c, const dp_conv2d_dims *d, int batch, const float *x,
                                        const float *w, const float *dy, float *dx, float *dw, float *db, float *ws) {
    if (batch <= 0) return;
    const int K = (int)col_rows(d), M = d->out_c;
    const size_t cols = cols_of(d, batch), P = (size_t)d->out_h * d->out_w;
    float *col = ws, *dyt = ws + (size_t)K * cols, *dcol = dyt + (size_t)M * cols;
    im2col(c, d, batch, x, col);
    const size_t n = (size_t)M * cols;
    DP_LAUNCH(from_nchw_k, dp_blocks(n), DP_CUDA_THREADS, 0, dp_stream(c))(n, M, P, batch, dy, dyt);
    DP_LAUNCHED("conv2d gradient layout");
    dp_cuda_gemm(c, 0, 1, M, K, (int)cols, 1.0f, dyt, (int)cols, col, (int)cols, 1.0f, dw, K); // dw += dyt col^T
    if (db) {
        DP_LAUNCH(conv_bias_grad_k, M, DP_CUDA_THREADS, 0, dp_stream(c))(M, cols, dyt, db);
        DP_LAUNCHED("conv2d bias gradient");
    }
    if (!dx) return;
    dp_cuda_gemm(c, 1, 0, K, (int)cols, M, 1.0f, w, K, dyt, (int)cols, 0.0f, dcol, (int)cols); // dcol = w^T dyt
    const size_t nx = (size_t)batch * d->in_c * d->in_h * d->in_w;
    DP_LAUNCH(col2im_k, dp_blocks(nx), DP_CUDA_THREADS, 0, dp_stream(c))(nx, d->in_c, d->in_h, d->in_w, d->k, d->stride,
                                                                   d->pad, d->out_h, d->out_w, batch, dcol, dx);
    DP_LAUNCHED("conv2d col2im");
}
