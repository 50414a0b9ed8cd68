/* ddp.c: DistributedDataParallel (strategy.h). The device part of a micro-step (zeroing, the
 * buffers' broadcast, forward, backward with the buckets' all-reduces) and the optimizer step
 * are each recorded as one graph where the device can (exec/graph.h). */
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "train/strategy.h"
#include "train/trainer.h"

typedef struct {
    dp_req *bucket_req;  /* (n_buckets) the bucket's all-reduce in flight */
    int *step_count;     /* (n_local) samples so far this step */
} ddp_state;

typedef struct {
    dp_trainer *t;
    ddp_state *s;
    const dp_batch *b;
    const dp_micro_info *mi;
    float lr;
} ddp_args;

/* A bucket is complete: its all-reduce starts at once, running while backward goes on. */
static dp_status bucket_ready(void *ctx, int k, int node, int more_backward) {
    ddp_args *a = ctx;
    dp_trainer *t = a->t;
    dp_executor *ex = &t->ex;
    const dp_slice *s = &t->model.params.buckets[k];
    const double t0 = dp_now();
    if (t->backend->trace) t->backend->trace->ready_node = node;
    dp_status st = dp_exec_allreduce_start(ex, dp_exec_slices(ex, DP_ARENA_GRADS, s->offset), s->count,
                                           &a->s->bucket_req[k]);
    if (t->backend->trace) t->backend->trace->ready_node = -1;
    DP_TRY(st);
    if (more_backward) ex->comm_overlap_s += dp_now() - t0; /* backward work remained to hide it */
    return DP_OK;
}

static dp_status device_part(void *arg) {
    ddp_args *a = arg;
    dp_trainer *t = a->t;
    dp_executor *ex = &t->ex;
    const dp_layout *L = &t->model.params;
    const int reduce = t->world > 1;
    if (a->mi->micro == 0) DP_TRY(dp_exec_zero_grads(ex));
    /* PyTorch's broadcast_buffers: rank 0's BN statistics at every forward */
    if (reduce && t->model.buffers.n)
        DP_TRY(dp_exec_broadcast(ex, dp_exec_slices(ex, DP_ARENA_BUFFERS, 0), t->model.buffers.n, 0));
    DP_TRY(dp_exec_forward(ex, a->b, a->mi, 1.0f / (float)a->mi->step_samples));
    const int overlap = reduce && t->cfg.overlap;
    DP_TRY(dp_exec_backward(ex, a->b, a->mi, overlap ? bucket_ready : NULL, a));
    if (!a->mi->last || !reduce) return DP_OK;
    for (int k = 0; k < L->n_buckets && !overlap; k++) {
        const dp_slice *s = &L->buckets[k];
        if (t->backend->trace) t->backend->trace->ready_node = 0; /* --no-overlap: after the last node */
        DP_TRY(dp_exec_allreduce_start(ex, dp_exec_slices(ex, DP_ARENA_GRADS, s->offset), s->count,
                                       &a->s->bucket_req[k]));
    }
    return dp_exec_wait_all(ex, a->s->bucket_req, L->n_buckets);
}

static dp_status step_replica(void *arg, int r) {
    ddp_args *a = arg;
    dp_trainer *t = a->t;
    dp_replica *rep = &t->ex.rep[r];
    dp_sgd o = t->sgd;
    o.stream = rep->dev->kc.stream, o.device = rep->dev->kc.device; /* on the replica's device */
    dp_sgd_step(&o, &t->model.params, rep->params, rep->grads, rep->momentum, a->lr);
    return DP_OK;
}

static dp_status optimizer_part(void *arg) { return dp_exec_for_replicas(&((ddp_args *)arg)->t->ex, step_replica, arg); }

/* What the recorded device work depends on: the lanes and their counts, the micro-step's place,
 * whether lanes 1.. start clear; and (part 1) the learning rate. */
static uint64_t graph_key(const dp_trainer *t, const dp_batch *b, const dp_micro_info *mi, int part, float lr) {
    const dp_executor *ex = &t->ex;
    int v[8 + ex->n_local];
    int32_t lr_bits;
    memcpy(&lr_bits, &lr, sizeof lr_bits);
    v[0] = part, v[1] = mi->micro, v[2] = mi->last, v[3] = mi->step_samples, v[4] = mi->micro_samples;
    v[5] = part ? lr_bits : ex->lanes_clear;
    v[6] = ex->rep[0].n_active, v[7] = ex->rep[0].n_active ? ex->rep[0].slots[0].lane : 0;
    for (int r = 0; r < ex->n_local; r++) v[8 + r] = b[r].n;
    return dp_graph_key(DP_GRAPH_KEY0, v, 8 + ex->n_local);
}

static dp_status ddp_micro(dp_trainer *t, void *state, const dp_batch *b, const dp_batch *hb,
                           const dp_micro_info *mi, float lr, dp_step_metrics *m) {
    (void)hb;
    ddp_state *s = state;
    dp_executor *ex = &t->ex;
    ddp_args a = {t, s, b, mi, lr};
    DP_TRY(dp_exec_run_graph(ex, graph_key(t, b, mi, 0, lr), device_part, &a));
    /* a replay skips the host's bookkeeping of zeroing and backward: keep it */
    ex->lanes_clear = mi->last ? 1 : mi->micro == 0 ? 0 : ex->lanes_clear;
    for (int r = 0; r < ex->n_local; r++) s->step_count[r] += b[r].n;
    if (!mi->last) return DP_OK;
    int count[ex->n_local], check[ex->n_local];
    for (int r = 0; r < ex->n_local; r++) count[r] = s->step_count[r], s->step_count[r] = 0, check[r] = 1;
    DP_TRY(dp_step_add_metrics(t, count, 0, check, m));
    if (atomic_load(&t->nonfinite)) return DP_OK; /* a device's gradients hold NaN/Inf: nothing is applied */
    return dp_exec_run_graph(ex, graph_key(t, b, mi, 1, lr), optimizer_part, &a);
}

static dp_status ddp_alloc(dp_trainer *t, void **state) {
    ddp_state *s = calloc(1, sizeof *s);
    *state = s;
    if (!s) return dp_fail(DP_ERR_NOMEM, "out of memory for the DDP state");
    DP_ALLOC(s->bucket_req, t->model.params.n_buckets, "bucket requests");
    DP_ALLOC(s->step_count, t->ex.n_local, "step sample counts");
    return DP_OK;
}

static dp_status ddp_finish(dp_trainer *t, void *state) {
    (void)t, (void)state; /* every replica stepped: they hold the same parameters */
    return DP_OK;
}

static void ddp_free(dp_trainer *t, void *state) {
    (void)t;
    ddp_state *s = state;
    if (!s) return;
    free(s->bucket_req);
    free(s->step_count);
    free(s);
}

const dp_strategy dp_strategy_ddp = {"ddp", ddp_alloc, ddp_micro, ddp_finish, ddp_free};
