/* state_dict.c: naming a model's arenas the way PyTorch names its twin's tensors. */
#include "io/state_dict.h"

#include <stdio.h>
#include <stdlib.h>

static void add(dp_sd_entry *e, int *n, const dp_layer *l, const char *suffix, dp_sd_kind kind, size_t offset,
                int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    dp_sd_entry *x = &e[(*n)++];
    snprintf(x->name, sizeof x->name, "%s.%s", l->name, suffix);
    x->kind = kind;
    x->ndim = ndim;
    x->shape[0] = d0, x->shape[1] = d1, x->shape[2] = d2, x->shape[3] = d3;
    x->offset = offset;
    x->count = 1;
    for (int i = 0; i < ndim; i++) x->count *= (size_t)x->shape[i];
}

dp_status dp_state_dict(const dp_model *m, dp_sd_entry **out, int *n_out) {
    dp_sd_entry *e;
    DP_ALLOC(e, (size_t)m->n_nodes * 5 + 1, "the state_dict table");
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const dp_layer *l = &m->nodes[i];
        if (l->ops == &dp_conv2d_ops) {
            const int oc = l->cfg.conv.out_c, k = l->cfg.conv.k;
            add(e, &n, l, "weight", DP_SD_PARAM, l->poff[0], 4, oc, l->in_shape[0].c, k, k);
            if (l->cfg.conv.bias) add(e, &n, l, "bias", DP_SD_PARAM, l->poff[1], 1, oc, 0, 0, 0);
        } else if (l->ops == &dp_linear_ops) {
            const int of = l->cfg.linear.out_f;
            add(e, &n, l, "weight", DP_SD_PARAM, l->poff[0], 2, of, (int64_t)dp_shape_size(l->in_shape[0]), 0, 0);
            if (l->cfg.linear.bias) add(e, &n, l, "bias", DP_SD_PARAM, l->poff[1], 1, of, 0, 0, 0);
        } else if (l->ops == &dp_batchnorm_ops) {
            const int c = l->in_shape[0].c;
            add(e, &n, l, "weight", DP_SD_PARAM, l->poff[0], 1, c, 0, 0, 0);
            add(e, &n, l, "bias", DP_SD_PARAM, l->poff[1], 1, c, 0, 0, 0);
            add(e, &n, l, "running_mean", DP_SD_BUFFER, l->boff[0], 1, c, 0, 0, 0);
            add(e, &n, l, "running_var", DP_SD_BUFFER, l->boff[1], 1, c, 0, 0, 0);
            add(e, &n, l, "num_batches_tracked", DP_SD_COUNTER, 0, 0, 0, 0, 0, 0);
        } else if (l->n_tensors > 0) {
            free(e);
            return dp_fail(DP_ERR_INTERNAL, "model %s: layer %s (%s) has tensors but no state_dict naming", m->name,
                           l->name, l->ops->kind);
        }
    }
    *out = e;
    *n_out = n;
    return DP_OK;
}
