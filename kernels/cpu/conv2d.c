/* conv2d.c: Conv2d as GEMMs over im2col matrices, split over threads by contiguous chunks of
 * samples. Inputs are first copied into a zero-padded buffer where needed, so that no inner loop
 * checks bounds. Two back ends, picked by shape:
 * - "direct": few output channels (LeNet). OpenBLAS is slow on thin products such as 6x25 by
 *   25x576 (~20 GFLOP/s here), so this path runs its own register-tiled SIMD kernels, one sample
 *   at a time while its data is in L1/L2, and keeps the weight gradient as per-lane vector
 *   partials until the end of the chunk. With stride 1 ("implicit") nothing is copied: the
 *   forward and weight-gradient tiles read the padded input directly, and the input-gradient
 *   tile adds its result straight into the padded input gradient (col2im fused). Other strides
 *   build the im2col matrix ("explicit").
 * - "blas": everything else (ResNet). Several samples share one im2col matrix so that a GEMM has
 *   at least ~128 columns even where a sample has only 1..16 output positions.
 * The weight gradient of chunk c goes to its own partial; partials are added to dw in chunk
 * order after the parallel part, so results depend on the thread count but not on timing. */
#include "kernels/cpu/variant.h" /* first: renames this variant's functions */
#include "kernels/cpu/conv2d.h"

#include <cblas.h>
#include <string.h>

#include "kernels/cpu/cpu_common.h"


#define NB (2 * DP_VL) /* columns of a micro-tile (two vectors) */
#define MRF 6          /* rows of a forward / dcol micro-tile */
#define MRW 2          /* dW micro-tile: MRW output channels x KRW im2col rows */
#define KRW 6
#define BLAS_MIN_COLS 128        /* the blas path groups samples up to this many GEMM columns */
#define BLAS_MAX_COL (1u << 18)  /* ... with an im2col matrix of at most this many floats */
#define DW_GROUP_BYTES 24576         /* direct dw: samples' inputs + gradients per pass (L1) */
#define AI static inline __attribute__((always_inline))

typedef struct {
    int M, K, P;     /* out_c, in_c * k * k, out_h * out_w */
    int direct;      /* 1: own SIMD kernels, 0: OpenBLAS */
    int implicit;    /* direct, stride 1, out_w near a multiple of VL: tiles read the padded input */
    int Hp, Wp;      /* padded input */
    int copy_x;      /* inputs go through the padded buffer xp (pad > 0, or rows read past out_w) */
    int OWr, NV;     /* implicit: out_w rounded up to VL; vectors per sample (out_h * OWr / VL) */
    int rowpad;      /* implicit with out_w % VL != 0: dy goes through a (M, out_h, OWr) copy */
    size_t pin;      /* floats of one padded input (with VL of slack: rows are read up to OWr) */
    int ld;          /* explicit direct: row stride of col / dyp (P rounded up to NB) */
    int G;           /* blas: samples per GEMM; implicit, sh: samples per dw pass */
    int sh, PV;      /* 16-float vectors, stride 1: the shifted planes of conv2d_v4.h; P's vectors */
    int mv;          /* sh, M 16 or 32, k <= 5: dw with the output channels in the lanes (dy transposed) */
    size_t S, xs_sz; /* sh: floats of one shifted plane (Hp * out_w); of a sample's planes, with slack */
    size_t o_xp, o_dxp, o_col, o_dy, o_dw, o_db, per_chunk; /* a chunk's slice of ws (floats) */
} conv_plan;

/* Row groups of the fused input gradient: group g = (kw, rows q0.. of the (c, kh) pairs). */
static int dx_groups(const dp_conv2d_dims *d) { return d->k * ((d->in_c * d->k + MRF - 1) / MRF); }

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; } /* 64-byte slices: no false sharing */

#if DP_VL == 16
static void sh_plan(const dp_conv2d_dims *d, conv_plan *p); /* conv2d_v4.h */
#define SH_KMAX_PLAN 32                                      /* its SH_KMAX */
#endif

static conv_plan make_plan(const dp_conv2d_dims *d) {
    conv_plan p;
    memset(&p, 0, sizeof p);
    p.M = d->out_c;
    p.K = d->in_c * d->k * d->k;
    p.P = d->out_h * d->out_w;
    p.Hp = d->in_h + 2 * d->pad;
    p.Wp = d->in_w + 2 * d->pad;
    if (dp_conv2d_force_path) p.direct = dp_conv2d_force_path == 1;
    else p.direct = p.M <= 32 && (size_t)p.M * p.K <= 8192; /* weights fit in L1 */
#if DP_VL == 16
    if (p.direct && d->stride == 1 && d->k <= SH_KMAX_PLAN) {
        sh_plan(d, &p);
        return p;
    }
#endif
    p.OWr = (d->out_w + DP_VL - 1) / DP_VL * DP_VL;
    /* implicit tiles compute whole vectors: worth it while at most 1/5 of the lanes are wasted */
    p.implicit = p.direct && d->stride == 1 && 5 * d->out_w >= 4 * p.OWr;
    p.NV = d->out_h * p.OWr / DP_VL;
    p.rowpad = p.implicit && p.OWr != d->out_w;
    p.copy_x = d->pad > 0 || p.rowpad;
    p.pin = round16((size_t)d->in_c * p.Hp * p.Wp + (p.implicit ? DP_VL : 0));
    const size_t xsz = p.copy_x ? p.pin : 0;
    if (p.implicit) {
        /* samples per dw pass, so that their inputs and gradients stay in L1 */
        const size_t per = sizeof(float) * ((p.copy_x ? p.pin : (size_t)d->in_c * d->in_h * d->in_w) +
                                            (size_t)p.M * p.NV * DP_VL);
        p.G = (int)(DW_GROUP_BYTES / per);
        if (p.G < 1) p.G = 1;
        if (p.G > 8) p.G = 8;
        p.o_xp = 0;                                                    /* xp (G, pin) */
        p.o_dxp = p.o_xp + xsz * p.G;                                  /* dxp (pin) */
        p.o_col = p.o_dxp + xsz;                                       /* wg (groups, M, MRF) */
        p.o_dy = p.o_col + round16((size_t)dx_groups(d) * p.M * MRF);  /* dyr (G, M, NV * VL) */
        p.o_dw = p.o_dy + (p.rowpad ? round16((size_t)p.G * p.M * p.NV * DP_VL) : 0);
    } else if (p.direct) {
        p.G = 1;
        p.ld = (p.P + NB - 1) / NB * NB;
        p.o_xp = 0;                                         /* xp (pin) */
        p.o_dxp = xsz;                                      /* dxp (pin) */
        p.o_col = 2 * xsz;                                  /* col (K, ld) */
        p.o_dy = p.o_col + round16((size_t)p.K * p.ld);     /* dyp (M, ld) */
        p.o_dw = p.o_dy + round16((size_t)p.M * p.ld);
    } else {
        int G = (BLAS_MIN_COLS + p.P - 1) / p.P;
        while (G > 1 && (size_t)p.K * G * p.P > BLAS_MAX_COL) G--;
        p.G = G;
        const size_t cols = (size_t)G * p.P;
        p.o_xp = 0;                                                  /* xp (pin) */
        p.o_dxp = xsz;                                               /* dxp (pin) */
        p.o_col = 2 * xsz;                                           /* col (K, G*P) */
        p.o_dy = p.o_col + round16((size_t)p.K * cols);              /* yb (M, G*P), if G > 1 */
        p.o_dw = p.o_dy + (G > 1 ? round16((size_t)p.M * cols) : 0); /* dw partial (M, K) */
        p.o_db = p.o_dw + round16((size_t)p.M * p.K);                /* db partial (M) */
        p.per_chunk = p.o_db + round16((size_t)p.M);
        return p;
    }
    p.o_db = p.o_dw + round16((size_t)p.M * p.K * DP_VL);  /* dwv (M, K, VL) */
    p.per_chunk = p.o_db + round16((size_t)p.M * DP_VL);    /* dbv (M, VL) */
    return p;
}

