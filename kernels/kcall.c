/* kcall.c: kernel calls as data (kcall.h): running a record, and the recording table. */
#include "kernels/kcall.h"

#include <stdlib.h>
#include <string.h>

static const char *const names[] = {
    [DP_KC_CONV_FWD] = "conv2d_forward", [DP_KC_CONV_BWD] = "conv2d_backward", [DP_KC_LIN_FWD] = "linear_forward",
    [DP_KC_LIN_BWD] = "linear_backward", [DP_KC_RELU_FWD] = "relu_forward", [DP_KC_RELU_BWD] = "relu_backward",
    [DP_KC_ADD] = "add", [DP_KC_COPY] = "copy", [DP_KC_MAXPOOL_FWD] = "maxpool_forward",
    [DP_KC_MAXPOOL_BWD] = "maxpool_backward", [DP_KC_AVGPOOL_FWD] = "avgpool_forward",
    [DP_KC_AVGPOOL_BWD] = "avgpool_backward", [DP_KC_BN_SUMS] = "bn_sums", [DP_KC_BN_STATS] = "bn_stats",
    [DP_KC_BN_APPLY] = "bn_apply", [DP_KC_BN_BWD_SUMS] = "bn_backward_sums", [DP_KC_BN_BWD] = "bn_backward",
    [DP_KC_XENT] = "softmax_xent", [DP_KC_ROUND_BF16] = "round_bf16",
};

const char *dp_kcall_name(int kind) {
    return kind > 0 && kind <= DP_KC_ROUND_BF16 ? names[kind] : "an unknown kernel";
}

int dp_kcall_same(const dp_kcall *a, const dp_kcall *b) {
    const int conv = a->kind == DP_KC_CONV_FWD || a->kind == DP_KC_CONV_BWD;
    return a->kind == b->kind && (!conv || memcmp(&a->dims, &b->dims, sizeof a->dims) == 0);
}

/* ---- the recorder */

void dp_kcall_rec_reset(dp_kcall_rec *r) { r->n = 0, r->refused = NULL, r->out_of_memory = 0; }

void dp_kcall_rec_free(dp_kcall_rec *r) {
    free(r->calls);
    memset(r, 0, sizeof *r);
}

/* A new zeroed record of `kind` in c's recording, or NULL (noted) out of memory. */
static dp_kcall *rec(const dp_kctx *c, int kind) {
    dp_kcall_rec *r = c->stream;
    if (r->n == r->cap) {
        const int cap = r->cap ? 2 * r->cap : 64;
        dp_kcall *calls = realloc(r->calls, (size_t)cap * sizeof *calls);
        if (!calls) {
            r->out_of_memory = 1;
            return NULL;
        }
        r->calls = calls, r->cap = cap;
    }
    dp_kcall *a = &r->calls[r->n++];
    memset(a, 0, sizeof *a);
    a->kind = kind;
    return a;
}

#define P(k, v) (a->p[k] = (void *)(uintptr_t)(v))
#define REC(kind)                                                                                                  \
    dp_kcall *a = rec(c, kind);                                                                                    \
    if (!a) return

