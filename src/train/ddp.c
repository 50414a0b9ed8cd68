/* ddp.c: DistributedDataParallel (strategy.h). The device part of a micro-step (zeroing, the
 * buffers' broadcast, forward, backward with the buckets' all-reduces) and the optimizer step
 * are each recorded as one graph where the device can (exec/graph.h). */
#include <stdlib.h>

#include "train/strategy.h"

typedef struct {
    dp_req *bucket_req;  /* (n_buckets) the bucket's all-reduce in flight */
    int *step_count;     /* (n_local) samples so far this step */
} ddp_state;

typedef struct {
    const dp_step_ctx *c;
    ddp_state *s;
} ddp_args;

/* A bucket is complete: its all-reduce starts at once, running while backward goes on. */
static dp_status bucket_ready(void *ctx, int k, int node, int more_backward) {
    ddp_args *a = ctx;
    dp_executor *ex = a->c->ex;
    const dp_slice *s = &a->c->model->params.buckets[k];
    return dp_exec_allreduce_start(ex, dp_exec_slices(ex, DP_ARENA_GRADS, s->offset), s->count, &a->s->bucket_req[k],
                                   node, more_backward);
}

static dp_status device_part(void *arg) {
    ddp_args *a = arg;
    const dp_step_ctx *c = a->c;
    dp_executor *ex = c->ex;
    const dp_layout *L = &c->model->params;
    const int reduce = c->world > 1;
    if (c->mi->micro == 0) DP_TRY(dp_exec_zero_grads(ex));
    /* PyTorch's broadcast_buffers: rank 0's BN statistics at every forward */
    if (reduce && c->model->buffers.n)
        DP_TRY(dp_exec_broadcast(ex, dp_exec_slices(ex, DP_ARENA_BUFFERS, 0), c->model->buffers.n, 0));
    DP_TRY(dp_exec_forward(ex, c->b, c->mi, 1.0f / (float)c->mi->step_samples));
    const int overlap = reduce && c->overlap;
    DP_TRY(dp_exec_backward(ex, c->b, c->mi, overlap ? bucket_ready : NULL, a));
    if (!c->mi->last || !reduce) return DP_OK;
    for (int k = 0; k < L->n_buckets && !overlap; k++) { /* --no-overlap: after the last node */
        const dp_slice *s = &L->buckets[k];
        DP_TRY(dp_exec_allreduce_start(ex, dp_exec_slices(ex, DP_ARENA_GRADS, s->offset), s->count,
                                       &a->s->bucket_req[k], 0, 0));
    }
    return dp_exec_wait_all(ex, a->s->bucket_req, L->n_buckets);
}

static dp_status optimizer_part(void *arg) {
    const dp_step_ctx *c = ((ddp_args *)arg)->c;
    return dp_exec_optimizer_step(c->ex, DP_EXEC_ALL, c->sgd, c->lr);
}

static dp_status ddp_micro(const dp_step_ctx *c, void *state) {
    ddp_state *s = state;
    dp_executor *ex = c->ex;
    const int n_local = dp_exec_n_local(ex);
    ddp_args a = {c, s};
    DP_TRY(dp_exec_run_graph(ex, DP_EXEC_PART_PASSES, c->b, c->mi, c->lr, device_part, &a));
    for (int r = 0; r < n_local; r++) s->step_count[r] += c->b[r].n;
    if (!c->mi->last) return DP_OK;
    int count[n_local], check[n_local];
    for (int r = 0; r < n_local; r++) count[r] = s->step_count[r], s->step_count[r] = 0, check[r] = 1;
    dp_step_in in = c->in;
    in.count = count, in.host_lanes = 0, in.check = check;
    DP_TRY(dp_exec_step_sums(ex, &in, c->sums));
    if (!dp_step_sums_apply(c->sums)) return DP_OK; /* NaN/Inf: nothing is applied */
    return dp_exec_run_graph(ex, DP_EXEC_PART_OPTIMIZER, c->b, c->mi, c->lr, optimizer_part, &a);
}

static size_t ddp_largest(const dp_model *m) {
    size_t n = 0;
    for (int k = 0; k < m->params.n_buckets; k++) n = m->params.buckets[k].count > n ? m->params.buckets[k].count : n;
    return n;
}

static dp_status ddp_alloc(const dp_step_ctx *c, void **state) {
    ddp_state *s = calloc(1, sizeof *s);
    *state = s;
    if (!s) return dp_fail(DP_ERR_NOMEM, "out of memory for the DDP state");
    DP_ALLOC(s->bucket_req, c->model->params.n_buckets, "bucket requests");
    DP_ALLOC(s->step_count, dp_exec_n_local(c->ex), "step sample counts");
    return DP_OK;
}

static dp_status ddp_finish(const dp_step_ctx *c, void *state) {
    (void)c, (void)state; /* every replica stepped: they hold the same parameters */
    return DP_OK;
}

static void ddp_free(const dp_step_ctx *c, void *state) {
    (void)c;
    ddp_state *s = state;
    if (!s) return;
    free(s->bucket_req);
    free(s->step_count);
    free(s);
}

const dp_strategy dp_strategy_ddp = {.name = "ddp", .title = "DDP", .largest_collective = ddp_largest,
                                     .alloc = ddp_alloc, .micro_step = ddp_micro, .finish = ddp_finish,
                                     .free = ddp_free};