/* Depends only on the shape and the number of chunks, so it also covers any smaller batch or
 * thread count. */
size_t conv2d_workspace_floats(const dp_conv2d_dims *d, int batch, int nthreads) {
    const conv_plan p = make_plan(d);
    return p.per_chunk * (size_t)dp_nchunks(batch, nthreads);
}

/* ---------------------------------------------------------------- padding, im2col, col2im */

/* The sample xs (in_c, H, W) as a zero-padded (in_c, Hp, Wp) array: xs itself unless copy_x,
 * else xp, whose border (and slack) was zeroed once per chunk. */
static const float *pad_input(const dp_conv2d_dims *d, const conv_plan *pl, const float *xs, float *xp) {
    if (!pl->copy_x) return xs;
    const int H = d->in_h, W = d->in_w, p = d->pad;
    for (int c = 0; c < d->in_c; c++)
        for (int i = 0; i < H; i++)
            memcpy(xp + ((size_t)c * pl->Hp + i + p) * pl->Wp + p, xs + ((size_t)c * H + i) * W, sizeof(float) * W);
    return xp;
}

/* dx (in_c, H, W) = the interior of dxp (in_c, Hp, Wp). */
static void unpad(const dp_conv2d_dims *d, const conv_plan *pl, const float *dxp, float *dx) {
    const int H = d->in_h, W = d->in_w, p = d->pad;
    for (int c = 0; c < d->in_c; c++)
        for (int i = 0; i < H; i++)
            memcpy(dx + ((size_t)c * H + i) * W, dxp + ((size_t)c * pl->Hp + i + p) * pl->Wp + p, sizeof(float) * W);
}

static inline void copy_row(float *dst, const float *src, int n) {
    if (n < DP_VL) {
        for (int i = 0; i < n; i++) dst[i] = src[i];
        return;
    }
    int i = 0;
    for (; i + DP_VL <= n; i += DP_VL) DP_VSTORE(dst + i, DP_VLOAD(src + i));
    if (i < n) DP_VSTORE(dst + n - DP_VL, DP_VLOAD(src + n - DP_VL)); /* overlaps: a copy may */
}

static inline void add_row(float *dst, const float *src, int n) {
    int i = 0;
    for (; i + DP_VL <= n; i += DP_VL) DP_VSTORE(dst + i, DP_VLOAD(dst + i) + DP_VLOAD(src + i));
    for (; i < n; i++) dst[i] += src[i];
}

#if DP_VL == 16
/* dst[i] = src[2i], i < n: 16 at a time, the even floats of 32 (masked: nothing read past src[2n-2]). */
static inline void gather2_row(float *dst, const float *src, int n) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    for (int i = 0; i < n; i += DP_VL) {
        const int left = 2 * (n - i) - 1; /* floats of src from 2i on that are read */
        const __m512 lo = _mm512_maskz_loadu_ps(dp_lane_mask(0, left), src + 2 * i);
        const __m512 hi = _mm512_maskz_loadu_ps(dp_lane_mask(0, left - DP_VL), src + 2 * i + DP_VL);
        _mm512_mask_storeu_ps(dst + i, dp_lane_mask(0, n - i), _mm512_permutex2var_ps(lo, even, hi));
    }
}

