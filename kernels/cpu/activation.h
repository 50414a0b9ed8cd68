/* activation.h: element-wise kernels on the CPU. */
#ifndef DP_KERNEL_ACTIVATION_H
#define DP_KERNEL_ACTIVATION_H

#include <stddef.h>

void relu_forward_cpu(size_t n, const float *x, float *y, int nthreads);
/* dx = dy where y > 0, else 0 (PyTorch's threshold_backward on the output). */
void relu_backward_cpu(size_t n, const float *y, const float *dy, float *dx, int nthreads);
/* y = a + b (residual connection). */
void add_forward_cpu(size_t n, const float *a, const float *b, float *y, int nthreads);
/* y = x rounded to the nearest bf16 value (kernels/bf16.h); in place allowed. */
void round_bf16_cpu(size_t n, const float *x, float *y, int nthreads);

#endif
