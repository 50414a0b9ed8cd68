/* table.c: the CPU kernel table (kernels/kernels.h) over the kernels of kernels/cpu/. */
#include <string.h>

#include "core/treesum.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/batchnorm.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/fused.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/loss.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/sgd.h"
#include "kernels/kcall.h"
#include "kernels/kernels.h"

static size_t cpu_conv2d_workspace_floats(const dp_conv2d_dims *d, int batch, int nthreads) {
    return conv2d_workspace_floats(d, batch, nthreads);
}
static void cpu_conv2d_forward(const dp_kctx *c, const dp_conv2d_dims *d, int batch, const float *x, const float *w,
                     const float *b, float *y, float *ws) {
    conv2d_forward_cpu(d, batch, x, w, b, y, ws, c->nthreads);
}
static void cpu_conv2d_backward(const dp_kctx *c, const dp_conv2d_dims *d, int batch, const float *x, const float *w,
                     const float *dy, float *dx, float *dw, float *db, float *ws) {
    conv2d_backward_cpu(d, batch, x, w, dy, dx, dw, db, ws, c->nthreads);
}
static void cpu_linear_forward(const dp_kctx *c, int batch, int in_f, int out_f, const float *x, const float *w, const float *b,
                    float *y) {
    linear_forward_cpu(batch, in_f, out_f, x, w, b, y, c->nthreads);
}
static void cpu_linear_backward(const dp_kctx *c, int batch, int in_f, int out_f, const float *x, const float *w, const float *dy,
                    float *dx, float *dw, float *db) {
    linear_backward_cpu(batch, in_f, out_f, x, w, dy, dx, dw, db, c->nthreads);
}
static void cpu_relu_forward(const dp_kctx *c, size_t n, const float *x, float *y) { relu_forward_cpu(n, x, y, c->nthreads); }
static void cpu_relu_backward(const dp_kctx *c, size_t n, const float *y, const float *dy, float *dx) {
    relu_backward_cpu(n, y, dy, dx, c->nthreads);
}
static void cpu_add(const dp_kctx *c, size_t n, const float *a, const float *b, float *y) {
    add_forward_cpu(n, a, b, y, c->nthreads);
}
static void cpu_round_bf16(const dp_kctx *c, size_t n, const float *x, float *y) {
    round_bf16_cpu(n, x, y, c->nthreads);
}
static void cpu_copy(const dp_kctx *c, size_t n, const float *x, float *y) {
    (void)c;
    if (n) memcpy(y, x, n * sizeof(float));
}
static void cpu_maxpool_forward(const dp_kctx *c, int batch, int ch, int h, int w, int k, int stride, int pad, const float *x,
                        float *y, int32_t *argmax) {
    maxpool2d_forward_cpu(batch, ch, h, w, k, stride, pad, x, y, argmax, c->nthreads);
}
static void cpu_maxpool_backward(const dp_kctx *c, int batch, int ch, int h, int w, int k, int stride, int pad, int oh, int ow,
                        const float *dy, const int32_t *argmax, float *dx) {
    (void)k, (void)stride, (void)pad; /* the CPU scatters through the argmax */
    maxpool2d_backward_cpu(batch, ch, h, w, oh, ow, dy, argmax, dx, c->nthreads);
}
static void cpu_avgpool_forward(const dp_kctx *c, int batch, int ch, int hw, const float *x, float *y) {
    global_avgpool_forward_cpu(batch, ch, hw, x, y, c->nthreads);
}
static void cpu_avgpool_backward(const dp_kctx *c, int batch, int ch, int hw, const float *dy, float *dx) {
    global_avgpool_backward_cpu(batch, ch, hw, dy, dx, c->nthreads);
}
/* two double arrays of ch for the sums */
static size_t cpu_bn_workspace_floats(int batch, int ch, int hw) {
    (void)batch, (void)hw;
    return 4 * (size_t)ch;
}
static void cpu_bn_sums(const dp_kctx *c, int batch, int ch, int hw, const float *x, float *sums, float *ws) {
    batchnorm_sums_cpu(batch, ch, hw, x, sums, (double *)(void *)ws, c->nthreads);
}
static void cpu_bn_stats(const dp_kctx *c, int ch, int training, const float *sums, double count, float eps,
                     float momentum, int update, float *mean, float *invstd, float *run_mean, float *run_var) {
    (void)c;
    batchnorm_finalize_cpu(ch, training, sums, count, eps, momentum, update, mean, invstd, run_mean, run_var);
}
static void cpu_bn_apply(const dp_kctx *c, int batch, int ch, int hw, const float *x, const float *mean,
                     const float *invstd, const float *gamma, const float *beta, float *y) {
    batchnorm_apply_cpu(batch, ch, hw, x, mean, invstd, gamma, beta, y, c->nthreads);
}
static void cpu_bn_backward_sums(const dp_kctx *c, int batch, int ch, int hw, const float *x, const float *dy,
                        const float *mean, const float *invstd, float *sums, float *ws) {
    batchnorm_backward_sums_cpu(batch, ch, hw, x, dy, mean, invstd, sums, (double *)(void *)ws, c->nthreads);
}
static void cpu_bn_backward(const dp_kctx *c, int batch, int ch, int hw, const float *x, const float *dy, const float *mean,
                   const float *invstd, const float *gamma, const float *local, const float *sums, double count,
                   float *dx, float *dgamma, float *dbeta, float *ws) {
    batchnorm_backward_cpu(batch, ch, hw, x, dy, mean, invstd, gamma, local, sums, count, dx, dgamma, dbeta,
                           (double *)(void *)ws, c->nthreads);
}
static void cpu_softmax_xent(const dp_kctx *c, int batch, int classes, const float *logits, const int32_t *labels,
                 float grad_scale, float *dlogits, float *loss, int32_t *correct) {
    (void)c;
    int ok = 0;
    *loss = batch ? (float)softmax_xent_cpu(batch, classes, logits, labels, grad_scale, dlogits, &ok) : 0.0f;
    *correct = ok;
}
static void cpu_sgd(const dp_kctx *c, size_t n, float *p, const float *g, float *buf, float lr, float momentum, float wd,
                int nesterov) {
    (void)c;
    sgd_step_cpu(n, p, g, buf, lr, momentum, wd, nesterov);
}
static void cpu_tree_sum(const dp_kctx *c, float *const *v, int n, size_t lo, size_t count, int clear) {
    (void)c;
    dp_tree_sum(v, n, lo, count, clear);
}
static void cpu_lane_metrics(const dp_kctx *c, int n, float *loss, const int32_t *correct, float *out) {
    (void)c;
    long hits = 0;
    for (int l = 0; l < n; l++) hits += correct[l];
    out[0] = dp_tree_sum_scalars(loss, n, 1);
    out[1] = (float)hits;
}
static void cpu_nonfinite(const dp_kctx *c, size_t n, const float *x, float *flag) {
    (void)c;
    if (!all_finite_cpu(x, n)) *flag = 1.0f;
}

