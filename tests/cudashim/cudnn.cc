// cudnn.cc: the cuDNN calls conv_cudnn.cu makes, for 4-d NCHW float tensors. Descriptors are
// checked as cuDNN checks them (the output's shape against the convolution's); the algorithm
// queries list what a GPU's would in kind (a non-deterministic algorithm first where cuDNN has
// one, which the caller must skip); each pass is queued on the handle's stream and computed by a
// direct loop in double, one fixed order: the same bits every run, whatever the algorithm.
#include <string.h>
#include <vector>

#include "cudnn.h"
#include "shim.h"

struct cudnnContext {
    cudaStream_t stream = nullptr;
};
struct cudnnTensorStruct {
    int n = 0, c = 0, h = 0, w = 0;
    bool set = false;
};
struct cudnnFilterStruct {
    int k = 0, c = 0, h = 0, w = 0;
    bool set = false;
};
struct cudnnConvolutionStruct {
    int pad_h = 0, pad_w = 0, u = 1, v = 1, dil_h = 1, dil_w = 1;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
    bool set = false;
};

namespace {

// The shapes of one convolution: x (n, c, h, w), w (k, c, r, s), y (n, k, oh, ow).
struct Conv {
    int n, c, h, w, k, r, s, oh, ow, pad_h, pad_w, u, v, dil_h, dil_w;
    bool flip;
};

cudnnStatus_t shapes(cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t cv,
                     cudnnTensorDescriptor_t y, Conv *out) {
    if (!x || !w || !cv || !y || !x->set || !w->set || !cv->set || !y->set) return CUDNN_STATUS_BAD_PARAM;
    Conv c{x->n, x->c, x->h, x->w, w->k, w->h, w->w, 0, 0, cv->pad_h, cv->pad_w, cv->u, cv->v, cv->dil_h, cv->dil_w,
           cv->mode == CUDNN_CONVOLUTION};
    c.oh = (c.h + 2 * c.pad_h - c.dil_h * (c.r - 1) - 1) / c.u + 1;
    c.ow = (c.w + 2 * c.pad_w - c.dil_w * (c.s - 1) - 1) / c.v + 1;
    if (w->c != x->c || y->n != x->n || y->c != w->k || y->h != c.oh || y->w != c.ow || c.oh <= 0 || c.ow <= 0)
        return CUDNN_STATUS_BAD_PARAM;
    *out = c;
    return CUDNN_STATUS_SUCCESS;
}

// Calls f(xi, wi, yi) for every term of the convolution: y[yi] += x[xi] * w[wi], in one order.
template <class F>
void each_term(const Conv &c, F f) {
    for (int n = 0; n < c.n; n++)
        for (int k = 0; k < c.k; k++)
            for (int ch = 0; ch < c.c; ch++)
                for (int r = 0; r < c.r; r++)
                    for (int s = 0; s < c.s; s++) {
                        const int rr = c.flip ? c.r - 1 - r : r, ss = c.flip ? c.s - 1 - s : s;
                        const size_t wi = (((size_t)k * c.c + ch) * c.r + rr) * c.s + ss;
                        for (int oy = 0; oy < c.oh; oy++) {
                            const int iy = oy * c.u - c.pad_h + r * c.dil_h;
                            if (iy < 0 || iy >= c.h) continue;
                            for (int ox = 0; ox < c.ow; ox++) {
                                const int ix = ox * c.v - c.pad_w + s * c.dil_w;
                                if (ix < 0 || ix >= c.w) continue;
                                f((((size_t)n * c.c + ch) * c.h + iy) * c.w + ix, wi,
                                  (((size_t)n * c.k + k) * c.oh + oy) * c.ow + ox);
                            }
                        }
                    }
}

// out = alpha acc + beta out (out not read when beta is 0)
void blend(float *out, const std::vector<double> &acc, float alpha, float beta) {
    for (size_t i = 0; i < acc.size(); i++)
        out[i] = (float)(alpha * acc[i] + (beta != 0.0f ? (double)beta * out[i] : 0.0));
}

cudnnStatus_t queue(cudnnHandle_t h, std::function<void()> fn) {
    cudaError_t e = dpshim::enqueue(h->stream, [fn = std::move(fn)] {
        dpshim::counts.dnn_calls++;
        dpshim::counts.launches++;
        fn();
    });
    return e == cudaSuccess ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
}

// What the algorithm queries return: `n` entries, each deterministic unless listed in `nondet`.
template <class Perf, class Algo>
cudnnStatus_t list(cudnnConvolutionDescriptor_t cv, int want, int *got, Perf *perf, std::initializer_list<Algo> algos,
                   std::initializer_list<Algo> nondet) {
    if (!got || !perf || want <= 0) return CUDNN_STATUS_BAD_PARAM;
    int n = 0;
    for (Algo a : algos) {
        if (n == want) break;
        Perf p;
        memset(&p, 0, sizeof p);
        p.algo = a, p.status = CUDNN_STATUS_SUCCESS, p.time = 0.01f * (float)(n + 1), p.memory = 0;
        p.determinism = CUDNN_DETERMINISTIC;
        for (Algo b : nondet)
            if (a == b) p.determinism = CUDNN_NON_DETERMINISTIC;
        p.mathType = cv->math == CUDNN_TENSOR_OP_MATH ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
        perf[n++] = p;
    }
    *got = n;
    return CUDNN_STATUS_SUCCESS;
}

// cudnnFind* runs every algorithm: it allocates and synchronises, which a capture does not allow.
cudnnStatus_t before_find(cudnnHandle_t h) {
    if (!h) return CUDNN_STATUS_BAD_PARAM;
    if (dpshim::capturing(h->stream)) return CUDNN_STATUS_NOT_SUPPORTED;
    return dpshim::sync_stream(h->stream) == cudaSuccess ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
}

} // namespace

