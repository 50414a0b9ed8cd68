// conv_cudnn.cu: the CUDA table's convolution entries. With cuDNN (a build that found it) the
// forward, data-gradient and weight-gradient passes are cuDNN's, with algorithms from its
// heuristics restricted to deterministic ones that fit the workspace the layer reserved (the
// im2col path's, which is ample), fp32 FMA math unless --tf32; the bias and its gradient are
// fixed-order kernels. Descriptors and algorithm choices are cached per shape and GPU, so a shape
// always runs the same algorithm: the same bits every run, and for every replica count (a lane has
// the same shape whatever the replicas). A shape whose plan could not be made fails every call (a
// note the device's wait reports). cuDNN handles are one per host thread and GPU (support.cu); the
// handles and plans of a GPU go at its last close. Which of the two a shape uses is a fixed rule, not a timing
// (a timing could pick differently in another run): cuDNN from 1M multiply-adds per sample
// (ResNet-18's convolutions), im2col + cuBLAS below (LeNet's), where cuDNN's per-call host cost
// outweighs its kernels (H100: LeNet epoch 4.1 s against 1.75 s when launched eagerly; docs/gpu.md).
// DPTRAIN_CONV=gemm or =cudnn forces one for every shape. Within cuDNN, DPTRAIN_CONV_ALGOS=time
// chooses each pass's deterministic algorithm by cuDNN's timings, and a record (kernels/conv_algos.h)
// given there replays a run's choices; every choice is noted in the process's record.
#include <mutex>
#include <stdlib.h>
#include <string.h>

#include "dp_config.h"
#include "kernels/conv_algos.h"
#include "kernels/cuda/common.cuh"

void dp_cuda_conv2d_forward_gemm(const dp_kctx *c, const dp_conv2d_dims *d, int batch, const float *x, const float *w,
                                 const float *b, float *y, float *ws);
void dp_cuda_conv2d_backward_gemm(const dp_kctx *c, const dp_conv2d_dims *d, int batch, const float *x,
                                  const float *w, const float *dy, float *dx, float *dw, float *db, float *ws);

#if DP_HAVE_CUDNN
#include <cudnn.h>

static size_t gemm_ws_bytes(const dp_conv2d_dims *d, int batch) {
    const size_t K = (size_t)d->in_c * d->k * d->k, cols = (size_t)batch * d->out_h * d->out_w;
    return (2 * K * cols + (size_t)d->out_c * cols) * sizeof(float);
}

#define CUDNN_MIN_MACS 1000000.0

static int forced(void) { /* 0: the rule, 1: always cuDNN, 2: never */
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("DPTRAIN_CONV");
        v = e && strcmp(e, "cudnn") == 0 ? 1 : e && strcmp(e, "gemm") == 0 ? 2 : 0;
    }
    return v;
}

static int use_cudnn(const dp_conv2d_dims *d) {
    if (forced()) return forced() == 1;
    const double macs = (double)d->out_c * d->out_h * d->out_w * d->in_c * d->k * d->k;
    return macs >= CUDNN_MIN_MACS;
}

typedef struct {
    int used, dev; /* a slot in use, and the device its algorithms were chosen on */
    dp_conv2d_dims d;
    int batch, tf32, ok;
    char why[256]; /* ok == 0: why the plan failed, noted again at every call of that shape */
    cudnnTensorDescriptor_t x, y, bias;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    int fwd_ok, data_ok, filter_ok; /* cuDNN has a deterministic algorithm for the pass (else im2col) */
    size_t ws_bytes;
} plan_t;

/* Slots are reused, never moved: a plan's address stays valid while another thread adds one. */
#define MAX_PLANS 256
static plan_t plans[MAX_PLANS];
static std::mutex plans_mu;

static void destroy_dnn(void *h, void *aux) {
    (void)aux;
    cudnnDestroy((cudnnHandle_t)h);
}

static void *make_dnn(void **aux) {
    (void)aux;
    cudnnHandle_t h = nullptr;
    cudnnStatus_t s = cudnnCreate(&h);
    if (s == CUDNN_STATUS_SUCCESS) return h;
    dp_cuda_note("cudnnCreate", cudnnGetErrorString(s));
    return nullptr;
}

static const char *bind_dnn(void *h, cudaStream_t stream) {
    const cudnnStatus_t s = cudnnSetStream((cudnnHandle_t)h, stream);
    return s == CUDNN_STATUS_SUCCESS ? nullptr : cudnnGetErrorString(s);
}

/* This thread's cuDNN handle on the call's device (made current first: one thread may drive
 * several, nccl --gpus), bound to the call's stream. */
