/* linear.c: fully connected layer on single-threaded OpenBLAS GEMMs (the x86-64-v4 variant: its
 * own AVX-512 tiles). Threads split the batch for y and dx, and the output features for dw and db,
 * so no partial sums are needed and every gradient element is summed over the batch in the same
 * order whatever the thread count. */
#include "kernels/cpu/variant.h" /* first: renames this variant's functions */
#include "kernels/cpu/linear.h"

#include <cblas.h>

#include "kernels/cpu/cpu_common.h"

/* Below this many multiply-adds a thread fork costs more than it saves. */
#define LINEAR_MIN_MACS_PER_THREAD 65536

static int linear_threads(int batch, int in_f, int out_f, int nthreads) {
    const double macs = (double)batch * in_f * out_f;
    int nt = nthreads;
    if (macs / LINEAR_MIN_MACS_PER_THREAD < nt) nt = (int)(macs / LINEAR_MIN_MACS_PER_THREAD);
    if (nt > batch) nt = batch;
    return nt < 1 ? 1 : nt;
}

#if DP_VL == 16
/* x86-64-v4: small GEMMs of its own instead of OpenBLAS's (which packs the weights on every call,
 * a large share of the work at a lane's batch of 8). Vectors run along in_f, the rows of x, W and
 * dx; the last vector of a row is loaded and stored with a mask. */
#define AI static inline __attribute__((always_inline))
#define LNB 4 /* forward tile: LNB samples x LOB outputs = 16 dot products, summed by dp_sum16 */
#define LOB 4
#define LIV 3 /* backward tiles: 8 rows (samples or outputs) x LIV vectors of in_f */

/* y[n][o] = b[o] + x[n] . w[o] for n < NB, o < OB: lane partials along in_f, then dp_sum16's tree. */
AI void lin_fwd_tile(const int NB, const int OB, int in_f, const float *x, const float *w, const float *b, float *y,
                     int out_f) {
    __m512 c[LNB * LOB];
#pragma GCC unroll 16
    for (int e = 0; e < LNB * LOB; e++) c[e] = _mm512_setzero_ps();
    for (int i = 0; i < in_f; i += DP_VL) {
        const __mmask16 m = dp_lane_mask(0, in_f - i);
        __m512 xv[LNB], wv[LOB];
#pragma GCC unroll 4
        for (int n = 0; n < NB; n++) xv[n] = _mm512_maskz_loadu_ps(m, x + (size_t)n * in_f + i);
#pragma GCC unroll 4
        for (int o = 0; o < OB; o++) wv[o] = _mm512_maskz_loadu_ps(m, w + (size_t)o * in_f + i);
#pragma GCC unroll 4
        for (int n = 0; n < NB; n++)
#pragma GCC unroll 4
            for (int o = 0; o < OB; o++) c[n * LOB + o] = _mm512_fmadd_ps(xv[n], wv[o], c[n * LOB + o]);
    }
    float s[16];
    _mm512_storeu_ps(s, dp_sum16(c));
    for (int n = 0; n < NB; n++)
        for (int o = 0; o < OB; o++) y[(size_t)n * out_f + o] = (b ? b[o] : 0.0f) + s[n * LOB + o];
}

static void fwd_rows(int lo, int hi, int in_f, int out_f, const float *x, const float *w, const float *b, float *y) {
    for (int n0 = lo; n0 < hi; n0 += LNB) {
        const int NB = hi - n0 < LNB ? hi - n0 : LNB;
        for (int o0 = 0; o0 < out_f; o0 += LOB) {
            const int OB = out_f - o0 < LOB ? out_f - o0 : LOB;
            const float *xn = x + (size_t)n0 * in_f, *wo = w + (size_t)o0 * in_f, *bo = b ? b + o0 : NULL;
            float *yo = y + (size_t)n0 * out_f + o0;
#define LF(nb, ob) lin_fwd_tile(nb, ob, in_f, xn, wo, bo, yo, out_f)
#define LF_OB(nb)                  \
    switch (OB) {                  \
    case 4: LF(nb, 4); break;      \
    case 3: LF(nb, 3); break;      \
    case 2: LF(nb, 2); break;      \
    default: LF(nb, 1); break;     \
    }
            switch (NB) {
            case 4: LF_OB(4) break;
            case 3: LF_OB(3) break;
            case 2: LF_OB(2) break;
            default: LF_OB(1) break;
            }
#undef LF_OB
#undef LF
        }
    }
}

/* C[r][i0 ..] (add: +=) = the sum over t < T, in order, of A[t][r] B[t][i0 ..] for rows r < R and
 * NV vectors of in_f from i0; A[t][r] is at A + t*lda + r*ars. dx: t = output, r = sample, B = W;
 * dw: t = sample, r = output, B = x (the sum over the samples in sample order). */
