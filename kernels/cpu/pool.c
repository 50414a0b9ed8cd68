/* pool.c: max and global average pooling. Threads split the (sample, channel) planes; every
 * output depends on one plane only, so results do not depend on the thread count. */
#include "kernels/cpu/variant.h" /* first: renames this variant's functions */
#include "kernels/cpu/pool.h"

#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_common.h"

/* Threads for `planes` planes of `plane` floats each. */
static int plane_threads(int planes, size_t plane, int nthreads) {
    int nt = dp_eltwise_threads((size_t)planes * plane, nthreads);
    return nt > planes ? (planes < 1 ? 1 : planes) : nt;
}

#define PLANES(planes, nt, CALL)                                          \
    do {                                                                  \
        if ((nt) == 1) {                                                  \
            int lo = 0, hi = (planes);                                    \
            CALL;                                                         \
        } else {                                                          \
            _Pragma("omp parallel for num_threads(nt) schedule(static)") \
            for (int t_ = 0; t_ < (nt); t_++) {                           \
                int lo, hi;                                               \
                dp_chunk((planes), (nt), t_, &lo, &hi);                   \
                CALL;                                                     \
            }                                                             \
        }                                                                 \
    } while (0)

/* ---------------------------------------------------------------- max pooling */

/* PyTorch's rule: take v if v > max or v is NaN (so NaN propagates). */
#define TAKE(v, m) ((v) > (m) || (v) != (v))

/* PyTorch's rule, lane-wise: m, k = the max of (m, v) and its index. */
#define VTAKE(VI, m, k, v, kv)                                    \
    do {                                                          \
        const VI t_ = ((v) > (m)) | ((v) != (v));                 \
        (m) = (__typeof__(m))((t_ & (VI)(v)) | (~t_ & (VI)(m)));  \
        (k) = (t_ & (kv)) | (~t_ & (k));                          \
    } while (0)

#if DP_VL == 16
/* AVX-512: the same with a compare into a mask register and a masked move (the generic form
 * above would turn each compare's mask back into a vector first) */
#define VTAKE8(VI, m, k, v, kv)                                                                        \
    do {                                                                                               \
        const __m256 v_ = (__m256)(v);                                                                 \
        const __mmask8 t_ = _mm256_cmp_ps_mask(v_, (__m256)(m), _CMP_GT_OQ) | _mm256_cmp_ps_mask(v_, v_, _CMP_UNORD_Q); \
        (m) = (__typeof__(m))_mm256_mask_mov_ps((__m256)(m), t_, v_);                                  \
        (k) = (VI)_mm256_mask_mov_epi32((__m256i)(k), t_, (__m256i)(kv));                              \
    } while (0)
#define VTAKE4(VI, m, k, v, kv)                                                                        \
    do {                                                                                               \
        const __m128 v_ = (__m128)(v);                                                                 \
        const __mmask8 t_ = _mm_cmp_ps_mask(v_, (__m128)(m), _CMP_GT_OQ) | _mm_cmp_ps_mask(v_, v_, _CMP_UNORD_Q); \
        (m) = (__typeof__(m))_mm_mask_mov_ps((__m128)(m), t_, v_);                                     \
        (k) = (VI)_mm_mask_mov_epi32((__m128i)(k), t_, (__m128i)(kv));                                \
    } while (0)
#else
#define VTAKE8 VTAKE
#define VTAKE4 VTAKE
#endif

/* 2x2 stride 2 on N outputs of a row pair (r0, r1 at the block's first input column; k0 the
 * flat index of r0[0]): forward (y, am) and the block-wise backward (returns 1 if an argmax lies
 * outside its block). Defined for 4 lanes and, with AVX, 8. */
