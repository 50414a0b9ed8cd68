/* conv2d_v4.h: the direct path of conv2d.c for 16-float vectors (x86-64-v4, AVX-512), stride 1.
 * Included by conv2d.c, after conv_plan, in the variant compiled with AVX-512 only.
 *
 * A 16-float vector is wider than a LeNet row (24 or 8 outputs), so the tiles of the 8-float
 * variant, which read one output row's inputs straight from the padded input, would leave lanes
 * idle. Here a vector covers 16 consecutive outputs q of the (out_h, out_w) plane in their own
 * order, across row ends, and reads its inputs from "shifted planes" built once per sample:
 *
 *     X[c][kw] (Hp, out_w): X[c][kw][h][ow] = the padded input at (c, h, ow + kw)
 *
 * so that the input of output q = oh*out_w + ow at kernel offset (c, kh, kw) is X[c][kw][kh*out_w
 * + q]: 16 consecutive floats for every (c, kh, kw), whatever out_w. Outputs, dy and weights keep
 * their own layouts (no copy of dy; y written with whole vectors). The input gradient is summed the
 * same way into planes DX[c][kw] (DX[c][kw][kh*out_w + q] += the gradient of im2col row (c, kh, kw)
 * at q), then dx[c][h][w] = the sum over kw of DX[c][kw][h][w - kw]. A sample's last vector may
 * run past P: its dy lanes are loaded as zeros, so they add nothing to dw and zeros to DX's next
 * floats (or its slack).
 *
 * Summation order (fixed by the shapes alone): y and every DX element sum their products in
 * (c, kh, kw) or m order; dw keeps 16 lane partials (lane l: the positions q = l mod 16 of the
 * chunk's samples in order), added at the end with a fixed pairwise tree (sum16 below). */

#define SH_NT 4 /* vectors per forward / dx tile: MRF (SH_DXR) x SH_NT accumulators of the 32 registers */
#define SH_DXR 5 /* rows of a dx tile (6 x 4 made GCC spill) */
#define SH_KMAX 32 /* the sh path's largest kernel (plans check it) */
#define SH_MR 4 /* dw tile: SH_MR output channels x 5 kernel columns */
#define SH_KR 5
#define SH_G 8 /* at most this many samples' shifted planes at once: each dw tile runs over all of them */
#define SH_DW_STEPS 32 /* a dw tile's vectors (samples x PV): enough to pay for its lane sums */

/* Mask of vector v of a sample's P outputs. */
static inline __mmask16 sh_vmask(int v, int P) { return dp_lane_mask(0, P - v * DP_VL); }

/* X (in_c, k, Hp, out_w) from one sample xs (in_c, H, W), then zeros up to xs_sz. Rows are
 * written in order with whole vectors: a row's last vector spills into the next row, which
 * overwrites it. Lanes outside the input (padding) load as zeros. */
static void sh_build(const dp_conv2d_dims *d, const conv_plan *pl, const float *xs, float *X) {
    const int H = d->in_h, W = d->in_w, p = d->pad, OW = d->out_w, k = d->k, Hp = pl->Hp;
    const int nv = (OW + DP_VL - 1) / DP_VL;
    float *dst = X;
    if (p == 0) { /* no padding (LeNet): every input column is inside the row; only the row's end masked */
        const __mmask16 last = dp_lane_mask(0, OW - (nv - 1) * DP_VL);
        for (int c = 0; c < d->in_c; c++)
            for (int kw = 0; kw < k; kw++) {
                const float *src = xs + (size_t)c * H * W + kw;
                for (int h = 0; h < Hp; h++, dst += OW, src += W) {
                    for (int i = 0; i < nv - 1; i++) _mm512_storeu_ps(dst + i * DP_VL, _mm512_loadu_ps(src + i * DP_VL));
                    _mm512_storeu_ps(dst + (nv - 1) * DP_VL, _mm512_maskz_loadu_ps(last, src + (nv - 1) * DP_VL));
                }
            }
    } else {
        for (int c = 0; c < d->in_c; c++)
            for (int kw = 0; kw < k; kw++) {
                __mmask16 mk[8];
                const int nm = nv < 8 ? nv : 8;
                for (int i = 0; i < nm; i++) {
                    const int c0 = i * DP_VL + kw - p; /* input column of lane 0 */
                    mk[i] = dp_lane_mask(-c0, W - c0) & dp_lane_mask(0, OW - i * DP_VL);
                }
                for (int h = 0; h < Hp; h++, dst += OW) {
                    const int r = h - p;
                    const float *src = xs + ((size_t)c * H + (r < 0 ? 0 : r >= H ? H - 1 : r)) * W + kw - p;
                    for (int i = 0; i < nv; i++) {
                        const int c0 = i * DP_VL + kw - p;
                        const __mmask16 m = r < 0 || r >= H ? 0
                                            : i < 8         ? mk[i]
                                                            : dp_lane_mask(-c0, W - c0) & dp_lane_mask(0, OW - i * DP_VL);
                        _mm512_storeu_ps(dst + i * DP_VL, _mm512_maskz_loadu_ps(m, src + i * DP_VL));
                    }
                }
            }
    }
    /* the slack, which a sample's last vector may read (times a zero dy): zeros, not garbage */
    memset(dst, 0, sizeof(float) * (pl->xs_sz - (size_t)(dst - X)));
}

