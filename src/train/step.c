/* step.c: one training micro-step on every local replica, node by node in lockstep, with the
 * strategy deciding the collectives:
 *   DDP: buffers broadcast from rank 0, forward, loss, backward with each gradient bucket
 *        all-reduced (sum; the loss is already scaled by 1/global batch) as soon as it is
 *        complete, then every replica steps its own optimizer.
 *   DP:  parameters and buffers replicated from rank 0, forward, logits gathered to rank 0,
 *        loss there over the whole batch, logit gradients scattered back, backward, gradients
 *        reduced to rank 0, only rank 0 steps. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "kernels/cpu/loss.h"
#include "train/trainer.h"

/* Runs the body for every local replica (the trainer must be named t): in parallel over replicas when there are several
 * (each kernel then single-threaded), else once with all threads inside the kernels. */
#define FOR_REPLICAS(t, r) \
    _Pragma("omp parallel for num_threads(t->cfg.threads) schedule(static) if (t->n_local > 1)") \
    for (int r = 0; r < (t)->n_local; r++)

static dp_exec exec_of(const dp_trainer *t, int r, const dp_batch *b, int global_batch, int training) {
    dp_exec x = {0};
    x.batch = b ? b[r].n : 0;
    x.global_batch = global_batch;
    x.training = training;
    x.sync = t->cfg.sync_bn;
    x.nthreads = t->kthreads;
    x.params = t->rep[r].params;
    x.grads = t->rep[r].grads;
    x.buffers = t->rep[r].buffers;
    return x;
}

static dp_status first_error(const dp_status *st, int n) {
    for (int i = 0; i < n; i++)
        if (st[i] != DP_OK) return st[i];
    return DP_OK;
}

/* One collective over the same slice of every local replica's arena. */
static float *const *slices(dp_trainer *t, size_t which, size_t offset) {
    for (int r = 0; r < t->n_local; r++) {
        float *base = which == 0 ? t->rep[r].params : which == 1 ? t->rep[r].grads : t->rep[r].buffers;
        t->ptrs[r] = base + offset;
    }
    return t->ptrs;
}
enum { ARENA_PARAMS = 0, ARENA_GRADS = 1, ARENA_BUFFERS = 2 };

static float *const *node_sync(dp_trainer *t, int node) {
    for (int r = 0; r < t->n_local; r++) t->ptrs[r] = t->rep[r].acts.sync[node];
    return t->ptrs;
}

/* A node's local sums on every replica (SyncBN), summed over all replicas with --sync-bn. */
static dp_status node_sums(dp_trainer *t, int i, const dp_batch *b, int global_batch, int backward) {
    const dp_model *m = &t->model;
    if (!dp_node_has_sums(m, i)) return DP_OK;
    FOR_REPLICAS(t, r) {
        dp_exec x = exec_of(t, r, b, global_batch, 1);
        if (backward) dp_node_backward_sums(m, i, &t->rep[r].acts, &x, b[r].x);
        else dp_node_forward_sums(m, i, &t->rep[r].acts, &x, b[r].x);
    }
    if (t->cfg.sync_bn) DP_TRY(dp_allreduce(t->backend, node_sync(t, i), m->nodes[i].sync_floats, DP_SUM));
    return DP_OK;
}

static dp_status forward_all(dp_trainer *t, const dp_batch *b, int global_batch, dp_status *st) {
    const dp_model *m = &t->model;
    for (int i = 0; i < m->n_nodes; i++) {
        DP_TRY(node_sums(t, i, b, global_batch, 0));
        FOR_REPLICAS(t, r) {
            dp_exec x = exec_of(t, r, b, global_batch, 1);
            st[r] = dp_node_forward(m, i, &t->rep[r].acts, &x, b[r].x);
        }
        DP_TRY(first_error(st, t->n_local));
    }
    return DP_OK;
}

/* Backward; with `reduce_buckets`, each bucket's all-reduce starts right after the node that
 * completes it (overlap: a backend with non-blocking collectives runs it while backward goes
 * on) and all are waited for at the end; without overlap they all start after the last node. */
static dp_status backward_all(dp_trainer *t, const dp_batch *b, int global_batch, int reduce_buckets, dp_status *st) {
    const dp_model *m = &t->model;
    const dp_layout *L = &m->params;
    int next_bucket = 0;
    for (int i = m->n_nodes - 1; i >= 0; i--) {
        DP_TRY(node_sums(t, i, b, global_batch, 1));
        FOR_REPLICAS(t, r) {
            dp_exec x = exec_of(t, r, b, global_batch, 1);
            st[r] = dp_node_backward(m, i, &t->rep[r].acts, &x, b[r].x);
        }
        DP_TRY(first_error(st, t->n_local));
        while (reduce_buckets && t->cfg.overlap && next_bucket < L->n_buckets && t->bucket_node[next_bucket] == i) {
            const dp_slice *s = &L->buckets[next_bucket];
            double t0 = dp_now();
            DP_TRY(dp_allreduce_start(t->backend, slices(t, ARENA_GRADS, s->offset), s->count, DP_SUM,
                                      &t->bucket_req[next_bucket]));
            if (i > 0) t->comm_overlap_s += dp_now() - t0; /* backward work remained to hide it */
            next_bucket++;
        }
    }
    if (!reduce_buckets) return DP_OK;
    for (; next_bucket < L->n_buckets; next_bucket++) {
        const dp_slice *s = &L->buckets[next_bucket];
        DP_TRY(dp_allreduce_start(t->backend, slices(t, ARENA_GRADS, s->offset), s->count, DP_SUM,
                                  &t->bucket_req[next_bucket]));
    }
    for (int k = 0; k < L->n_buckets; k++) DP_TRY(dp_wait(t->backend, t->bucket_req[k]));
    return DP_OK;
}

