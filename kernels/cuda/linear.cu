// linear.cu: fully connected layer on cuBLAS (fp32, no TF32 unless the handle says so): the same
// products as kernels/cpu/linear.c; the bias gradient sums the batch in order, one thread a
// feature, so it is the CPU's sum.
#include "kernels/cuda/common.cuh"

__global__ void bias_rows_k(size_t n, int out_f, const float *b, float *y) {
    DP_FOR(i, n) y[i] = b[i % out_f];
}
__global__ void bias_grad_k(int batch, int out_f, const float *dy, float *db) {
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= out_f) return;
    float acc = db[o];
    for (int n = 0; n < batch; n++) acc = __fadd_rn(acc, dy[(size_t)n * out_f + o]);
    db[o] = acc;
}

extern "C" void dp_cuda_linear_forward(const dp_kctx *c, int batch, int in_f, int out_f, const float *x,
                                       const float *w, const float *b, float *y) {
    if (batch <= 0 || out_f <= 0) return;
    const size_t n = (size_t)batch * out_f;
    if (b) {
        DP_LAUNCH(bias_rows_k, dp_blocks(n), DP_CUDA_THREADS, 0, dp_stream(c))(n, out_f, b, y);
        DP_LAUNCHED("linear bias");
    }
    // y (batch, out_f) = x (batch, in_f) w^T (in_f, out_f) [+ y]
    dp_cuda_gemm(c, 0, 1, batch, out_f, in_f, 1.0f, x, in_f, w, in_f, b ? 1.0f : 0.0f, y, out_f);
}

extern "C" void dp_cuda_linear_backward(const dp_kctx *c, int batch, int in_f, int out_f, const float *x,
                                        const float *w, const float *dy, float *dx, float *dw, float *db) {
    if (batch <= 0 || out_f <= 0 || in_f <= 0) return;
    if (dx) dp_cuda_gemm(c, 0, 0, batch, in_f, out_f, 1.0f, dy, out_f, w, in_f, 0.0f, dx, in_f);
    dp_cuda_gemm(c, 1, 0, out_f, in_f, batch, 1.0f, dy, out_f, x, in_f, 1.0f, dw, in_f); // dw += dy^T x
    if (db) {
        DP_LAUNCH(bias_grad_k, (out_f + DP_CUDA_THREADS - 1) / DP_CUDA_THREADS, DP_CUDA_THREADS, 0, dp_stream(c))(batch, out_f,
                                                                                                          dy, db);
        DP_LAUNCHED("linear bias gradient");
    }
}
