// support.cu: the CUDA table's shared pieces: its error records (one per device), the library
// handles it creates itself (one per host thread and device, released at the device's last close),
// its own cuBLAS handle, row-major GEMM.
#include <mutex>
#include <string.h>
#include <thread>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

// ---- the first failure of each device (cuda_kernels.h) ----

#define NOTE_SLOTS (DP_CUDA_MAX_DEVICES + 1) // the last: a failure while no device could be named
static std::mutex note_mu;
static char note_msg[NOTE_SLOTS][512];
static int note_set[NOTE_SLOTS];

static int slot_of(int dev) { return dev >= 0 && dev < DP_CUDA_MAX_DEVICES ? dev : DP_CUDA_MAX_DEVICES; }

int dp_cuda_current_device(void) {
    int d = -1;
    if (cudaGetDevice(&d) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return d;
}

void dp_cuda_note(const char *what, const char *why) {
    const int s = slot_of(dp_cuda_current_device()); // kernels run on the current device
    std::lock_guard<std::mutex> g(note_mu);
    if (note_set[s]) return;
    snprintf(note_msg[s], sizeof note_msg[s], "CUDA: %s failed: %s", what, why);
    note_set[s] = 1;
}

static int take(int s, char *buf, size_t n) {
    if (!note_set[s]) return 0;
    if (buf && n) snprintf(buf, n, "%s", note_msg[s]);
    note_set[s] = 0;
    return 1;
}

extern "C" int dp_cuda_device_error(int dev, char *buf, size_t n) {
    std::lock_guard<std::mutex> g(note_mu);
    return take(slot_of(dev), buf, n) || take(DP_CUDA_MAX_DEVICES, buf, n);
}

extern "C" int dp_cuda_kernels_error(char *buf, size_t n) { return dp_cuda_device_error(dp_cuda_current_device(), buf, n); }

extern "C" void dp_cuda_forget_errors(int dev) {
    std::lock_guard<std::mutex> g(note_mu);
    note_set[slot_of(dev)] = 0;
    note_set[DP_CUDA_MAX_DEVICES] = 0;
}

// ---- library handles per host thread and device ----

typedef struct {
    std::thread::id tid;
    int kind, dev;
    void *h, *aux;
    void (*destroy)(void *h, void *aux);
} lib_handle;
static std::mutex handles_mu;
static std::vector<lib_handle> handles;

void *dp_cuda_handle_find(int kind, int dev) {
    const std::thread::id me = std::this_thread::get_id();
    std::lock_guard<std::mutex> g(handles_mu);
    for (const lib_handle &e : handles)
        if (e.kind == kind && e.dev == dev && e.tid == me) return e.h;
    return nullptr;
}

void dp_cuda_handle_keep(int kind, int dev, void *h, void *aux, void (*destroy)(void *h, void *aux)) {
    lib_handle e;
    e.tid = std::this_thread::get_id(), e.kind = kind, e.dev = dev, e.h = h, e.aux = aux, e.destroy = destroy;
    std::lock_guard<std::mutex> g(handles_mu);
    handles.push_back(e);
}

void dp_cuda_handles_release(int dev) {
    std::vector<lib_handle> gone;
    {
        std::lock_guard<std::mutex> g(handles_mu);
        for (size_t i = 0; i < handles.size();) {
            if (handles[i].dev == dev) {
                gone.push_back(handles[i]);
                handles[i] = handles.back();
                handles.pop_back();
            } else {
                i++;
            }
        }
    }
    if (gone.empty()) return;
    const int was = dp_cuda_current_device(); // a handle is destroyed on the device it was made on
    cudaSetDevice(dev);
    for (const lib_handle &e : gone) e.destroy(e.h, e.aux);
    if (was >= 0) cudaSetDevice(was);
    cudaGetLastError();
}

// ---- cuBLAS ----

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

static void destroy_blas(void *h, void *ws) {
    cublasDestroy((cublasHandle_t)h);
    if (ws) cudaFree(ws);
}

void dp_cuda_use(int ordinal) {
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur == ordinal) return;
    DP_CUDA_NOTE(cudaSetDevice(ordinal));
}

void *dp_cuda_thread_handle(const dp_kctx *c, int kind, void *(*create)(void **aux),
                            void (*destroy)(void *h, void *aux), const char *bind_what,
                            const char *(*bind)(void *h, cudaStream_t s)) {
    dp_cuda_use(c ? c->ordinal : 0);
    const int dev = dp_cuda_current_device();
    void *h = dp_cuda_handle_find(kind, dev);
    if (!h) {
        void *aux = nullptr;
        if (!(h = create(&aux))) return nullptr; // noted
        dp_cuda_handle_keep(kind, dev, h, aux, destroy);
    }
    // unchecked, the work would run on the handle's previous stream: a race, not an error
    const char *err = bind(h, dp_stream(c));
    if (err) {
        dp_cuda_note(bind_what, err);
        return nullptr;
    }
    return h;
}

static void *make_blas(void **ws) {
    cublasHandle_t own = nullptr;
    cublasStatus_t s = cublasCreate(&own);
    if (s != CUBLAS_STATUS_SUCCESS) {
        dp_cuda_note("cublasCreate", blas_status(s));
        return nullptr;
    }
    cudaError_t e = cudaMalloc(ws, DP_CUDA_BLAS_WORKSPACE);
    if (e != cudaSuccess) {
        cublasDestroy(own);
        dp_cuda_note("cudaMalloc (the table's cuBLAS workspace)", cudaGetErrorString(e));
        return nullptr;
    }
    s = cublasSetWorkspace(own, *ws, DP_CUDA_BLAS_WORKSPACE);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetMathMode(own, CUBLAS_DEFAULT_MATH);
    if (s != CUBLAS_STATUS_SUCCESS) {
        destroy_blas(own, *ws);
        dp_cuda_note("cublasSetWorkspace / cublasSetMathMode", blas_status(s));
        return nullptr;
    }
    return own;
}

static const char *bind_blas(void *h, cudaStream_t s) {
    const cublasStatus_t st = cublasSetStream((cublasHandle_t)h, s);
    return st == CUBLAS_STATUS_SUCCESS ? nullptr : blas_status(st);
}

// The table's own handle (tests, callers without an executor): one per host thread and device,
// since a handle must not be used by two threads at once and belongs to the device current at its
// creation; the workspace every handle has (DP_CUDA_BLAS_WORKSPACE), fp32 math (no TF32) so results
// compare with the CPU's. The executor's handles are its devices' own (c->handle); the call's device
// (c->ordinal) is made current first, since one thread may drive several (nccl --gpus).
cublasHandle_t dp_cuda_blas(const dp_kctx *c) {
    if (!c || !c->handle)
        return (cublasHandle_t)dp_cuda_thread_handle(c, DP_CUDA_HANDLE_BLAS, make_blas, destroy_blas,
                                                     "cublasSetStream", bind_blas);
    dp_cuda_use(c->ordinal);
    return (cublasHandle_t)c->handle;
}

void dp_cuda_gemm(const dp_kctx *c, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    cublasHandle_t h = dp_cuda_blas(c);
    if (!h) return; // noted
    // row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T
    cublasStatus_t s = cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha,
                                   B, ldb, A, lda, &beta, C, ldc);
    if (s != CUBLAS_STATUS_SUCCESS) dp_cuda_note("cublasSgemm", blas_status(s));
}
