/* step.c: one training micro-step on every local replica, node by node in lockstep over all
 * lanes (see replica.h), with the strategy deciding the collectives:
 *   DDP: buffers broadcast from rank 0, forward, loss, backward with each gradient bucket
 *        all-reduced (sum; the loss is already scaled by 1/global batch) as soon as it is
 *        complete, then every replica steps its own optimizer.
 *   DP:  parameters and buffers replicated from rank 0, forward, logits gathered to rank 0,
 *        loss there over the whole batch, logit gradients sent back, backward, gradients
 *        reduced to rank 0, only rank 0 steps. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "kernels/cpu/loss.h"
#include "train/trainer.h"

/* Runs the body for every lane q = (replica r, lane l) of every local replica, in parallel
 * over lanes (the trainer must be named t). */
#define FOR_LANES(t, r, l)                                                                              \
    _Pragma("omp parallel for num_threads(t->cfg.threads) schedule(static) if (t->n_local * t->n_lanes > 1)") \
    for (int q_ = 0; q_ < t->n_local * t->n_lanes; q_++)                                               \
        for (int r = q_ / t->n_lanes, l = q_ % t->n_lanes, once_ = 1; once_; once_ = 0)

/* Samples each BN statistic covers: the replica's batch, or the global batch with SyncBN. */
static dp_exec exec_of(const dp_trainer *t, int r, int l, const dp_batch *b, int global_batch, int training) {
    const dp_replica *rep = &t->rep[r];
    dp_exec x = {0};
    x.batch = rep->lanes[l].n;
    x.stat_batch = t->cfg.sync_bn ? global_batch : b[r].n;
    x.training = training;
    x.update_stats = l == 0;
    x.nthreads = t->kthreads;
    x.params = rep->params;
    x.grads = rep->lanes[l].grads;
    x.buffers = rep->buffers;
    return x;
}

static const float *lane_input(const dp_trainer *t, const dp_batch *b, int r, int l) {
    return b[r].x + (size_t)t->rep[r].lanes[l].lo * dp_shape_size(t->model.input);
}

static dp_status first_error(const dp_status *st, int n) {
    for (int i = 0; i < n; i++)
        if (st[i] != DP_OK) return st[i];
    return DP_OK;
}

enum { ARENA_PARAMS = 0, ARENA_GRADS = 1, ARENA_BUFFERS = 2 };

/* The same slice of every local replica's arena, for one collective. */
static float *const *slices(dp_trainer *t, int which, size_t offset) {
    for (int r = 0; r < t->n_local; r++) {
        float *base = which == ARENA_PARAMS ? t->rep[r].params : which == ARENA_GRADS ? t->rep[r].grads
                                                                                      : t->rep[r].buffers;
        t->ptrs[r] = base + offset;
    }
    return t->ptrs;
}

/* The reduction of a node's sums (SyncBN): lanes' sums added into lane 0, over all replicas
 * with --sync-bn, and handed back to every lane. The lanes computed their own sums before. */
static dp_status reduce_sums(dp_trainer *t, int i) {
    const size_t n = t->model.nodes[i].sync_floats;
    for (int r = 0; r < t->n_local; r++) {
        float *s0 = t->rep[r].lanes[0].acts.sync[i];
        for (int l = 1; l < t->n_lanes; l++) {
            const float *sl = t->rep[r].lanes[l].acts.sync[i];
            for (size_t k = 0; k < n; k++) s0[k] += sl[k];
        }
        t->ptrs[r] = s0;
    }
    if (t->cfg.sync_bn) DP_TRY(dp_allreduce(t->backend, t->ptrs, n, DP_SUM));
    for (int r = 0; r < t->n_local; r++)
        for (int l = 1; l < t->n_lanes; l++)
            memcpy(t->rep[r].lanes[l].acts.sync[i], t->rep[r].lanes[0].acts.sync[i], n * sizeof(float));
    return DP_OK;
}

/* Forward and loss. The lanes run independently between synchronisation points, which are
 * only the nodes with sums (BN): each parallel region runs a lane through a stretch of nodes
 * and ends with the next BN node's local sums; the loss ends the last stretch. LeNet is one
 * region per step, not one per layer. loss/correct are per replica; NaN/Inf names the replica. */
