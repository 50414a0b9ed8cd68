/* Global average pooling (AdaptiveAvgPool2d(1)), output (C, 1, 1). */
#include "nn/layer.h"

static dp_status plan(dp_layer *l, dp_layout *params, dp_layout *buffers) {
    (void)params, (void)buffers;
    l->out = (dp_shape){l->in_shape[0].c, 1, 1};
    return DP_OK;
}

static dp_status forward(const dp_layer *l, const dp_exec *x, const float *const *in, float *out, float *ctx,
                         const float *sync) {
    (void)ctx, (void)sync;
    const dp_kctx *c = &x->kc;
    dp_exec_kernels(x)->avgpool_forward(c, x->batch, l->out.c, l->in_shape[0].h * l->in_shape[0].w, in[0], out);
    return DP_OK;
}

static dp_status backward(const dp_layer *l, const dp_exec *x, const float *const *in, const float *out,
                          const float *dout, float *const *din, const float *ctx, const float *sync) {
    (void)in, (void)out, (void)ctx, (void)sync;
    const dp_kctx *c = &x->kc;
    if (din[0])
        dp_exec_kernels(x)->avgpool_backward(c, x->batch, l->out.c, l->in_shape[0].h * l->in_shape[0].w, dout, din[0]);
    return DP_OK;
}

const dp_layer_ops dp_global_avgpool_ops = {.kind = "avgpool", .plan = plan, .forward = forward, .backward = backward};
