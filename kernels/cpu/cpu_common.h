/* cpu_common.h: private helpers of the CPU kernels (not part of their API): a portable SIMD
 * vector type (GCC vector extensions: AVX where the target has it, else SSE), an explicit FMA
 * (ISO C mode turns -ffp-contract off, so `a * b + c` would not fuse), and the split of a
 * batch into contiguous per-thread chunks. */
#ifndef DP_KERNEL_CPU_COMMON_H
#define DP_KERNEL_CPU_COMMON_H

#include <stddef.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#define DP_VL 16
#elif defined(__AVX__)
#include <immintrin.h>
#define DP_VL 8
#else
#define DP_VL 4 /* 16-byte vectors: no ABI change without AVX (-Wpsabi) */
#endif

typedef float dp_vf __attribute__((vector_size(DP_VL * sizeof(float))));
/* The same vector with alignment 4 and may_alias, for unaligned loads and stores. */
typedef float dp_vfu __attribute__((vector_size(DP_VL * sizeof(float)), aligned(4), may_alias));

#define DP_VLOAD(p) (*(const dp_vfu *)(const void *)(p))
#define DP_VSTORE(p, v) (*(dp_vfu *)(void *)(p) = (v))
/* Not {0} + s: that would keep a scalar add (0 + s differs from s for s = -0). */
static inline dp_vf dp_vsplat(float s) {
#if DP_VL == 16
    return (dp_vf){s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s};
#elif DP_VL == 8
    return (dp_vf){s, s, s, s, s, s, s, s};
#else
    return (dp_vf){s, s, s, s};
#endif
}
#define DP_VSPLAT(s) dp_vsplat(s)
#if DP_VL == 16
#define DP_VFMA(a, b, c) ((dp_vf)_mm512_fmadd_ps((a), (b), (c)))
#elif defined(__FMA__) && DP_VL == 8
#define DP_VFMA(a, b, c) ((dp_vf)_mm256_fmadd_ps((a), (b), (c)))
#else
#define DP_VFMA(a, b, c) ((a) * (b) + (c))
#endif

/* Keeps v in a register: stops the compiler from folding one load into several FMAs. */
#if DP_VL == 16
#define DP_KEEP(v) __asm__("" : "+v"(v)) /* any of the 32 zmm registers */
#else
#define DP_KEEP(v) __asm__("" : "+x"(v))
#endif

/* Number of chunks a batch is split into: one per thread, never an empty one. */
static inline int dp_nchunks(int batch, int nthreads) {
    int n = nthreads < batch ? nthreads : batch;
    return n < 1 ? 1 : n;
}

/* Chunk c of n over [0, total): contiguous, sizes differ by at most one. */
static inline void dp_chunk(int total, int n, int c, int *lo, int *hi) {
    *lo = (int)((long long)total * c / n);
    *hi = (int)((long long)total * (c + 1) / n);
}

/* Test hook for conv2d: 0 picks the GEMM path by shape, 1 forces the direct SIMD path, 2 OpenBLAS. */
extern int dp_conv2d_force_path;

/* Element-wise kernels use threads only above this many elements per thread (below it the fork
 * costs more than it saves). */
#define DP_ELTWISE_MIN_PER_THREAD 16384

static inline int dp_eltwise_threads(size_t n, int nthreads) {
    size_t t = n / DP_ELTWISE_MIN_PER_THREAD;
    if (t < 1) t = 1;
    return (size_t)nthreads < t ? (nthreads < 1 ? 1 : nthreads) : (int)t;
}

#endif