/* dst[2i] += src[i], i < n (the odd floats between are left as they are). */
static inline void scatter2_add_row(float *dst, const float *src, int n) {
    const __m512i spread_lo = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i spread_hi = _mm512_setr_epi32(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    for (int i = 0; i < n; i += DP_VL) {
        const __m512 v = _mm512_maskz_loadu_ps(dp_lane_mask(0, n - i), src + i);
        const int left = 2 * (n - i) - 1;
        const __mmask16 m0 = dp_lane_mask(0, left) & 0x5555, m1 = dp_lane_mask(0, left - DP_VL) & 0x5555;
        float *d0 = dst + 2 * i, *d1 = d0 + DP_VL;
        _mm512_mask_storeu_ps(d0, m0, _mm512_add_ps(_mm512_maskz_loadu_ps(m0, d0), _mm512_permutexvar_ps(spread_lo, v)));
        _mm512_mask_storeu_ps(d1, m1, _mm512_add_ps(_mm512_maskz_loadu_ps(m1, d1), _mm512_permutexvar_ps(spread_hi, v)));
    }
}
#endif

/* col (K, ldc): row (ic, kh, kw), column oh*OW + ow = xp[ic][oh*s + kh][ow*s + kw] of the padded
 * input. Columns [P, zero_to) are zeroed. */
static void im2col(const dp_conv2d_dims *d, const conv_plan *pl, const float *xp, float *col, int ldc,
                   int zero_to) {
    const int k = d->k, s = d->stride, OH = d->out_h, OW = d->out_w, Wp = pl->Wp;
    float *dst = col;
    for (int c = 0; c < d->in_c; c++)
        for (int kh = 0; kh < k; kh++)
            for (int kw = 0; kw < k; kw++, dst += ldc) {
                const float *src = xp + ((size_t)c * pl->Hp + kh) * Wp + kw;
                for (int oh = 0; oh < OH; oh++) {
                    const float *srow = src + (size_t)oh * s * Wp;
                    float *drow = dst + (size_t)oh * OW;
                    if (s == 1) copy_row(drow, srow, OW);
#if DP_VL == 16
                    else if (s == 2) gather2_row(drow, srow, OW);
#endif
                    else
                        for (int ow = 0; ow < OW; ow++) drow[ow] = srow[ow * s];
                }
                for (int q = OH * OW; q < zero_to; q++) dst[q] = 0.0f;
            }
}

/* dxp (in_c, Hp, Wp) = the sum of col (K, ldc) over the positions im2col took it from. */
static void col2im(const dp_conv2d_dims *d, const conv_plan *pl, const float *col, int ldc, float *dxp) {
    const int k = d->k, s = d->stride, OH = d->out_h, OW = d->out_w, Wp = pl->Wp;
    memset(dxp, 0, sizeof(float) * (size_t)d->in_c * pl->Hp * Wp);
    const float *src = col;
    for (int c = 0; c < d->in_c; c++)
        for (int kh = 0; kh < k; kh++)
            for (int kw = 0; kw < k; kw++, src += ldc) {
                float *dst = dxp + ((size_t)c * pl->Hp + kh) * Wp + kw;
                for (int oh = 0; oh < OH; oh++) { /* rows in the inner loop: no store-to-load stalls */
                    float *drow = dst + (size_t)oh * s * Wp;
                    const float *srow = src + (size_t)oh * OW;
                    if (s == 1) add_row(drow, srow, OW);
#if DP_VL == 16
                    else if (s == 2) scatter2_add_row(drow, srow, OW);
#endif
                    else
                        for (int ow = 0; ow < OW; ow++) drow[ow * s] += srow[ow];
                }
            }
}

/* ---------------------------------------------------------------- direct path: SIMD micro-kernels */

#define SWITCH6(R, CALL)        \
    switch (R) {                \
    case 6: CALL(6); break;     \
    case 5: CALL(5); break;     \
    case 4: CALL(4); break;     \
    case 3: CALL(3); break;     \
    case 2: CALL(2); break;     \
    default: CALL(1); break;    \
    }

/* C[i][0..NB) = bias[i] + sum_k A[i][k] B[k][0..NB), i < R. */
AI void tile_nn(const int R, int K, const float *A, int lda, const float *B, int ldb, const float *bias, float *C,
                int ldc) {
    dp_vf c0[MRF], c1[MRF];
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) c0[i] = c1[i] = DP_VSPLAT(bias ? bias[i] : 0.0f);
    for (int k = 0; k < K; k++) {
        const float *b = B + (size_t)k * ldb;
        const dp_vf b0 = DP_VLOAD(b), b1 = DP_VLOAD(b + DP_VL);
#pragma GCC unroll 6
        for (int i = 0; i < R; i++) {
            const dp_vf a = DP_VSPLAT(A[(size_t)i * lda + k]);
            c0[i] = DP_VFMA(a, b0, c0[i]);
            c1[i] = DP_VFMA(a, b1, c1[i]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) {
        DP_VSTORE(C + (size_t)i * ldc, c0[i]);
        DP_VSTORE(C + (size_t)i * ldc + DP_VL, c1[i]);
    }
}

/* tile_nn reading the padded input xp (in_c, Hp, Wp) in place of an im2col matrix: the two
 * vectors of outputs start at x0 and x1 (stride 1, so im2col row (c, kh, kw) of a vector is
 * x0[c*plane + kh*Wp + kw ..]). */
AI void tile_nn_x(const int R, int C, int k, size_t plane, int Wp, const float *x0, const float *x1, const float *A,
                  int lda, const float *bias, float *C0, float *C1, int ldc) {
    dp_vf c0[MRF], c1[MRF];
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) c0[i] = c1[i] = DP_VSPLAT(bias ? bias[i] : 0.0f);
    const float *a = A;
    for (int c = 0; c < C; c++)
        for (int kh = 0; kh < k; kh++) {
            const size_t o = c * plane + (size_t)kh * Wp;
            for (int kw = 0; kw < k; kw++, a++) {
                const dp_vf b0 = DP_VLOAD(x0 + o + kw), b1 = DP_VLOAD(x1 + o + kw);
#pragma GCC unroll 6
                for (int i = 0; i < R; i++) {
                    const dp_vf w = DP_VSPLAT(a[(size_t)i * lda]);
                    c0[i] = DP_VFMA(w, b0, c0[i]);
                    c1[i] = DP_VFMA(w, b1, c1[i]);
                }
            }
        }
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) {
        DP_VSTORE(C0 + (size_t)i * ldc, c0[i]);
        DP_VSTORE(C1 + (size_t)i * ldc, c1[i]);
    }
}

/* Weight-gradient tile, lane-wise: Cv[i][j] += A[i][p] * B[j][p] summed over the p of ns
 * samples. Vector p of a sample covers output row oh, columns ow.. (ow steps by VL up to OW);
 * A[i] of sample s starts at A + s*as + i*lda (vectors in order), B[j] at xo[j] + s*xs +
 * oh*Wp + ow: the implicit im2col of a padded input, or (OH 1, Wp 0) an im2col row. MRW x KRW
 * = 2 x 6 keeps 12 accumulators, 2 A vectors and one B vector in the 16 registers. */
AI void tile_dw(const int MR, const int KR, int ns, size_t as, size_t xs, int OH, int OW, int Wp, const float *A,
                int lda, const float *const *xo, float *Cv, int ldcv) {
    dp_vf c[MRW][KRW];
#pragma GCC unroll 2
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 6
        for (int j = 0; j < KR; j++) c[i][j] = DP_VLOAD(Cv + ((size_t)i * ldcv + j) * DP_VL);
    for (int s = 0; s < ns; s++) {
        const float *ap = A + s * as;
        for (int oh = 0; oh < OH; oh++) {
            const size_t rb = s * xs + (size_t)oh * Wp;
            for (int ow = 0; ow < OW; ow += DP_VL, ap += DP_VL) {
                const dp_vf a0 = DP_VLOAD(ap), a1 = MR > 1 ? (dp_vf)DP_VLOAD(ap + lda) : a0;
#pragma GCC unroll 6
                for (int j = 0; j < KR; j++) {
                    dp_vf b = DP_VLOAD(xo[j] + rb + ow);
                    DP_KEEP(b); /* one (often line-splitting) load, not one per FMA */
                    c[0][j] = DP_VFMA(a0, b, c[0][j]);
                    if (MR > 1) c[1][j] = DP_VFMA(a1, b, c[1][j]);
                }
            }
        }
    }
#pragma GCC unroll 2
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 6
        for (int j = 0; j < KR; j++) DP_VSTORE(Cv + ((size_t)i * ldcv + j) * DP_VL, c[i][j]);
}

/* tile_dw for the implicit im2col, rows kk0.. of one kernel row (c, kh): row j reads x + j, so
 * one pointer and constant offsets address all of them (no spills). MR x KR accumulators, MR A
 * vectors and one B vector stay within the 16 registers (see DW_MR). */
