/* Residual add of two nodes of the same shape. */
#include "nn/layer.h"

static dp_status plan(dp_layer *l, dp_layout *params, dp_layout *buffers) {
    (void)params, (void)buffers;
    dp_shape a = l->in_shape[0], b = l->in_shape[1];
    if (l->n_in != 2 || a.c != b.c || a.h != b.h || a.w != b.w)
        return dp_fail(DP_ERR_INTERNAL, "residual add of different shapes %dx%dx%d and %dx%dx%d", a.c, a.h, a.w, b.c,
                       b.h, b.w);
    l->out = a;
    return DP_OK;
}

static dp_status forward(const dp_layer *l, const dp_exec *x, const float *const *in, float *out, float *ctx,
                         const float *sync) {
    (void)ctx, (void)sync;
    const dp_kctx *c = &x->kc;
    dp_exec_kernels(x)->add(c, (size_t)x->batch * dp_shape_size(l->out), in[0], in[1], out);
    return DP_OK;
}

static dp_status backward(const dp_layer *l, const dp_exec *x, const float *const *in, const float *out,
                          const float *dout, float *const *din, const float *ctx, const float *sync) {
    (void)in, (void)out, (void)ctx, (void)sync;
    const dp_kctx *c = &x->kc;
    for (int j = 0; j < 2; j++)
        if (din[j]) dp_exec_kernels(x)->copy(c, (size_t)x->batch * dp_shape_size(l->out), dout, din[j]);
    return DP_OK;
}

const dp_layer_ops dp_add_ops = {.kind = "add", .plan = plan, .forward = forward, .backward = backward};