static void cpu_gather_batch(const dp_kctx *c, int n, int ch, int hw, const uint8_t *pixels, const uint8_t *labels,
                   const int32_t *idx, const float *lut, float *x, int32_t *y) {
    (void)c;
    const size_t chw = (size_t)ch * (size_t)hw;
    for (int i = 0; i < n; i++) {
        const uint8_t *src = pixels + (size_t)idx[i] * chw;
        float *dst = x + (size_t)i * chw;
        for (int k = 0; k < ch; k++)
            for (int p = 0; p < hw; p++) dst[(size_t)k * hw + p] = lut[k * 256 + src[(size_t)k * hw + p]];
        y[i] = labels[idx[i]];
    }
}

/* the lanes one after the other, in order: the reference the devices' one-launch kernels equal */
static void cpu_lanes(const dp_kctx *c, int n, const dp_kcall *const *calls) {
    dp_kcall_lanes_in_order(&dp_cpu_kernels, c, n, calls);
}

/* the fused entries' CPU twins (kernels/cpu/fused.c) */
#define cpu_conv2d_relu_forward dp_cpu_conv2d_relu_forward
#define cpu_bn_apply_relu dp_cpu_bn_apply_relu
#define cpu_maxpool_relu_backward dp_cpu_maxpool_relu_backward

/* Every entry of kernels.def is cpu_<entry> above: one missing does not compile. */
const dp_kernels dp_cpu_kernels = {
    "cpu",
#define DP_KDEF_PREFIX cpu_
#include "kernels/kdef_table.h"
};
