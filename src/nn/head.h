/* head.h: what a model's output is trained against and judged by, set by the model builder
 * (model.h: dp_model.head): the loss of a batch's outputs against their labels, with its gradient,
 * and the label an output predicts. Classification's softmax cross-entropy is the one head today;
 * another kind of model brings its own instead of the passes, DataParallel's master, evaluation
 * and the profiler each calling softmax cross-entropy. */
#ifndef DP_HEAD_H
#define DP_HEAD_H

#include <stdint.h>

#include "kernels/kernels.h"

typedef struct dp_head_ops {
    const char *name;
    /* n samples' outputs (width floats each) against their labels, on c's device (k: its kernel
     * table): *loss the summed loss, *hits the samples predicted right, dout (may be NULL) scale
     * times the loss's gradient */
    void (*loss)(const dp_kernels *k, const dp_kctx *c, int n, int width, const float *out, const int32_t *labels,
                 float scale, float *dout, float *loss, int32_t *hits);
    /* the label one output (width floats, on the host) predicts */
    int (*predict)(const float *out, int width);
} dp_head_ops;

/* Softmax cross-entropy over the classes; the prediction is the first largest logit. */
extern const dp_head_ops dp_head_softmax_xent;

#endif
