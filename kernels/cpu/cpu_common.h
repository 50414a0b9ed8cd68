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

#if DP_VL == 16
/* AVX-512 helpers (the x86-64-v4 variant). Lanes [lo, hi) of a 16-lane mask (clipped). */
static inline __mmask16 dp_lane_mask(int lo, int hi) {
    if (lo < 0) lo = 0;
    if (hi > DP_VL) hi = DP_VL;
    return hi <= lo ? 0 : (__mmask16)((((1u << hi) - 1u) >> lo) << lo);
}

/* The sums of 16 vectors' lanes, s[e] = the sum of v[e]'s 16 lanes by a fixed pairwise tree
 * (lanes l and l+8, then l and l+4, l+2, l+1), as one vector. */
static inline __m512 dp_sum16(const __m512 *v) {
    __m512 a[8], b[4], c[2];
    /* a[i]: v[2i]'s lanes l + (l+8) in its low half, v[2i+1]'s in its high half */
    for (int i = 0; i < 8; i++)
        a[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
    /* b[i]: 128-bit blocks e0 e1 e2 e3 = elements 4i..4i+3, each l + (l+4) of 4 partials */
    for (int i = 0; i < 4; i++)
        b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xDD));
    /* c[i]: block j = element 4(2i)+j's two partials, then element 4(2i+1)+j's */
    for (int i = 0; i < 2; i++)
        c[i] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0xEE));
    /* block j: elements j, 4+j, 8+j, 12+j */
    const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], 0x88), _mm512_shuffle_ps(c[0], c[1], 0xDD));
    const __m512i perm = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(perm, r);
}
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
