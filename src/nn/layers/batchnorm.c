/* BatchNorm1d / BatchNorm2d (by input shape) with PyTorch's semantics: batch statistics in
 * training with the biased variance for normalising and the unbiased one for the running
 * estimate (momentum 0.1), running statistics in eval. Sums come out through forward_sums /
 * backward_sums so the executor can add them over replicas first (SyncBatchNorm).
 * ctx: mean[C], invstd[C], local sum_dy[C], local sum_dy_xhat[C]. sync: two sums of C. */
#include <math.h>

#include "kernels/cpu/batchnorm.h"
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

/* Two double arrays of C for the kernels' sums. */
static size_t ws_floats(const dp_layer *l, int batch, int nthreads) {
    (void)batch, (void)nthreads;
    return 4 * (size_t)l->in_shape[0].c;
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
    const int c = l->in_shape[0].c;
    double *s = (double *)x->ws, *s2 = s + c;
    if (!x->training) return;
    if (x->batch > 0) {
        batchnorm_stats_cpu(x->batch, c, hw_of(l), in[0], s, s2, x->nthreads);
    } else {
        for (int i = 0; i < 2 * c; i++) s[i] = 0;
    }
    for (int i = 0; i < c; i++) sync[i] = (float)s[i], sync[c + i] = (float)s2[i];
}

static dp_status forward(const dp_layer *l, const dp_exec *x, const float *const *in, float *out, float *ctx,
                         const float *sync) {
    const int c = l->in_shape[0].c, hw = hw_of(l);
    float *mean = ctx, *invstd = ctx + c;
    const float eps = l->cfg.bn.eps, mom = l->cfg.bn.momentum;
    float *rmean = x->buffers + l->boff[0], *rvar = x->buffers + l->boff[1];
    if (x->training) {
        double count = (double)x->stat_batch * hw;
        if (count <= 0) return DP_OK;
        for (int i = 0; i < c; i++) {
            double m = sync[i] / count;
            double var = sync[c + i] / count - m * m;
            if (var < 0) var = 0; /* rounding in E[x^2] - m^2 */
            mean[i] = (float)m;
            invstd[i] = (float)(1.0 / sqrt(var + eps));
            if (!x->update_stats) continue;
            double unbiased = count > 1 ? var * count / (count - 1) : var;
            rmean[i] = (1 - mom) * rmean[i] + mom * (float)m;
            rvar[i] = (1 - mom) * rvar[i] + mom * (float)unbiased;
        }
    } else {
        for (int i = 0; i < c; i++) {
            mean[i] = rmean[i];
            invstd[i] = 1.0f / sqrtf(rvar[i] + eps);
        }
    }
    if (x->batch > 0)
        batchnorm_apply_cpu(x->batch, c, hw, in[0], mean, invstd, x->params + l->poff[0], x->params + l->poff[1], out,
                            x->nthreads);
    return DP_OK;
}

static void backward_sums(const dp_layer *l, const dp_exec *x, const float *const *in, const float *dout, float *ctx,
                          float *sync) {
    const int c = l->in_shape[0].c;
    double *s = (double *)x->ws, *s2 = s + c;
    if (x->batch > 0) {
        batchnorm_backward_reduce_cpu(x->batch, c, hw_of(l), in[0], dout, ctx, ctx + c, s, s2, x->nthreads);
    } else {
        for (int i = 0; i < 2 * c; i++) s[i] = 0;
    }
    /* The parameter gradients use the local sums (DDP adds them over replicas later);
     * dx uses the sums the executor may have added over replicas. */
    for (int i = 0; i < c; i++) {
        ctx[2 * c + i] = sync[i] = (float)s[i];
        ctx[3 * c + i] = sync[c + i] = (float)s2[i];
    }
}

static dp_status backward(const dp_layer *l, const dp_exec *x, const float *const *in, const float *out,
                          const float *dout, float *const *din, const float *ctx, const float *sync) {
    (void)out;
    const int c = l->in_shape[0].c, hw = hw_of(l);
    float *dgamma = x->grads + l->poff[0], *dbeta = x->grads + l->poff[1];
    for (int i = 0; i < c; i++) {
        dbeta[i] += ctx[2 * c + i];
        dgamma[i] += ctx[3 * c + i];
    }
    if (!din[0] || x->batch == 0) return DP_OK;
    double *s = (double *)x->ws, *s2 = s + c;
    for (int i = 0; i < c; i++) s[i] = sync[i], s2[i] = sync[c + i];
    double count = (double)x->stat_batch * hw;
    batchnorm_backward_input_cpu(x->batch, c, hw, in[0], dout, ctx, ctx + c, x->params + l->poff[0], s, s2, count,
                                 din[0], x->nthreads);
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