AI void tile_dw_x(const int MR, const int KR, int ns, size_t as, size_t xs, int OH, int OW, int Wp, const float *A,
                  int lda, const float *x, float *Cv, int ldcv) {
    dp_vf c[4][6];
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 6
        for (int j = 0; j < KR; j++) c[i][j] = DP_VLOAD(Cv + ((size_t)i * ldcv + j) * DP_VL);
    for (int s = 0; s < ns; s++) {
        const float *ap = A + s * as, *xb = x + s * xs;
        for (int oh = 0; oh < OH; oh++) {
            const float *xr = xb + (size_t)oh * Wp;
            for (int ow = 0; ow < OW; ow += DP_VL, ap += DP_VL) {
                dp_vf a[4];
#pragma GCC unroll 4
                for (int i = 0; i < MR; i++) a[i] = DP_VLOAD(ap + (size_t)i * lda);
#pragma GCC unroll 6
                for (int j = 0; j < KR; j++) {
                    dp_vf b = DP_VLOAD(xr + ow + j);
                    DP_KEEP(b);
#pragma GCC unroll 4
                    for (int i = 0; i < MR; i++) c[i][j] = DP_VFMA(a[i], b, c[i][j]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 6
        for (int j = 0; j < KR; j++) DP_VSTORE(Cv + ((size_t)i * ldcv + j) * DP_VL, c[i][j]);
}

/* Rows of tile_dw_x for KR columns: MR*KR + MR + 1 <= 16 registers. */
static const int DW_MR[7] = {0, 4, 4, 3, 3, 2, 2};

/* C[j][0..NB) = sum_m A[m][j] D[m][0..NB), j < R (A^T D: the im2col gradient). */
AI void tile_tn(const int R, int M, const float *A, int lda, const float *D, int ldd, float *C, int ldc) {
    dp_vf c0[MRF], c1[MRF];
#pragma GCC unroll 6
    for (int j = 0; j < R; j++) c0[j] = c1[j] = DP_VSPLAT(0.0f);
    for (int m = 0; m < M; m++) {
        const float *dm = D + (size_t)m * ldd;
        const dp_vf d0 = DP_VLOAD(dm), d1 = DP_VLOAD(dm + DP_VL);
        const float *am = A + (size_t)m * lda;
#pragma GCC unroll 6
        for (int j = 0; j < R; j++) {
            const dp_vf a = DP_VSPLAT(am[j]);
            c0[j] = DP_VFMA(a, d0, c0[j]);
            c1[j] = DP_VFMA(a, d1, c1[j]);
        }
    }
#pragma GCC unroll 6
    for (int j = 0; j < R; j++) {
        DP_VSTORE(C + (size_t)j * ldc, c0[j]);
        DP_VSTORE(C + (size_t)j * ldc + DP_VL, c1[j]);
    }
}

/* tile_tn with col2im fused (stride 1): dcol rows r < R for two vectors of outputs (D0, D1),
 * each added into dxp at x0 + off[r] and x1 + off[r]. The rows of one call share the kernel
 * column kw, so their targets never partly overlap (no store-to-load forwarding stalls). Wg
 * (M, MRF) holds the rows' weights. two = 0: the second vector is a duplicate, not added. */
AI void tile_dx(const int R, int M, const float *Wg, const float *D0, const float *D1, int ldd, float *x0, float *x1,
                const size_t *off, int two) {
    dp_vf c0[MRF], c1[MRF];
#pragma GCC unroll 6
    for (int j = 0; j < R; j++) c0[j] = c1[j] = DP_VSPLAT(0.0f);
    for (int m = 0; m < M; m++) {
        const dp_vf d0 = DP_VLOAD(D0 + (size_t)m * ldd), d1 = DP_VLOAD(D1 + (size_t)m * ldd);
#pragma GCC unroll 6
        for (int j = 0; j < R; j++) {
            const dp_vf a = DP_VSPLAT(Wg[m * MRF + j]);
            c0[j] = DP_VFMA(a, d0, c0[j]);
            c1[j] = DP_VFMA(a, d1, c1[j]);
        }
    }
#pragma GCC unroll 6
    for (int j = 0; j < R; j++) {
        float *t0 = x0 + off[j];
        DP_VSTORE(t0, DP_VLOAD(t0) + c0[j]);
        if (two) {
            float *t1 = x1 + off[j];
            DP_VSTORE(t1, DP_VLOAD(t1) + c1[j]);
        }
    }
}

#if DP_VL == 16
#include "kernels/cpu/conv2d_v4.h"

static void sh_plan(const dp_conv2d_dims *d, conv_plan *p) {
    p->sh = 1;
    p->PV = (p->P + DP_VL - 1) / DP_VL;
    p->S = (size_t)p->Hp * d->out_w;
    p->xs_sz = round16((size_t)d->in_c * d->k * p->S + DP_VL);
    p->G = (SH_DW_STEPS + p->PV - 1) / p->PV; /* samples a dw tile runs over: at least SH_DW_STEPS vectors */
    if (p->G > SH_G) p->G = SH_G;
    p->mv = (p->M == 16 || p->M == 32) && d->k <= 5;
    if (p->mv) p->G = SH_G; /* its tiles run over every position of the group */
    p->o_xp = 0;                                                    /* X (G, xs_sz) */
    p->o_dxp = p->xs_sz * p->G;                                     /* DX (xs_sz) */
    p->o_col = p->o_dxp + p->xs_sz;                                 /* wg (k, groups, M, SH_DXR) */
    p->o_dw = p->o_col + round16((size_t)sh_dx_groups(d) * p->M * SH_DXR);
    p->o_db = p->o_dw + round16((size_t)p->M * p->K);              /* dw partial (M, K) */
    p->o_dy = p->o_db + round16((size_t)p->M * DP_VL);             /* dbv (M, VL) */
    p->per_chunk = p->o_dy + (p->mv ? round16((size_t)p->G * p->PV * DP_VL * p->M) : 0); /* dT (G, PV*16, M) */
}

static void bwd_sh(const dp_conv2d_dims *d, const conv_plan *pl, int s0, int s1, const float *x, const float *w,
                   const float *dy, float *dx, float *cw) {
    const size_t in_sz = (size_t)d->in_c * d->in_h * d->in_w, out_sz = (size_t)pl->M * pl->P;
    float *X = cw + pl->o_xp, *DX = cw + pl->o_dxp, *wg = cw + pl->o_col, *dwp = cw + pl->o_dw;
    memset(dwp, 0, sizeof(float) * (size_t)pl->M * pl->K);
    if (dx) sh_pack_dx(d, pl, w, wg);
    for (int s = s0; s < s1; s += pl->G) {
        const int ns = s1 - s < pl->G ? s1 - s : pl->G;
        for (int i = 0; i < ns; i++) sh_build(d, pl, x + (s + i) * in_sz, X + i * pl->xs_sz);
        if (pl->mv) {
            float *dT = cw + pl->o_dy;
            const size_t dts = (size_t)pl->PV * DP_VL * pl->M;
            for (int i = 0; i < ns; i++) sh_transpose_dy(pl, dy + (s + i) * out_sz, dT + i * dts);
            sh_dw_m(d, pl, ns, X, pl->xs_sz, dT, dts, dwp);
        } else {
            sh_dw(d, pl, ns, dy + s * out_sz, X, pl->xs_sz, dwp);
        }
        if (dx)
            for (int i = 0; i < ns; i++) sh_dx(d, pl, wg, dy + (s + i) * out_sz, DX, dx + (s + i) * in_sz);
    }
}
#endif

/* ---------------------------------------------------------------- direct path: GEMM drivers */

/* C (M, P) = A (M, K) B (K, ldb) + bias; B has ldb >= P rounded up to NB readable columns. */
static void gemm_nn(int M, int K, int P, const float *A, const float *B, int ldb, const float *bias, float *C) {
    float tmp[MRF * NB];
    for (int p0 = 0; p0 < P; p0 += NB) {
        const int full = p0 + NB <= P;
        for (int m0 = 0; m0 < M; m0 += MRF) {
            const int R = M - m0 < MRF ? M - m0 : MRF;
            float *dst = full ? C + (size_t)m0 * P + p0 : tmp;
            const int ldc = full ? P : NB;
            const float *a = A + (size_t)m0 * K, *bb = bias ? bias + m0 : NULL;
#define NN_CALL(r) tile_nn(r, K, a, K, B + p0, ldb, bb, dst, ldc)
            SWITCH6(R, NN_CALL)
#undef NN_CALL
            if (!full)
                for (int i = 0; i < R; i++)
                    for (int q = 0; q < P - p0; q++) C[(size_t)(m0 + i) * P + p0 + q] = tmp[i * NB + q];
        }
    }
}

/* ys (M, P) = conv of the padded sample xp, stride 1. Vector v covers output row v / (OWr/VL),
 * columns from (v % (OWr/VL)) * VL; lanes past out_w are computed and dropped. */
static void fwd_implicit(const dp_conv2d_dims *d, const conv_plan *pl, const float *xp, const float *w,
                         const float *b, float *ys) {
    const int M = pl->M, K = pl->K, P = pl->P, OW = d->out_w, Wp = pl->Wp, NV = pl->NV, nvr = pl->OWr / DP_VL;
    const size_t plane = (size_t)pl->Hp * Wp;
    float tmp[2 * MRF * DP_VL];
    for (int v = 0; v < NV; v += 2) {
        const int two = v + 1 < NV, v1 = two ? v + 1 : v; /* odd count: the last one twice */
        const int oh0 = v / nvr, ow0 = v % nvr * DP_VL, oh1 = v1 / nvr, ow1 = v1 % nvr * DP_VL;
        const int n0 = OW - ow0 < DP_VL ? OW - ow0 : DP_VL, n1 = !two ? 0 : OW - ow1 < DP_VL ? OW - ow1 : DP_VL;
        const int whole = n0 == DP_VL && n1 == DP_VL;
        const float *x0 = xp + (size_t)oh0 * Wp + ow0, *x1 = xp + (size_t)oh1 * Wp + ow1;
        const size_t y0 = (size_t)oh0 * OW + ow0, y1 = (size_t)oh1 * OW + ow1;
        for (int m0 = 0; m0 < M; m0 += MRF) {
            const int R = M - m0 < MRF ? M - m0 : MRF;
            const float *a = w + (size_t)m0 * K, *bb = b ? b + m0 : NULL;
            float *ym = ys + (size_t)m0 * P;
            float *c0 = whole ? ym + y0 : tmp, *c1 = whole ? ym + y1 : tmp + MRF * DP_VL;
            const int ldc = whole ? P : DP_VL;
#define NNX_CALL(r) tile_nn_x(r, d->in_c, d->k, plane, Wp, x0, x1, a, K, bb, c0, c1, ldc)
            SWITCH6(R, NNX_CALL)
#undef NNX_CALL
            if (!whole)
                for (int i = 0; i < R; i++) {
                    memcpy(ym + (size_t)i * P + y0, tmp + i * DP_VL, sizeof(float) * n0);
                    if (n1) memcpy(ym + (size_t)i * P + y1, tmp + (MRF + i) * DP_VL, sizeof(float) * n1);
                }
        }
    }
}

/* dwv (M, K, VL) += lane-wise gradient of one sample from its im2col col (K, ld) and dy g (M, ldg). */
static void dw_explicit(const conv_plan *pl, const float *g, int ldg, const float *col, float *dwv) {
    const int M = pl->M, K = pl->K, n = (pl->P + DP_VL - 1) / DP_VL * DP_VL;
    for (int k0 = 0; k0 < K; k0 += KRW) {
        const int KR = K - k0 < KRW ? K - k0 : KRW;
        const float *xo[KRW];
        for (int j = 0; j < KRW; j++) xo[j] = col + (size_t)(k0 + (j < KR ? j : 0)) * pl->ld;
        for (int m0 = 0; m0 < M; m0 += MRW) {
            const float *a = g + (size_t)m0 * ldg;
            float *cv = dwv + ((size_t)m0 * K + k0) * DP_VL;
#define DW_CALL(mr, kr) tile_dw(mr, kr, 1, 0, 0, 1, n, 0, a, ldg, xo, cv, K)
#define DW_K(mr) SWITCH6(KR, DW_K_##mr)
#define DW_K_1(kr) DW_CALL(1, kr)
#define DW_K_2(kr) DW_CALL(2, kr)
            if (M - m0 >= 2) DW_K(2) else DW_K(1)
#undef DW_K_2
#undef DW_K_1
#undef DW_K
#undef DW_CALL
        }
    }
}

/* dwv (M, K, VL) += lane-wise gradient of ns samples (stride 1): sample s's padded input at
 * xp + s*xs, its dy (M, out_h, OWr) at g + s*gs. */
static void dw_implicit(const dp_conv2d_dims *d, const conv_plan *pl, int ns, const float *g, size_t gs,
                        const float *xp, size_t xs, float *dwv) {
    /* rows of dy are OWr long (zero past out_w): P here is the padded count */
    const int M = pl->M, K = pl->K, P = pl->NV * DP_VL, k = d->k, OH = d->out_h, OW = pl->OWr, Wp = pl->Wp;
    const size_t plane = (size_t)pl->Hp * Wp;
    for (int c = 0; c < d->in_c; c++)
        for (int kh = 0; kh < k; kh++)
            for (int kw0 = 0; kw0 < k; kw0 += 6) {
                const int KR = k - kw0 < 6 ? k - kw0 : 6, kk0 = (c * k + kh) * k + kw0, MRX = DW_MR[KR];
                const float *xb = xp + c * plane + (size_t)kh * Wp + kw0;
                for (int m0 = 0; m0 < M; m0 += MRX) {
                    const int MR = M - m0 < MRX ? M - m0 : MRX;
                    const float *a = g + (size_t)m0 * P;
                    float *cv = dwv + ((size_t)m0 * K + kk0) * DP_VL;
#define DWX(mr, kr)                                                          \
    case kr * 8 + mr:                                                        \
        tile_dw_x(mr, kr, ns, gs, xs, OH, OW, Wp, a, P, xb, cv, K); \
        break;
                    switch (KR * 8 + MR) {
                        DWX(1, 1) DWX(2, 1) DWX(3, 1) DWX(4, 1)
                        DWX(1, 2) DWX(2, 2) DWX(3, 2) DWX(4, 2)
                        DWX(1, 3) DWX(2, 3) DWX(3, 3)
                        DWX(1, 4) DWX(2, 4) DWX(3, 4)
                        DWX(1, 5) DWX(2, 5)
                        DWX(1, 6) DWX(2, 6)
                    default: break;
                    }
#undef DWX
                }
            }
}

/* C (K, ldc) = A^T D: A (M, K), D (M, ldd) with P rounded up to NB readable columns. */
static void gemm_tn(int M, int K, int P, const float *A, const float *D, int ldd, float *C, int ldc) {
    for (int p0 = 0; p0 < P; p0 += NB) {
        for (int k0 = 0; k0 < K; k0 += MRF) {
            const int R = K - k0 < MRF ? K - k0 : MRF;
#define TN_CALL(r) tile_tn(r, M, A + k0, K, D + p0, ldd, C + (size_t)k0 * ldc + p0, ldc)
            SWITCH6(R, TN_CALL)
#undef TN_CALL
        }
    }
}

/* Wg (groups, M, MRF): the weights of each group's rows, so a tile broadcasts from one place. */
static void pack_dx_weights(const dp_conv2d_dims *d, const conv_plan *pl, const float *w, float *wg) {
    const int k = d->k, nq = d->in_c * k, per = (nq + MRF - 1) / MRF;
    for (int kw = 0; kw < k; kw++)
        for (int gi = 0; gi < per; gi++) {
            float *dst = wg + (size_t)(kw * per + gi) * pl->M * MRF;
            for (int m = 0; m < pl->M; m++)
                for (int j = 0; j < MRF; j++) {
                    const int q = gi * MRF + j;
                    dst[m * MRF + j] = q < nq ? w[(size_t)m * pl->K + (size_t)q * k + kw] : 0.0f;
                }
        }
}

/* dxp (in_c, Hp, Wp) = the input gradient of one sample with dy g (M, out_h, OWr), stride 1.
 * Lanes past out_w hold zero gradients: they add 0 to the padding (or the slack) of dxp, which
 * is the padded buffer whenever such lanes exist (rowpad implies copy_x). */
static void dx_implicit(const dp_conv2d_dims *d, const conv_plan *pl, const float *wg, const float *g, float *dxp) {
    const int M = pl->M, ldg = pl->NV * DP_VL, Wp = pl->Wp, k = d->k, nq = d->in_c * k, NV = pl->NV;
    const int per = (nq + MRF - 1) / MRF, nvr = pl->OWr / DP_VL;
    const size_t plane = (size_t)pl->Hp * Wp;
    memset(dxp, 0, sizeof(float) * (pl->copy_x ? pl->pin : (size_t)d->in_c * d->in_h * d->in_w));
    for (int kw = 0; kw < k; kw++)
        for (int gi = 0; gi < per; gi++) {
            const int q0 = gi * MRF, R = nq - q0 < MRF ? nq - q0 : MRF;
            size_t off[MRF];
            for (int j = 0; j < R; j++) off[j] = (size_t)(q0 + j) / k * plane + (size_t)((q0 + j) % k) * Wp + kw;
            const float *wgg = wg + (size_t)(kw * per + gi) * M * MRF;
            for (int v = 0; v < NV; v += 2) {
                const int two = v + 1 < NV, v1 = two ? v + 1 : v;
                float *x0 = dxp + (size_t)(v / nvr) * Wp + v % nvr * DP_VL;
                float *x1 = dxp + (size_t)(v1 / nvr) * Wp + v1 % nvr * DP_VL;
#define DX_CALL(r) tile_dx(r, M, wgg, g + v * DP_VL, g + v1 * DP_VL, ldg, x0, x1, off, two)
                SWITCH6(R, DX_CALL)
#undef DX_CALL
            }
        }
}

/* ---------------------------------------------------------------- direct path: per chunk */

static void fwd_direct(const dp_conv2d_dims *d, const conv_plan *pl, int s0, int s1, const float *x,
                       const float *w, const float *b, float *y, float *cw) {
    const size_t in_sz = (size_t)d->in_c * d->in_h * d->in_w, out_sz = (size_t)pl->M * pl->P;
    float *xp = cw + pl->o_xp, *col = cw + pl->o_col; /* (pin), (K, ld) */
#if DP_VL == 16
    if (pl->sh) {
        for (int s = s0; s < s1; s++) {
            sh_build(d, pl, x + s * in_sz, xp);
            sh_forward(d, pl, xp, w, b, y + s * out_sz);
        }
        return;
    }
#endif
    if (pl->copy_x) memset(xp, 0, sizeof(float) * pl->pin); /* border and slack stay zero */
    for (int s = s0; s < s1; s++) {
        const float *xs = pad_input(d, pl, x + s * in_sz, xp);
        if (pl->implicit) {
            fwd_implicit(d, pl, xs, w, b, y + s * out_sz);
        } else {
            im2col(d, pl, xs, col, pl->ld, pl->ld);
            gemm_nn(pl->M, pl->K, pl->P, w, col, pl->ld, b, y + s * out_sz);
        }
    }
}

/* dyr (M, out_h, OWr) = g (M, out_h, out_w) with zeros past out_w. */
static void pad_rows(const dp_conv2d_dims *d, const conv_plan *pl, const float *g, float *dyr) {
    const int OW = d->out_w, OWr = pl->OWr;
    for (int r = 0; r < pl->M * d->out_h; r++) {
        memcpy(dyr + (size_t)r * OWr, g + (size_t)r * OW, sizeof(float) * OW);
        for (int q = OW; q < OWr; q++) dyr[(size_t)r * OWr + q] = 0.0f;
    }
}

static void bwd_implicit(const dp_conv2d_dims *d, const conv_plan *pl, int s0, int s1, const float *x,
                         const float *w, const float *dy, float *dx, float *cw) {
    const size_t in_sz = (size_t)d->in_c * d->in_h * d->in_w, out_sz = (size_t)pl->M * pl->P;
    const size_t dyr_sz = (size_t)pl->M * pl->NV * DP_VL;
    float *xp = cw + pl->o_xp, *dxp = cw + pl->o_dxp, *wg = cw + pl->o_col, *dyr = cw + pl->o_dy;
    float *dwv = cw + pl->o_dw;
    if (dx) pack_dx_weights(d, pl, w, wg);
    if (pl->copy_x) memset(xp, 0, sizeof(float) * pl->pin * pl->G); /* borders and slack stay zero */
    /* dw over groups of samples (their inputs and gradients stay in L1), then dx per sample */
    for (int s = s0; s < s1; s += pl->G) {
        const int ns = s1 - s < pl->G ? s1 - s : pl->G;
        const float *xs = x + s * in_sz, *g = dy + s * out_sz;
        if (pl->copy_x) {
            for (int i = 0; i < ns; i++) pad_input(d, pl, x + (s + i) * in_sz, xp + i * pl->pin);
            xs = xp;
        }
        if (pl->rowpad) {
            for (int i = 0; i < ns; i++) pad_rows(d, pl, dy + (s + i) * out_sz, dyr + i * dyr_sz);
            g = dyr;
        }
        dw_implicit(d, pl, ns, g, dyr_sz, xs, pl->copy_x ? pl->pin : in_sz, dwv);
        if (dx)
            for (int i = 0; i < ns; i++) {
                float *dxs = dx + (s + i) * in_sz;
                dx_implicit(d, pl, wg, g + i * dyr_sz, pl->copy_x ? dxp : dxs);
                if (pl->copy_x) unpad(d, pl, dxp, dxs);
            }
    }
}

static void bwd_direct(const dp_conv2d_dims *d, const conv_plan *pl, int s0, int s1, const float *x,
                       const float *w, const float *dy, float *dx, int want_db, float *cw) {
    const int M = pl->M, K = pl->K, P = pl->P, ld = pl->ld;
    const size_t in_sz = (size_t)d->in_c * d->in_h * d->in_w, out_sz = (size_t)M * P;
    float *xp = cw + pl->o_xp, *dxp = cw + pl->o_dxp, *col = cw + pl->o_col, *dyp = cw + pl->o_dy;
    float *dwv = cw + pl->o_dw, *dbv = cw + pl->o_db;
    if (!pl->sh) memset(dwv, 0, sizeof(float) * (size_t)M * K * DP_VL); /* sh: partials of its own */
    memset(dbv, 0, sizeof(float) * (size_t)M * DP_VL);
    if (want_db)
        for (int s = s0; s < s1; s++)
            for (int m = 0; m < M; m++) {
                const float *gm = dy + s * out_sz + (size_t)m * P;
                dp_vf acc = DP_VLOAD(dbv + (size_t)m * DP_VL);
                int q = 0;
                for (; q + DP_VL <= P; q += DP_VL) acc += DP_VLOAD(gm + q);
                for (; q < P; q++) acc[q % DP_VL] += gm[q];
                DP_VSTORE(dbv + (size_t)m * DP_VL, acc);
            }
#if DP_VL == 16
    if (pl->sh) {
        bwd_sh(d, pl, s0, s1, x, w, dy, dx, cw);
        return;
    }
#endif
    if (pl->implicit) {
        bwd_implicit(d, pl, s0, s1, x, w, dy, dx, cw);
        return;
    }
    if (pl->copy_x) memset(xp, 0, sizeof(float) * pl->pin);
    for (int s = s0; s < s1; s++) {
        const float *g = dy + s * out_sz; /* (M, P) */
        int ldg = P;
        if (P % NB) { /* the tiles read whole NB-column blocks: pad the rows with zeros */
            for (int m = 0; m < M; m++) {
                memcpy(dyp + (size_t)m * ld, g + (size_t)m * P, sizeof(float) * P);
                for (int q = P; q < ld; q++) dyp[(size_t)m * ld + q] = 0.0f;
            }
            g = dyp, ldg = ld;
        }
        im2col(d, pl, pad_input(d, pl, x + s * in_sz, xp), col, ld, ld);
        dw_explicit(pl, g, ldg, col, dwv);
        if (dx) {
            gemm_tn(M, K, P, w, g, ldg, col, ld); /* dcol; col is free again */
            float *dxs = dx + s * in_sz;
            col2im(d, pl, col, ld, pl->copy_x ? dxp : dxs);
            if (pl->copy_x) unpad(d, pl, dxp, dxs);
        }
    }
}

/* ---------------------------------------------------------------- blas path */

static void fwd_blas(const dp_conv2d_dims *d, const conv_plan *pl, int s0, int s1, const float *x, const float *w,
                     const float *b, float *y, float *cw) {
    const int M = pl->M, K = pl->K, P = pl->P;
    const size_t in_sz = (size_t)d->in_c * d->in_h * d->in_w, out_sz = (size_t)M * P;
    float *xp = cw + pl->o_xp, *col = cw + pl->o_col, *yb = cw + pl->o_dy;
    if (pl->copy_x) memset(xp, 0, sizeof(float) * pl->pin);
    for (int g0 = s0; g0 < s1; g0 += pl->G) {
        const int g = s1 - g0 < pl->G ? s1 - g0 : pl->G, N = g * P;
        for (int i = 0; i < g; i++)
            im2col(d, pl, pad_input(d, pl, x + (g0 + i) * in_sz, xp), col + (size_t)i * P, N, 0);
        if (g == 1) {
            float *ys = y + g0 * out_sz;
            for (int m = 0; m < M; m++)
                for (int q = 0; q < P; q++) ys[(size_t)m * P + q] = b ? b[m] : 0.0f;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, P, K, 1.0f, w, K, col, N, 1.0f, ys, P);
        } else {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, w, K, col, N, 0.0f, yb, N);
            for (int i = 0; i < g; i++)
                for (int m = 0; m < M; m++) {
                    float *dst = y + (g0 + i) * out_sz + (size_t)m * P;
                    const float *src = yb + (size_t)m * N + (size_t)i * P;
                    const float bm = b ? b[m] : 0.0f;
                    for (int q = 0; q < P; q++) dst[q] = src[q] + bm;
                }
        }
    }
}

/* dwt (M, K) and dbt (M) accumulate (+=). */
static void bwd_blas(const dp_conv2d_dims *d, const conv_plan *pl, int s0, int s1, const float *x, const float *w,
                     const float *dy, float *dx, float *dwt, float *dbt, float *cw) {
    const int M = pl->M, K = pl->K, P = pl->P;
    const size_t in_sz = (size_t)d->in_c * d->in_h * d->in_w, out_sz = (size_t)M * P;
    float *xp = cw + pl->o_xp, *dxp = cw + pl->o_dxp, *col = cw + pl->o_col, *yb = cw + pl->o_dy;
    if (pl->copy_x) memset(xp, 0, sizeof(float) * pl->pin);
    for (int g0 = s0; g0 < s1; g0 += pl->G) {
        const int g = s1 - g0 < pl->G ? s1 - g0 : pl->G, N = g * P;
        for (int i = 0; i < g; i++)
            im2col(d, pl, pad_input(d, pl, x + (g0 + i) * in_sz, xp), col + (size_t)i * P, N, 0);
        const float *gy = dy + g0 * out_sz; /* (M, N) */
        if (g > 1) {
            for (int i = 0; i < g; i++)
                for (int m = 0; m < M; m++)
                    memcpy(yb + (size_t)m * N + (size_t)i * P, dy + (g0 + i) * out_sz + (size_t)m * P,
                           sizeof(float) * P);
            gy = yb;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, K, N, 1.0f, gy, N, col, N, 1.0f, dwt, K);
        if (dbt)
            for (int m = 0; m < M; m++) {
                float acc = 0.0f;
                for (int q = 0; q < N; q++) acc += gy[(size_t)m * N + q];
                dbt[m] += acc;
            }
        if (dx) {
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, N, M, 1.0f, w, K, gy, N, 0.0f, col, N);
            for (int i = 0; i < g; i++) {
                float *dxs = dx + (g0 + i) * in_sz;
                col2im(d, pl, col + (size_t)i * P, N, pl->copy_x ? dxp : dxs);
                if (pl->copy_x) unpad(d, pl, dxp, dxs);
            }
        }
    }
}

/* ---------------------------------------------------------------- entry points */

void conv2d_forward_cpu(const dp_conv2d_dims *d, int batch, const float *x, const float *w, const float *b,
                        float *y, float *ws, int nthreads) {
    if (batch <= 0) return;
    const conv_plan pl = make_plan(d);
    const int nc = dp_nchunks(batch, nthreads);
    if (nc == 1) {
        if (pl.direct) fwd_direct(d, &pl, 0, batch, x, w, b, y, ws);
        else fwd_blas(d, &pl, 0, batch, x, w, b, y, ws);
        return;
    }
#pragma omp parallel for num_threads(nc) schedule(static)
    for (int c = 0; c < nc; c++) {
        int lo, hi;
        dp_chunk(batch, nc, c, &lo, &hi);
        float *cw = ws + (size_t)c * pl.per_chunk;
        if (pl.direct) fwd_direct(d, &pl, lo, hi, x, w, b, y, cw);
        else fwd_blas(d, &pl, lo, hi, x, w, b, y, cw);
    }
}

static void bwd_chunk(const dp_conv2d_dims *d, const conv_plan *pl, int batch, int nc, int c, const float *x,
                      const float *w, const float *dy, float *dx, float *dw, float *db, float *ws) {
    int lo, hi;
    dp_chunk(batch, nc, c, &lo, &hi);
    float *cw = ws + (size_t)c * pl->per_chunk;
    if (pl->direct) {
        bwd_direct(d, pl, lo, hi, x, w, dy, dx, db != NULL, cw);
        return;
    }
    /* chunk 0 accumulates straight into dw / db, the others into zeroed partials */
    float *dwt = dw, *dbt = db;
    if (c > 0) {
        dwt = cw + pl->o_dw, dbt = db ? cw + pl->o_db : NULL;
        memset(dwt, 0, sizeof(float) * (size_t)pl->M * pl->K);
        if (dbt) memset(dbt, 0, sizeof(float) * (size_t)pl->M);
    }
    bwd_blas(d, pl, lo, hi, x, w, dy, dx, dwt, dbt, cw);
}

#if DP_VL == 16
/* out[i] += the lanes of the vector partials p[i] summed over the nc chunks (chunk order), i < n. */
static void lanes16(const conv_plan *pl, int nc, const float *p, size_t n, float *out) {
    __m512 v[16];
    for (size_t i = 0; i < 16; i++) {
        if (i >= n) {
            v[i] = _mm512_setzero_ps();
            continue;
        }
        v[i] = _mm512_loadu_ps(p + i * DP_VL);
        for (int c = 1; c < nc; c++) v[i] = _mm512_add_ps(v[i], _mm512_loadu_ps(p + i * DP_VL + (size_t)c * pl->per_chunk));
    }
    const __mmask16 m = dp_lane_mask(0, (int)n);
    _mm512_mask_storeu_ps(out, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, out), dp_sum16(v)));
}
#endif

