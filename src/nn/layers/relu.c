/* ReLU layer. */
#include "nn/layer.h"

static dp_status plan(dp_layer *l, dp_layout *params, dp_layout *buffers) {
    (void)params, (void)buffers;
    l->out = l->in_shape[0];
    return DP_OK;
}

static dp_status forward(const dp_layer *l, const dp_exec *x, const float *const *in, float *out, float *ctx,
                         const float *sync) {
    (void)ctx, (void)sync;
    const dp_kctx *c = &x->kc;
    dp_exec_kernels(x)->relu_forward(c, (size_t)x->batch * dp_shape_size(l->out), in[0], out);
    return DP_OK;
}

static dp_status backward(const dp_layer *l, const dp_exec *x, const float *const *in, const float *out,
                          const float *dout, float *const *din, const float *ctx, const float *sync) {
    (void)in, (void)ctx, (void)sync;
    const dp_kctx *c = &x->kc;
    if (din[0]) dp_exec_kernels(x)->relu_backward(c, (size_t)x->batch * dp_shape_size(l->out), out, dout, din[0]);
    return DP_OK;
}

const dp_layer_ops dp_relu_ops = {.kind = "relu", .plan = plan, .forward = forward, .backward = backward};