static cudnnHandle_t dnn(const dp_kctx *c) {
    return (cudnnHandle_t)dp_cuda_thread_handle(c, DP_CUDA_HANDLE_CUDNN, make_dnn, destroy_dnn, "cudnnSetStream",
                                                bind_dnn);
}

static void plan_free(plan_t *p) {
    if (p->x) cudnnDestroyTensorDescriptor(p->x);
    if (p->y) cudnnDestroyTensorDescriptor(p->y);
    if (p->bias) cudnnDestroyTensorDescriptor(p->bias);
    if (p->w) cudnnDestroyFilterDescriptor(p->w);
    if (p->conv) cudnnDestroyConvolutionDescriptor(p->conv);
    p->x = p->y = p->bias = nullptr, p->w = nullptr, p->conv = nullptr;
}

void dp_cuda_conv_release(int dev) {
    std::lock_guard<std::mutex> g(plans_mu);
    for (int i = 0; i < MAX_PLANS; i++)
        if (plans[i].used && plans[i].dev == dev) plan_free(&plans[i]), memset(&plans[i], 0, sizeof plans[i]);
}

#define DNN(call)                                                                     \
    do {                                                                              \
        cudnnStatus_t s_ = (call);                                                    \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                             \
            snprintf(p->why, sizeof p->why, "%s: %s", #call, cudnnGetErrorString(s_)); \
            return 0;                                                                 \
        }                                                                             \
    } while (0)

static int math_ok(cudnnMathType_t m, int tf32) { return tf32 || m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH; }

// Per pass, the first deterministic algorithm within the workspace of a list: cuDNN's heuristics'
// (the default), its timings of every algorithm on this GPU (DPTRAIN_CONV_ALGOS=time: cudnnFind*,
// fastest first), or the one a replayed record names (kernels/conv_algos.h; validated against the
// heuristics' list, which holds every algorithm). A pass without one (some shapes have no
// deterministic weight-gradient algorithm in fp32) runs as im2col + cuBLAS, always for that shape.
// pin: the recorded algorithm, -1 for im2col, -2 for none recorded.
template <typename Perf, typename Algo>
static int pick(const Perf *f, int n, const plan_t *p, int pin, Algo *out) {
    for (int i = 0; i < n && pin != -1; i++)
        if (f[i].status == CUDNN_STATUS_SUCCESS && f[i].determinism == CUDNN_DETERMINISTIC &&
            f[i].memory <= p->ws_bytes && math_ok(f[i].mathType, p->tf32) && (pin == -2 || (int)f[i].algo == pin)) {
            *out = f[i].algo;
            return 1;
        }
    return 0;
}

#define PICK(list, pin, out, ok, pass)                                                                            \
    do {                                                                                                          \
        ok = pick(list, n, p, pin, &out);                                                                         \
        if (!ok && pin >= 0) {                                                                                    \
            snprintf(p->why, sizeof p->why, "the recorded %s algorithm %d is not a deterministic one within the " \
                     "workspace on this GPU (DPTRAIN_CONV_ALGOS)", pass, pin);                                    \
            return 0;                                                                                             \
        }                                                                                                         \
    } while (0)

static int make_plan(cudnnHandle_t h, plan_t *p, int timed) {
    const dp_conv2d_dims *d = &p->d;
    DNN(cudnnCreateTensorDescriptor(&p->x));
    DNN(cudnnCreateTensorDescriptor(&p->y));
    DNN(cudnnCreateTensorDescriptor(&p->bias));
    DNN(cudnnCreateFilterDescriptor(&p->w));
    DNN(cudnnCreateConvolutionDescriptor(&p->conv));
    DNN(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, p->batch, d->in_c, d->in_h, d->in_w));
    DNN(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, p->batch, d->out_c, d->out_h, d->out_w));
    DNN(cudnnSetTensor4dDescriptor(p->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, d->out_c, 1, 1));
    DNN(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, d->out_c, d->in_c, d->k, d->k));
    DNN(cudnnSetConvolution2dDescriptor(p->conv, d->pad, d->pad, d->stride, d->stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                        CUDNN_DATA_FLOAT));
    // fp32: FMA only (no tensor cores), as PyTorch with allow_tf32 off
    DNN(cudnnSetConvolutionMathType(p->conv, p->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
    dp_conv_algo rec;
    const int pinned = dp_conv_algos_pinned(d, p->batch, p->tf32, &rec);
    if (!pinned) rec.fwd = rec.data = rec.filter = -2;
    timed = timed && !pinned;
    int n = 0;
    cudnnConvolutionFwdAlgoPerf_t f[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    if (timed)
        DNN(cudnnFindConvolutionForwardAlgorithm(h, p->x, p->w, p->conv, p->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n,
                                                 f));
    else
        DNN(cudnnGetConvolutionForwardAlgorithm_v7(h, p->x, p->w, p->conv, p->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n,
                                                   f));
    PICK(f, rec.fwd, p->fwd, p->fwd_ok, "forward");
    cudnnConvolutionBwdDataAlgoPerf_t bd[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    if (timed)
        DNN(cudnnFindConvolutionBackwardDataAlgorithm(h, p->w, p->y, p->conv, p->x,
                                                      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, bd));
    else
        DNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p->w, p->y, p->conv, p->x,
                                                         CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, bd));
    PICK(bd, rec.data, p->bwd_data, p->data_ok, "data-gradient");
    cudnnConvolutionBwdFilterAlgoPerf_t bf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    if (timed)
        DNN(cudnnFindConvolutionBackwardFilterAlgorithm(h, p->x, p->y, p->conv, p->w,
                                                        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, bf));
    else
        DNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p->x, p->y, p->conv, p->w,
                                                           CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, bf));
    PICK(bf, rec.filter, p->bwd_filter, p->filter_ok, "weight-gradient");
    return 1;
}