/* Loss of each replica's logits against its labels; gradient scaled to the mean over the
 * global batch (and over micro-batches). NaN/Inf names the replica. */
static dp_status loss_all(dp_trainer *t, const dp_batch *b, float scale, double *loss, int *correct) {
    const dp_model *m = &t->model;
    FOR_REPLICAS(t, r) {
        dp_acts *a = &t->rep[r].acts;
        loss[r] = b[r].n ? softmax_xent_cpu(b[r].n, m->n_classes, a->out[m->output], b[r].y, scale,
                                            a->dout[m->output], &correct[r])
                         : 0.0;
        if (!b[r].n) correct[r] = 0;
    }
    for (int r = 0; r < t->n_local; r++)
        if (!isfinite(loss[r]))
            return dp_fail(DP_ERR_NUMERIC, "the loss of replica %d became %s at epoch %d, step %ld: training stopped "
                           "(try a smaller --lr)", t->rep[r].rank, isnan(loss[r]) ? "NaN" : "Inf", t->epoch,
                           t->step + 1);
    return DP_OK;
}

static void zero_grads(dp_trainer *t, int from) {
    FOR_REPLICAS(t, r) {
        if (r >= from) memset(t->rep[r].grads, 0, t->model.params.n * sizeof(float));
    }
}

/* Sums [loss, correct, count] over every replica of every process into *m. */
static dp_status add_metrics(dp_trainer *t, const dp_batch *b, const double *loss, const int *correct,
                             dp_step_metrics *m) {
    for (int r = 0; r < t->n_local; r++) {
        t->metric_bufs[r][0] = (float)loss[r];
        t->metric_bufs[r][1] = (float)correct[r];
        t->metric_bufs[r][2] = (float)b[r].n;
    }
    /* not through dp_allreduce: bookkeeping, not gradient traffic, stays out of the statistics */
    DP_TRY(t->backend->iface->allreduce(t->backend, t->metric_bufs, 3, DP_SUM));
    m->loss_sum += t->metric_bufs[0][0];
    m->correct += lrintf(t->metric_bufs[0][1]);
    m->count += lrintf(t->metric_bufs[0][2]);
    return DP_OK;
}

static dp_status ddp_micro(dp_trainer *t, const dp_batch *b, int global_batch, int micro, int n_micro, float lr,
                           dp_step_metrics *m) {
    dp_status st[t->n_local];
    double loss[t->n_local];
    int correct[t->n_local];
    const int last = micro == n_micro - 1;
    if (micro == 0) zero_grads(t, 0);
    /* PyTorch's broadcast_buffers: rank 0's BN statistics at every forward */
    if (t->world > 1 && t->model.buffers.n)
        DP_TRY(dp_broadcast(t->backend, slices(t, ARENA_BUFFERS, 0), t->model.buffers.n, 0));
    DP_TRY(forward_all(t, b, global_batch, st));
    DP_TRY(loss_all(t, b, 1.0f / ((float)global_batch * (float)n_micro), loss, correct));
    DP_TRY(backward_all(t, b, global_batch, last && t->world > 1, st));
    DP_TRY(add_metrics(t, b, loss, correct, m));
    if (!last) return DP_OK;
    FOR_REPLICAS(t, r) {
        dp_sgd_step(&t->sgd, &t->model.params, t->rep[r].params, t->rep[r].grads, t->rep[r].momentum, lr);
    }
    return DP_OK;
}

/* DP's gather record per replica: its logits (max_local, K), labels (max_local) and count. */
static size_t dp_record_floats(const dp_trainer *t) {
    return (size_t)t->rep[0].acts.max_batch * (size_t)(t->model.n_classes + 1) + 1;
}

dp_status dp_strategy_alloc(dp_trainer *t) {
    if (t->cfg.mode != DP_MODE_DP) return DP_OK;
    size_t rec = dp_record_floats(t);
    DP_ALLOC(t->dp_send, (size_t)t->n_local * rec, "DataParallel gather buffers");
    DP_ALLOC(t->dp_recv, (size_t)t->n_local * rec * (size_t)t->world, "DataParallel gather buffers");
    return DP_OK;
}

