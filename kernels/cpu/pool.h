/* pool.h: pooling on the CPU, NCHW. */
#ifndef DP_KERNEL_POOL_H
#define DP_KERNEL_POOL_H

#include <stdint.h>

#include "kernels/shapes.h" /* dp_pool_out_size */
/* MaxPool2d (padding counts as -inf). argmax (batch, c, oh, ow) keeps the flat h*w index of
 * each maximum inside its (sample, channel) plane; the first maximum wins on ties, as PyTorch. */
void maxpool2d_forward_cpu(int batch, int c, int h, int w, int k, int stride, int pad, const float *x, float *y,
                           int32_t *argmax, int nthreads);
/* dx = 0, then dx[argmax] += dy (overwrite semantics for dx as a whole). */
void maxpool2d_backward_cpu(int batch, int c, int h, int w, int oh, int ow, const float *dy, const int32_t *argmax,
                            float *dx, int nthreads);
/* AdaptiveAvgPool2d(1): y (batch, c) = mean over h*w. */
void global_avgpool_forward_cpu(int batch, int c, int hw, const float *x, float *y, int nthreads);
void global_avgpool_backward_cpu(int batch, int c, int hw, const float *dy, float *dx, int nthreads);

#endif