/* Rows i < R (output channels), vectors j < NT: y[i][q0 + 16j ..] = bias + the products. X and y
 * point at q0 of channel 0 / plane (0, 0); the last vector stores its mask's lanes only. */
AI void sh_tile_fwd(const int R, const int NT, int C, int k, int OW, size_t S, const float *X, const float *A, int lda,
                    const float *bias, float *y, int P, __mmask16 last) {
    dp_vf c[MRF][SH_NT];
#pragma GCC unroll 6
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NT; j++) c[i][j] = DP_VSPLAT(bias ? bias[i] : 0.0f);
    const float *a = A;
    for (int ci = 0; ci < C; ci++)
        for (int kh = 0; kh < k; kh++) {
            const float *xr = X + (size_t)ci * k * S + (size_t)kh * OW;
            for (int kw = 0; kw < k; kw++, a++, xr += S) {
                dp_vf b[SH_NT];
#pragma GCC unroll 4
                for (int j = 0; j < NT; j++) b[j] = DP_VLOAD(xr + j * DP_VL);
#pragma GCC unroll 6
                for (int i = 0; i < R; i++) {
                    const dp_vf w = DP_VSPLAT(a[(size_t)i * lda]);
#pragma GCC unroll 4
                    for (int j = 0; j < NT; j++) c[i][j] = DP_VFMA(w, b[j], c[i][j]);
                }
            }
        }
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) {
#pragma GCC unroll 4
        for (int j = 0; j < NT - 1; j++) DP_VSTORE(y + (size_t)i * P + j * DP_VL, c[i][j]);
        _mm512_mask_storeu_ps(y + (size_t)i * P + (NT - 1) * DP_VL, last, (__m512)c[i][NT - 1]);
    }
}

/* ys (M, P) = the convolution of one sample whose shifted planes are X. */
static void sh_forward(const dp_conv2d_dims *d, const conv_plan *pl, const float *X, const float *w, const float *b,
                       float *ys) {
    const int M = pl->M, K = pl->K, P = pl->P, PV = pl->PV;
    for (int v0 = 0; v0 < PV; v0 += SH_NT) {
        const int NT = PV - v0 < SH_NT ? PV - v0 : SH_NT;
        const __mmask16 last = sh_vmask(v0 + NT - 1, P);
        const float *x = X + (size_t)v0 * DP_VL;
        for (int m0 = 0; m0 < M; m0 += MRF) {
            const int R = M - m0 < MRF ? M - m0 : MRF;
            const float *a = w + (size_t)m0 * K, *bb = b ? b + m0 : NULL;
            float *ym = ys + (size_t)m0 * P + (size_t)v0 * DP_VL;
#define SHF(r, nt) tile_call_fwd(r, nt)
#define tile_call_fwd(r, nt) sh_tile_fwd(r, nt, d->in_c, d->k, d->out_w, pl->S, x, a, K, bb, ym, P, last)
#define SHF_NT(r)                              \
    switch (NT) {                              \
    case 4: SHF(r, 4); break;                  \
    case 3: SHF(r, 3); break;                  \
    case 2: SHF(r, 2); break;                  \
    default: SHF(r, 1); break;                 \
    }
            SWITCH6(R, SHF_NT)
#undef SHF_NT
#undef tile_call_fwd
#undef SHF
        }
    }
}

