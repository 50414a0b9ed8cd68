/* stepverbs.c: what a strategy (train/strategy.h) asks of the replicas: a micro-step's passes with
 * the gradients' all-reduce (DDP's), a recorded part of a micro-step, the optimizer step, the logits
 * and their gradients, the loss on a device and the step's loss as a strategy computed it. Each goes
 * to the replica's own device; the passes and the optimizer step are recorded as graphs where the
 * device can (graph.h). */
#include <string.h>

#include "core/treesum.h"
#include "exec/executor_impl.h"

/* What a micro-step's recorded passes depend on (graph.h): the lanes and their counts, the
 * micro-step's place, whether lanes 1.. start clear. */
static uint64_t graph_key(const dp_executor *ex, const dp_batch *b, const dp_micro_info *mi) {
    int v[8 + ex->n_local];
    v[0] = DP_EXEC_PART_PASSES, v[1] = mi->micro, v[2] = mi->last, v[3] = mi->step_samples, v[4] = mi->micro_samples;
    v[5] = ex->lanes_clear;
    v[6] = ex->rep[0].n_active, v[7] = ex->rep[0].n_active ? ex->rep[0].slots[0].lane : 0;
    for (int r = 0; r < ex->n_local; r++) v[8 + r] = b[r].n;
    return dp_graph_key(DP_GRAPH_KEY0, v, 8 + ex->n_local);
}

dp_status dp_exec_run_graph(dp_executor *ex, const dp_batch *b, const dp_micro_info *mi, dp_status (*fn)(void *),
                            void *arg) {
    DP_TRY(dp_graph_run(&ex->graphs, ex->dev, ex->backend, ex->graphs_on, graph_key(ex, b, mi), fn, arg));
    /* a replay skips the host's bookkeeping of zeroing (micro-step 0) and backward (the last): keep it */
    ex->lanes_clear = mi->last ? 1 : mi->micro == 0 ? 0 : ex->lanes_clear;
    return DP_OK;
}

typedef struct {
    dp_executor *ex;
    const dp_sgd *o;
    float lr;
    int r;
} sgd_args;

static dp_status step_replica(void *arg, int r) {
    const sgd_args *a = arg;
    dp_replica *rep = &a->ex->rep[r];
    dp_sgd o = *a->o;
    o.kc = rep->dev->main.kc; /* on the replica's device */
    o.device_memory = !(rep->dev->caps & DP_CAP_HOST_MEMORY); /* there its metrics checked the gradients */
    dp_sgd_step(&o, &a->ex->model->params, rep->params, rep->grads, rep->momentum, a->lr);
    return DP_OK;
}

static dp_status step_replicas(void *arg) {
    sgd_args *a = arg;
    return a->r == DP_EXEC_ALL ? dp_exec_for_replicas(a->ex, step_replica, a) : step_replica(a, a->r);
}

dp_status dp_exec_optimizer_step(dp_executor *ex, int r, const dp_sgd *o, float lr) {
    sgd_args a = {ex, o, lr, r};
    /* the recorded step depends on which replicas step and the learning rate only */
    int v[3] = {DP_EXEC_PART_OPTIMIZER, r, 0};
    memcpy(&v[2], &lr, sizeof lr);
    return dp_graph_run(&ex->graphs, ex->dev, ex->backend, ex->graphs_on, dp_graph_key(DP_GRAPH_KEY0, v, 3),
                        step_replicas, &a);
}

typedef struct {
    dp_executor *ex;
    const dp_batch *b;
    const dp_micro_info *mi;
    float scale;
    const dp_exec_sync *sync;
} passes_args;

/* A bucket is complete: its all-reduce starts at once, running while backward goes on. */
static dp_status bucket_ready(void *ctx, int k, int node, int more_backward) {
    dp_executor *ex = ((passes_args *)ctx)->ex;
    const dp_slice *s = &ex->model->params.buckets[k];
    return dp_exec_allreduce_start(ex, dp_exec_slices(ex, DP_ARENA_GRADS, s->offset), s->count, &ex->bucket_req[k],
                                   node, more_backward);
}

