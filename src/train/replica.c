#include "train/replica.h"

#include <stdlib.h>
#include <string.h>

static dp_status lane_create(dp_lane *l, const dp_model *m, int max_batch, int own_grads) {
    DP_TRY(dp_acts_create(m, max_batch, 1, &l->acts));
    if (own_grads) DP_TRY(dp_alloc_floats(&l->grads, m->params.n, "lane gradients"));
    DP_TRY(dp_alloc_floats(&l->eval_x, (size_t)max_batch * dp_shape_size(m->input), "evaluation batch"));
    DP_ALLOC(l->eval_y, max_batch, "evaluation labels");
    return DP_OK;
}

dp_status dp_replica_create(dp_replica *r, const dp_model *m, int rank, int max_batch, int n_lanes) {
    memset(r, 0, sizeof *r);
    r->rank = rank;
    dp_status s;
    if ((s = dp_alloc_floats(&r->params, m->params.n, "parameters")) != DP_OK ||
        (s = dp_alloc_floats(&r->grads, m->params.n, "gradients")) != DP_OK ||
        (s = dp_alloc_floats(&r->momentum, m->params.n, "momentum buffers")) != DP_OK ||
        (s = dp_alloc_floats(&r->buffers, m->buffers.n, "batch-norm buffers")) != DP_OK) {
        dp_replica_free(r);
        return s;
    }
    r->lanes = calloc((size_t)n_lanes, sizeof *r->lanes);
    if (!r->lanes) {
        dp_replica_free(r);
        return dp_fail(DP_ERR_NOMEM, "out of memory for %d lanes", n_lanes);
    }
    r->n_lanes = n_lanes;
    int per_lane = (max_batch + n_lanes - 1) / n_lanes;
    for (int l = 0; l < n_lanes; l++) {
        if ((s = lane_create(&r->lanes[l], m, per_lane, l > 0)) != DP_OK) {
            dp_replica_free(r);
            return s;
        }
    }
    r->lanes[0].grads = r->grads;
    return DP_OK;
}

void dp_replica_free(dp_replica *r) {
    for (int l = 0; l < r->n_lanes; l++) {
        dp_lane *ln = &r->lanes[l];
        dp_acts_free(&ln->acts);
        if (l > 0) dp_free(ln->grads);
        dp_free(ln->eval_x);
        free(ln->eval_y);
    }
    free(r->lanes);
    dp_free(r->params);
    dp_free(r->grads);
    dp_free(r->momentum);
    dp_free(r->buffers);
    memset(r, 0, sizeof *r);
}

void dp_replica_split(dp_replica *r, int n) {
    int base = n / r->n_lanes, extra = n % r->n_lanes, lo = 0;
    for (int l = 0; l < r->n_lanes; l++) {
        r->lanes[l].lo = lo;
        r->lanes[l].n = base + (l < extra);
        lo += r->lanes[l].n;
    }
}
