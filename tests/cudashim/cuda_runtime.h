// cuda_runtime.h (the CUDA stand-in, tests/cudashim/): the runtime API (cuda_runtime_api.h) and,
// for C++, what a .cu file's device code needs to compile as host C++: the qualifiers, the
// coordinates of the current thread, __syncthreads, the intrinsics kernels/cuda/ uses, and the
// launcher that DP_LAUNCH (kernels/cuda/common.cuh) expands to without nvcc. A launch queues the
// kernel, its arguments captured by value, on its stream; a stream's worker runs each block's
// threads as fibers on one OS thread (fibers.cc), so __shared__ is per-OS-thread static storage.
#ifndef DP_CUDASHIM_RUNTIME_H
#define DP_CUDASHIM_RUNTIME_H

#include "cuda_runtime_api.h"

#ifdef __cplusplus
#include <functional>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <tuple>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
// one block at a time per OS thread, its threads fibers of that thread: per-thread statics are the block's
#define __shared__ static thread_local

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

// The running fiber's coordinates (fibers.cc sets them before it resumes a thread of a block).
struct dp_shim_coords {
    uint3 thread, block, block_dim, grid_dim;
};
extern thread_local dp_shim_coords dp_shim_here;
#define threadIdx (static_cast<const uint3 &>(dp_shim_here.thread))
#define blockIdx (static_cast<const uint3 &>(dp_shim_here.block))
#define blockDim (static_cast<const uint3 &>(dp_shim_here.block_dim))
#define gridDim (static_cast<const uint3 &>(dp_shim_here.grid_dim))
static constexpr int warpSize = 32;

// The block's barrier: the calling fiber waits until every live thread of its block is there.
void dp_shim_syncthreads(void);
int dp_shim_syncthreads_or(int pred);
#define __syncthreads() dp_shim_syncthreads()
#define __syncthreads_or(p) dp_shim_syncthreads_or(p)

// Rounded-to-nearest arithmetic, never contracted into an FMA (the shim's sources are compiled
// with -ffp-contract=off), as the _rn intrinsics are on a GPU.
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline unsigned __float_as_uint(float f) {
    unsigned u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }

// Checks the launch as a GPU does (block size, grid limits, shared memory: an error for
// cudaGetLastError, nothing queued), else queues body on s to run once per thread of the grid.
void dp_shim_launch_kernel(dim3 grid, dim3 block, size_t shmem, cudaStream_t s, std::function<void()> body);

template <class... P>
struct dp_shim_launcher {
    void (*kernel)(P...);
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;
    template <class... A>
    void operator()(A &&...a) const {
        static_assert(sizeof...(A) == sizeof...(P), "a kernel takes one argument per parameter");
        // converted to the parameters' types and copied now, as a launch copies its arguments
        std::tuple<typename std::decay<P>::type...> args(std::forward<A>(a)...);
        void (*k)(P...) = kernel;
        dp_shim_launch_kernel(grid, block, shmem, stream, [k, args]() { std::apply(k, args); });
    }
};
template <class... P>
dp_shim_launcher<P...> dp_shim_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t shmem, cudaStream_t s) {
    return dp_shim_launcher<P...>{kernel, grid, block, shmem, s};
}
#endif

#endif
