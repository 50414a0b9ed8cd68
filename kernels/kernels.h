/* kernels.h: the kernel table, one per device: every computation a layer, the loss and the
 * optimizer run, as plain functions with explicit shapes. Layers reach it through dp_exec
 * (x->k), so src/nn/ names no device; kernels/cpu/table.c fills the CPU table, and a CUDA
 * table (kernels/cuda/) fills the same entries with the same meaning, tested against the CPU
 * twins, which stay the reference. Pointers are on the table's device. Kernels accumulate
 * weight gradients (+=, as PyTorch's .grad) and overwrite everything else; every sum over
 * samples is taken in sample order within one call (data/chunks.h relies on that). */
#ifndef DP_KERNELS_H
#define DP_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/shapes.h"

/* What a kernel call runs on: the CPU's thread count, or a device's stream. The fields beyond
 * nthreads mean what the device's table makes of them (kernels/cuda/: a cudaStream_t, a
 * cublasHandle_t, TF32, the GPU ordinal). */
typedef struct {
    int nthreads;   /* CPU: OpenMP threads the call may use */
    void *stream;   /* a device stream to enqueue on (NULL: the device's default stream) */
    void *handle;   /* a math library handle bound to that stream (NULL: the table's own) */
    int fast_math;  /* matrix products and convolutions may trade precision for speed (CUDA: TF32) */
    int ordinal;    /* which device of its kind the stream is on, made current before each call (one
                       process may drive several: nccl --gpus) */
} dp_kctx;

struct dp_kcall; /* kernels/kcall.h */

