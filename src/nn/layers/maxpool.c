/* MaxPool2d layer; ctx keeps the argmax of each output for backward. */
#include <stdint.h>

#include "kernels/shapes.h"
#include "nn/fuse.h"
#include "nn/layer.h"

static dp_status plan(dp_layer *l, dp_layout *params, dp_layout *buffers) {
    (void)params, (void)buffers;
    const dp_shape in = l->in_shape[0];
    const int k = l->cfg.pool.k, s = l->cfg.pool.stride, p = l->cfg.pool.pad;
    if (k < 1 || s < 1 || p < 0 || 2 * p > k)
        return dp_fail(DP_ERR_INTERNAL, "invalid max pooling (kernel %d, stride %d, pad %d)", k, s, p);
    int oh = dp_pool_out_size(in.h, k, s, p), ow = dp_pool_out_size(in.w, k, s, p);
    if (oh < 1 || ow < 1)
        return dp_fail(DP_ERR_FORMAT, "a %dx%d pooling window does not fit: the images are too small for this model", k,
                       k);
    l->out = (dp_shape){in.c, oh, ow};
    l->ctx_per_sample = dp_shape_size(l->out); /* int32 argmax, one per output */
    return DP_OK;
}

static dp_status forward(const dp_layer *l, const dp_exec *x, const float *const *in, float *out, float *ctx,
                         const float *sync) {
    (void)sync;
    const dp_shape s = l->in_shape[0];
    const dp_kctx *c = &x->kc;
    dp_exec_kernels(x)->maxpool_forward(c, x->batch, s.c, s.h, s.w, l->cfg.pool.k, l->cfg.pool.stride, l->cfg.pool.pad,
                                         in[0], out, (int32_t *)ctx);
    return DP_OK;
}

static dp_status backward(const dp_layer *l, const dp_exec *x, const float *const *in, const float *out,
                          const float *dout, float *const *din, const float *ctx, const float *sync) {
    (void)in, (void)out, (void)sync;
    const dp_shape s = l->in_shape[0];
    const dp_kctx *c = &x->kc;
    if (din[0])
        dp_exec_kernels(x)->maxpool_backward(c, x->batch, s.c, s.h, s.w, l->cfg.pool.k, l->cfg.pool.stride,
                                              l->cfg.pool.pad, l->out.h, l->out.w, dout, (const int32_t *)ctx, din[0]);
    return DP_OK;
}

void dp_maxpool_relu_backward(const dp_layer *l, const dp_exec *x, const float *dout, const float *ctx, const float *y,
                              float *dpool, float *dx) {
    const dp_shape s = l->in_shape[0];
    const dp_kctx *c = &x->kc;
    dp_exec_kernels(x)->maxpool_relu_backward(c, x->batch, s.c, s.h, s.w, l->cfg.pool.k, l->cfg.pool.stride,
                                              l->cfg.pool.pad, l->out.h, l->out.w, dout, (const int32_t *)ctx, y,
                                              dpool, dx);
}

const dp_layer_ops dp_maxpool_ops = {.kind = "maxpool", .plan = plan, .forward = forward, .backward = backward};