extern "C" {

const char *cudnnGetErrorString(cudnnStatus_t s) {
    switch (s) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    }
    return "CUDNN_STATUS_UNKNOWN";
}
cudnnStatus_t cudnnCreate(cudnnHandle_t *h) {
    if (!h) return CUDNN_STATUS_BAD_PARAM;
    *h = new cudnnContext;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t h) {
    delete h;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) {
    if (!h) return CUDNN_STATUS_BAD_PARAM;
    h->stream = s;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d) {
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    *d = new cudnnTensorStruct;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) {
    delete d;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t f, cudnnDataType_t t, int n,
                                         int c, int h, int w) {
    if (!d || n <= 0 || c <= 0 || h <= 0 || w <= 0) return CUDNN_STATUS_BAD_PARAM;
    if (f != CUDNN_TENSOR_NCHW || t != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED; // the stand-in's subset
    *d = cudnnTensorStruct{n, c, h, w, true};
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d) {
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    *d = new cudnnFilterStruct;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) {
    delete d;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t t, cudnnTensorFormat_t f, int k,
                                         int c, int h, int w) {
    if (!d || k <= 0 || c <= 0 || h <= 0 || w <= 0) return CUDNN_STATUS_BAD_PARAM;
    if (f != CUDNN_TENSOR_NCHW || t != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED;
    *d = cudnnFilterStruct{k, c, h, w, true};
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d) {
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    *d = new cudnnConvolutionStruct;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
    delete d;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w, int u, int v,
                                              int dil_h, int dil_w, cudnnConvolutionMode_t mode, cudnnDataType_t t) {
    if (!d || pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dil_h <= 0 || dil_w <= 0) return CUDNN_STATUS_BAD_PARAM;
    if (t != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED;
    d->pad_h = pad_h, d->pad_w = pad_w, d->u = u, d->v = v, d->dil_h = dil_h, d->dil_w = dil_w, d->mode = mode;
    d->set = true;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m) {
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    d->math = m;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                     cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t cv,
                                                     cudnnTensorDescriptor_t y, int want, int *got,
                                                     cudnnConvolutionFwdAlgoPerf_t *perf) {
    Conv c;
    if (!h) return CUDNN_STATUS_BAD_PARAM;
    if (cudnnStatus_t s = shapes(x, w, cv, y, &c)) return s;
    return list<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
        cv, want, got, perf, {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM},
        {});
}
cudnnStatus_t cudnnFindConvolutionForwardAlgorithm(cudnnHandle_t h, cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w,
                                                   cudnnConvolutionDescriptor_t cv, cudnnTensorDescriptor_t y,
                                                   int want, int *got, cudnnConvolutionFwdAlgoPerf_t *perf) {
    if (cudnnStatus_t s = before_find(h)) return s;
    return cudnnGetConvolutionForwardAlgorithm_v7(h, x, w, cv, y, want, got, perf);
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t h, cudnnFilterDescriptor_t w,
                                                          cudnnTensorDescriptor_t dy, cudnnConvolutionDescriptor_t cv,
                                                          cudnnTensorDescriptor_t dx, int want, int *got,
                                                          cudnnConvolutionBwdDataAlgoPerf_t *perf) {
    Conv c;
    if (!h) return CUDNN_STATUS_BAD_PARAM;
    if (cudnnStatus_t s = shapes(dx, w, cv, dy, &c)) return s;
    return list<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
        cv, want, got, perf, {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1},
        {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0});
}
cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithm(cudnnHandle_t h, cudnnFilterDescriptor_t w,
                                                        cudnnTensorDescriptor_t dy, cudnnConvolutionDescriptor_t cv,
                                                        cudnnTensorDescriptor_t dx, int want, int *got,
                                                        cudnnConvolutionBwdDataAlgoPerf_t *perf) {
    if (cudnnStatus_t s = before_find(h)) return s;
    return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w, dy, cv, dx, want, got, perf);
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                            cudnnTensorDescriptor_t dy, cudnnConvolutionDescriptor_t cv,
                                                            cudnnFilterDescriptor_t dw, int want, int *got,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t *perf) {
    Conv c;
    if (!h) return CUDNN_STATUS_BAD_PARAM;
    if (cudnnStatus_t s = shapes(x, dw, cv, dy, &c)) return s;
    return list<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
        cv, want, got, perf, {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1},
        {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0});
}
cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithm(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                          cudnnTensorDescriptor_t dy, cudnnConvolutionDescriptor_t cv,
                                                          cudnnFilterDescriptor_t dw, int want, int *got,
                                                          cudnnConvolutionBwdFilterAlgoPerf_t *perf) {
    if (cudnnStatus_t s = before_find(h)) return s;
    return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x, dy, cv, dw, want, got, perf);
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *alpha, cudnnTensorDescriptor_t xd, const void *x,
                                      cudnnFilterDescriptor_t wd, const void *w, cudnnConvolutionDescriptor_t cv,
                                      cudnnConvolutionFwdAlgo_t algo, void *ws, size_t ws_bytes, const void *beta,
                                      cudnnTensorDescriptor_t yd, void *y) {
    (void)ws, (void)ws_bytes;
    Conv c;
    if (!h || !alpha || !beta || !x || !w || !y || (unsigned)algo >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT)
        return CUDNN_STATUS_BAD_PARAM;
    if (cudnnStatus_t s = shapes(xd, wd, cv, yd, &c)) return s;
    const float a = *(const float *)alpha, b = *(const float *)beta;
    const float *X = (const float *)x, *W = (const float *)w;
    float *Y = (float *)y;
    return queue(h, [=] {
        std::vector<double> acc((size_t)c.n * c.k * c.oh * c.ow);
        each_term(c, [&](size_t xi, size_t wi, size_t yi) { acc[yi] += (double)X[xi] * W[wi]; });
        blend(Y, acc, a, b);
    });
}
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void *alpha, cudnnFilterDescriptor_t wd,
                                           const void *w, cudnnTensorDescriptor_t dyd, const void *dy,
                                           cudnnConvolutionDescriptor_t cv, cudnnConvolutionBwdDataAlgo_t algo,
                                           void *ws, size_t ws_bytes, const void *beta, cudnnTensorDescriptor_t dxd,
                                           void *dx) {
    (void)ws, (void)ws_bytes;
    Conv c;
    if (!h || !alpha || !beta || !w || !dy || !dx || (unsigned)algo >= CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT)
        return CUDNN_STATUS_BAD_PARAM;
    if (cudnnStatus_t s = shapes(dxd, wd, cv, dyd, &c)) return s;
    const float a = *(const float *)alpha, b = *(const float *)beta;
    const float *W = (const float *)w, *DY = (const float *)dy;
    float *DX = (float *)dx;
    return queue(h, [=] {
        std::vector<double> acc((size_t)c.n * c.c * c.h * c.w);
        each_term(c, [&](size_t xi, size_t wi, size_t yi) { acc[xi] += (double)DY[yi] * W[wi]; });
        blend(DX, acc, a, b);
    });
}
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *alpha, cudnnTensorDescriptor_t xd,
                                             const void *x, cudnnTensorDescriptor_t dyd, const void *dy,
                                             cudnnConvolutionDescriptor_t cv, cudnnConvolutionBwdFilterAlgo_t algo,
                                             void *ws, size_t ws_bytes, const void *beta, cudnnFilterDescriptor_t dwd,
                                             void *dw) {
    (void)ws, (void)ws_bytes;
    Conv c;
    if (!h || !alpha || !beta || !x || !dy || !dw || (unsigned)algo >= CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT)
        return CUDNN_STATUS_BAD_PARAM;
    if (cudnnStatus_t s = shapes(xd, dwd, cv, dyd, &c)) return s;
    const float a = *(const float *)alpha, b = *(const float *)beta;
    const float *X = (const float *)x, *DY = (const float *)dy;
    float *DW = (float *)dw;
    return queue(h, [=] {
        std::vector<double> acc((size_t)c.k * c.c * c.r * c.s);
        each_term(c, [&](size_t xi, size_t wi, size_t yi) { acc[wi] += (double)DY[yi] * X[xi]; });
        blend(DW, acc, a, b);
    });
}
cudnnStatus_t cudnnAddTensor(cudnnHandle_t h, const void *alpha, cudnnTensorDescriptor_t bd, const void *b,
                             const void *beta, cudnnTensorDescriptor_t yd, void *y) {
    if (!h || !alpha || !beta || !b || !y || !bd || !yd || !bd->set || !yd->set) return CUDNN_STATUS_BAD_PARAM;
    // the bias shape this stand-in supports: (1, C, 1, 1) over (N, C, H, W)
    if (bd->n != 1 || bd->c != yd->c || bd->h != 1 || bd->w != 1) return CUDNN_STATUS_NOT_SUPPORTED;
    const float a = *(const float *)alpha, be = *(const float *)beta;
    const float *B = (const float *)b;
    float *Y = (float *)y;
    const cudnnTensorStruct t = *yd;
    return queue(h, [=] {
        const size_t hw = (size_t)t.h * t.w;
        for (size_t i = 0; i < (size_t)t.n * t.c * hw; i++) {
            const double prev = be != 0.0f ? (double)be * Y[i] : 0.0;
            Y[i] = (float)((double)a * B[i / hw % (size_t)t.c] + prev);
        }
    });
}

} // extern "C"
