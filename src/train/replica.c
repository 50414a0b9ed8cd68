#include "train/replica.h"

#include <stdlib.h>
#include <string.h>

dp_status dp_replica_create(dp_replica *r, const dp_model *m, int rank, int max_batch, int nthreads) {
    memset(r, 0, sizeof *r);
    r->rank = rank;
    dp_status s;
    if ((s = dp_alloc_floats(&r->params, m->params.n, "parameters")) != DP_OK ||
        (s = dp_alloc_floats(&r->grads, m->params.n, "gradients")) != DP_OK ||
        (s = dp_alloc_floats(&r->momentum, m->params.n, "momentum buffers")) != DP_OK ||
        (s = dp_alloc_floats(&r->buffers, m->buffers.n, "batch-norm buffers")) != DP_OK ||
        (s = dp_acts_create(m, max_batch, nthreads, &r->acts)) != DP_OK ||
        (s = dp_alloc_floats(&r->eval_x, (size_t)max_batch * dp_shape_size(m->input), "evaluation batch")) != DP_OK) {
        dp_replica_free(r);
        return s;
    }
    r->eval_y = calloc((size_t)max_batch, sizeof *r->eval_y);
    if (!r->eval_y) {
        dp_replica_free(r);
        return dp_fail(DP_ERR_NOMEM, "out of memory for evaluation labels");
    }
    return DP_OK;
}

void dp_replica_free(dp_replica *r) {
    dp_free(r->params);
    dp_free(r->grads);
    dp_free(r->momentum);
    dp_free(r->buffers);
    dp_free(r->eval_x);
    free(r->eval_y);
    dp_acts_free(&r->acts);
    memset(r, 0, sizeof *r);
}