/* DPTRAIN_CONV_ALGOS: "time" chooses each shape's algorithms by cuDNN's timings (outside a graph
 * capture: cudnnFind* allocates and synchronises), a record (conv_algos.h) replays its choices;
 * unset: cuDNN's heuristics. 1: time. A bad record is noted at every plan. */
static int algos_env(char *why, size_t cap) { return dp_conv_algos_pin_env(why, cap); }

/* The plan of a shape on the current device, made at its first call; NULL (noted, so the call
 * fails at the next wait) when it could not be made, at that call and at every later one. */
static const plan_t *plan_for(const dp_kctx *c, cudnnHandle_t h, const dp_conv2d_dims *d, int batch) {
    std::lock_guard<std::mutex> g(plans_mu);
    const int tf32 = c ? c->fast_math : 0, dev = dp_cuda_current_device();
    plan_t *p = nullptr;
    for (int i = 0; i < MAX_PLANS; i++) {
        plan_t *q = &plans[i];
        if (!q->used) {
            if (!p) p = q;
            continue;
        }
        if (q->dev == dev && q->batch == batch && q->tf32 == tf32 && !memcmp(&q->d, d, sizeof *d)) {
            if (!q->ok) dp_cuda_note("cuDNN convolution plan", q->why);
            return q->ok ? q : nullptr;
        }
    }
    if (!p) return dp_cuda_note("cuDNN", "more than 256 convolution shapes"), nullptr;
    memset(p, 0, sizeof *p);
    p->used = 1, p->dev = dev, p->d = *d, p->batch = batch, p->tf32 = tf32, p->ws_bytes = gemm_ws_bytes(d, batch);
    char bad[160];
    const int env = algos_env(bad, sizeof bad);
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (env == 1 && cudaStreamIsCapturing(dp_stream(c), &cap) != cudaSuccess) cap = cudaStreamCaptureStatusActive;
    if (env < 0) snprintf(p->why, sizeof p->why, "DPTRAIN_CONV_ALGOS: %s", bad), p->ok = 0;
    else p->ok = make_plan(h, p, env == 1 && cap == cudaStreamCaptureStatusNone);
    if (!p->ok) { /* kept, so that every call of the shape fails the same way */
        plan_free(p);
        dp_cuda_note("cuDNN convolution plan", p->why);
        return nullptr;
    }
    const dp_conv_algo rec = {*d, batch, tf32, p->fwd_ok ? (int)p->fwd : -1, p->data_ok ? (int)p->bwd_data : -1,
                              p->filter_ok ? (int)p->bwd_filter : -1};
    dp_conv_algos_note(&rec); /* the process's record of its choices (conv_algos.h) */
    if (getenv("DPTRAIN_CONV_LOG")) // which algorithm each pass of each shape runs (docs/gpu.md)
        fprintf(stderr, "conv %dx%dx%d -> %d k%d s%d p%d batch %d tf32 %d: forward %d, data %d, filter %d (-1: im2col)\n",
                d->in_c, d->in_h, d->in_w, d->out_c, d->k, d->stride, d->pad, batch, tf32,
                p->fwd_ok ? (int)p->fwd : -1, p->data_ok ? (int)p->bwd_data : -1, p->filter_ok ? (int)p->bwd_filter : -1);
    return p;
}

// db[m] += sum over samples and positions of dy (NCHW), in a fixed order: one block per channel.
__global__ void bias_grad_nchw_k(int batch, int M, size_t P, const float *dy, float *db) {
    const int m = blockIdx.x;
    double acc = 0.0;
    const size_t n = (size_t)batch * P;
    for (size_t e = threadIdx.x; e < n; e += blockDim.x) acc += dy[((e / P) * M + m) * P + e % P];
    acc = dp_block_sum(acc);
    if (threadIdx.x == 0) db[m] = __fadd_rn(db[m], (float)acc);
}

