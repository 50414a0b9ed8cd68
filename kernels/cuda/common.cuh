// common.cuh: what the CUDA kernels share: launch shapes, the stream and cuBLAS handle of a
// call, and a deterministic block sum (a fixed tree over the threads, so a reduction gives the
// same bits every run; no atomics anywhere in kernels/cuda/).
#ifndef DP_CUDA_COMMON_CUH
#define DP_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

extern "C" {
#include "kernels/kernels.h"
}

#define DP_CUDA_THREADS 256

// Makes `ordinal` the calling thread's current device unless it is already (support.cu): launches,
// cuBLAS and cuDNN calls need their stream's device current, and one thread may drive several.
void dp_cuda_use(int ordinal);

// The stream of a call, with its device made current: every launch names its stream through this.
static inline cudaStream_t dp_stream(const dp_kctx *c) {
    if (!c) return 0;
    dp_cuda_use(c->device);
    return (cudaStream_t)c->stream;
}

static inline unsigned dp_blocks(size_t n) {
    size_t b = (n + DP_CUDA_THREADS - 1) / DP_CUDA_THREADS;
    return (unsigned)(b < 65535 * 32 ? (b ? b : 1) : 65535 * 32);
}

// Grid-stride loop over [0, n).
#define DP_FOR(i, n) for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

// The cuBLAS handle of a call: the executor's (bound to its stream), or one of the table's own.
cublasHandle_t dp_cuda_blas(const dp_kctx *c);

// Row-major C (M x N) = alpha op(A) op(B) + beta C, with op(A) M x K and op(B) K x N.
void dp_cuda_gemm(const dp_kctx *c, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc);

// Sum of v over the block's threads in a fixed tree; the result in thread 0. blockDim.x must be
// DP_CUDA_THREADS.
__device__ inline double dp_block_sum(double v) {
    __shared__ double s[DP_CUDA_THREADS];
    s[threadIdx.x] = v;
    __syncthreads();
    for (int h = DP_CUDA_THREADS / 2; h > 0; h /= 2) {
        if (threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h];
        __syncthreads();
    }
    double r = s[0];
    __syncthreads();
    return r;
}

// The table's entries return nothing (a launch is asynchronous: most failures show at the
// next synchronisation), so a failed launch or library call is recorded here, first one wins,
// and the executor reads it with dp_cuda_kernels_error (cuda_kernels.h) at its sync points.
void dp_cuda_note(const char *what, const char *why);
#define DP_LAUNCHED(name)                                                                \
    do {                                                                                 \
        cudaError_t e_ = cudaGetLastError();                                             \
        if (e_ != cudaSuccess) dp_cuda_note(name, cudaGetErrorString(e_));                 \
    } while (0)
#define DP_CUDA_NOTE(call)                                                               \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) dp_cuda_note(#call, cudaGetErrorString(e_));                \
    } while (0)

#endif