static void conv_fwd(const dp_kctx *c, const dp_conv2d_dims *d, int batch, const float *x, const float *w,
                     const float *b, float *y, float *ws) {
    REC(DP_KC_CONV_FWD);
    a->dims = *d, a->i[0] = batch;
    P(0, x), P(1, w), P(2, b), P(3, y), P(4, ws);
}
static void conv_bwd(const dp_kctx *c, const dp_conv2d_dims *d, int batch, const float *x, const float *w,
                     const float *dy, float *dx, float *dw, float *db, float *ws) {
    REC(DP_KC_CONV_BWD);
    a->dims = *d, a->i[0] = batch;
    P(0, x), P(1, w), P(2, dy), P(3, dx), P(4, dw), P(5, db), P(6, ws);
}
static void lin_fwd(const dp_kctx *c, int batch, int in_f, int out_f, const float *x, const float *w, const float *b,
                    float *y) {
    REC(DP_KC_LIN_FWD);
    a->i[0] = batch, a->i[1] = in_f, a->i[2] = out_f;
    P(0, x), P(1, w), P(2, b), P(3, y);
}
static void lin_bwd(const dp_kctx *c, int batch, int in_f, int out_f, const float *x, const float *w, const float *dy,
                    float *dx, float *dw, float *db) {
    REC(DP_KC_LIN_BWD);
    a->i[0] = batch, a->i[1] = in_f, a->i[2] = out_f;
    P(0, x), P(1, w), P(2, dy), P(3, dx), P(4, dw), P(5, db);
}
static void relu_fwd(const dp_kctx *c, size_t n, const float *x, float *y) {
    REC(DP_KC_RELU_FWD);
    a->z = n;
    P(0, x), P(1, y);
}
static void relu_bwd(const dp_kctx *c, size_t n, const float *y, const float *dy, float *dx) {
    REC(DP_KC_RELU_BWD);
    a->z = n;
    P(0, y), P(1, dy), P(2, dx);
}
static void add(const dp_kctx *c, size_t n, const float *x, const float *y, float *out) {
    REC(DP_KC_ADD);
    a->z = n;
    P(0, x), P(1, y), P(2, out);
}
static void copy(const dp_kctx *c, size_t n, const float *x, float *y) {
    REC(DP_KC_COPY);
    a->z = n;
    P(0, x), P(1, y);
}
static void round_bf16(const dp_kctx *c, size_t n, const float *x, float *y) {
    REC(DP_KC_ROUND_BF16);
    a->z = n;
    P(0, x), P(1, y);
}
static void maxpool_fwd(const dp_kctx *c, int batch, int ch, int h, int w, int k, int stride, int pad, const float *x,
                        float *y, int32_t *argmax) {
    REC(DP_KC_MAXPOOL_FWD);
    a->i[0] = batch, a->i[1] = ch, a->i[2] = h, a->i[3] = w, a->i[4] = k, a->i[5] = stride, a->i[6] = pad;
    P(0, x), P(1, y), P(2, argmax);
}
static void maxpool_bwd(const dp_kctx *c, int batch, int ch, int h, int w, int k, int stride, int pad, int oh, int ow,
                        const float *dy, const int32_t *argmax, float *dx) {
    REC(DP_KC_MAXPOOL_BWD);
    a->i[0] = batch, a->i[1] = ch, a->i[2] = h, a->i[3] = w, a->i[4] = k, a->i[5] = stride, a->i[6] = pad;
    a->i[7] = oh, a->i[8] = ow;
    P(0, dy), P(1, argmax), P(2, dx);
}
static void avgpool_fwd(const dp_kctx *c, int batch, int ch, int hw, const float *x, float *y) {
    REC(DP_KC_AVGPOOL_FWD);
    a->i[0] = batch, a->i[1] = ch, a->i[2] = hw;
    P(0, x), P(1, y);
}
static void avgpool_bwd(const dp_kctx *c, int batch, int ch, int hw, const float *dy, float *dx) {
    REC(DP_KC_AVGPOOL_BWD);
    a->i[0] = batch, a->i[1] = ch, a->i[2] = hw;
    P(0, dy), P(1, dx);
}
static size_t conv_ws(const dp_conv2d_dims *d, int batch, int nthreads) {
    return dp_cpu_kernels.conv2d_workspace_floats(d, batch, nthreads);
}
static size_t bn_ws(int batch, int ch, int hw) { return dp_cpu_kernels.bn_workspace_floats(batch, ch, hw); }
static void bn_sums(const dp_kctx *c, int batch, int ch, int hw, const float *x, float *sums, float *ws) {
    REC(DP_KC_BN_SUMS);
    a->i[0] = batch, a->i[1] = ch, a->i[2] = hw;
    P(0, x), P(1, sums), P(2, ws);
}
static void bn_stats(const dp_kctx *c, int ch, int training, const float *sums, double count, float eps,
                     float momentum, int update, float *mean, float *invstd, float *run_mean, float *run_var) {
    REC(DP_KC_BN_STATS);
    a->i[0] = ch, a->i[1] = training, a->i[2] = update, a->count = count, a->f[0] = eps, a->f[1] = momentum;
    P(0, sums), P(1, mean), P(2, invstd), P(3, run_mean), P(4, run_var);
}
static void bn_apply(const dp_kctx *c, int batch, int ch, int hw, const float *x, const float *mean,
                     const float *invstd, const float *gamma, const float *beta, float *y) {
    REC(DP_KC_BN_APPLY);
    a->i[0] = batch, a->i[1] = ch, a->i[2] = hw;
    P(0, x), P(1, mean), P(2, invstd), P(3, gamma), P(4, beta), P(5, y);
}
static void bn_bwd_sums(const dp_kctx *c, int batch, int ch, int hw, const float *x, const float *dy,
                        const float *mean, const float *invstd, float *sums, float *ws) {
    REC(DP_KC_BN_BWD_SUMS);
    a->i[0] = batch, a->i[1] = ch, a->i[2] = hw;
    P(0, x), P(1, dy), P(2, mean), P(3, invstd), P(4, sums), P(5, ws);
}
static void bn_bwd(const dp_kctx *c, int batch, int ch, int hw, const float *x, const float *dy, const float *mean,
                   const float *invstd, const float *gamma, const float *local, const float *sums, double count,
                   float *dx, float *dgamma, float *dbeta, float *ws) {
    REC(DP_KC_BN_BWD);
    a->i[0] = batch, a->i[1] = ch, a->i[2] = hw, a->count = count;
    P(0, x), P(1, dy), P(2, mean), P(3, invstd), P(4, gamma), P(5, local), P(6, sums), P(7, dx), P(8, dgamma),
        P(9, dbeta), P(10, ws);
}
static void xent(const dp_kctx *c, int batch, int classes, const float *logits, const int32_t *labels,
                 float grad_scale, float *dlogits, float *loss, int32_t *correct) {
    REC(DP_KC_XENT);
    a->i[0] = batch, a->i[1] = classes, a->f[0] = grad_scale;
    P(0, logits), P(1, labels), P(2, dlogits), P(3, loss), P(4, correct);
}