/* Weight-gradient tile: dwp[i*K + j*dj] += the sum over the q of ns samples of dy[i][q] *
 * x[j*xj + q], i < MR output channels, j < KR weights. A is dy at the tile's first channel (rows of
 * P); samples are as (dy) and xs (x) floats apart. Lane l of an accumulator sums the positions q =
 * l mod 16 of the samples in order; the lanes are then added by dp_sum16's tree. */
AI void sh_tile_dw(const int MR, const int KR, int ns, size_t as, size_t xs, int PV, int P, const float *A,
                   const float *x, size_t xj, float *dwp, int K, int dj) {
    dp_vf c[SH_MR][SH_KR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 5
        for (int j = 0; j < KR; j++) c[i][j] = DP_VSPLAT(0.0f);
    const __mmask16 tail = sh_vmask(PV - 1, P);
    /* one loop over the group's vectors (PV a sample is often 4): pointers jump between samples */
    const float *ap = A, *xb = x;
    for (int u = 0, v = 0; u < ns * PV; u++) {
        const __mmask16 mk = v == PV - 1 ? tail : (__mmask16)0xFFFF;
        dp_vf a[SH_MR];
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++) a[i] = (dp_vf)_mm512_maskz_loadu_ps(mk, ap + (size_t)i * P);
#pragma GCC unroll 5
        for (int j = 0; j < KR; j++) {
            dp_vf bv = DP_VLOAD(xb + j * xj);
            DP_KEEP(bv);
#pragma GCC unroll 4
            for (int i = 0; i < MR; i++) c[i][j] = DP_VFMA(a[i], bv, c[i][j]);
        }
        ap += DP_VL, xb += DP_VL;
        if (++v == PV) v = 0, ap += as - (size_t)PV * DP_VL, xb += xs - (size_t)PV * DP_VL;
    }
    __m512 t[32];
    const int n = MR * KR;
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 5
        for (int j = 0; j < KR; j++) t[i * KR + j] = (__m512)c[i][j];
    for (int e = n; e < (n + 15) / 16 * 16; e++) t[e] = _mm512_setzero_ps();
    for (int e0 = 0; e0 < n; e0 += 16) {
        float sum[16];
        _mm512_storeu_ps(sum, dp_sum16(t + e0));
        for (int e = e0; e < n && e < e0 + 16; e++) dwp[(size_t)(e / KR) * K + (size_t)(e % KR) * dj] += sum[e - e0];
    }
}

/* dwp (M, K) += the weight gradient of ns samples: shifted planes X (xs floats apart), dy g (M, P
 * per sample). */
static void sh_dw(const dp_conv2d_dims *d, const conv_plan *pl, int ns, const float *g, const float *X, size_t xs,
                  float *dwp) {
    const int M = pl->M, K = pl->K, P = pl->P, k = d->k, OW = d->out_w, PV = pl->PV;
    const size_t S = pl->S, gs = (size_t)M * P;
    const int mt = (M + SH_MR - 1) / SH_MR, MRX = (M + mt - 1) / mt; /* tiles of even height */
    /* a tile's columns are kernel rows kh0.. of one (c, kw): its inputs are one shifted plane at
       offsets kh*out_w apart, a few cache lines for all of them */
    for (int c = 0; c < d->in_c; c++)
        for (int kw = 0; kw < k; kw++)
            for (int kh0 = 0; kh0 < k; kh0 += SH_KR) {
                const int KR = k - kh0 < SH_KR ? k - kh0 : SH_KR, kk0 = (c * k + kh0) * k + kw;
                const float *xb = X + (size_t)(c * k + kw) * S + (size_t)kh0 * OW;
                for (int m0 = 0; m0 < M; m0 += MRX) { /* the planes' rows stay in L1 for every m0 */
                    const int MR = M - m0 < MRX ? M - m0 : MRX;
                    const float *a = g + (size_t)m0 * P;
                    float *dp = dwp + (size_t)m0 * K + kk0;
#define SHW(mr, kr)                                                  \
    case kr * 8 + mr:                                                \
        sh_tile_dw(mr, kr, ns, gs, xs, PV, P, a, xb, OW, dp, K, k); \
        break;
#define SHW_K(kr) SHW(1, kr) SHW(2, kr) SHW(3, kr) SHW(4, kr)
                    switch (KR * 8 + MR) {
                        SHW_K(1) SHW_K(2) SHW_K(3) SHW_K(4) SHW_K(5)
                    default: break;
                    }
#undef SHW_K
#undef SHW
                }
            }
}

