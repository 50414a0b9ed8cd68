/* layer.h: one node of a model graph. Each layer type is a small const ops table plus its
 * private config; layers hold slices into the arenas, never pointers, so one model description
 * serves every replica and every device. src/nn/ never includes a backend: what a layer needs
 * from outside (the arenas, scratch, mode, the batch sizes) comes in dp_exec. */
#ifndef DP_LAYER_H
#define DP_LAYER_H

#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"
#include "core/rng.h"
#include "core/status.h"
#include "kernels/kernels.h"

typedef struct { int c, h, w; } dp_shape; /* one sample, CHW; a feature vector is (F, 1, 1) */

static inline size_t dp_shape_size(dp_shape s) { return (size_t)s.c * (size_t)s.h * (size_t)s.w; }

#define DP_MAX_INPUTS 2
#define DP_INPUT (-1) /* node id of the model's input */

typedef struct dp_layer dp_layer;

typedef struct {
    int batch;          /* samples in this call (may be 0) */
    int stat_batch;     /* samples the `sync` sums cover: the call's own batch, the replica's whole
                           batch when it is split over lanes, the global batch with SyncBN */
    int training;       /* 1: batch statistics; 0: eval (running statistics) */
    int update_stats;   /* training: this call updates the BN running statistics (one lane of each replica) */
    const dp_kernels *k; /* the device's kernel table (NULL: the CPU's) */
    dp_kctx kc;         /* what its kernels run on: OpenMP threads, or a device stream (a device's own) */
    float *ws;          /* scratch, dp_model.ws_floats(batch) floats */
    const float *params;
    float *grads;
    float *buffers;     /* BN running statistics */
} dp_exec;

/* The kernel table of an exec. */
static inline const dp_kernels *dp_exec_kernels(const dp_exec *x) { return x->k ? x->k : &dp_cpu_kernels; }

/* Everything but plan may assume shapes were checked by plan. `in` has n_in entries.
 * din[i] may be NULL (model input: no gradient needed). Gradients of parameters accumulate. */
typedef struct {
    const char *kind;
    /* Sets l->out, adds parameter / buffer tensors, sets ctx and sync sizes. Fails on a bad shape. */
    dp_status (*plan)(dp_layer *l, dp_layout *params, dp_layout *buffers);
    /* Floats of scratch for a batch with kernel table k (0 if none). */
    size_t (*ws_floats)(const dp_layer *l, const dp_kernels *k, int batch, int nthreads);
    /* PyTorch's default initialisation. */
    void (*init)(const dp_layer *l, float *params, float *buffers, dp_rng *rng);
    /* Optional (SyncBatchNorm): local sums that the executor may sum over replicas before forward. */
    void (*forward_sums)(const dp_layer *l, const dp_exec *x, const float *const *in, float *sync);
    dp_status (*forward)(const dp_layer *l, const dp_exec *x, const float *const *in, float *out, float *ctx,
                         const float *sync);
    /* Optional: local sums of the gradient terms, summed over replicas before backward. */
    void (*backward_sums)(const dp_layer *l, const dp_exec *x, const float *const *in, const float *dout,
                          float *ctx, float *sync);
    dp_status (*backward)(const dp_layer *l, const dp_exec *x, const float *const *in, const float *out,
                          const float *dout, float *const *din, const float *ctx, const float *sync);
} dp_layer_ops;

struct dp_layer {
    const dp_layer_ops *ops;
    char name[32];              /* "conv1", "bn2", ... (tensor names are name.weight etc.) */
    int in[DP_MAX_INPUTS];      /* producing node ids, DP_INPUT for the model input */
    int n_in;
    dp_shape in_shape[DP_MAX_INPUTS];
    dp_shape out;
    int tensor0, n_tensors;     /* parameter tensors in the parameter layout */
    size_t poff[4];             /* their offsets in the parameter arena (weight, bias, ...) */
    size_t boff[4];             /* offsets of its tensors in the buffer arena */
    size_t ctx_per_sample;      /* floats of saved context per sample (e.g. maxpool argmax) */
    size_t ctx_fixed;           /* plus this many (e.g. BN mean and invstd) */
    size_t sync_floats;         /* floats of sums for forward_sums / backward_sums */
    int bf16;                   /* conv, linear under --precision bf16 (nn/layers/bf16.h); set by
                                   dp_model_set_precision */
    union {
        struct { int out_c, k, stride, pad, bias; } conv;
        struct { int out_f, bias; } linear;
        struct { int k, stride, pad; } pool;
        struct { float momentum, eps; } bn;
    } cfg;
};

/* Adds the tensor "<layer name>.<suffix>" to L and returns its offset in *offset. */
dp_status dp_layer_add_tensor(dp_layout *L, const dp_layer *l, const char *suffix, size_t count, int flags,
                              size_t *offset);

/* The layer types (src/nn/layers/). */
extern const dp_layer_ops dp_conv2d_ops, dp_linear_ops, dp_batchnorm_ops, dp_relu_ops, dp_maxpool_ops,
    dp_flatten_ops, dp_add_ops, dp_global_avgpool_ops;

#endif
