/* sgd.h: torch.optim.SGD over a flat arena (dampening 0):
 *   g = grad + weight_decay * p            (tensors flagged DP_TENSOR_NO_DECAY skip the decay)
 *   buf = momentum * buf + g               (buf starts at 0, so the first step sets buf = g, as torch)
 *   g = nesterov ? g + momentum * buf : buf
 *   p -= lr * g
 * Padding between tensors has zero gradients and stays zero. */
#ifndef DP_SGD_H
#define DP_SGD_H

#include "core/arena.h"

struct dp_kernels;

typedef struct {
    float lr, momentum, weight_decay;
    int nesterov;
    const struct dp_kernels *k; /* the device's kernels (NULL: the CPU's) */
    void *stream;               /* and its stream */
} dp_sgd;

/* momentum_buf may be NULL when momentum == 0. */
void dp_sgd_step(const dp_sgd *o, const dp_layout *L, float *params, const float *grads, float *momentum_buf,
                 float lr);

#endif
