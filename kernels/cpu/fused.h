/* fused.h: the CPU twins of the kernel table's fused entries (kernels/kernels.h, kernels/cpu/fused.c). */
#ifndef DP_CPU_FUSED_H
#define DP_CPU_FUSED_H

#include "kernels/kernels.h"

void dp_cpu_conv2d_relu_forward(const dp_kctx *c, const dp_conv2d_dims *d, int batch, const float *x, const float *w,
                                const float *b, float *y, float *ws, float *r, int pool_k, int pool_stride,
                                int pool_pad, float *pooled, int32_t *argmax);
void dp_cpu_bn_apply_relu(const dp_kctx *c, int batch, int ch, int hw, const float *x, const float *mean,
                          const float *invstd, const float *gamma, const float *beta, float *y, float *r);
void dp_cpu_maxpool_relu_backward(const dp_kctx *c, int batch, int ch, int h, int w, int k, int stride, int pad, int oh,
                                  int ow, const float *dy, const int32_t *argmax, const float *y, float *dpool,
                                  float *dx);

#endif
