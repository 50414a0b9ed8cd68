/* fuse.h: layer sequences run as one fused kernel call (kernels/kernels.h) where the device's table
 * has it: conv -> relu (-> maxpool) and bn -> relu forward, maxpool -> relu backward. The plan is
 * made once per model (dp_model_finish); each fused call writes every buffer the layers it stands
 * for would write, with the same bits, so nothing downstream (other consumers, the tests that read
 * a node's output, a table without the entry) can tell. */
#ifndef DP_FUSE_H
#define DP_FUSE_H

#include "nn/model.h"

enum {
    DP_FUSE_NONE,
    DP_FUSE_CONV_RELU,      /* forward, at a conv: it and the relu after it */
    DP_FUSE_CONV_RELU_POOL, /* forward, at a conv: it, the relu and the max pool after them */
    DP_FUSE_BN_RELU,        /* forward, at a batch norm: it and the relu after it */
    DP_FUSE_POOL_RELU,      /* backward, at a max pool: it and the relu before it */
    DP_FUSE_TAIL,           /* a node a fused call at node `head` runs */
};

/* One node's part in the fusion plan, forward and backward. */
typedef struct dp_fuse {
    unsigned char fwd, bwd;
    int fwd_head, bwd_head; /* for DP_FUSE_TAIL: the node whose call runs this one */
} dp_fuse;

/* Plans m->fuse from the graph. */
dp_status dp_fuse_plan(dp_model *m);

/* Node `node`'s forward (backward) when the plan fuses it and x's table has the fused entry: runs
 * the fused call at a head, nothing at a tail; returns 1 with *st set. 0: run the node alone. */
int dp_fuse_forward(const dp_model *m, int node, dp_acts *a, const dp_exec *x, const float *const *in, dp_status *st);
int dp_fuse_backward(const dp_model *m, int node, dp_acts *a, const dp_exec *x, const float *const *in,
                     dp_status *st);

/* The layers' fused calls (src/nn/layers/): conv2d's forward, its relu into r and, with pool (a max
 * pool layer) set, that pool's output and argmax; batch norm's forward with its relu into r; a max
 * pool's backward into dpool and the relu's (whose output y the pool read) into dx. */
dp_status dp_conv2d_forward_relu(const dp_layer *l, const dp_exec *x, const float *in, float *out, float *r,
                                 const dp_layer *pool, float *pooled, float *argmax);
dp_status dp_batchnorm_forward_relu(const dp_layer *l, const dp_exec *x, const float *const *in, float *out,
                                    float *ctx, const float *sync, float *r);
void dp_maxpool_relu_backward(const dp_layer *l, const dp_exec *x, const float *dout, const float *ctx, const float *y,
                              float *dpool, float *dx);

#endif
