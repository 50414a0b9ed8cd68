#include "train/replica.h"

#include <stdlib.h>
#include <string.h>

static dp_status slot_create(dp_slot *s, const dp_model *m, int max_batch) {
    DP_TRY(dp_acts_create(m, max_batch, 1, &s->acts));
    DP_TRY(dp_alloc_floats(&s->eval_x, (size_t)max_batch * dp_shape_size(m->input), "evaluation batch"));
    DP_ALLOC(s->eval_y, max_batch, "evaluation labels");
    return DP_OK;
}

static dp_status create(dp_replica *r, const dp_model *m, int lane_batch, int n_lanes, int n_slots) {
    DP_TRY(dp_alloc_floats(&r->params, m->params.n, "parameters"));
    DP_TRY(dp_alloc_floats(&r->grads, m->params.n, "gradients"));
    DP_TRY(dp_alloc_floats(&r->momentum, m->params.n, "momentum buffers"));
    DP_TRY(dp_alloc_floats(&r->buffers, m->buffers.n, "batch-norm buffers"));
    r->lane_grads = calloc((size_t)n_lanes, sizeof *r->lane_grads);
    r->slots = calloc((size_t)n_slots, sizeof *r->slots);
    if (!r->lane_grads || !r->slots) return dp_fail(DP_ERR_NOMEM, "out of memory for %d lanes", n_lanes);
    r->n_lanes = n_lanes;
    r->lane_grads[0] = r->grads;
    for (int l = 1; l < n_lanes; l++) DP_TRY(dp_alloc_floats(&r->lane_grads[l], m->params.n, "lane gradients"));
    r->n_slots = n_slots;
    for (int s = 0; s < n_slots; s++) DP_TRY(slot_create(&r->slots[s], m, lane_batch));
    return DP_OK;
}

dp_status dp_replica_create(dp_replica *r, const dp_model *m, int rank, int lane_batch, int n_lanes, int n_slots) {
    memset(r, 0, sizeof *r);
    r->rank = rank;
    dp_status s = create(r, m, lane_batch, n_lanes, n_slots);
    if (s != DP_OK) dp_replica_free(r);
    return s;
}

void dp_replica_free(dp_replica *r) {
    for (int s = 0; r->slots && s < r->n_slots; s++) {
        dp_acts_free(&r->slots[s].acts);
        dp_free(r->slots[s].eval_x);
        free(r->slots[s].eval_y);
    }
    free(r->slots);
    for (int l = 1; r->lane_grads && l < r->n_lanes; l++) dp_free(r->lane_grads[l]);
    free(r->lane_grads);
    dp_free(r->params);
    dp_free(r->grads);
    dp_free(r->momentum);
    dp_free(r->buffers);
    memset(r, 0, sizeof *r);
}

void dp_replica_assign(dp_replica *r, int first, int count, const int *counts) {
    int lo = 0;
    r->n_active = count;
    for (int s = 0; s < count; s++) {
        dp_slot *sl = &r->slots[s];
        sl->lane = first + s;
        sl->grads = r->lane_grads[first + s];
        sl->lo = lo;
        sl->n = counts[s];
        lo += counts[s];
    }
}
