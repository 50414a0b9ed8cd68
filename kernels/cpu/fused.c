/* fused.c: the CPU twins of the fused entries (kernels/kernels.h): the entries they fuse, called one
 * after the other, so that they are the reference a device's one-launch kernel is tested against and
 * a run with the fusion is bitwise a run without it. Compiled once (it calls the table, not a variant). */
#include "kernels/cpu/fused.h"

void dp_cpu_conv2d_relu_forward(const dp_kctx *c, const dp_conv2d_dims *d, int batch, const float *x, const float *w,
                                const float *b, float *y, float *ws, float *r, int pool_k, int pool_stride,
                                int pool_pad, float *pooled, int32_t *argmax) {
    const dp_kernels *k = &dp_cpu_kernels;
    k->conv2d_forward(c, d, batch, x, w, b, y, ws);
    k->relu_forward(c, (size_t)batch * d->out_c * d->out_h * d->out_w, y, r);
    if (pool_k > 0)
        k->maxpool_forward(c, batch, d->out_c, d->out_h, d->out_w, pool_k, pool_stride, pool_pad, r, pooled, argmax);
}

void dp_cpu_bn_apply_relu(const dp_kctx *c, int batch, int ch, int hw, const float *x, const float *mean,
                          const float *invstd, const float *gamma, const float *beta, float *y, float *r) {
    dp_cpu_kernels.bn_apply(c, batch, ch, hw, x, mean, invstd, gamma, beta, y);
    dp_cpu_kernels.relu_forward(c, (size_t)batch * ch * hw, y, r);
}

void dp_cpu_maxpool_relu_backward(const dp_kctx *c, int batch, int ch, int h, int w, int k, int stride, int pad, int oh,
                                  int ow, const float *dy, const int32_t *argmax, const float *y, float *dpool,
                                  float *dx) {
    dp_cpu_kernels.maxpool_backward(c, batch, ch, h, w, k, stride, pad, oh, ow, dy, argmax, dpool);
    dp_cpu_kernels.relu_backward(c, (size_t)batch * ch * h * w, y, dpool, dx);
}