static dp_status forward_all(dp_trainer *t, const dp_batch *b, int global_batch, float scale, double *loss,
                             int *correct, dp_status *st) {
    const dp_model *m = &t->model;
    const int nq = t->n_local * t->n_lanes;
    double lq[nq];
    int cq[nq];
    if (dp_node_has_sums(m, 0)) {
        FOR_LANES(t, r, l) {
            dp_exec x = exec_of(t, r, l, b, global_batch, 1);
            dp_node_forward_sums(m, 0, &t->rep[r].lanes[l].acts, &x, lane_input(t, b, r, l));
        }
        DP_TRY(reduce_sums(t, 0));
    }
    for (int i = 0; i < m->n_nodes;) {
        int j = i + 1;
        while (j < m->n_nodes && !dp_node_has_sums(m, j)) j++;
        FOR_LANES(t, r, l) {
            dp_lane *ln = &t->rep[r].lanes[l];
            dp_exec x = exec_of(t, r, l, b, global_batch, 1);
            const float *in = lane_input(t, b, r, l);
            st[q_] = DP_OK;
            for (int k = i; k < j && st[q_] == DP_OK; k++) st[q_] = dp_node_forward(m, k, &ln->acts, &x, in);
            if (j < m->n_nodes) {
                dp_node_forward_sums(m, j, &ln->acts, &x, in);
            } else {
                cq[q_] = 0;
                lq[q_] = ln->n ? softmax_xent_cpu(ln->n, m->n_classes, ln->acts.out[m->output], b[r].y + ln->lo, scale,
                                                  ln->acts.dout[m->output], &cq[q_])
                               : 0.0;
            }
        }
        DP_TRY(first_error(st, nq));
        if (j < m->n_nodes) DP_TRY(reduce_sums(t, j));
        i = j;
    }
    for (int r = 0; r < t->n_local; r++) {
        loss[r] = 0, correct[r] = 0;
        for (int l = 0; l < t->n_lanes; l++) loss[r] += lq[r * t->n_lanes + l], correct[r] += cq[r * t->n_lanes + l];
        if (!isfinite(loss[r]))
            return dp_fail(DP_ERR_NUMERIC, "the loss of replica %d became %s at epoch %d, step %ld: training stopped "
                           "(try a smaller --lr)", t->rep[r].rank, isnan(loss[r]) ? "NaN" : "Inf", t->epoch,
                           t->step + 1);
    }
    return DP_OK;
}

/* Adds the lanes' gradients of bucket k into lane 0 (the replica's arena), in lane order. */
static void sum_lanes(dp_trainer *t, int k) {
    if (t->n_lanes == 1) return;
    const dp_slice *s = &t->model.params.buckets[k];
    for (int r = 0; r < t->n_local; r++) {
        float *restrict g0 = t->rep[r].grads + s->offset;
        for (int l = 1; l < t->n_lanes; l++) {
            const float *restrict gl = t->rep[r].lanes[l].grads + s->offset;
            for (size_t i = 0; i < s->count; i++) g0[i] += gl[i];
        }
    }
}

/* Whether bucket `next` (the next to complete) is completed by node i's backward. */
static int completes(const dp_trainer *t, int last, int next, int i) {
    return last && next < t->model.params.n_buckets && t->bucket_node[next] == i;
}

/* Backward. Lanes run independently between synchronisation points: a BN node (its sums are
 * reduced between its backward_sums and its backward) and, on the micro-step that reduces
 * (`last`), a node that completes gradient buckets. Those buckets are then summed over lanes
 * and, with `allreduce`, their all-reduce starts at once (overlap: a backend with non-blocking
 * collectives runs it while backward goes on) or, with --no-overlap, after the last node; all
 * are waited for at the end. */