/* The entries no layer calls (the optimizer's, the executor's own): refused, so that a change
 * that records one fails the step (dp_kcall_rec.refused) rather than dropping the call. */
static void refuse(const dp_kctx *c, const char *name) {
    dp_kcall_rec *r = c->stream;
    if (!r->refused) r->refused = name;
}
static void sgd(const dp_kctx *c, size_t n, float *p, const float *g, float *buf, float lr, float momentum, float wd,
                int nesterov) {
    (void)n, (void)p, (void)g, (void)buf, (void)lr, (void)momentum, (void)wd, (void)nesterov;
    refuse(c, "sgd");
}
static void tree(const dp_kctx *c, float *const *v, int n, size_t lo, size_t count, int clear) {
    (void)v, (void)n, (void)lo, (void)count, (void)clear;
    refuse(c, "tree_sum");
}
static void lane_metrics(const dp_kctx *c, int n, float *loss, const int32_t *correct, float *out) {
    (void)n, (void)loss, (void)correct, (void)out;
    refuse(c, "lane_metrics");
}
static void nonfinite(const dp_kctx *c, size_t n, const float *x, float *flag) {
    (void)n, (void)x, (void)flag;
    refuse(c, "nonfinite");
}
static void gather(const dp_kctx *c, int n, int ch, int hw, const uint8_t *pixels, const uint8_t *labels,
                   const int32_t *idx, const float *lut, float *x, int32_t *y) {
    (void)n, (void)ch, (void)hw, (void)pixels, (void)labels, (void)idx, (void)lut, (void)x, (void)y;
    refuse(c, "gather_batch");
}
static void lanes(const dp_kctx *c, int n, const dp_kcall *const *calls) {
    (void)n, (void)calls;
    refuse(c, "lanes");
}

const dp_kernels dp_kcall_recorder = {
    .device = "recorder",
    .conv2d_workspace_floats = conv_ws,
    .conv2d_forward = conv_fwd,
    .conv2d_backward = conv_bwd,
    .linear_forward = lin_fwd,
    .linear_backward = lin_bwd,
    .relu_forward = relu_fwd,
    .relu_backward = relu_bwd,
    .add = add,
    .copy = copy,
    .round_bf16 = round_bf16,
    .maxpool_forward = maxpool_fwd,
    .maxpool_backward = maxpool_bwd,
    .avgpool_forward = avgpool_fwd,
    .avgpool_backward = avgpool_bwd,
    .bn_workspace_floats = bn_ws,
    .bn_sums = bn_sums,
    .bn_stats = bn_stats,
    .bn_apply = bn_apply,
    .bn_backward_sums = bn_bwd_sums,
    .bn_backward = bn_bwd,
    .softmax_xent = xent,
    .sgd = sgd,
    .tree_sum = tree,
    .lane_metrics = lane_metrics,
    .nonfinite = nonfinite,
    .gather_batch = gather,
    .lanes = lanes,
};