/* Part r of nr of the sum of the chunks' weight gradients into dw (and, part 0, db): each
 * element in chunk order, so the result does not depend on which thread adds it. */
static void reduce_part(const conv_plan *pl, int nc, int r, int nr, const float *ws, float *dw, float *db) {
    const size_t nw = (size_t)pl->M * pl->K;
    const size_t lo = nw * r / nr, hi = nw * (r + 1) / nr;
    if (pl->direct) { /* vector partials: add the chunks lane-wise, then the lanes */
#if DP_VL == 16
        /* 16 elements at a time, each element's lanes with dp_sum16's tree (zeros pad the last
           block: every element is summed the same way wherever the parts start) */
        if (pl->sh) /* the chunks' partials (M, K), added in chunk order */
            for (size_t e = lo; e < hi; e++) {
                const float *pw = ws + pl->o_dw + e;
                float acc = pw[0];
                for (int c = 1; c < nc; c++) acc += pw[(size_t)c * pl->per_chunk];
                dw[e] += acc;
            }
        else
            for (size_t e0 = lo; e0 < hi; e0 += 16) {
                const size_t n = hi - e0 < 16 ? hi - e0 : 16;
                lanes16(pl, nc, ws + pl->o_dw + e0 * DP_VL, n, dw + e0);
            }
        if (db && r == 0)
            for (int m0 = 0; m0 < pl->M; m0 += 16) {
                const int n = pl->M - m0 < 16 ? pl->M - m0 : 16;
                lanes16(pl, nc, ws + pl->o_db + (size_t)m0 * DP_VL, (size_t)n, db + m0);
            }
        return;
#endif
        for (size_t e = lo; e < hi; e++) {
            const float *pw = ws + pl->o_dw + e * DP_VL;
            dp_vf v = DP_VLOAD(pw);
            for (int c = 1; c < nc; c++) v += DP_VLOAD(pw + (size_t)c * pl->per_chunk);
            double acc = 0.0;
            for (int l = 0; l < DP_VL; l++) acc += v[l];
            dw[e] += (float)acc;
        }
        if (db && r == 0)
            for (int m = 0; m < pl->M; m++) {
                const float *pb = ws + pl->o_db + (size_t)m * DP_VL;
                dp_vf v = DP_VLOAD(pb);
                for (int c = 1; c < nc; c++) v += DP_VLOAD(pb + (size_t)c * pl->per_chunk);
                double acc = 0.0;
                for (int l = 0; l < DP_VL; l++) acc += v[l];
                db[m] += (float)acc;
            }
        return;
    }
    for (int c = 1; c < nc; c++) { /* blas: chunk 0 already added itself */
        const float *pw = ws + (size_t)c * pl->per_chunk + pl->o_dw, *pb = ws + (size_t)c * pl->per_chunk + pl->o_db;
        for (size_t e = lo; e < hi; e++) dw[e] += pw[e];
        if (db && r == 0)
            for (int m = 0; m < pl->M; m++) db[m] += pb[m];
    }
}

void conv2d_backward_cpu(const dp_conv2d_dims *d, int batch, const float *x, const float *w, const float *dy,
                         float *dx, float *dw, float *db, float *ws, int nthreads) {
    if (batch <= 0) return;
    const conv_plan pl = make_plan(d);
    const int nc = dp_nchunks(batch, nthreads);
    if (nc == 1) {
        bwd_chunk(d, &pl, batch, 1, 0, x, w, dy, dx, dw, db, ws);
        if (pl.direct) reduce_part(&pl, 1, 0, 1, ws, dw, db);
        return;
    }
    /* one parallel region: the chunks, a barrier, then the sum of their partials */
#pragma omp parallel num_threads(nc)
    {
#pragma omp for schedule(static)
        for (int c = 0; c < nc; c++) bwd_chunk(d, &pl, batch, nc, c, x, w, dy, dx, dw, db, ws);
#pragma omp for schedule(static)
        for (int r = 0; r < nc; r++) reduce_part(&pl, nc, r, nc, ws, dw, db);
    }
}