static dp_status dp_micro(dp_trainer *t, const dp_batch *b, int global_batch, float lr, dp_step_metrics *m) {
    const dp_model *md = &t->model;
    const int K = md->n_classes, maxb = t->rep[0].acts.max_batch;
    const size_t rec = dp_record_floats(t), all = rec * (size_t)t->world;
    dp_status st[t->n_local];
    double loss[t->n_local];
    int correct[t->n_local];
    /* replicate: the master's parameters and buffers to every replica, every step */
    if (t->world > 1) {
        DP_TRY(dp_broadcast(t->backend, slices(t, ARENA_PARAMS, 0), md->params.n, 0));
        if (md->buffers.n) DP_TRY(dp_broadcast(t->backend, slices(t, ARENA_BUFFERS, 0), md->buffers.n, 0));
    }
    zero_grads(t, 0);
    DP_TRY(forward_all(t, b, global_batch, st));
    /* gather outputs (and labels) to the master */
    const float *send[t->n_local];
    float *recv[t->n_local];
    for (int r = 0; r < t->n_local; r++) {
        float *s = t->dp_send + (size_t)r * rec;
        memcpy(s, t->rep[r].acts.out[md->output], (size_t)b[r].n * K * sizeof(float));
        for (int i = 0; i < b[r].n; i++) s[(size_t)maxb * K + i] = (float)b[r].y[i];
        s[rec - 1] = (float)b[r].n;
        send[r] = s;
        recv[r] = t->dp_recv + (size_t)r * all;
    }
    DP_TRY(dp_allgather(t->backend, send, recv, rec));
    /* the loss over the whole batch, on the master; its logit gradients go back to every replica */
    for (int r = 0; r < t->n_local; r++) loss[r] = 0, correct[r] = 0;
    int master = -1;
    for (int r = 0; r < t->n_local; r++)
        if (t->rep[r].rank == 0) master = r;
    if (master >= 0) {
        float *g = recv[master], *dlogits = t->dp_send + (size_t)master * rec; /* sent already: reuse */
        int32_t labels[maxb];
        for (int q = 0; q < t->world; q++) {
            float *rq = g + (size_t)q * rec;
            int n = (int)rq[rec - 1], c = 0;
            for (int i = 0; i < n; i++) labels[i] = (int32_t)rq[(size_t)maxb * K + i];
            if (n) loss[master] += softmax_xent_cpu(n, K, rq, labels, 1.0f / (float)global_batch, dlogits, &c);
            memcpy(rq, dlogits, (size_t)n * K * sizeof(float)); /* the record's logits become their gradients */
            correct[master] += c;
        }
        if (!isfinite(loss[master]))
            return dp_fail(DP_ERR_NUMERIC, "the loss became %s at epoch %d, step %ld (computed on the master replica "
                           "0 in DP mode): training stopped (try a smaller --lr)", isnan(loss[master]) ? "NaN" : "Inf",
                           t->epoch, t->step + 1);
    }
    DP_TRY(dp_broadcast(t->backend, recv, all, 0));
    for (int r = 0; r < t->n_local; r++)
        memcpy(t->rep[r].acts.dout[md->output], recv[r] + (size_t)t->rep[r].rank * rec,
               (size_t)b[r].n * K * sizeof(float));
    DP_TRY(backward_all(t, b, global_batch, 0, st));
    /* reduce the gradients to the master, which alone steps */
    dp_batch counted[t->n_local];
    for (int r = 0; r < t->n_local; r++) counted[r] = (dp_batch){.n = t->rep[r].rank == 0 ? global_batch : 0};
    DP_TRY(add_metrics(t, counted, loss, correct, m));
    if (t->world > 1) DP_TRY(dp_reduce(t->backend, slices(t, ARENA_GRADS, 0), md->params.n, DP_SUM, 0));
    if (master >= 0)
        dp_sgd_step(&t->sgd, &md->params, t->rep[master].params, t->rep[master].grads, t->rep[master].momentum, lr);
    return DP_OK;
}

dp_status dp_train_micro(dp_trainer *t, const dp_batch *batches, int global_batch, int micro, int n_micro, float lr,
                         dp_step_metrics *m) {
    if (t->cfg.mode == DP_MODE_DDP) return ddp_micro(t, batches, global_batch, micro, n_micro, lr, m);
    return dp_micro(t, batches, global_batch, lr, m);
}

dp_status dp_strategy_finish(dp_trainer *t) {
    /* DP: the replicas hold last step's copies; evaluation and checkpoints read the master's */
    if (t->cfg.mode != DP_MODE_DP || t->world == 1) return DP_OK;
    DP_TRY(dp_broadcast(t->backend, slices(t, ARENA_PARAMS, 0), t->model.params.n, 0));
    if (t->model.buffers.n) DP_TRY(dp_broadcast(t->backend, slices(t, ARENA_BUFFERS, 0), t->model.buffers.n, 0));
    return DP_OK;
}