static dp_status run_passes(void *arg) {
    passes_args *a = arg;
    dp_executor *ex = a->ex;
    const dp_exec_sync *sy = a->sync;
    const dp_layout *L = &ex->model->params;
    if (a->mi->micro == 0) DP_TRY(dp_exec_zero_grads(ex));
    if (sy->broadcast_buffers && ex->model->buffers.n)
        DP_TRY(dp_exec_broadcast(ex, dp_exec_slices(ex, DP_ARENA_BUFFERS, 0), ex->model->buffers.n, 0));
    DP_TRY(dp_exec_forward(ex, a->b, a->mi, a->scale));
    const int overlap = sy->allreduce && sy->overlap;
    DP_TRY(dp_exec_backward(ex, a->b, a->mi, overlap ? bucket_ready : NULL, a));
    if (!a->mi->last || !sy->allreduce) return DP_OK;
    for (int k = 0; k < L->n_buckets && !overlap; k++) { /* after the last node */
        const dp_slice *s = &L->buckets[k];
        DP_TRY(dp_exec_allreduce_start(ex, dp_exec_slices(ex, DP_ARENA_GRADS, s->offset), s->count, &ex->bucket_req[k],
                                       0, 0));
    }
    return dp_exec_wait_all(ex, ex->bucket_req, L->n_buckets);
}

dp_status dp_exec_micro_passes(dp_executor *ex, const dp_batch *b, const dp_micro_info *mi, float scale,
                               const dp_exec_sync *sync) {
    passes_args a = {ex, b, mi, scale, sync};
    return dp_exec_run_graph(ex, b, mi, run_passes, &a);
}

dp_status dp_exec_logits(dp_executor *ex, int r, float *dst) {
    const dp_model *md = ex->model;
    const dp_dev *d = dp_exec_dev(ex, r);
    const int K = md->n_classes;
    for (int l = 0; l < ex->rep[r].n_active; l++) {
        const dp_slot *sl = &ex->rep[r].slots[l];
        DP_TRY(d->copy(d, dst + (size_t)sl->lo * K, sl->acts.out[md->output], (size_t)sl->n * K * sizeof(float)));
    }
    return DP_OK;
}

dp_status dp_exec_set_dlogits(dp_executor *ex, int r, const float *src) {
    const dp_model *md = ex->model;
    const dp_dev *d = dp_exec_dev(ex, r);
    const int K = md->n_classes;
    for (int l = 0; l < ex->rep[r].n_active; l++) {
        dp_slot *sl = &ex->rep[r].slots[l];
        DP_TRY(d->copy(d, sl->acts.dout[md->output], src + (size_t)sl->lo * K, (size_t)sl->n * K * sizeof(float)));
    }
    return DP_OK;
}

dp_status dp_exec_loss(dp_executor *ex, int r, int n, const float *logits, const int32_t *labels, float scale,
                       float *dlogits, float *loss, int32_t *hits) {
    const dp_dev *d = dp_exec_dev(ex, r);
    ex->model->head->loss(d->k, &d->main.kc, n, ex->model->n_classes, logits, labels, scale, dlogits, loss, hits);
    return DP_OK;
}

dp_status dp_exec_set_step_loss(dp_executor *ex, int r, int groups, int per, float *loss, const int32_t *hits,
                                float *pairs) {
    if (ex->dev->caps & DP_CAP_HOST_MEMORY) { /* into the lanes' host copies, which the step's sums read */
        for (int q = 0; q < ex->n_local; q++) dp_exec_set_lane_sums(ex, q, 0, 0);
        if (r < 0) return DP_OK;
        float reps[groups > 0 ? groups : 1];
        long h = 0;
        for (int g = 0; g < groups; g++) {
            reps[g] = dp_tree_sum_scalars(loss + (size_t)g * per, per, 1);
            for (int i = 0; i < per; i++) h += hits[(size_t)g * per + i];
        }
        dp_exec_set_lane_sums(ex, r, dp_tree_sum_scalars(reps, groups, 1), (int32_t)h);
        return DP_OK;
    }
    for (int q = 0; q < ex->n_local; q++) {
        const dp_dev *d = dp_exec_dev(ex, q);
        if (q != r) DP_TRY(d->zero(d, ex->d_metrics[q], 2 * sizeof(float)));
    }
    if (r < 0) return DP_OK;
    /* each group's tree and hits into a pair (the first into the step's metrics), then the tree over
       the pairs: the hits are whole floats, exact as the host's integer sum below 2^24 */
    const dp_dev *d = dp_exec_dev(ex, r);
    float *v[groups > 0 ? groups : 1];
    for (int g = 0; g < groups; g++) {
        v[g] = g == 0 ? ex->d_metrics[r] : pairs + 2 * (size_t)g;
        d->k->lane_metrics(&d->main.kc, per, loss + (size_t)g * per, hits + (size_t)g * per, v[g]);
    }
    if (groups > 1) d->k->tree_sum(&d->main.kc, v, groups, 0, 2, 0);
    return DP_OK;
}
