/* model.h: a model is a graph of layers in topological order (a chain for LeNet, a DAG with
 * residual adds for ResNet), planned once into parameter and buffer layouts. The per-replica
 * activation memory (dp_acts) is separate, so the trainer can step one node at a time across
 * all replicas: that lockstep is where collectives (DDP buckets, SyncBN sums) slot in. */
#ifndef DP_MODEL_H
#define DP_MODEL_H

#include "nn/head.h"
#include "nn/layer.h"

typedef struct {
    char name[32];
    dp_shape input;
    int n_classes;
    dp_layer *nodes;
    int n_nodes, cap;
    int output;                 /* node producing the logits */
    const dp_head_ops *head;    /* the loss and prediction on the output (head.h); the builder sets it */
    dp_layout params, buffers;
    int (*din_accumulate)[DP_MAX_INPUTS]; /* 1: another consumer already wrote that input's gradient */
    struct dp_fuse *fuse;       /* per node: the layer sequences run as one kernel call (fuse.h) */
    dp_status error;            /* first builder error (sticky), reported by dp_model_finish */
} dp_model;

/* Builder: each returns the new node id, or -1 after recording an error in m. */
void dp_model_init(dp_model *m, const char *name, dp_shape input, int n_classes);
int dp_model_conv2d(dp_model *m, const char *name, int in, int out_c, int k, int stride, int pad, int bias);
int dp_model_linear(dp_model *m, const char *name, int in, int out_f, int bias);
int dp_model_batchnorm(dp_model *m, const char *name, int in);
int dp_model_relu(dp_model *m, int in);
int dp_model_maxpool(dp_model *m, int in, int k, int stride, int pad);
int dp_model_flatten(dp_model *m, int in);
int dp_model_add(dp_model *m, int a, int b);
int dp_model_global_avgpool(dp_model *m, int in);
/* Plans the graph (shapes, layouts, gradient flow); the output must be (n_classes, 1, 1). */
dp_status dp_model_finish(dp_model *m, int output);
void dp_model_free(dp_model *m);
/* --precision: bf16 != 0 makes the convolution and linear layers compute on bf16 copies of their
 * operands (nn/layers/bf16.h); call before sizing activations (their scratch grows). */
void dp_model_set_precision(dp_model *m, int bf16);

/* Initialises parameters and buffers as PyTorch does, from rng. params/buffers are arenas
 * of m->params.n / m->buffers.n floats. */
void dp_model_init_params(const dp_model *m, float *params, float *buffers, dp_rng *rng);

/* One replica's activations for up to max_batch samples. */
typedef struct {
    int max_batch;
    float **out, **dout, **ctx, **sync; /* per node */
    float *ws;                          /* scratch shared by the layers */
    float *din_tmp;                     /* gradient of a node with several consumers, before it is added */
    float *mem;
    const struct dp_dev *dev; /* where mem lives (NULL: the host) */
    size_t ws_floats;
} dp_acts;

dp_status dp_acts_create(const dp_model *m, int max_batch, int nthreads, dp_acts *a);
/* The same on a device (kernels/device.h; NULL: the host). */
struct dp_dev;
dp_status dp_acts_create_on(const dp_model *m, int max_batch, int nthreads, const struct dp_dev *dev, dp_acts *a);
/* Floats dp_acts_create allocates for these arguments (memory estimates, without allocating). */
size_t dp_acts_floats(const dp_model *m, int max_batch, int nthreads);
/* The same with kernel table k's scratch sizes (a device's convolutions need more). */
size_t dp_acts_floats_k(const dp_model *m, const dp_kernels *k, int max_batch, int nthreads);
void dp_acts_free(dp_acts *a);

/* One node on one replica. `input` is the model's input batch. x->ws is set from a. */
void dp_node_forward_sums(const dp_model *m, int node, dp_acts *a, const dp_exec *x, const float *input);
dp_status dp_node_forward(const dp_model *m, int node, dp_acts *a, const dp_exec *x, const float *input);
void dp_node_backward_sums(const dp_model *m, int node, dp_acts *a, const dp_exec *x, const float *input);
dp_status dp_node_backward(const dp_model *m, int node, dp_acts *a, const dp_exec *x, const float *input);
/* Whether the node has cross-replica sums (SyncBN). */
static inline int dp_node_has_sums(const dp_model *m, int node) { return m->nodes[node].sync_floats > 0; }

/* Whole passes on one replica with local statistics (evaluation, tests). backward expects
 * a->dout[m->output] to hold the gradient of the loss with respect to the logits. */
dp_status dp_model_forward(const dp_model *m, dp_acts *a, const dp_exec *x, const float *input);
dp_status dp_model_backward(const dp_model *m, dp_acts *a, const dp_exec *x, const float *input);

/* Builds a named model ("lenet", "lenet-bn") for this input shape and class count. */
dp_status dp_model_build(const char *name, dp_shape input, int n_classes, dp_model *m);
int dp_model_known(const char *name);
/* The node after whose backward bucket b of the parameters (dp_layout_make_buckets) is complete:
 * the node holding its first tensor (backward runs the nodes in reverse). */
int dp_model_bucket_node(const dp_model *m, int b);
const char *dp_model_names(void); /* "lenet, lenet-bn" for messages */

#endif