static dp_status backward_all(dp_trainer *t, const dp_batch *b, int global_batch, int last, int allreduce,
                              dp_status *st) {
    const dp_model *m = &t->model;
    const dp_layout *L = &m->params;
    const int nq = t->n_local * t->n_lanes;
    int next = 0;
    if (dp_node_has_sums(m, m->n_nodes - 1)) {
        FOR_LANES(t, r, l) {
            dp_exec x = exec_of(t, r, l, b, global_batch, 1);
            dp_node_backward_sums(m, m->n_nodes - 1, &t->rep[r].lanes[l].acts, &x, lane_input(t, b, r, l));
        }
        DP_TRY(reduce_sums(t, m->n_nodes - 1));
    }
    for (int i = m->n_nodes - 1; i >= 0;) {
        /* the stretch i, i-1, ..., j+1: it ends after a node that completes a bucket, or
         * before a BN node j (whose local sums the lanes then compute) */
        int j = i - 1;
        if (!completes(t, last, next, i))
            while (j >= 0 && !dp_node_has_sums(m, j) && !completes(t, last, next, j)) j--;
        if (j >= 0 && completes(t, last, next, j) && !dp_node_has_sums(m, j)) j--; /* j completes: include it */
        FOR_LANES(t, r, l) {
            dp_lane *ln = &t->rep[r].lanes[l];
            dp_exec x = exec_of(t, r, l, b, global_batch, 1);
            const float *in = lane_input(t, b, r, l);
            st[q_] = DP_OK;
            for (int k = i; k > j && st[q_] == DP_OK; k--) st[q_] = dp_node_backward(m, k, &ln->acts, &x, in);
            if (j >= 0 && dp_node_has_sums(m, j)) dp_node_backward_sums(m, j, &ln->acts, &x, in);
        }
        DP_TRY(first_error(st, nq));
        for (; completes(t, last, next, j + 1); next++) {
            sum_lanes(t, next);
            if (!allreduce || !t->cfg.overlap) continue;
            const dp_slice *s = &L->buckets[next];
            double t0 = dp_now();
            DP_TRY(dp_allreduce_start(t->backend, slices(t, ARENA_GRADS, s->offset), s->count, DP_SUM,
                                      &t->bucket_req[next]));
            if (j >= 0) t->comm_overlap_s += dp_now() - t0; /* backward work remained to hide it */
        }
        if (j >= 0 && dp_node_has_sums(m, j)) DP_TRY(reduce_sums(t, j));
        i = j;
    }
    if (!last || !allreduce) return DP_OK;
    for (int k = 0; k < L->n_buckets && !t->cfg.overlap; k++) {
        const dp_slice *s = &L->buckets[k];
        DP_TRY(dp_allreduce_start(t->backend, slices(t, ARENA_GRADS, s->offset), s->count, DP_SUM,
                                  &t->bucket_req[k]));
    }
    for (int k = 0; k < L->n_buckets; k++) DP_TRY(dp_wait(t->backend, t->bucket_req[k]));
    return DP_OK;
}

static void zero_grads(dp_trainer *t) {
    FOR_LANES(t, r, l) { memset(t->rep[r].lanes[l].grads, 0, t->model.params.n * sizeof(float)); }
}

/* Sums [loss, correct, count] over every replica of every process into *m. */
static dp_status add_metrics(dp_trainer *t, const int *count, const double *loss, const int *correct,
                             dp_step_metrics *m) {
    for (int r = 0; r < t->n_local; r++) {
        t->metric_bufs[r][0] = (float)loss[r];
        t->metric_bufs[r][1] = (float)correct[r];
        t->metric_bufs[r][2] = (float)count[r];
    }
    /* not through dp_allreduce: bookkeeping, not gradient traffic, stays out of the statistics */
    DP_TRY(t->backend->iface->allreduce(t->backend, t->metric_bufs, 3, DP_SUM));
    m->loss_sum += t->metric_bufs[0][0];
    m->correct += lrintf(t->metric_bufs[0][1]);
    m->count += lrintf(t->metric_bufs[0][2]);
    return DP_OK;
}

static void split_batches(dp_trainer *t, const dp_batch *b) {
    for (int r = 0; r < t->n_local; r++) dp_replica_split(&t->rep[r], b[r].n);
}

