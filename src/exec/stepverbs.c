/* stepverbs.c: what a strategy (train/strategy.h) asks of the replicas besides the passes and the
 * collectives: a recorded part of a micro-step, the optimizer step, the logits and their
 * gradients, the loss on a device. Each goes to the replica's own device. */
#include <string.h>

#include "exec/executor_impl.h"

/* What the recorded device work depends on (graph.h): the lanes and their counts, the micro-step's
 * place, whether lanes 1.. start clear; and (the optimizer) the learning rate. */
static uint64_t graph_key(const dp_executor *ex, int part, const dp_batch *b, const dp_micro_info *mi, float lr) {
    int v[8 + ex->n_local];
    int32_t lr_bits;
    memcpy(&lr_bits, &lr, sizeof lr_bits);
    v[0] = part, v[1] = mi->micro, v[2] = mi->last, v[3] = mi->step_samples, v[4] = mi->micro_samples;
    v[5] = part ? lr_bits : ex->lanes_clear;
    v[6] = ex->rep[0].n_active, v[7] = ex->rep[0].n_active ? ex->rep[0].slots[0].lane : 0;
    for (int r = 0; r < ex->n_local; r++) v[8 + r] = b[r].n;
    return dp_graph_key(DP_GRAPH_KEY0, v, 8 + ex->n_local);
}

dp_status dp_exec_run_graph(dp_executor *ex, int part, const dp_batch *b, const dp_micro_info *mi, float lr,
                            dp_status (*fn)(void *), void *arg) {
    DP_TRY(dp_graph_run(&ex->graphs, ex->dev, ex->backend, ex->graphs_on, graph_key(ex, part, b, mi, lr), fn, arg));
    /* a replay skips the host's bookkeeping of zeroing (micro-step 0) and backward (the last): keep it */
    if (part == DP_EXEC_PART_PASSES) ex->lanes_clear = mi->last ? 1 : mi->micro == 0 ? 0 : ex->lanes_clear;
    return DP_OK;
}

typedef struct {
    dp_executor *ex;
    const dp_sgd *o;
    float lr;
} sgd_args;

static dp_status step_replica(void *arg, int r) {
    const sgd_args *a = arg;
    dp_replica *rep = &a->ex->rep[r];
    dp_sgd o = *a->o;
    o.kc = rep->dev->main.kc; /* on the replica's device */
    dp_sgd_step(&o, &a->ex->model->params, rep->params, rep->grads, rep->momentum, a->lr);
    return DP_OK;
}

dp_status dp_exec_optimizer_step(dp_executor *ex, int r, const dp_sgd *o, float lr) {
    sgd_args a = {ex, o, lr};
    return r == DP_EXEC_ALL ? dp_exec_for_replicas(ex, step_replica, &a) : step_replica(&a, r);
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
