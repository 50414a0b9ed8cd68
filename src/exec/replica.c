#include "exec/replica.h"

#include <stdlib.h>
#include <string.h>

static dp_status slot_create(dp_slot *s, const dp_model *m, const dp_dev *dev, int max_batch) {
    DP_TRY(dp_acts_create_on(m, max_batch, 1, dev, &s->acts));
    DP_TRY(dev->alloc(dev, &s->eval_x, (size_t)max_batch * dp_shape_size(m->input), "evaluation batch"));
    DP_ALLOC(s->eval_y, max_batch, "evaluation labels"); /* on the host: the loss is computed there */
    s->rec_kc = (dp_kctx){.nthreads = 1, .stream = &s->rec, .ordinal = dev->main.kc.ordinal};
    return DP_OK;
}

static dp_status create(dp_replica *r, const dp_model *m, int lane_batch, int n_lanes, int n_slots) {
    const dp_dev *d = r->dev;
    DP_TRY(d->alloc(d, &r->params, m->params.n, "parameters"));
    DP_TRY(d->alloc(d, &r->grads, m->params.n, "gradients"));
    DP_TRY(d->alloc(d, &r->momentum, m->params.n, "momentum buffers"));
    DP_TRY(d->alloc(d, &r->buffers, m->buffers.n, "batch-norm buffers"));
    if (d->caps & DP_CAP_HOST_MEMORY) {
        r->h_params = r->params, r->h_buffers = r->buffers, r->h_momentum = r->momentum;
    } else {
        DP_TRY(dp_alloc_floats(&r->h_params, m->params.n, "host copy of the parameters"));
        DP_TRY(dp_alloc_floats(&r->h_buffers, m->buffers.n, "host copy of the batch-norm buffers"));
        DP_TRY(dp_alloc_floats(&r->h_momentum, m->params.n, "host copy of the momentum buffers"));
    }
    r->lane_grads = calloc((size_t)n_lanes, sizeof *r->lane_grads);
    r->slots = calloc((size_t)n_slots, sizeof *r->slots);
    if (!r->lane_grads || !r->slots) return dp_fail(DP_ERR_NOMEM, "out of memory for %d lanes", n_lanes);
    r->n_lanes = n_lanes;
    r->lane_grads[0] = r->grads;
    for (int l = 1; l < n_lanes; l++) DP_TRY(d->alloc(d, &r->lane_grads[l], m->params.n, "lane gradients"));
    r->n_slots = n_slots;
    for (int s = 0; s < n_slots; s++) DP_TRY(slot_create(&r->slots[s], m, d, lane_batch));
    return DP_OK;
}

dp_status dp_replica_create(dp_replica *r, const dp_model *m, const dp_dev *dev, int rank, int lane_batch, int n_lanes,
                            int n_slots) {
    memset(r, 0, sizeof *r);
    r->rank = rank;
    r->dev = dev ? dev : dp_dev_cpu();
    dp_status s = create(r, m, lane_batch, n_lanes, n_slots);
    if (s != DP_OK) dp_replica_free(r);
    return s;
}

void dp_replica_free(dp_replica *r) {
    const dp_dev *d = r->dev;
    if (!d) return;
    for (int s = 0; r->slots && s < r->n_slots; s++) {
        dp_acts_free(&r->slots[s].acts);
        d->free(d, r->slots[s].eval_x);
        free(r->slots[s].eval_y);
        dp_kcall_rec_free(&r->slots[s].rec);
    }
    free(r->slots);
    for (int l = 1; r->lane_grads && l < r->n_lanes; l++) d->free(d, r->lane_grads[l]);
    free(r->lane_grads);
    if (!(d->caps & DP_CAP_HOST_MEMORY)) {
        dp_free(r->h_params);
        dp_free(r->h_buffers);
        dp_free(r->h_momentum);
    }
    d->free(d, r->params);
    d->free(d, r->grads);
    d->free(d, r->momentum);
    d->free(d, r->buffers);
    memset(r, 0, sizeof *r);
}

dp_status dp_replica_pull(dp_replica *r, const dp_model *m) {
    const dp_dev *d = r->dev;
    if (d->caps & DP_CAP_HOST_MEMORY) return DP_OK;
    DP_TRY(d->download(d, r->h_params, r->params, m->params.n * sizeof(float)));
    DP_TRY(d->download(d, r->h_buffers, r->buffers, m->buffers.n * sizeof(float)));
    return d->download(d, r->h_momentum, r->momentum, m->params.n * sizeof(float));
}

dp_status dp_replica_push(dp_replica *r, const dp_model *m) {
    const dp_dev *d = r->dev;
    if (d->caps & DP_CAP_HOST_MEMORY) return DP_OK;
    DP_TRY(d->upload(d, r->params, r->h_params, m->params.n * sizeof(float)));
    DP_TRY(d->upload(d, r->buffers, r->h_buffers, m->buffers.n * sizeof(float)));
    DP_TRY(d->upload(d, r->momentum, r->h_momentum, m->params.n * sizeof(float)));
    return d->wait(d); /* the host copies may change once this returns */
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