/* ---- the weight gradient with the output channels in the lanes (M = 16 or 32, k <= 5)
 * dW[m][k] = the sum over the chunk's samples and positions q, in order, of dy[m][q] X[k][q]: with
 * dy transposed per sample to dT (P rows of the M channels), a vector of dT[q] times X[k][q]
 * broadcast adds to one accumulator per weight column k, a plain sequential sum per weight (no
 * lane partials), every lane an output channel, one load per multiply-add. */

/* r (16 rows of 16) = its transpose: swaps of 8x8, 4x4, 2x2 and 1x1 blocks. Stage b: row i (bit b
 * clear) takes lanes l of itself where l has bit b clear and lanes l - b of row i + b elsewhere; row
 * i + b the lanes l + b of row i and its own. */
static const int32_t TR_IDX[4][2][16] = {
    {{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23}, {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}},
    {{0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27}, {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31}},
    {{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29}, {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31}},
    {{0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30}, {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}},
};

static inline void transpose16(__m512 *r) {
#pragma GCC unroll 4
    for (int st = 0, b = 8; st < 4; st++, b >>= 1) {
        const __m512i ilo = _mm512_loadu_si512(TR_IDX[st][0]), ihi = _mm512_loadu_si512(TR_IDX[st][1]);
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            if (!(i & b)) {
                const __m512 a = r[i], c = r[i + b];
                r[i] = _mm512_permutex2var_ps(a, ilo, c);
                r[i + b] = _mm512_permutex2var_ps(a, ihi, c);
            }
    }
}

/* dT (PV*16, M) = g (M, P) transposed; rows past P hold zeros. */
static void sh_transpose_dy(const conv_plan *pl, const float *g, float *dT) {
    const int M = pl->M, P = pl->P;
    for (int m0 = 0; m0 < M; m0 += 16)
        for (int v = 0; v < pl->PV; v++) {
            const __mmask16 mk = sh_vmask(v, P);
            __m512 r[16];
            for (int i = 0; i < 16; i++) r[i] = _mm512_maskz_loadu_ps(mk, g + (size_t)(m0 + i) * P + v * DP_VL);
            transpose16(r);
            for (int i = 0; i < 16; i++) _mm512_storeu_ps(dT + (size_t)(v * DP_VL + i) * M + m0, r[i]);
        }
}

/* Accumulators for KH kernel rows kh0.. x all k kernel columns of one input channel, NM vectors of
 * output channels each: the sum over ns samples (X xs floats apart, dT dts floats apart) of their P
 * positions in order; then dwp[m][c, kh0 + i, kw] += the lanes. */
AI void sh_tile_dwm(const int NM, const int KH, const int KK, int ns, int P, size_t xs, size_t dts, const float *X,
                    size_t S, int OW, const float *dT, int M, float *dwp, int K, int kk0) {
    __m512 c[2][25];
#pragma GCC unroll 2
    for (int v = 0; v < NM; v++)
#pragma GCC unroll 25
        for (int t = 0; t < KH * KK; t++) c[v][t] = _mm512_setzero_ps();
    for (int s = 0; s < ns; s++) {
        const float *xb = X + s * xs, *d = dT + s * dts;
        const float *x0 = xb, *x1 = xb + S, *x2 = xb + 2 * S, *x3 = xb + 3 * S, *x4 = xb + 4 * S;
        for (int q = 0; q < P; q++, d += M) {
            __m512 dv[2];
#pragma GCC unroll 2
            for (int v = 0; v < NM; v++) dv[v] = _mm512_loadu_ps(d + v * DP_VL);
#pragma GCC unroll 5
            for (int i = 0; i < KH; i++) {
                const size_t o = (size_t)i * OW + q;
#pragma GCC unroll 5
                for (int j = 0; j < KK; j++) {
                    const float *xr = j == 0 ? x0 : j == 1 ? x1 : j == 2 ? x2 : j == 3 ? x3 : x4;
                    const __m512 xv = _mm512_set1_ps(xr[o]);
#pragma GCC unroll 2
                    for (int v = 0; v < NM; v++) c[v][i * KK + j] = _mm512_fmadd_ps(xv, dv[v], c[v][i * KK + j]);
                }
            }
        }
    }
    float t[16];
    for (int v = 0; v < NM; v++)
        for (int e = 0; e < KH * KK; e++) {
            _mm512_storeu_ps(t, c[v][e]);
            float *dst = dwp + (size_t)(v * DP_VL) * K + kk0 + (size_t)(e / KK) * KK + e % KK;
            for (int l = 0; l < 16; l++) dst[(size_t)l * K] += t[l];
        }
}

