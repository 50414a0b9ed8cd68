/* sgd.h: torch.optim.SGD over a flat arena (dampening 0):
 *   g = grad + weight_decay * p            (tensors flagged DP_TENSOR_NO_DECAY skip the decay)
 *   buf = momentum * buf + g               (buf starts at 0, so the first step sets buf = g, as torch)
 *   g = nesterov ? g + momentum * buf : buf
 *   p -= lr * g
 * Padding between tensors has zero gradients and stays zero.
 * A gradient holding NaN or Inf is never applied: the step leaves params and momentum as they
 * were and sets *nonfinite (when given), so the trainer can stop or skip (--on-nan). The check is
 * one integer pass over the gradients before the update (measured in docs/reliability.md), run
 * here when they are in the host's memory. In a device's own memory (device_memory, set by whoever
 * builds the step from the device's DP_CAP_HOST_MEMORY, whatever its kernel table) the same pass
 * runs there (the kernel table's nonfinite) inside the step's metrics, which carry its answer to
 * the host with no wait of its own, and the trainer does not call the step when it found one
 * (train/strategy.h: dp_step_add_metrics). */
#ifndef DP_SGD_H
#define DP_SGD_H

#include <stdatomic.h>

#include "core/arena.h"
#include "kernels/kernels.h"

typedef struct {
    float lr, momentum, weight_decay;
    int nesterov;
    const dp_kernels *k;        /* the device's kernels (NULL: the CPU's) */
    dp_kctx kc;                 /* and the stream the step runs on (zero: the CPU's) */
    int device_memory;          /* the arenas are a device's own memory (zero: the host's, checked here) */
    atomic_int *nonfinite;      /* may be NULL; set to 1 by a step that found a NaN/Inf gradient */
} dp_sgd;

/* 1 if every one of the n floats is finite. */
int dp_all_finite(const float *x, size_t n);

/* momentum_buf may be NULL when momentum == 0. */
void dp_sgd_step(const dp_sgd *o, const dp_layout *L, float *params, const float *grads, float *momentum_buf,
                 float lr);

#endif