static const float one = 1.0f, zero = 0.0f;

static void cudnn_forward(const dp_kctx *c, const dp_conv2d_dims *d, int batch, const float *x, const float *w,
                          const float *b, float *y, float *ws) {
    cudnnHandle_t h = dnn(c);
    const plan_t *p = h ? plan_for(c, h, d, batch) : nullptr;
    if (!p) return;
    if (!p->fwd_ok) return dp_cuda_conv2d_forward_gemm(c, d, batch, x, w, b, y, ws);
    cudnnStatus_t s = cudnnConvolutionForward(h, &one, p->x, x, p->w, w, p->conv, p->fwd, ws, p->ws_bytes, &zero, p->y, y);
    if (s == CUDNN_STATUS_SUCCESS && b) s = cudnnAddTensor(h, &one, p->bias, b, &one, p->y, y);
    if (s != CUDNN_STATUS_SUCCESS) dp_cuda_note("cudnnConvolutionForward", cudnnGetErrorString(s));
}

static void cudnn_backward(const dp_kctx *c, const dp_conv2d_dims *d, int batch, const float *x, const float *w,
                           const float *dy, float *dx, float *dw, float *db, float *ws) {
    cudnnHandle_t h = dnn(c);
    const plan_t *p = h ? plan_for(c, h, d, batch) : nullptr;
    if (!p) return;
    if (!p->data_ok) return dp_cuda_conv2d_backward_gemm(c, d, batch, x, w, dy, dx, dw, db, ws);
    if (!p->filter_ok) { // weight and bias gradients by im2col, the input's by cuDNN
        dp_cuda_conv2d_backward_gemm(c, d, batch, x, w, dy, nullptr, dw, db, ws);
    } else {
        // weight gradients accumulate (beta = 1), as PyTorch's .grad
        cudnnStatus_t s = cudnnConvolutionBackwardFilter(h, &one, p->x, x, p->y, dy, p->conv, p->bwd_filter, ws,
                                                         p->ws_bytes, &one, p->w, dw);
        if (s != CUDNN_STATUS_SUCCESS) return dp_cuda_note("cudnnConvolutionBackwardFilter", cudnnGetErrorString(s));
    }
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    if (db && p->filter_ok) {
        DP_LAUNCH(bias_grad_nchw_k, d->out_c, DP_CUDA_THREADS, 0, dp_stream(c))(batch, d->out_c, (size_t)d->out_h * d->out_w,
                                                                        dy, db);
        DP_LAUNCHED("conv2d bias gradient");
    }
    if (!dx) return;
    s = cudnnConvolutionBackwardData(h, &one, p->w, w, p->y, dy, p->conv, p->bwd_data, ws, p->ws_bytes, &zero, p->x, dx);
    if (s != CUDNN_STATUS_SUCCESS) dp_cuda_note("cudnnConvolutionBackwardData", cudnnGetErrorString(s));
}

#else
void dp_cuda_conv_release(int dev) { (void)dev; }
#endif

extern "C" void dp_cuda_conv2d_forward(const dp_kctx *c, const dp_conv2d_dims *d, int batch, const float *x,
                                       const float *w, const float *b, float *y, float *ws) {
    if (batch <= 0) return;
#if DP_HAVE_CUDNN
    if (use_cudnn(d)) return cudnn_forward(c, d, batch, x, w, b, y, ws);
#endif
    dp_cuda_conv2d_forward_gemm(c, d, batch, x, w, b, y, ws);
}

extern "C" void dp_cuda_conv2d_backward(const dp_kctx *c, const dp_conv2d_dims *d, int batch, const float *x,
                                        const float *w, const float *dy, float *dx, float *dw, float *db, float *ws) {
    if (batch <= 0) return;
#if DP_HAVE_CUDNN
    if (use_cudnn(d)) return cudnn_backward(c, d, batch, x, w, dy, dx, dw, db, ws);
#endif
    dp_cuda_conv2d_backward_gemm(c, d, batch, x, w, dy, dx, dw, db, ws);
}

extern "C" const char *dp_cuda_conv_impl(void) {
#if DP_HAVE_CUDNN
    return forced() == 1 ? "cuDNN (DPTRAIN_CONV=cudnn)" : forced() == 2 ? "im2col + cuBLAS (DPTRAIN_CONV=gemm)"
                                                                  : "cuDNN from 1M MACs per sample, else im2col + cuBLAS";
#else
    return "im2col + cuBLAS";
#endif
}