/* dwp (M, K) += the weight gradient of ns samples: shifted planes X (xs floats apart), dy transposed
 * in dT (dts floats apart). */
static void sh_dw_m(const dp_conv2d_dims *d, const conv_plan *pl, int ns, const float *X, size_t xs, const float *dT,
                    size_t dts, float *dwp) {
    const int k = d->k, NM = pl->M / 16, KHX = (NM == 1 ? 25 : 12) / k; /* rows a tile: <= 25 accumulators */
    for (int c = 0; c < d->in_c; c++)
        for (int kh0 = 0; kh0 < k; kh0 += KHX) {
            const int KH = k - kh0 < KHX ? k - kh0 : KHX, kk0 = (c * k + kh0) * k;
            const float *xb = X + (size_t)c * k * pl->S + (size_t)kh0 * d->out_w;
#define SWM(nm, kh, kk)                                                                                      \
    case (nm * 8 + kh) * 8 + kk:                                                                             \
        sh_tile_dwm(nm, kh, kk, ns, pl->P, xs, dts, xb, pl->S, d->out_w, dT, pl->M, dwp, pl->K, kk0);        \
        break;
            switch ((NM * 8 + KH) * 8 + k) {
                SWM(1, 5, 5) SWM(1, 4, 5) SWM(1, 3, 5) SWM(1, 2, 5) SWM(1, 1, 5)
                SWM(1, 4, 4) SWM(1, 3, 4) SWM(1, 2, 4) SWM(1, 1, 4)
                SWM(1, 3, 3) SWM(1, 2, 3) SWM(1, 1, 3)
                SWM(1, 2, 2) SWM(1, 1, 2) SWM(1, 1, 1)
                SWM(2, 2, 5) SWM(2, 1, 5) SWM(2, 3, 4) SWM(2, 2, 4) SWM(2, 1, 4)
                SWM(2, 3, 3) SWM(2, 2, 3) SWM(2, 1, 3) SWM(2, 2, 2) SWM(2, 1, 2) SWM(2, 1, 1)
            default: break;
            }
#undef SWM
        }
}

/* Wg (k, groups, M, SH_DXR): for each kh, the weights of the (c, kw) rows q0.. of a group, so that a
 * tile's rows add into different planes (no partly overlapping stores in one tile). */
static int sh_dx_groups(const dp_conv2d_dims *d) { return d->k * ((d->in_c * d->k + SH_DXR - 1) / SH_DXR); }

static void sh_pack_dx(const dp_conv2d_dims *d, const conv_plan *pl, const float *w, float *wg) {
    const int k = d->k, nq = d->in_c * k, per = (nq + SH_DXR - 1) / SH_DXR;
    for (int kh = 0; kh < k; kh++)
        for (int gi = 0; gi < per; gi++) {
            float *dst = wg + (size_t)(kh * per + gi) * pl->M * SH_DXR;
            for (int m = 0; m < pl->M; m++)
                for (int j = 0; j < SH_DXR; j++) {
                    const int q = gi * SH_DXR + j, c = q / k, kw = q % k;
                    dst[m * SH_DXR + j] = q < nq ? w[(size_t)m * pl->K + (size_t)(c * k + kh) * k + kw] : 0.0f;
                }
        }
}

/* Input-gradient tile: rows i < R of a group, vectors j < NT from q0: DX[off[i] + 16j] += sum over
 * m of Wg[m][i] dy[m][q0 + 16j]. D is dy at q0 (rows of P); X is DX at kh*out_w + q0. */
