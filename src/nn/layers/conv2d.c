/* Conv2d layer: shape planning and parameters around the conv2d kernels. */
#include "kernels/shapes.h"
#include "nn/fuse.h"
#include "nn/layer.h"
#include "nn/layers/bf16.h"
#include "nn/layers/init.h"

static dp_conv2d_dims dims_of(const dp_layer *l) {
    dp_conv2d_dims d = {l->in_shape[0].c, l->in_shape[0].h, l->in_shape[0].w, l->cfg.conv.out_c, l->cfg.conv.k,
                        l->cfg.conv.stride, l->cfg.conv.pad, 0, 0};
    dp_conv2d_dims_init(&d);
    return d;
}

static dp_status plan(dp_layer *l, dp_layout *params, dp_layout *buffers) {
    (void)buffers;
    const int oc = l->cfg.conv.out_c, k = l->cfg.conv.k;
    if (oc < 1 || k < 1 || l->cfg.conv.stride < 1 || l->cfg.conv.pad < 0)
        return dp_fail(DP_ERR_INTERNAL, "invalid convolution (out %d, kernel %d, stride %d, pad %d)", oc, k,
                       l->cfg.conv.stride, l->cfg.conv.pad);
    dp_conv2d_dims d = {l->in_shape[0].c, l->in_shape[0].h, l->in_shape[0].w, oc, k, l->cfg.conv.stride,
                        l->cfg.conv.pad, 0, 0};
    if (dp_conv2d_dims_init(&d) != 0)
        return dp_fail(DP_ERR_FORMAT, "a %dx%d kernel with padding %d does not fit the input: the images are too small "
                       "for this model", k, k, l->cfg.conv.pad);
    l->out = (dp_shape){oc, d.out_h, d.out_w};
    DP_TRY(dp_layer_add_tensor(params, l, "weight", (size_t)oc * d.in_c * k * k, 0, &l->poff[0]));
    if (l->cfg.conv.bias) DP_TRY(dp_layer_add_tensor(params, l, "bias", (size_t)oc, 0, &l->poff[1]));
    return DP_OK;
}

static size_t weight_floats(const dp_conv2d_dims *d) { return (size_t)d->out_c * d->in_c * d->k * d->k; }

static size_t ws_floats(const dp_layer *l, const dp_kernels *k, int batch, int nthreads) {
    dp_conv2d_dims d = dims_of(l);
    return dp_bf16_ws_floats(l, batch, weight_floats(&d)) + k->conv2d_workspace_floats(&d, batch, nthreads);
}

static void init(const dp_layer *l, float *params, float *buffers, dp_rng *rng) {
    (void)buffers;
    dp_conv2d_dims d = dims_of(l);
    size_t fan_in = (size_t)d.in_c * d.k * d.k;
    dp_init_uniform_fan_in(params + l->poff[0], (size_t)d.out_c * fan_in, fan_in, rng);
    if (l->cfg.conv.bias) dp_init_uniform_fan_in(params + l->poff[1], (size_t)d.out_c, fan_in, rng);
}

static dp_status forward(const dp_layer *l, const dp_exec *x, const float *const *in, float *out, float *ctx,
                         const float *sync) {
    (void)ctx, (void)sync;
    if (x->batch == 0) return DP_OK;
    dp_conv2d_dims d = dims_of(l);
    const dp_kctx *c = &x->kc;
    const dp_kernels *k = dp_exec_kernels(x);
    const float *w = x->params + l->poff[0], *b = l->cfg.conv.bias ? x->params + l->poff[1] : NULL;
    if (!l->bf16) {
        k->conv2d_forward(c, &d, x->batch, in[0], w, b, out, x->ws);
        return DP_OK;
    }
    const dp_bf16_scratch s = dp_bf16_carve(l, x, weight_floats(&d));
    const size_t n_in = (size_t)x->batch * dp_shape_size(l->in_shape[0]);
    const size_t n_out = (size_t)x->batch * dp_shape_size(l->out);
    k->round_bf16(c, n_in, in[0], s.x);
    k->round_bf16(c, weight_floats(&d), w, s.w);
    if (b) k->round_bf16(c, (size_t)d.out_c, b, s.dy);
    k->conv2d_forward(c, &d, x->batch, s.x, s.w, b ? s.dy : NULL, out, s.rest);
    k->round_bf16(c, n_out, out, out);
    return DP_OK;
}

dp_status dp_conv2d_forward_relu(const dp_layer *l, const dp_exec *x, const float *in, float *out, float *r,
                                 const dp_layer *pool, float *pooled, float *argmax) {
    if (x->batch == 0) return DP_OK;
    dp_conv2d_dims d = dims_of(l);
    const dp_kctx *c = &x->kc;
    dp_exec_kernels(x)->conv2d_relu_forward(c, &d, x->batch, in, x->params + l->poff[0],
                                             l->cfg.conv.bias ? x->params + l->poff[1] : NULL, out, x->ws, r,
                                             pool ? pool->cfg.pool.k : 0, pool ? pool->cfg.pool.stride : 0,
                                             pool ? pool->cfg.pool.pad : 0, pooled, (int32_t *)(void *)argmax);
    return DP_OK;
}

static dp_status backward(const dp_layer *l, const dp_exec *x, const float *const *in, const float *out,
                          const float *dout, float *const *din, const float *ctx, const float *sync) {
    (void)out, (void)ctx, (void)sync;
    if (x->batch == 0) return DP_OK;
    dp_conv2d_dims d = dims_of(l);
    const dp_kctx *c = &x->kc;
    const dp_kernels *k = dp_exec_kernels(x);
    float *dw = x->grads + l->poff[0], *db = l->cfg.conv.bias ? x->grads + l->poff[1] : NULL;
    if (!l->bf16) {
        k->conv2d_backward(c, &d, x->batch, in[0], x->params + l->poff[0], dout, din[0], dw, db, x->ws);
        return DP_OK;
    }
    const dp_bf16_scratch s = dp_bf16_carve(l, x, weight_floats(&d));
    const size_t n_in = (size_t)x->batch * dp_shape_size(l->in_shape[0]);
    const size_t n_out = (size_t)x->batch * dp_shape_size(l->out);
    k->round_bf16(c, n_in, in[0], s.x);
    k->round_bf16(c, weight_floats(&d), x->params + l->poff[0], s.w);
    k->round_bf16(c, n_out, dout, s.dy);
    k->conv2d_backward(c, &d, x->batch, s.x, s.w, s.dy, din[0], dw, db, s.rest);
    if (din[0]) k->round_bf16(c, n_in, din[0], din[0]);
    return DP_OK;
}

const dp_layer_ops dp_conv2d_ops = {
    .kind = "conv",
    .plan = plan,
    .ws_floats = ws_floats,
    .init = init,
    .forward = forward,
    .backward = backward,
};
