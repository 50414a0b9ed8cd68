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
#include "kernels/cuda/cuda_kernels.h" // dp_cuda_kernels: its definition (table.cu) keeps C linkage

#define DP_CUDA_THREADS 256

// The one launch syntax of kernels/cuda/: DP_LAUNCH(kernel, grid, block, shmem, stream)(args...).
// nvcc: kernel<<<grid, block, shmem, stream>>>(args...). Anything else compiles these files
// against the CPU stand-in for CUDA (tests/cudashim/), whose launcher queues the kernel on the
// stream with its arguments copied, as a launch does.
#ifdef __CUDACC__
#define DP_LAUNCH(kernel, grid, block, shmem, stream) kernel<<<grid, block, shmem, stream>>>
#else
#define DP_LAUNCH(kernel, grid, block, shmem, stream) dp_shim_launch(kernel, grid, block, shmem, stream)
#endif

// Makes `ordinal` the calling thread's current device unless it is already (support.cu): launches,
// cuBLAS and cuDNN calls need their stream's device current, and one thread may drive several.
void dp_cuda_use(int ordinal);

// The stream of a call, with its device made current: every launch names its stream through this.
static inline cudaStream_t dp_stream(const dp_kctx *c) {
    if (!c) return 0;
    dp_cuda_use(c->ordinal);
    return (cudaStream_t)c->stream;
}

static inline unsigned dp_blocks(size_t n) {
    size_t b = (n + DP_CUDA_THREADS - 1) / DP_CUDA_THREADS;
    return (unsigned)(b < 65535 * 32 ? (b ? b : 1) : 65535 * 32);
}

// lanes() (kernels/kcall.h): the most lanes one launch takes (its per-lane arguments go by value,
// within the 4 KB a kernel's parameters may take); more are launched in groups of this many.
#define DP_CUDA_LANES 16

// Grid-stride loop over [0, n).
#define DP_FOR(i, n) for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

// The cuBLAS handle of a call: the executor's (bound to its stream), or one of the table's own.
cublasHandle_t dp_cuda_blas(const dp_kctx *c);

// Every cuBLAS handle's workspace, the device's and the table's own alike: cuBLAS picks its
// algorithm by the workspace it has, so one size keeps "the same shape, the same bits" on every
// stream. 32 MiB: what NVIDIA's cuBLAS documentation recommends for Hopper (4 MiB elsewhere).
#define DP_CUDA_BLAS_WORKSPACE ((size_t)32 << 20)

// Devices whose errors and handles are kept apart (ordinals at or above share one record).
#define DP_CUDA_MAX_DEVICES 64

// The calling thread's current device (cudaGetDevice), -1 if CUDA cannot say. Kernels and library
// calls run there; every operation of the CUDA device (device.cu) makes its own device current.
int dp_cuda_current_device(void);

// Library handles the table creates itself, one per host thread and device (a handle belongs to
// the device current at its creation, and must not be used by two threads at once): find returns
// this thread's for dev (NULL: none yet), keep records one with how to destroy it, and release
// destroys every thread's handles on dev, at the device's last close (device.cu).
enum { DP_CUDA_HANDLE_BLAS = 1, DP_CUDA_HANDLE_CUDNN = 2 };
void *dp_cuda_handle_find(int kind, int dev);
void dp_cuda_handle_keep(int kind, int dev, void *h, void *aux, void (*destroy)(void *h, void *aux));
void dp_cuda_handles_release(int dev);
// This thread's handle of `kind` on the call's device, made current first (one thread may drive
// several, nccl --gpus): found, or made by create (which notes its own failure and returns NULL;
// *aux: what destroy frees with it) and kept; then bound to the call's stream by bind, which
// returns NULL or the library's message, noted under bind_what. NULL when anything failed (noted).
void *dp_cuda_thread_handle(const dp_kctx *c, int kind, void *(*create)(void **aux),
                            void (*destroy)(void *h, void *aux), const char *bind_what,
                            const char *(*bind)(void *h, cudaStream_t s));
// cuDNN's plans (descriptors and algorithm choices) of device dev, at its last close (conv_cudnn.cu).
void dp_cuda_conv_release(int dev);

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
// for the current device, and the device reads it with dp_cuda_device_error (cuda_kernels.h) at
// its waits.
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