AI void sh_tile_dx(const int R, const int NT, int M, int P, const float *Wg, const float *D, float *X, const size_t *off,
                   __mmask16 last) {
    dp_vf c[SH_DXR][SH_NT];
#pragma GCC unroll 6
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NT; j++) c[i][j] = DP_VSPLAT(0.0f);
    for (int m = 0; m < M; m++) {
        dp_vf dv[SH_NT];
#pragma GCC unroll 4
        for (int j = 0; j < NT; j++)
            dv[j] = (dp_vf)_mm512_maskz_loadu_ps(j == NT - 1 ? last : (__mmask16)0xFFFF, D + (size_t)m * P + j * DP_VL);
#pragma GCC unroll 6
        for (int i = 0; i < R; i++) {
            const dp_vf a = DP_VSPLAT(Wg[m * SH_DXR + i]);
#pragma GCC unroll 4
            for (int j = 0; j < NT; j++) c[i][j] = DP_VFMA(a, dv[j], c[i][j]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NT; j++) {
            float *t = X + off[i] + j * DP_VL;
            DP_VSTORE(t, DP_VLOAD(t) + c[i][j]);
        }
}

/* dxs (in_c, H, W) = the input gradient of one sample with dy g (M, P); DX is scratch of
 * pl->xs_sz floats, wg the packed weights. */
static void sh_dx(const dp_conv2d_dims *d, const conv_plan *pl, const float *wg, const float *g, float *DX,
                  float *dxs) {
    const int M = pl->M, P = pl->P, PV = pl->PV, k = d->k, OW = d->out_w, nq = d->in_c * k;
    const int per = (nq + SH_DXR - 1) / SH_DXR;
    const size_t S = pl->S;
    memset(DX, 0, sizeof(float) * pl->xs_sz);
    for (int kh = 0; kh < k; kh++)
        for (int gi = 0; gi < per; gi++) {
            const int q0 = gi * SH_DXR, R = nq - q0 < SH_DXR ? nq - q0 : SH_DXR;
            size_t off[SH_DXR];
            for (int j = 0; j < R; j++) off[j] = (size_t)(q0 + j) * S; /* plane (c, kw) = row q0 + j */
            const float *wgg = wg + (size_t)(kh * per + gi) * M * SH_DXR;
            for (int v0 = 0; v0 < PV; v0 += SH_NT) {
                const int NT = PV - v0 < SH_NT ? PV - v0 : SH_NT;
                const __mmask16 last = sh_vmask(v0 + NT - 1, P);
                const float *D = g + (size_t)v0 * DP_VL;
                float *X = DX + (size_t)kh * OW + (size_t)v0 * DP_VL;
#define SHX(r, nt) sh_tile_dx(r, nt, M, P, wgg, D, X, off, last)
#define SHX_NT(r)                              \
    switch (NT) {                              \
    case 4: SHX(r, 4); break;                  \
    case 3: SHX(r, 3); break;                  \
    case 2: SHX(r, 2); break;                  \
    default: SHX(r, 1); break;                 \
    }
                switch (R) {
                case 5: SHX_NT(5) break;
                case 4: SHX_NT(4) break;
                case 3: SHX_NT(3) break;
                case 2: SHX_NT(2) break;
                default: SHX_NT(1) break;
                }
#undef SHX_NT
#undef SHX
            }
        }
    /* dx[c][h - pad][w - pad] = sum over kw of DX[c][kw][h][w - kw], kw in order, for the padded
       columns w = w0 + lane that are inside the input */
    const int H = d->in_h, W = d->in_w, pad = d->pad, Wp = pl->Wp;
    for (int w0 = 0; w0 < Wp; w0 += DP_VL) {
        __mmask16 mk[SH_KMAX]; /* the lanes kw contributes to; they depend on w0 and kw only */
        for (int kw = 0; kw < k; kw++) mk[kw] = dp_lane_mask(kw - w0, kw + OW - w0);
        const __mmask16 ms = dp_lane_mask(pad - w0, pad + W - w0);
        for (int c = 0; c < d->in_c; c++)
            for (int h = pad; h < pad + H; h++) {
                float *drow = dxs + ((size_t)c * H + (h - pad)) * W - pad; /* padded column 0 */
                const float *src = DX + (size_t)c * k * S + (size_t)h * OW + w0; /* lane w: DX[..][w - kw] */
                __m512 acc = _mm512_setzero_ps();
                for (int kw = 0; kw < k; kw++, src += S - 1)
                    acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(mk[kw], src));
                _mm512_mask_storeu_ps(drow + w0, ms, acc);
            }
    }
}

