/* Linear layer: y = x W^T + b on the flattened input, around the linear kernels. */
#include "nn/layer.h"
#include "nn/layers/bf16.h"
#include "nn/layers/init.h"

static dp_status plan(dp_layer *l, dp_layout *params, dp_layout *buffers) {
    (void)buffers;
    const int out_f = l->cfg.linear.out_f;
    const size_t in_f = dp_shape_size(l->in_shape[0]);
    if (out_f < 1 || in_f < 1) return dp_fail(DP_ERR_INTERNAL, "invalid linear layer %zu -> %d", in_f, out_f);
    l->out = (dp_shape){out_f, 1, 1};
    DP_TRY(dp_layer_add_tensor(params, l, "weight", (size_t)out_f * in_f, 0, &l->poff[0]));
    if (l->cfg.linear.bias) DP_TRY(dp_layer_add_tensor(params, l, "bias", (size_t)out_f, 0, &l->poff[1]));
    return DP_OK;
}

static size_t weight_floats(const dp_layer *l) { return (size_t)l->cfg.linear.out_f * dp_shape_size(l->in_shape[0]); }

static size_t ws_floats(const dp_layer *l, const dp_kernels *k, int batch, int nthreads) {
    (void)k, (void)nthreads;
    return dp_bf16_ws_floats(l, batch, weight_floats(l));
}

static void init(const dp_layer *l, float *params, float *buffers, dp_rng *rng) {
    (void)buffers;
    size_t in_f = dp_shape_size(l->in_shape[0]);
    dp_init_uniform_fan_in(params + l->poff[0], (size_t)l->cfg.linear.out_f * in_f, in_f, rng);
    if (l->cfg.linear.bias) dp_init_uniform_fan_in(params + l->poff[1], (size_t)l->cfg.linear.out_f, in_f, rng);
}

static dp_status forward(const dp_layer *l, const dp_exec *x, const float *const *in, float *out, float *ctx,
                         const float *sync) {
    (void)ctx, (void)sync;
    if (x->batch == 0) return DP_OK;
    const dp_kctx *c = &x->kc;
    const dp_kernels *k = dp_exec_kernels(x);
    const int in_f = (int)dp_shape_size(l->in_shape[0]), out_f = l->cfg.linear.out_f;
    const float *w = x->params + l->poff[0], *b = l->cfg.linear.bias ? x->params + l->poff[1] : NULL;
    if (!l->bf16) {
        k->linear_forward(c, x->batch, in_f, out_f, in[0], w, b, out);
        return DP_OK;
    }
    const dp_bf16_scratch s = dp_bf16_carve(l, x, weight_floats(l));
    k->round_bf16(c, (size_t)x->batch * in_f, in[0], s.x);
    k->round_bf16(c, weight_floats(l), w, s.w);
    if (b) k->round_bf16(c, (size_t)out_f, b, s.dy);
    k->linear_forward(c, x->batch, in_f, out_f, s.x, s.w, b ? s.dy : NULL, out);
    k->round_bf16(c, (size_t)x->batch * out_f, out, out);
    return DP_OK;
}

static dp_status backward(const dp_layer *l, const dp_exec *x, const float *const *in, const float *out,
                          const float *dout, float *const *din, const float *ctx, const float *sync) {
    (void)out, (void)ctx, (void)sync;
    if (x->batch == 0) return DP_OK;
    const dp_kctx *c = &x->kc;
    const dp_kernels *k = dp_exec_kernels(x);
    const int in_f = (int)dp_shape_size(l->in_shape[0]), out_f = l->cfg.linear.out_f;
    float *dw = x->grads + l->poff[0], *db = l->cfg.linear.bias ? x->grads + l->poff[1] : NULL;
    if (!l->bf16) {
        k->linear_backward(c, x->batch, in_f, out_f, in[0], x->params + l->poff[0], dout, din[0], dw, db);
        return DP_OK;
    }
    const dp_bf16_scratch s = dp_bf16_carve(l, x, weight_floats(l));
    k->round_bf16(c, (size_t)x->batch * in_f, in[0], s.x);
    k->round_bf16(c, weight_floats(l), x->params + l->poff[0], s.w);
    k->round_bf16(c, (size_t)x->batch * out_f, dout, s.dy);
    k->linear_backward(c, x->batch, in_f, out_f, s.x, s.w, s.dy, din[0], dw, db);
    if (din[0]) k->round_bf16(c, (size_t)x->batch * in_f, din[0], din[0]);
    return DP_OK;
}

const dp_layer_ops dp_linear_ops = {
    .kind = "fc",
    .plan = plan,
    .ws_floats = ws_floats,
    .init = init,
    .forward = forward,
    .backward = backward,
};
