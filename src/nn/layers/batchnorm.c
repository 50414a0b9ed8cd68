/* BatchNorm1d / BatchNorm2d (by input shape) with PyTorch's semantics: batch statistics in
 * training with the biased variance for normalising and the unbiased one for the running
 * estimate (momentum 0.1), running statistics in eval. Sums come out through forward_sums /
 * backward_sums so the executor can add them over replicas first (SyncBatchNorm).
 * ctx: mean[C], invstd[C], local sum_dy[C], local sum_dy_xhat[C]. sync: two sums of C. */
#include "nn/fuse.h"
#include "nn/layer.h"

static int hw_of(const dp_layer *l) { return l->in_shape[0].h * l->in_shape[0].w; }

static dp_status plan(dp_layer *l, dp_layout *params, dp_layout *buffers) {
    const int c = l->in_shape[0].c;
    l->out = l->in_shape[0];
    DP_TRY(dp_layer_add_tensor(params, l, "weight", (size_t)c, DP_TENSOR_BN, &l->poff[0]));
    DP_TRY(dp_layer_add_tensor(params, l, "bias", (size_t)c, DP_TENSOR_BN, &l->poff[1]));
    DP_TRY(dp_layer_add_tensor(buffers, l, "running_mean", (size_t)c, DP_TENSOR_BN, &l->boff[0]));
    DP_TRY(dp_layer_add_tensor(buffers, l, "running_var", (size_t)c, DP_TENSOR_BN, &l->boff[1]));
    l->ctx_fixed = 4 * (size_t)c;
    l->sync_floats = 2 * (size_t)c;
    return DP_OK;
}

/* The kernels' partial sums: as many as the table asks for this shape. */
static size_t ws_floats(const dp_layer *l, const dp_kernels *k, int batch, int nthreads) {
    (void)nthreads;
    return k->bn_workspace_floats(batch, l->in_shape[0].c, hw_of(l));
}

static void init(const dp_layer *l, float *params, float *buffers, dp_rng *rng) {
    (void)rng;
    const int c = l->in_shape[0].c;
    for (int i = 0; i < c; i++) {
        params[l->poff[0] + i] = 1.0f;
        params[l->poff[1] + i] = 0.0f;
        buffers[l->boff[0] + i] = 0.0f;
        buffers[l->boff[1] + i] = 1.0f;
    }
}

static void forward_sums(const dp_layer *l, const dp_exec *x, const float *const *in, float *sync) {
    if (!x->training) return;
    const dp_kctx *c = &x->kc;
    dp_exec_kernels(x)->bn_sums(c, x->batch, l->in_shape[0].c, hw_of(l), in[0], sync, x->ws);
}

/* The forward, with its relu into r when r is set (fuse.h). */
static dp_status forward_to(const dp_layer *l, const dp_exec *x, const float *const *in, float *out, float *ctx,
                            const float *sync, float *r) {
    const int ch = l->in_shape[0].c;
    const dp_kernels *k = dp_exec_kernels(x);
    const dp_kctx *c = &x->kc;
    const double count = (double)x->stat_batch * hw_of(l);
    if (x->training && count <= 0) return DP_OK;
    float *mean = ctx, *invstd = ctx + ch;
    k->bn_stats(c, ch, x->training, sync, count, l->cfg.bn.eps, l->cfg.bn.momentum, x->update_stats, mean, invstd,
                x->buffers + l->boff[0], x->buffers + l->boff[1]);
    if (x->batch > 0 && r)
        k->bn_apply_relu(c, x->batch, ch, hw_of(l), in[0], mean, invstd, x->params + l->poff[0],
                         x->params + l->poff[1], out, r);
    else if (x->batch > 0)
        k->bn_apply(c, x->batch, ch, hw_of(l), in[0], mean, invstd, x->params + l->poff[0], x->params + l->poff[1],
                    out);
    return DP_OK;
}

static dp_status forward(const dp_layer *l, const dp_exec *x, const float *const *in, float *out, float *ctx,
                         const float *sync) {
    return forward_to(l, x, in, out, ctx, sync, NULL);
}

dp_status dp_batchnorm_forward_relu(const dp_layer *l, const dp_exec *x, const float *const *in, float *out,
                                    float *ctx, const float *sync, float *r) {
    return forward_to(l, x, in, out, ctx, sync, r);
}

static void backward_sums(const dp_layer *l, const dp_exec *x, const float *const *in, const float *dout, float *ctx,
                          float *sync) {
    const int ch = l->in_shape[0].c;
    const dp_kernels *k = dp_exec_kernels(x);
    const dp_kctx *c = &x->kc;
    k->bn_backward_sums(c, x->batch, ch, hw_of(l), in[0], dout, ctx, ctx + ch, sync, x->ws);
    /* keep this call's own sums: the parameter gradients use them, dx the summed ones */
    k->copy(c, 2 * (size_t)ch, sync, ctx + 2 * ch);
}

static dp_status backward(const dp_layer *l, const dp_exec *x, const float *const *in, const float *out,
                          const float *dout, float *const *din, const float *ctx, const float *sync) {
    (void)out;
    const int ch = l->in_shape[0].c;
    const dp_kctx *c = &x->kc;
    dp_exec_kernels(x)->bn_backward(c, x->batch, ch, hw_of(l), in[0], dout, ctx, ctx + ch, x->params + l->poff[0],
                                    ctx + 2 * ch, sync, (double)x->stat_batch * hw_of(l), din[0],
                                    x->grads + l->poff[0], x->grads + l->poff[1], x->ws);
    return DP_OK;
}

const dp_layer_ops dp_batchnorm_ops = {
    .kind = "bn",
    .plan = plan,
    .ws_floats = ws_floats,
    .init = init,
    .forward_sums = forward_sums,
    .forward = forward,
    .backward_sums = backward_sums,
    .backward = backward,
};
