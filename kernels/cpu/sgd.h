/* sgd.h: one torch.optim.SGD step over a flat run of parameters, on the CPU. */
#ifndef DP_KERNEL_SGD_H
#define DP_KERNEL_SGD_H

#include <stddef.h>

/* d = g + wd p; with momentum: buf = momentum buf + d, and p -= lr (d + momentum buf) with
 * nesterov, else p -= lr buf; without momentum p -= lr d (buf unused, may be NULL). */
void sgd_step_cpu(size_t n, float *p, const float *g, float *buf, float lr, float momentum, float wd, int nesterov);
/* 1 if no x[i] is NaN or Inf. */
int all_finite_cpu(const float *x, size_t n);

#endif