#define DEF_POOL2(N, VF, VI, EV, OD, ZL, ZH, IOTA)                                                         \
    typedef float VF __attribute__((vector_size(N * 4), aligned(4), may_alias));                          \
    typedef int32_t VI __attribute__((vector_size(N * 4), aligned(4), may_alias));                        \
    static inline void pool2_fwd##N(const float *r0, const float *r1, int32_t k0, int w, float *y,        \
                                    int32_t *am) {                                                        \
        const VF p0 = *(const VF *)r0, p1 = *(const VF *)(r0 + N);                                        \
        const VF q0 = *(const VF *)r1, q1 = *(const VF *)(r1 + N);                                        \
        const VI kb = IOTA + k0;                                                                          \
        VF m = EV(p0, p1);                                                                                \
        VI k = kb;                                                                                        \
        VTAKE##N(VI, m, k, OD(p0, p1), kb + 1);                                                           \
        VTAKE##N(VI, m, k, EV(q0, q1), kb + w);                                                           \
        VTAKE##N(VI, m, k, OD(q0, q1), kb + (w + 1));                                                     \
        *(VF *)y = m;                                                                                     \
        *(VI *)am = k;                                                                                    \
    }                                                                                                     \
    static inline int pool2_bwd##N(float *r0, float *r1, int32_t k0, int w, const float *g,               \
                                   const int32_t *am) {                                                   \
        const VI gv = *(const VI *)g, q = *(const VI *)am - (IOTA + k0);                                  \
        const VI e0 = q == 0, e1 = q == 1, e2 = q == w, e3 = q == w + 1;                                  \
        const VI bad = ~(e0 | e1 | e2 | e3);                                                              \
        const VF a = (VF)(gv & e0), b = (VF)(gv & e1), c = (VF)(gv & e2), d = (VF)(gv & e3);              \
        *(VF *)r0 = ZL(a, b);                                                                             \
        *(VF *)(r0 + N) = ZH(a, b);                                                                       \
        *(VF *)r1 = ZL(c, d);                                                                             \
        *(VF *)(r1 + N) = ZH(c, d);                                                                       \
        int any = 0;                                                                                      \
        for (int l = 0; l < N; l++) any |= bad[l];                                                        \
        return any != 0;                                                                                  \
    }

#define EV4(a, b) __builtin_shufflevector(a, b, 0, 2, 4, 6)
#define OD4(a, b) __builtin_shufflevector(a, b, 1, 3, 5, 7)
#define ZL4(a, b) __builtin_shufflevector(a, b, 0, 4, 1, 5)
#define ZH4(a, b) __builtin_shufflevector(a, b, 2, 6, 3, 7)
DEF_POOL2(4, pf4, pi4, EV4, OD4, ZL4, ZH4, ((pi4){0, 2, 4, 6}))
#if DP_VL >= 8
#define EV8(a, b) __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14)
#define OD8(a, b) __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15)
#define ZL8(a, b) __builtin_shufflevector(a, b, 0, 8, 1, 9, 2, 10, 3, 11)
#define ZH8(a, b) __builtin_shufflevector(a, b, 4, 12, 5, 13, 6, 14, 7, 15)
DEF_POOL2(8, pf8, pi8, EV8, OD8, ZL8, ZH8, ((pi8){0, 2, 4, 6, 8, 10, 12, 14}))
#endif

#if DP_VL == 16
/* AVX-512: n <= 16 outputs of a row pair at once (masked), the even and odd inputs split by
 * permutes; the same candidates in the same order as above. */
