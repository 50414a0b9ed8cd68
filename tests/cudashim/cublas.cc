// cublas.cc: the cuBLAS calls dptrain makes. A handle keeps its stream, workspace and math mode;
// a GEMM is checked as cuBLAS checks it, then queued on the handle's stream and computed there by
// a plain loop in double (one fixed order per shape: the same bits every run, on every stream).
#include <vector>

#include "cublas_v2.h"
#include "shim.h"

struct cublasContext {
    cudaStream_t stream = nullptr;
    void *workspace = nullptr;
    size_t workspace_bytes = 0;
    cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

namespace {

// Column-major C (m x n) = alpha op(A) op(B) + beta C; C is not read when beta is 0 (as BLAS).
void sgemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B, int ldb,
           float beta, float *C, int ldc) {
    std::vector<double> acc((size_t)m);
    for (int j = 0; j < n; j++) {
        for (int i = 0; i < m; i++) acc[(size_t)i] = 0.0;
        for (int p = 0; p < k; p++) {
            const double b = tb ? B[j + (size_t)p * ldb] : B[p + (size_t)j * ldb];
            if (ta)
                for (int i = 0; i < m; i++) acc[(size_t)i] += (double)A[p + (size_t)i * lda] * b;
            else
                for (int i = 0; i < m; i++) acc[(size_t)i] += (double)A[i + (size_t)p * lda] * b;
        }
        for (int i = 0; i < m; i++) {
            float *c = &C[i + (size_t)j * ldc];
            *c = (float)(alpha * acc[(size_t)i] + (beta != 0.0f ? (double)beta * *c : 0.0));
        }
    }
}

} // namespace

extern "C" {

cublasStatus_t cublasCreate(cublasHandle_t *h) {
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    *h = new cublasContext;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetStream(cublasHandle_t h, cudaStream_t *s) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!s) return CUBLAS_STATUS_INVALID_VALUE;
    *s = h->stream;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes && (!ws || ((size_t)ws & 255))) return CUBLAS_STATUS_INVALID_VALUE; // 256-byte aligned
    h->workspace = ws, h->workspace_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                           float *C, int ldc) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    const bool tA = ta != CUBLAS_OP_N, tB = tb != CUBLAS_OP_N;
    const int rows_a = tA ? k : m, rows_b = tB ? n : k;
    if (m < 0 || n < 0 || k < 0 || !alpha || !beta || lda < (rows_a > 1 ? rows_a : 1) ||
        ldb < (rows_b > 1 ? rows_b : 1) || ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!m || !n) return CUBLAS_STATUS_SUCCESS;
    const float a = *alpha, b = *beta; // host pointer mode: read at the call
    cudaError_t e = dpshim::enqueue(h->stream, [=] {
        dpshim::counts.blas_calls++;
        dpshim::counts.launches++;
        sgemm(tA, tB, m, n, k, a, A, lda, B, ldb, b, C, ldc);
    });
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

} // extern "C"
