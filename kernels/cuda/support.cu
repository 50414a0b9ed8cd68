// support.cu: the CUDA table's shared pieces: its error record, its own cuBLAS handle, row-major GEMM.
#include <mutex>
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

static std::mutex note_mu;
static char note_msg[512];
static int note_set;

void dp_cuda_note(const char *what, const char *why) {
    std::lock_guard<std::mutex> g(note_mu);
    if (note_set) return;
    snprintf(note_msg, sizeof note_msg, "CUDA: %s failed: %s", what, why);
    note_set = 1;
}

extern "C" int dp_cuda_kernels_error(char *buf, size_t n) {
    std::lock_guard<std::mutex> g(note_mu);
    if (!note_set) return 0;
    if (buf && n) snprintf(buf, n, "%s", note_msg);
    note_set = 0;
    return 1;
}

static const char *blas_status(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialised";
    case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
    default: return "error";
    }
}

void dp_cuda_use(int ordinal) {
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur == ordinal) return;
    DP_CUDA_NOTE(cudaSetDevice(ordinal));
}

// The table's own handle (tests, callers without an executor): one per host thread and device,
// since a handle must not be used by two threads at once and belongs to the device current when
// it was created; fp32 math (no TF32) so results compare with the CPU's. The executor's handles
// are its devices' own (c->blas); their device is made current here too.
#define DP_CUDA_OWN_HANDLES 64
cublasHandle_t dp_cuda_blas(const dp_kctx *c) {
    const int dev = c ? c->device : 0;
    dp_cuda_use(dev);
    if (c && c->blas) return (cublasHandle_t)c->blas;
    if (dev < 0 || dev >= DP_CUDA_OWN_HANDLES) {
        dp_cuda_note("cuBLAS handle", "device ordinal out of range");
        return nullptr;
    }
    static thread_local cublasHandle_t own[DP_CUDA_OWN_HANDLES];
    if (!own[dev]) {
        cublasStatus_t s = cublasCreate(&own[dev]);
        if (s != CUBLAS_STATUS_SUCCESS) {
            dp_cuda_note("cublasCreate", blas_status(s));
            own[dev] = nullptr;
            return nullptr;
        }
        cublasSetMathMode(own[dev], CUBLAS_DEFAULT_MATH);
    }
    cublasSetStream(own[dev], dp_stream(c));
    return own[dev];
}

void dp_cuda_gemm(const dp_kctx *c, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    cublasHandle_t h = dp_cuda_blas(c);
    if (!h) return;
    // row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T
    cublasStatus_t s = cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha,
                                   B, ldb, A, lda, &beta, C, ldc);
    if (s != CUBLAS_STATUS_SUCCESS) dp_cuda_note("cublasSgemm", blas_status(s));
}
