/* fuse.c: the fusion plan and its dispatch (fuse.h). */
#include "nn/fuse.h"

#include <stdlib.h>

/* Whether node j is a relu (max pool) that reads node i. */
static int reads(const dp_model *m, int j, const dp_layer_ops *ops, int i) {
    return j < m->n_nodes && m->nodes[j].ops == ops && m->nodes[j].n_in == 1 && m->nodes[j].in[0] == i;
}

dp_status dp_fuse_plan(dp_model *m) {
    free(m->fuse);
    m->fuse = calloc((size_t)m->n_nodes, sizeof *m->fuse);
    if (!m->fuse) return dp_fail(DP_ERR_NOMEM, "out of memory planning model %s", m->name);
    for (int i = 0; i < m->n_nodes; i++) {
        const dp_layer *l = &m->nodes[i];
        dp_fuse *f = m->fuse;
        if (f[i].fwd == DP_FUSE_NONE && (l->ops == &dp_conv2d_ops || l->ops == &dp_batchnorm_ops) &&
            reads(m, i + 1, &dp_relu_ops, i)) {
            const int pool = l->ops == &dp_conv2d_ops && reads(m, i + 2, &dp_maxpool_ops, i + 1);
            f[i].fwd = l->ops == &dp_batchnorm_ops ? DP_FUSE_BN_RELU
                       : pool                          ? DP_FUSE_CONV_RELU_POOL
                                                       : DP_FUSE_CONV_RELU;
            for (int t = i + 1; t <= i + 1 + pool; t++) f[t].fwd = DP_FUSE_TAIL, f[t].fwd_head = i;
        }
        /* backward: the pool writes the relu's gradient and the relu its input's, neither added to
           another consumer's (those go through dp_node_backward's scratch) */
        if (l->ops == &dp_maxpool_ops && i > 0 && reads(m, i, &dp_maxpool_ops, i - 1) &&
            m->nodes[i - 1].ops == &dp_relu_ops && m->nodes[i - 1].in[0] != DP_INPUT && !m->din_accumulate[i][0] &&
            !m->din_accumulate[i - 1][0]) {
            f[i].bwd = DP_FUSE_POOL_RELU;
            f[i - 1].bwd = DP_FUSE_TAIL, f[i - 1].bwd_head = i;
        }
    }
    return DP_OK;
}

/* Whether x's table has the entry the fused forward (backward) kind needs. */
static int has(const dp_kernels *k, int kind) {
    switch (kind) {
    case DP_FUSE_CONV_RELU:
    case DP_FUSE_CONV_RELU_POOL: return k->conv2d_relu_forward != NULL;
    case DP_FUSE_BN_RELU: return k->bn_apply_relu != NULL;
    case DP_FUSE_POOL_RELU: return k->maxpool_relu_backward != NULL;
    default: return 0;
    }
}

/* Whether the fused forward headed by node runs: the table has it, and the head is not a convolution
 * under --precision bf16, whose operands and output are rounded around the convolution
 * (nn/layers/bf16.h), which the fused kernel does not do. */
static int fwd_applies(const dp_model *m, int head, const dp_kernels *k) {
    const int kind = m->fuse[head].fwd;
    if ((kind == DP_FUSE_CONV_RELU || kind == DP_FUSE_CONV_RELU_POOL) && m->nodes[head].bf16) return 0;
    return has(k, kind);
}

int dp_fuse_forward(const dp_model *m, int node, dp_acts *a, const dp_exec *x, const float *const *in, dp_status *st) {
    if (!m->fuse) return 0;
    const dp_fuse *f = &m->fuse[node];
    const dp_kernels *k = dp_exec_kernels(x);
    *st = DP_OK;
    if (f->fwd == DP_FUSE_TAIL) return fwd_applies(m, f->fwd_head, k);
    if (!fwd_applies(m, node, k)) return 0;
    const dp_layer *l = &m->nodes[node];
    if (f->fwd == DP_FUSE_BN_RELU)
        *st = dp_batchnorm_forward_relu(l, x, in, a->out[node], a->ctx[node], a->sync[node], a->out[node + 1]);
    else if (f->fwd == DP_FUSE_CONV_RELU_POOL)
        *st = dp_conv2d_forward_relu(l, x, in[0], a->out[node], a->out[node + 1], &m->nodes[node + 2],
                                     a->out[node + 2], a->ctx[node + 2]);
    else
        *st = dp_conv2d_forward_relu(l, x, in[0], a->out[node], a->out[node + 1], NULL, NULL, NULL);
    return 1;
}

int dp_fuse_backward(const dp_model *m, int node, dp_acts *a, const dp_exec *x, const float *const *in,
                     dp_status *st) {
    (void)in;
    if (!m->fuse) return 0;
    const dp_fuse *f = &m->fuse[node];
    const dp_kernels *k = dp_exec_kernels(x);
    *st = DP_OK;
    if (f->bwd == DP_FUSE_TAIL) return has(k, m->fuse[f->bwd_head].bwd);
    if (!has(k, f->bwd)) return 0;
    const int relu = node - 1;
    dp_maxpool_relu_backward(&m->nodes[node], x, a->dout[node], a->ctx[node], a->out[relu], a->dout[relu],
                             a->dout[m->nodes[relu].in[0]]);
    return 1;
}