AI void lin_rows_tile(const int R, const int NV, int T, const float *A, int lda, int ars, const float *B, int ldb,
                      int i0, int in_f, float *C, int ldc, int add) {
    __m512 c[8][LIV];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 3
        for (int j = 0; j < NV; j++) c[r][j] = _mm512_setzero_ps();
    __mmask16 mk[LIV];
#pragma GCC unroll 3
    for (int j = 0; j < NV; j++) mk[j] = dp_lane_mask(0, in_f - i0 - j * DP_VL);
    for (int t = 0; t < T; t++) {
        __m512 bv[LIV];
#pragma GCC unroll 3
        for (int j = 0; j < NV; j++) bv[j] = _mm512_maskz_loadu_ps(mk[j], B + (size_t)t * ldb + i0 + j * DP_VL);
        const float *at = A + (size_t)t * lda;
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const __m512 a = _mm512_set1_ps(at[(size_t)r * ars]);
#pragma GCC unroll 3
            for (int j = 0; j < NV; j++) c[r][j] = _mm512_fmadd_ps(a, bv[j], c[r][j]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 3
        for (int j = 0; j < NV; j++) {
            float *dst = C + (size_t)r * ldc + i0 + j * DP_VL;
            const __m512 v = add ? _mm512_add_ps(_mm512_maskz_loadu_ps(mk[j], dst), c[r][j]) : c[r][j];
            _mm512_mask_storeu_ps(dst, mk[j], v);
        }
}

/* C rows [0, R) (R <= 8 at a time): see lin_rows_tile. */
static void lin_rows(int R, int T, const float *A, int lda, int ars, const float *B, int ldb, int in_f, float *C,
                     int ldc, int add) {
    for (int r0 = 0; r0 < R; r0 += 8) {
        const int RR = R - r0 < 8 ? R - r0 : 8;
        const float *a = A + (size_t)r0 * ars;
        float *c = C + (size_t)r0 * ldc;
        for (int i0 = 0; i0 < in_f; i0 += LIV * DP_VL) {
            const int left = (in_f - i0 + DP_VL - 1) / DP_VL, NV = left < LIV ? left : LIV;
#define LR(r, nv) lin_rows_tile(r, nv, T, a, lda, ars, B, ldb, i0, in_f, c, ldc, add)
#define LR_NV(r)                \
    switch (NV) {               \
    case 3: LR(r, 3); break;    \
    case 2: LR(r, 2); break;    \
    default: LR(r, 1); break;   \
    }
            switch (RR) {
            case 8: LR_NV(8) break;
            case 7: LR_NV(7) break;
            case 6: LR_NV(6) break;
            case 5: LR_NV(5) break;
            case 4: LR_NV(4) break;
            case 3: LR_NV(3) break;
            case 2: LR_NV(2) break;
            default: LR_NV(1) break;
            }
#undef LR_NV
#undef LR
        }
    }
}
#else
static void fwd_rows(int lo, int hi, int in_f, int out_f, const float *x, const float *w, const float *b, float *y) {
    if (hi <= lo) return;
    float *yr = y + (size_t)lo * out_f; /* (hi - lo, out_f) */
    if (b)
        for (int n = 0; n < hi - lo; n++)
            for (int o = 0; o < out_f; o++) yr[(size_t)n * out_f + o] = b[o];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, hi - lo, out_f, in_f, 1.0f, x + (size_t)lo * in_f, in_f, w,
                in_f, b ? 1.0f : 0.0f, yr, out_f);
}
#endif

void linear_forward_cpu(int batch, int in_f, int out_f, const float *x, const float *w, const float *b, float *y,
                        int nthreads) {
    if (batch <= 0 || out_f <= 0) return;
    const int nt = linear_threads(batch, in_f, out_f, nthreads);
    if (nt == 1) {
        fwd_rows(0, batch, in_f, out_f, x, w, b, y);
        return;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int c = 0; c < nt; c++) {
        int lo, hi;
        dp_chunk(batch, nt, c, &lo, &hi);
        fwd_rows(lo, hi, in_f, out_f, x, w, b, y);
    }
}

/* Chunk c of nt: dx rows of its batch chunk, dw / db rows of its output-feature chunk. */
static void bwd_chunk(int batch, int in_f, int out_f, int nt, int c, const float *x, const float *w, const float *dy,
                      float *dx, float *dw, float *db) {
    int lo, hi;
    dp_chunk(batch, nt, c, &lo, &hi);
#if DP_VL == 16
    /* dx[n] = sum over o of dy[n][o] W[o]; dw[o] += the sum over n, in order, of dy[n][o] x[n] */
    if (dx && hi > lo)
        lin_rows(hi - lo, out_f, dy + (size_t)lo * out_f, 1, out_f, w, in_f, in_f, dx + (size_t)lo * in_f, in_f, 0);
    int o0, o1;
    dp_chunk(out_f, nt, c, &o0, &o1);
    if (o1 <= o0) return;
    lin_rows(o1 - o0, batch, dy + o0, out_f, 1, x, in_f, in_f, dw + (size_t)o0 * in_f, in_f, 1);
#else
    if (dx && hi > lo)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, hi - lo, in_f, out_f, 1.0f, dy + (size_t)lo * out_f,
                    out_f, w, in_f, 0.0f, dx + (size_t)lo * in_f, in_f);
    int o0, o1;
    dp_chunk(out_f, nt, c, &o0, &o1);
    if (o1 <= o0) return;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, o1 - o0, in_f, batch, 1.0f, dy + o0, out_f, x, in_f, 1.0f,
                dw + (size_t)o0 * in_f, in_f);
#endif
    if (db)
        for (int n = 0; n < batch; n++) /* over the batch in order, vectorised over features */
            for (int o = o0; o < o1; o++) db[o] += dy[(size_t)n * out_f + o];
}

void linear_backward_cpu(int batch, int in_f, int out_f, const float *x, const float *w, const float *dy, float *dx,
                         float *dw, float *db, int nthreads) {
    if (batch <= 0 || out_f <= 0 || in_f <= 0) return;
    int nt = linear_threads(batch, in_f, out_f, nthreads);
    if (nt > out_f) nt = out_f;
    if (nt == 1) {
        bwd_chunk(batch, in_f, out_f, 1, 0, x, w, dy, dx, dw, db);
        return;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int c = 0; c < nt; c++) bwd_chunk(batch, in_f, out_f, nt, c, x, w, dy, dx, dw, db);
}
