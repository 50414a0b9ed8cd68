/* conv2d.h: 2-D convolution on the CPU, NCHW, square kernel, zero padding (PyTorch Conv2d,
 * groups = 1, dilation = 1). The reference that the CUDA kernel (kernels/cuda/conv2d.cu) is
 * tested against. Work is split over `nthreads` OpenMP threads by sample; weight gradients
 * are summed from per-thread partials in a fixed order, so results are deterministic for a
 * given thread count. */
#ifndef DP_KERNEL_CONV2D_H
#define DP_KERNEL_CONV2D_H

#include <stddef.h>

#include "kernels/shapes.h"


/* Floats of scratch the calls below need for this batch and thread count (enough, too, for any
 * smaller batch or thread count). */
size_t conv2d_workspace_floats(const dp_conv2d_dims *d, int batch, int nthreads);
/* y (batch, out_c, out_h, out_w) = conv(x (batch, in_c, in_h, in_w), w (out_c, in_c, k, k)) + b (out_c).
 * b may be NULL. */
void conv2d_forward_cpu(const dp_conv2d_dims *d, int batch, const float *x, const float *w, const float *b,
                        float *y, float *ws, int nthreads);
/* dw += dL/dw, db += dL/db (accumulate, as PyTorch's .grad), dx = dL/dx (overwrite).
 * dx and db may be NULL (first layer: no input gradient). */
void conv2d_backward_cpu(const dp_conv2d_dims *d, int batch, const float *x, const float *w, const float *dy,
                         float *dx, float *dw, float *db, float *ws, int nthreads);

#endif