typedef struct dp_kernels {
    const char *device; /* "cpu", "cuda" */

    /* convolution (shapes.h): workspace floats for a batch, forward, backward (dx may be NULL) */
    size_t (*conv2d_workspace_floats)(const dp_conv2d_dims *d, int batch, int nthreads);
    void (*conv2d_forward)(const dp_kctx *c, const dp_conv2d_dims *d, int batch, const float *x, const float *w,
                           const float *b, float *y, float *ws);
    void (*conv2d_backward)(const dp_kctx *c, const dp_conv2d_dims *d, int batch, const float *x, const float *w,
                            const float *dy, float *dx, float *dw, float *db, float *ws);
    /* fully connected: y (batch, out_f) = x (batch, in_f) w^T (out_f, in_f) + b */
    void (*linear_forward)(const dp_kctx *c, int batch, int in_f, int out_f, const float *x, const float *w,
                           const float *b, float *y);
    void (*linear_backward)(const dp_kctx *c, int batch, int in_f, int out_f, const float *x, const float *w,
                            const float *dy, float *dx, float *dw, float *db);
    /* element-wise over n floats: relu, its gradient from the output, y = a + b, y += x, copy */
    void (*relu_forward)(const dp_kctx *c, size_t n, const float *x, float *y);
    void (*relu_backward)(const dp_kctx *c, size_t n, const float *y, const float *dy, float *dx);
    void (*add)(const dp_kctx *c, size_t n, const float *a, const float *b, float *y);
    void (*copy)(const dp_kctx *c, size_t n, const float *x, float *y);
    /* pooling: max (argmax saved per output), global average */
    void (*maxpool_forward)(const dp_kctx *c, int batch, int ch, int h, int w, int k, int stride, int pad,
                            const float *x, float *y, int32_t *argmax);
    void (*maxpool_backward)(const dp_kctx *c, int batch, int ch, int h, int w, int k, int stride, int pad, int oh,
                             int ow, const float *dy,
                             const int32_t *argmax, float *dx);
    void (*avgpool_forward)(const dp_kctx *c, int batch, int ch, int hw, const float *x, float *y);
    void (*avgpool_backward)(const dp_kctx *c, int batch, int ch, int hw, const float *dy, float *dx);
    /* batch norm over x (batch, ch, hw), in the phases SyncBatchNorm needs; sums in float
     * pairs [sum (ch), sum of squares (ch)] that the executor may add over replicas;
     * ws: bn_workspace_floats(batch, ch, hw) floats of scratch (double partial sums) */
    size_t (*bn_workspace_floats)(int batch, int ch, int hw);
    void (*bn_sums)(const dp_kctx *c, int batch, int ch, int hw, const float *x, float *sums, float *ws);
    /* mean, invstd from the sums over count values (training; updates the running statistics
     * when update is set) or from the running statistics (training = 0) */
    void (*bn_stats)(const dp_kctx *c, int ch, int training, const float *sums, double count, float eps,
                     float momentum, int update, float *mean, float *invstd, float *run_mean, float *run_var);
    void (*bn_apply)(const dp_kctx *c, int batch, int ch, int hw, const float *x, const float *mean,
                     const float *invstd, const float *gamma, const float *beta, float *y);
    /* [sum dy, sum dy * xhat] of this call's samples */
    void (*bn_backward_sums)(const dp_kctx *c, int batch, int ch, int hw, const float *x, const float *dy,
                             const float *mean, const float *invstd, float *sums, float *ws);
    /* dgamma += local[ch:], dbeta += local[:ch]; dx (may be NULL) from the (summed) sums */
    void (*bn_backward)(const dp_kctx *c, int batch, int ch, int hw, const float *x, const float *dy,
                        const float *mean, const float *invstd, const float *gamma, const float *local,
                        const float *sums, double count, float *dx, float *dgamma, float *dbeta, float *ws);
    /* softmax cross-entropy of a batch: *loss = the summed loss (summed in sample order, then
     * rounded to float), *correct = the argmax hits; dlogits (may be NULL) = grad_scale * dL/dz */
    void (*softmax_xent)(const dp_kctx *c, int batch, int classes, const float *logits, const int32_t *labels,
                         float grad_scale, float *dlogits, float *loss, int32_t *correct);
    /* one torch.optim.SGD step over n floats: weight decay wd, momentum (buf) and nesterov */
    void (*sgd)(const dp_kctx *c, size_t n, float *p, const float *g, float *buf, float lr, float momentum,
                float wd, int nesterov);
    /* the fixed pairwise tree of core/treesum.h over n vectors into v[0], elements [lo, lo+count) */
    void (*tree_sum)(const dp_kctx *c, float *const *v, int n, size_t lo, size_t count, int clear);
    /* a replica's step metrics from its n lanes, where they were computed (so that they travel on
     * in one small buffer): out[0] = the lanes' losses added with the tree of core/treesum.h
     * (loss is left holding the tree's partial sums), out[1] = their hits summed, as a float */
    void (*lane_metrics)(const dp_kctx *c, int n, float *loss, const int32_t *correct, float *out);
    /* *flag = 1.0f when any of x[0..n) is NaN or Inf, else left as it was (the caller zeroes it):
       the SGD step's check of the gradients where they are, so that a device's check rides in its
       step metrics (optim/sgd.h) and costs no wait of its own */
    void (*nonfinite)(const dp_kctx *c, size_t n, const float *x, float *flag);
    /* a batch gathered from a data set held where the kernels run: sample i of x (ch, hw) is
       lut[ch * 256 + pixels[idx[i]]], the loader's normalisation table (dataset.h), and y[i] is
       labels[idx[i]] */
    void (*gather_batch)(const dp_kctx *c, int n, int ch, int hw, const uint8_t *pixels, const uint8_t *labels,
                         const int32_t *idx, const float *lut, float *x, int32_t *y);
    /* the same call of n lanes (kernels/kcall.h: one entry and shapes, each lane's own pointers and
       sample count) as one launch where the device has such a kernel, the lane a grid dimension;
       each lane's sums are its call's own, so the bits are those of the calls made one by one, in
       lane order (which is what the CPU's does) */
    void (*lanes)(const dp_kctx *c, int n, const struct dp_kcall *const *calls);
} dp_kernels;

extern const dp_kernels dp_cpu_kernels;
/* Which compiled variant of the CPU kernels this process runs (kernels/cpu/variant.h): "x86-64-v4
 * (AVX-512; chosen at run time)", "x86-64-v3 (AVX2, FMA; chosen at run time)", "x86-64 baseline (SSE2;
 * chosen at run time)" or the -march=native build's line, for --version and the log. */
const char *dp_cpu_kernel_variant(void);

#endif