static inline void take16(__m512 *m, __m512i *k, __m512 v, __m512i kv) {
    const __mmask16 t = _mm512_cmp_ps_mask(v, *m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    *m = _mm512_mask_mov_ps(*m, t, v);
    *k = _mm512_mask_mov_epi32(*k, t, kv);
}

static inline void pool2_fwd16(const float *r0, const float *r1, int32_t k0, int w, float *y, int32_t *am, int n) {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    const __mmask16 mo = dp_lane_mask(0, n), mlo = dp_lane_mask(0, 2 * n), mhi = dp_lane_mask(0, 2 * n - 16);
    const __m512 p0 = _mm512_maskz_loadu_ps(mlo, r0), p1 = _mm512_maskz_loadu_ps(mhi, r0 + 16);
    const __m512 q0 = _mm512_maskz_loadu_ps(mlo, r1), q1 = _mm512_maskz_loadu_ps(mhi, r1 + 16);
    const __m512i kb = _mm512_add_epi32(_mm512_set1_epi32(k0), ev);
    __m512 m = _mm512_permutex2var_ps(p0, ev, p1);
    __m512i k = kb;
    take16(&m, &k, _mm512_permutex2var_ps(p0, od, p1), _mm512_add_epi32(kb, _mm512_set1_epi32(1)));
    take16(&m, &k, _mm512_permutex2var_ps(q0, ev, q1), _mm512_add_epi32(kb, _mm512_set1_epi32(w)));
    take16(&m, &k, _mm512_permutex2var_ps(q0, od, q1), _mm512_add_epi32(kb, _mm512_set1_epi32(w + 1)));
    _mm512_mask_storeu_ps(y, mo, m);
    _mm512_mask_storeu_epi32(am, mo, k);
}

/* Block-wise backward of n <= 16 outputs; 1 if an argmax lies outside its block. */
static inline int pool2_bwd16(float *r0, float *r1, int32_t k0, int w, const float *g, const int32_t *am, int n) {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i zl = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i zh = _mm512_add_epi32(zl, _mm512_set1_epi32(8));
    const __mmask16 mo = dp_lane_mask(0, n), mlo = dp_lane_mask(0, 2 * n), mhi = dp_lane_mask(0, 2 * n - 16);
    const __m512 gv = _mm512_maskz_loadu_ps(mo, g);
    const __m512i q = _mm512_sub_epi32(_mm512_maskz_loadu_epi32(mo, am), _mm512_add_epi32(_mm512_set1_epi32(k0), ev));
    const __mmask16 e0 = _mm512_cmpeq_epi32_mask(q, _mm512_setzero_si512()) & mo;
    const __mmask16 e1 = _mm512_cmpeq_epi32_mask(q, _mm512_set1_epi32(1)) & mo;
    const __mmask16 e2 = _mm512_cmpeq_epi32_mask(q, _mm512_set1_epi32(w)) & mo;
    const __mmask16 e3 = _mm512_cmpeq_epi32_mask(q, _mm512_set1_epi32(w + 1)) & mo;
    const __m512 a = _mm512_maskz_mov_ps(e0, gv), b = _mm512_maskz_mov_ps(e1, gv);
    const __m512 c = _mm512_maskz_mov_ps(e2, gv), d = _mm512_maskz_mov_ps(e3, gv);
    _mm512_mask_storeu_ps(r0, mlo, _mm512_permutex2var_ps(a, zl, b));
    _mm512_mask_storeu_ps(r0 + 16, mhi, _mm512_permutex2var_ps(a, zh, b));
    _mm512_mask_storeu_ps(r1, mlo, _mm512_permutex2var_ps(c, zl, d));
    _mm512_mask_storeu_ps(r1 + 16, mhi, _mm512_permutex2var_ps(c, zh, d));
    return (mo & ~(e0 | e1 | e2 | e3)) != 0;
}
#endif

/* One 2x2 window in scalar code (rows narrower than 4 outputs). */
static inline void max4(const float *r0, const float *r1, int32_t k0, int w, float *y, int32_t *am) {
    float m = r0[0];
    int32_t k = k0;
    if (TAKE(r0[1], m)) m = r0[1], k = k0 + 1;
    if (TAKE(r1[0], m)) m = r1[0], k = k0 + w;
    if (TAKE(r1[1], m)) m = r1[1], k = k0 + w + 1;
    *y = m, *am = k;
}

/* 2x2, stride 2, no padding (LeNet). Blocks of 8 and 4 outputs; a last partial block is done as
 * a full block that overlaps the previous one (it writes the same values again). */
static void maxpool_2x2(int lo, int hi, int h, int w, const float *x, float *y, int32_t *am) {
    const int oh = h / 2, ow = w / 2;
    for (int pl = lo; pl < hi; pl++) {
        const float *xp = x + (size_t)pl * h * w;
        float *yp = y + (size_t)pl * oh * ow;
        int32_t *ap = am + (size_t)pl * oh * ow;
        for (int i = 0; i < oh; i++) {
            const float *r0 = xp + (size_t)2 * i * w, *r1 = r0 + w;
            float *yr = yp + (size_t)i * ow;
            int32_t *ar = ap + (size_t)i * ow;
            const int32_t base = 2 * i * w;
            int j = 0;
#if DP_VL == 16
            for (; ow - j > 8; j += 16) /* more than 8 left: 16 at a time, the last ones masked */
                pool2_fwd16(r0 + 2 * j, r1 + 2 * j, base + 2 * j, w, yr + j, ar + j, ow - j < 16 ? ow - j : 16);
#endif
#if DP_VL >= 8
            for (; j + 8 <= ow; j += 8) pool2_fwd8(r0 + 2 * j, r1 + 2 * j, base + 2 * j, w, yr + j, ar + j);
#endif
            for (; j + 4 <= ow; j += 4) pool2_fwd4(r0 + 2 * j, r1 + 2 * j, base + 2 * j, w, yr + j, ar + j);
            if (j < ow && ow >= 4) {
                j = ow - 4;
                pool2_fwd4(r0 + 2 * j, r1 + 2 * j, base + 2 * j, w, yr + j, ar + j);
            } else {
                for (; j < ow; j++) max4(r0 + 2 * j, r1 + 2 * j, base + 2 * j, w, yr + j, ar + j);
            }
        }
    }
}

static void maxpool_generic(int lo, int hi, int h, int w, int k, int s, int p, int oh, int ow, const float *x,
                            float *y, int32_t *am) {
    for (int pl = lo; pl < hi; pl++) {
        const float *xp = x + (size_t)pl * h * w;
        float *yp = y + (size_t)pl * oh * ow;
        int32_t *ap = am + (size_t)pl * oh * ow;
        for (int i = 0; i < oh; i++) {
            int h0 = i * s - p, h1 = h0 + k;
            if (h0 < 0) h0 = 0;
            if (h1 > h) h1 = h;
            for (int j = 0; j < ow; j++) {
                int w0 = j * s - p, w1 = w0 + k;
                if (w0 < 0) w0 = 0;
                if (w1 > w) w1 = w;
                float m = -INFINITY;
                int32_t idx = h0 * w + w0; /* PyTorch: the first element of the clipped window */
                for (int a = h0; a < h1; a++)
                    for (int b = w0; b < w1; b++) {
                        const float v = xp[a * w + b];
                        if (TAKE(v, m)) m = v, idx = a * w + b;
                    }
                yp[i * ow + j] = m;
                ap[i * ow + j] = idx;
            }
        }
    }
}

#if DP_VL == 16
/* Stride 2, any window and padding (ResNet's 3x3 pad 1), 16 output columns at a time: the inputs
 * of lane l at window column dw are x[2(j0 + l) - p + dw], the even floats of 32 loaded. Windows
 * are scanned in maxpool_generic's order (rows, then columns), the same rule, so the results are
 * its results. */
static void maxpool_s2_16(int lo, int hi, int h, int w, int k, int p, int oh, int ow, const float *x, float *y,
                          int32_t *am) {
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i even = _mm512_add_epi32(iota, iota), two_iota = even;
    for (int pl = lo; pl < hi; pl++) {
        const float *xp = x + (size_t)pl * h * w;
        float *yp = y + (size_t)pl * oh * ow;
        int32_t *ap = am + (size_t)pl * oh * ow;
        for (int i = 0; i < oh; i++) {
            int h0 = i * 2 - p, h1 = h0 + k;
            if (h0 < 0) h0 = 0;
            if (h1 > h) h1 = h;
            for (int j0 = 0; j0 < ow; j0 += 16) {
                const __mmask16 out = dp_lane_mask(0, ow - j0);
                /* PyTorch's index where no element is taken: the clipped window's first element */
                __m512i w0 = _mm512_sub_epi32(_mm512_add_epi32(_mm512_set1_epi32(2 * j0), two_iota), _mm512_set1_epi32(p));
                w0 = _mm512_max_epi32(w0, _mm512_setzero_si512());
                __m512i idx = _mm512_add_epi32(w0, _mm512_set1_epi32(h0 * w));
                __m512 m = _mm512_set1_ps(-INFINITY);
                for (int a = h0; a < h1; a++) {
                    const float *r = xp + (size_t)a * w;
                    for (int dw = 0; dw < k; dw++) {
                        const int base = 2 * j0 - p + dw; /* column of lane 0 */
                        const __mmask16 mlo = dp_lane_mask(-base, w - base), mhi = dp_lane_mask(-base - 16, w - base - 16);
                        const __m512 v = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(mlo, r + base), even,
                                                                _mm512_maskz_loadu_ps(mhi, r + base + 16));
                        /* lane l's column base + 2l inside the row (and an output lane) */
                        const __mmask16 in = out & _mm512_cmpge_epi32_mask(_mm512_add_epi32(_mm512_set1_epi32(base), two_iota),
                                                                          _mm512_setzero_si512()) &
                                             _mm512_cmplt_epi32_mask(_mm512_add_epi32(_mm512_set1_epi32(base), two_iota),
                                                                     _mm512_set1_epi32(w));
                        const __mmask16 t = in & (_mm512_cmp_ps_mask(v, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
                        m = _mm512_mask_mov_ps(m, t, v);
                        idx = _mm512_mask_mov_epi32(idx, t, _mm512_add_epi32(_mm512_set1_epi32(a * w + base), two_iota));
                    }
                }
                _mm512_mask_storeu_ps(yp + (size_t)i * ow + j0, out, m);
                _mm512_mask_storeu_epi32(ap + (size_t)i * ow + j0, out, idx);
            }
        }
    }
    (void)iota;
}
#endif

void maxpool2d_forward_cpu(int batch, int c, int h, int w, int k, int stride, int pad, const float *x, float *y,
                           int32_t *argmax, int nthreads) {
    const int oh = dp_pool_out_size(h, k, stride, pad), ow = dp_pool_out_size(w, k, stride, pad);
    const int planes = batch * c;
    if (planes <= 0 || oh <= 0 || ow <= 0) return;
    const int nt = plane_threads(planes, (size_t)h * w, nthreads);
    if (k == 2 && stride == 2 && pad == 0)
        PLANES(planes, nt, maxpool_2x2(lo, hi, h, w, x, y, argmax));
#if DP_VL == 16
    else if (stride == 2)
        PLANES(planes, nt, maxpool_s2_16(lo, hi, h, w, k, pad, oh, ow, x, y, argmax));
#endif
    else
        PLANES(planes, nt, maxpool_generic(lo, hi, h, w, k, stride, pad, oh, ow, x, y, argmax));
}

/* The backward kernel is not told k, stride and pad. Where the output is h/2 x w/2 (2x2 stride 2,
 * but also 3x3 stride 2 pad 1 on even sizes), output (i, j) usually takes its maximum from the
 * 2x2 block (2i.., 2j..). If every argmax of a plane lies in its own block, no input receives two
 * gradients and dx can be written block by block in one pass, without zeroing first. Returns 0
 * (plane partly written) when some argmax lies outside its block. */
static int maxpool_bwd_blocks(int h, int w, int oh, int ow, const float *gp, const int32_t *ap, float *xp) {
    for (int i = 0; i < oh; i++) {
        float *r0 = xp + (size_t)2 * i * w, *r1 = r0 + w;
        const int32_t base = 2 * i * w;
        const float *gr = gp + (size_t)i * ow;
        const int32_t *ar = ap + (size_t)i * ow;
        int bad = 0, j = 0;
#if DP_VL == 16
        for (; ow - j > 8; j += 16)
            bad |= pool2_bwd16(r0 + 2 * j, r1 + 2 * j, base + 2 * j, w, gr + j, ar + j, ow - j < 16 ? ow - j : 16);
#endif
#if DP_VL >= 8
        for (; j + 8 <= ow; j += 8) bad |= pool2_bwd8(r0 + 2 * j, r1 + 2 * j, base + 2 * j, w, gr + j, ar + j);
#endif
        for (; j + 4 <= ow; j += 4) bad |= pool2_bwd4(r0 + 2 * j, r1 + 2 * j, base + 2 * j, w, gr + j, ar + j);
        if (j < ow && ow >= 4) {
            j = ow - 4;
            bad |= pool2_bwd4(r0 + 2 * j, r1 + 2 * j, base + 2 * j, w, gr + j, ar + j);
        } else {
            for (; j < ow; j++) {
                const float g = gr[j];
                const int32_t q = ar[j] - base - 2 * j;
                bad |= q != 0 && q != 1 && q != w && q != w + 1;
                r0[2 * j] = q == 0 ? g : 0.0f;
                r0[2 * j + 1] = q == 1 ? g : 0.0f;
                r1[2 * j] = q == w ? g : 0.0f;
                r1[2 * j + 1] = q == w + 1 ? g : 0.0f;
            }
        }
        if (bad) return 0;
        if (w > 2 * ow) {
            memset(r0 + 2 * ow, 0, sizeof(float) * (size_t)(w - 2 * ow));
            memset(r1 + 2 * ow, 0, sizeof(float) * (size_t)(w - 2 * ow));
        }
    }
    if (h > 2 * oh) memset(xp + (size_t)2 * oh * w, 0, sizeof(float) * (size_t)(h - 2 * oh) * w);
    return 1;
}

static void maxpool_bwd(int lo, int hi, int h, int w, int oh, int ow, const float *dy, const int32_t *am,
                        float *dx) {
    int blocks = oh == h / 2 && ow == w / 2;
    for (int pl = lo; pl < hi; pl++) {
        const float *gp = dy + (size_t)pl * oh * ow;
        const int32_t *ap = am + (size_t)pl * oh * ow;
        float *xp = dx + (size_t)pl * h * w;
        if (blocks && maxpool_bwd_blocks(h, w, oh, ow, gp, ap, xp)) continue;
        blocks = 0; /* overlapping windows: do not try again in this chunk */
        memset(xp, 0, sizeof(float) * (size_t)h * w);
        for (int q = 0; q < oh * ow; q++) xp[ap[q]] += gp[q];
    }
}

void maxpool2d_backward_cpu(int batch, int c, int h, int w, int oh, int ow, const float *dy, const int32_t *argmax,
                            float *dx, int nthreads) {
    const int planes = batch * c;
    if (planes <= 0) return;
    const int nt = plane_threads(planes, (size_t)h * w, nthreads);
    PLANES(planes, nt, maxpool_bwd(lo, hi, h, w, oh, ow, dy, argmax, dx));
}

/* ---------------------------------------------------------------- global average pooling */

static void gap_fwd(int lo, int hi, int hw, const float *x, float *y) {
    for (int pl = lo; pl < hi; pl++) {
        const float *xp = x + (size_t)pl * hw;
        double acc = 0.0;
        for (int i = 0; i < hw; i++) acc += xp[i];
        y[pl] = (float)(acc / hw);
    }
}

static void gap_bwd(int lo, int hi, int hw, const float *dy, float *dx) {
    for (int pl = lo; pl < hi; pl++) {
        const float g = dy[pl] / (float)hw;
        float *xp = dx + (size_t)pl * hw;
        for (int i = 0; i < hw; i++) xp[i] = g;
    }
}

void global_avgpool_forward_cpu(int batch, int c, int hw, const float *x, float *y, int nthreads) {
    const int planes = batch * c;
    if (planes <= 0 || hw <= 0) return;
    const int nt = plane_threads(planes, (size_t)hw, nthreads);
    PLANES(planes, nt, gap_fwd(lo, hi, hw, x, y));
}

void global_avgpool_backward_cpu(int batch, int c, int hw, const float *dy, float *dx, int nthreads) {
    const int planes = batch * c;
    if (planes <= 0 || hw <= 0) return;
    const int nt = plane_threads(planes, (size_t)hw, nthreads);
    PLANES(planes, nt, gap_bwd(lo, hi, hw, dy, dx));
}