static dp_status ddp_micro(dp_trainer *t, const dp_batch *b, int global_batch, int micro, int n_micro, float lr,
                           dp_step_metrics *m) {
    dp_status st[t->n_local * t->n_lanes];
    double loss[t->n_local];
    int correct[t->n_local], count[t->n_local];
    const int last = micro == n_micro - 1;
    split_batches(t, b);
    if (micro == 0) zero_grads(t);
    /* PyTorch's broadcast_buffers: rank 0's BN statistics at every forward */
    if (t->world > 1 && t->model.buffers.n)
        DP_TRY(dp_broadcast(t->backend, slices(t, ARENA_BUFFERS, 0), t->model.buffers.n, 0));
    DP_TRY(forward_all(t, b, global_batch, 1.0f / ((float)global_batch * (float)n_micro), loss, correct, st));
    DP_TRY(backward_all(t, b, global_batch, last, t->world > 1, st));
    for (int r = 0; r < t->n_local; r++) count[r] = b[r].n;
    DP_TRY(add_metrics(t, count, loss, correct, m));
    if (!last) return DP_OK;
#pragma omp parallel for num_threads(t->cfg.threads) schedule(static) if (t->n_local > 1)
    for (int r = 0; r < t->n_local; r++)
        dp_sgd_step(&t->sgd, &t->model.params, t->rep[r].params, t->rep[r].grads, t->rep[r].momentum, lr);
    return DP_OK;
}

/* DP's gather record per replica: its logits (max_local, K), labels (max_local) and count. */
static size_t dp_record_floats(const dp_trainer *t) {
    return (size_t)t->max_local * (size_t)(t->model.n_classes + 1) + 1;
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
    const int K = md->n_classes, maxb = t->max_local;
    const size_t rec = dp_record_floats(t), all = rec * (size_t)t->world;
    dp_status st[t->n_local * t->n_lanes];
    double loss[t->n_local];
    int correct[t->n_local], count[t->n_local];
    split_batches(t, b);
    /* replicate: the master's parameters and buffers to every replica, every step */
    if (t->world > 1) {
        DP_TRY(dp_broadcast(t->backend, slices(t, ARENA_PARAMS, 0), md->params.n, 0));
        if (md->buffers.n) DP_TRY(dp_broadcast(t->backend, slices(t, ARENA_BUFFERS, 0), md->buffers.n, 0));
    }
    zero_grads(t);
    /* the lanes' own loss is not used: the master computes it over the whole batch */
    DP_TRY(forward_all(t, b, global_batch, 1.0f, loss, correct, st));
    /* gather outputs (and labels) to the master */
    const float *send[t->n_local];
    float *recv[t->n_local];
    for (int r = 0; r < t->n_local; r++) {
        float *s = t->dp_send + (size_t)r * rec;
        for (int l = 0; l < t->n_lanes; l++) {
            const dp_lane *ln = &t->rep[r].lanes[l];
            memcpy(s + (size_t)ln->lo * K, ln->acts.out[md->output], (size_t)ln->n * K * sizeof(float));
        }
        for (int i = 0; i < b[r].n; i++) s[(size_t)maxb * K + i] = (float)b[r].y[i];
        s[rec - 1] = (float)b[r].n;
        send[r] = s;
        recv[r] = t->dp_recv + (size_t)r * all;
    }
    DP_TRY(dp_allgather(t->backend, send, recv, rec));
    /* the loss over the whole batch, on the master; its logit gradients go back to every replica */
    int master = -1;
    for (int r = 0; r < t->n_local; r++) {
        loss[r] = 0, correct[r] = 0, count[r] = 0;
        if (t->rep[r].rank == 0) master = r;
    }
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
        count[master] = global_batch;
        if (!isfinite(loss[master]))
            return dp_fail(DP_ERR_NUMERIC, "the loss became %s at epoch %d, step %ld (computed on the master replica "
                           "0 in DP mode): training stopped (try a smaller --lr)", isnan(loss[master]) ? "NaN" : "Inf",
                           t->epoch, t->step + 1);
    }
    DP_TRY(dp_broadcast(t->backend, recv, all, 0));
    for (int r = 0; r < t->n_local; r++)
        for (int l = 0; l < t->n_lanes; l++) {
            dp_lane *ln = &t->rep[r].lanes[l];
            memcpy(ln->acts.dout[md->output], recv[r] + (size_t)t->rep[r].rank * rec + (size_t)ln->lo * K,
                   (size_t)ln->n * K * sizeof(float));
        }
    DP_TRY(backward_all(t, b, global_batch, 1, 0, st));
    DP_TRY(add_metrics(t, count, loss, correct, m));
    /* reduce the gradients to the master, which alone steps */
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
