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
#include "core/treesum.h"
#include "train/trainer.h"

/* Runs the body for every active slot q = (replica r, slot l) of every local replica, in
 * parallel over slots (the trainer must be named t). Which thread runs which slot changes no
 * result: each slot runs one lane, single-threaded, into its own arenas. */
#define FOR_SLOTS(t, r, l)                                                                              \
    _Pragma("omp parallel for num_threads(team(t)) schedule(static) if (t->n_local * t->rep[0].n_active > 1)") \
    for (int q_ = 0; q_ < t->n_local * t->rep[0].n_active; q_++)                                       \
        for (int r = q_ / t->rep[0].n_active, l = q_ % t->rep[0].n_active, once_ = 1; once_; once_ = 0)

/* Threads for the active slots: no more than there are slots (a woken thread with nothing to
 * do still costs its wake-up, and spins where it could have left the core to another). */
static int team(const dp_trainer *t) {
    const int nq = t->n_local * t->rep[0].n_active;
    return nq < t->cfg.threads ? nq : t->cfg.threads;
}

/* What a micro-step is: batch b of the epoch, its share of its optimizer step. */
typedef struct {
    int step_samples;   /* samples of the whole optimizer step (the loss is their mean) */
    int micro_samples;  /* samples of this micro-step over all replicas (SyncBN's count) */
    int last;           /* the micro-step that reduces and steps */
} micro_info;

/* Samples each BN statistic covers: the replica's batch, or the micro-batch with SyncBN. */
static dp_exec exec_of(const dp_trainer *t, int r, int l, const dp_batch *b, const micro_info *mi, int training) {
    const dp_replica *rep = &t->rep[r];
    dp_exec x = {0};
    x.batch = rep->slots[l].n;
    x.stat_batch = t->cfg.sync_bn ? mi->micro_samples : b[r].n;
    x.training = training;
    x.update_stats = l == 0;
    x.nthreads = 1;
    x.k = t->k;
    x.params = rep->params;
    x.grads = rep->slots[l].grads;
    x.buffers = rep->buffers;
    return x;
}

static const float *slot_input(const dp_trainer *t, const dp_batch *b, int r, int l) {
    return b[r].x + (size_t)t->rep[r].slots[l].lo * dp_shape_size(t->model.input);
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

/* The reduction of a node's sums (BN): the active slots' sums added with the fixed tree into
 * slot 0, over all replicas with --sync-bn, and handed back to every slot. */
static dp_status reduce_sums(dp_trainer *t, int i) {
    const size_t n = t->model.nodes[i].sync_floats;
    const int na = t->rep[0].n_active;
    for (int r = 0; r < t->n_local; r++) {
        float *v[na];
        for (int l = 0; l < na; l++) v[l] = t->rep[r].slots[l].acts.sync[i];
        t->k->tree_sum(&t->kc, v, na, 0, n, 0);
        t->ptrs[r] = v[0];
    }
    if (t->cfg.sync_bn) DP_TRY(dp_allreduce(t->backend, t->ptrs, n, DP_SUM));
    for (int r = 0; r < t->n_local; r++)
        for (int l = 1; l < na; l++) t->k->copy(&t->kc, n, t->rep[r].slots[0].acts.sync[i], t->rep[r].slots[l].acts.sync[i]);
    return DP_OK;
}

/* The loss of one lane: its samples' losses summed in order, as a float (the unit the trees add). */
static float lane_loss(const dp_trainer *t, int n, int K, const float *logits, const int32_t *y, float scale,
                       float *dlogits, int *correct) {
    float loss;
    int32_t ok;
    t->k->softmax_xent(&t->kc, n, K, logits, y, scale, dlogits, &loss, &ok);
    *correct = ok;
    return loss;
}

/* Forward and loss. The slots run independently between synchronisation points, which are
 * only the nodes with sums (BN): each parallel region runs a slot through a stretch of nodes
 * and ends with the next BN node's local sums; the loss ends the last stretch. LeNet is one
 * region per step, not one per layer. Each lane's loss goes to t->lane_loss. */
static dp_status forward_all(dp_trainer *t, const dp_batch *b, const micro_info *mi, float scale, dp_status *st) {
    const dp_model *m = &t->model;
    const int nq = t->n_local * t->rep[0].n_active;
    if (dp_node_has_sums(m, 0)) {
        FOR_SLOTS(t, r, l) {
            dp_exec x = exec_of(t, r, l, b, mi, 1);
            dp_node_forward_sums(m, 0, &t->rep[r].slots[l].acts, &x, slot_input(t, b, r, l));
        }
        DP_TRY(reduce_sums(t, 0));
    }
    for (int i = 0; i < m->n_nodes;) {
        int j = i + 1;
        while (j < m->n_nodes && !dp_node_has_sums(m, j)) j++;
        FOR_SLOTS(t, r, l) {
            dp_slot *sl = &t->rep[r].slots[l];
            dp_exec x = exec_of(t, r, l, b, mi, 1);
            const float *in = slot_input(t, b, r, l);
            st[q_] = DP_OK;
            for (int k = i; k < j && st[q_] == DP_OK; k++) st[q_] = dp_node_forward(m, k, &sl->acts, &x, in);
            if (j < m->n_nodes) {
                dp_node_forward_sums(m, j, &sl->acts, &x, in);
            } else {
                const size_t at = (size_t)r * t->n_lanes + (size_t)sl->lane;
                t->lane_loss[at] = lane_loss(t, sl->n, m->n_classes, sl->acts.out[m->output], b[r].y + sl->lo, scale,
                                             sl->acts.dout[m->output], &t->lane_correct[at]);
            }
        }
        DP_TRY(first_error(st, nq));
        if (j < m->n_nodes) DP_TRY(reduce_sums(t, j));
        i = j;
    }
    for (int r = 0; r < t->n_local; r++)
        for (int l = 0; l < t->rep[r].n_active; l++) {
            const float loss = t->lane_loss[(size_t)r * t->n_lanes + (size_t)t->rep[r].slots[l].lane];
            if (!isfinite(loss))
                return dp_fail(DP_ERR_NUMERIC, "the loss of replica %d became %s at epoch %d, step %ld: training "
                               "stopped (try a smaller --lr)", t->rep[r].rank, isnan(loss) ? "NaN" : "Inf", t->epoch,
                               t->step + 1);
        }
    return DP_OK;
}

/* Adds the lanes' partials of bucket k into lane 0 (the replica's arena) with the fixed tree,
 * in parallel over replicas and pieces of the bucket (the tree is per element), leaving the
 * other lanes zero for the next step. */
static void sum_lanes(dp_trainer *t, int k) {
    const int L = t->n_lanes;
    if (L == 1) return;
    const dp_slice *s = &t->model.params.buckets[k];
    const size_t piece = 16384, n_pieces = (s->count + piece - 1) / piece;
    const long total = (long)n_pieces * t->n_local;
#pragma omp parallel for num_threads(t->cfg.threads) schedule(static) if (total > 1 && s->count * L > 262144)
    for (long q = 0; q < total; q++) {
        const int r = (int)(q / (long)n_pieces);
        const size_t lo = (size_t)(q % (long)n_pieces) * piece;
        t->k->tree_sum(&t->kc, t->rep[r].lane_grads, L, s->offset + lo, lo + piece < s->count ? piece : s->count - lo,
                       1);
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
static dp_status backward_all(dp_trainer *t, const dp_batch *b, const micro_info *mi, int allreduce,
                              dp_status *st) {
    const dp_model *m = &t->model;
    const dp_layout *L = &m->params;
    const int nq = t->n_local * t->rep[0].n_active, last = mi->last;
    int next = 0;
    if (dp_node_has_sums(m, m->n_nodes - 1)) {
        FOR_SLOTS(t, r, l) {
            dp_exec x = exec_of(t, r, l, b, mi, 1);
            dp_node_backward_sums(m, m->n_nodes - 1, &t->rep[r].slots[l].acts, &x, slot_input(t, b, r, l));
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
        FOR_SLOTS(t, r, l) {
            dp_slot *sl = &t->rep[r].slots[l];
            dp_exec x = exec_of(t, r, l, b, mi, 1);
            const float *in = slot_input(t, b, r, l);
            st[q_] = DP_OK;
            for (int k = i; k > j && st[q_] == DP_OK; k--) st[q_] = dp_node_backward(m, k, &sl->acts, &x, in);
            if (j >= 0 && dp_node_has_sums(m, j)) dp_node_backward_sums(m, j, &sl->acts, &x, in);
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
    if (last) t->lanes_clear = 1; /* every bucket went through the clearing tree */
    if (!last || !allreduce) return DP_OK;
    for (int k = 0; k < L->n_buckets && !t->cfg.overlap; k++) {
        const dp_slice *s = &L->buckets[k];
        DP_TRY(dp_allreduce_start(t->backend, slices(t, ARENA_GRADS, s->offset), s->count, DP_SUM,
                                  &t->bucket_req[k]));
    }
    for (int k = 0; k < L->n_buckets; k++) DP_TRY(dp_wait(t->backend, t->bucket_req[k]));
    return DP_OK;
}

/* Every lane's partial starts at zero (the kernels accumulate, as PyTorch's .grad). The tree
 * of the last step left lanes 1.. zero, unless that step stopped before it. */
static void zero_grads(dp_trainer *t) {
    const int lanes = t->lanes_clear ? 1 : t->n_lanes;
    const long total = (long)t->n_local * lanes;
#pragma omp parallel for num_threads(t->cfg.threads) schedule(static) if (total > 1)
    for (long q = 0; q < total; q++)
        memset(t->rep[q / lanes].lane_grads[q % lanes], 0, t->model.params.n * sizeof(float));
    t->lanes_clear = 0;
    for (size_t i = 0; i < (size_t)t->n_local * (size_t)t->n_lanes; i++) t->lane_loss[i] = 0, t->lane_correct[i] = 0;
}

/* Sums [loss, correct, count] of the step over every replica of every process into *m: the
 * lanes' losses with the fixed tree, then the replicas' with the all-reduce's. */
static dp_status add_metrics(dp_trainer *t, const int *count, dp_step_metrics *m) {
    for (int r = 0; r < t->n_local; r++) {
        float *lanes = t->lane_loss + (size_t)r * t->n_lanes;
        long correct = 0;
        for (int l = 0; l < t->n_lanes; l++) correct += t->lane_correct[(size_t)r * t->n_lanes + l];
        t->metric_bufs[r][0] = dp_tree_sum_scalars(lanes, t->n_lanes, 1);
        t->metric_bufs[r][1] = (float)correct;
        t->metric_bufs[r][2] = (float)count[r];
    }
    /* not through dp_allreduce: bookkeeping, not gradient traffic, stays out of the statistics */
    DP_TRY(t->backend->iface->allreduce(t->backend, t->metric_bufs, 3, DP_SUM));
    m->loss_sum += t->metric_bufs[0][0];
    m->correct += lrintf(t->metric_bufs[0][1]);
    m->count += lrintf(t->metric_bufs[0][2]);
    return DP_OK;
}

/* Gives each replica's slots the lanes of batch b, with their sample counts. */
static dp_status assign_lanes(dp_trainer *t, const dp_batch *bt, int b, micro_info *mi) {
    const dp_sampler *sp = &t->sampler;
    int first, count;
    dp_sampler_micro_lanes(sp, b, &first, &count);
    mi->step_samples = dp_sampler_step_samples(sp, b);
    mi->micro_samples = dp_sampler_batch_size(sp, b);
    if (count > t->rep[0].n_slots)
        return dp_fail(DP_ERR_INTERNAL, "batch %d runs %d lanes at once, more than the %d slots", b, count,
                       t->rep[0].n_slots);
    for (int r = 0; r < t->n_local; r++) {
        int counts[count > 0 ? count : 1], total = 0;
        for (int i = 0; i < count; i++)
            total += counts[i] = dp_chunk_lane_count(&sp->plan, mi->step_samples, t->rep[r].rank, first + i);
        if (total != bt[r].n)
            return dp_fail(DP_ERR_INTERNAL, "replica %d got %d samples in batch %d, its lanes hold %d", t->rep[r].rank,
                           bt[r].n, b, total);
        dp_replica_assign(&t->rep[r], first, count, counts);
    }
    return DP_OK;
}

static dp_status ddp_micro(dp_trainer *t, const dp_batch *b, const micro_info *mi, int micro, float lr,
                           dp_step_metrics *m) {
    dp_status st[t->n_local * t->rep[0].n_active + 1];
    int count[t->n_local];
    if (micro == 0) zero_grads(t);
    /* PyTorch's broadcast_buffers: rank 0's BN statistics at every forward */
    if (t->world > 1 && t->model.buffers.n)
        DP_TRY(dp_broadcast(t->backend, slices(t, ARENA_BUFFERS, 0), t->model.buffers.n, 0));
    DP_TRY(forward_all(t, b, mi, 1.0f / (float)mi->step_samples, st));
    DP_TRY(backward_all(t, b, mi, t->world > 1, st));
    for (int r = 0; r < t->n_local; r++) t->step_count[r] += b[r].n;
    if (!mi->last) return DP_OK;
    for (int r = 0; r < t->n_local; r++) count[r] = t->step_count[r], t->step_count[r] = 0;
    DP_TRY(add_metrics(t, count, m));
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
    const size_t lanes = (size_t)t->n_local * (size_t)t->n_lanes;
    DP_ALLOC(t->lane_loss, lanes, "lane losses");
    DP_ALLOC(t->lane_correct, lanes, "lane accuracy counts");
    DP_ALLOC(t->step_count, t->n_local, "step sample counts");
    if (t->cfg.mode != DP_MODE_DP) return DP_OK;
    size_t rec = dp_record_floats(t);
    DP_ALLOC(t->dp_send, (size_t)t->n_local * rec, "DataParallel gather buffers");
    DP_ALLOC(t->dp_recv, (size_t)t->n_local * rec * (size_t)t->world, "DataParallel gather buffers");
    return DP_OK;
}

/* The master's loss over every replica's gathered record: per lane, then the lanes' tree,
 * then the replicas' tree, the additions DDP makes in its lanes and its all-reduce. The
 * record's logits are replaced by their gradients. */
static float master_loss(dp_trainer *t, float *g, size_t rec, const micro_info *mi, int b, int *correct) {
    const int K = t->model.n_classes, maxb = t->max_local;
    const dp_sampler *sp = &t->sampler;
    int first, count;
    dp_sampler_micro_lanes(sp, b, &first, &count);
    float lanes[count > 0 ? count : 1], reps[t->world];
    int32_t labels[maxb > 0 ? maxb : 1];
    float dlogits[(size_t)dp_chunk_max_lane(&sp->plan) * (size_t)K + 1];
    *correct = 0;
    for (int q = 0; q < t->world; q++) {
        float *rq = g + (size_t)q * rec;
        const int n = (int)rq[rec - 1];
        for (int i = 0; i < n; i++) labels[i] = (int32_t)rq[(size_t)maxb * K + i];
        for (int i = 0, lo = 0; i < count; i++) {
            const int ni = dp_chunk_lane_count(&sp->plan, mi->step_samples, q, first + i);
            int c = 0;
            lanes[i] = lane_loss(t, ni, K, rq + (size_t)lo * K, labels + lo, 1.0f / (float)mi->step_samples, dlogits, &c);
            memcpy(rq + (size_t)lo * K, dlogits, (size_t)ni * K * sizeof(float)); /* logits become their gradients */
            *correct += c;
            lo += ni;
        }
        /* the lanes of a DP step are all of the replica's (no accumulation) */
        reps[q] = dp_tree_sum_scalars(lanes, count, 1);
    }
    return dp_tree_sum_scalars(reps, t->world, 1);
}

static dp_status dp_micro(dp_trainer *t, const dp_batch *b, const micro_info *mi, int bi, float lr,
                          dp_step_metrics *m) {
    const dp_model *md = &t->model;
    const int K = md->n_classes, maxb = t->max_local;
    const size_t rec = dp_record_floats(t), all = rec * (size_t)t->world;
    dp_status st[t->n_local * t->rep[0].n_active + 1];
    int count[t->n_local];
    /* replicate: the master's parameters and buffers to every replica, every step */
    if (t->world > 1) {
        DP_TRY(dp_broadcast(t->backend, slices(t, ARENA_PARAMS, 0), md->params.n, 0));
        if (md->buffers.n) DP_TRY(dp_broadcast(t->backend, slices(t, ARENA_BUFFERS, 0), md->buffers.n, 0));
    }
    zero_grads(t);
    /* the slots' own loss is not used: the master computes it over the whole batch */
    DP_TRY(forward_all(t, b, mi, 1.0f, st));
    /* gather outputs (and labels) to the master */
    const float *send[t->n_local];
    float *recv[t->n_local];
    for (int r = 0; r < t->n_local; r++) {
        float *s = t->dp_send + (size_t)r * rec;
        for (int l = 0; l < t->rep[r].n_active; l++) {
            const dp_slot *sl = &t->rep[r].slots[l];
            memcpy(s + (size_t)sl->lo * K, sl->acts.out[md->output], (size_t)sl->n * K * sizeof(float));
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
        for (int l = 0; l < t->n_lanes; l++) t->lane_loss[(size_t)r * t->n_lanes + l] = 0;
        for (int l = 0; l < t->n_lanes; l++) t->lane_correct[(size_t)r * t->n_lanes + l] = 0;
        count[r] = 0;
        if (t->rep[r].rank == 0) master = r;
    }
    if (master >= 0) {
        int correct = 0;
        const float loss = master_loss(t, recv[master], rec, mi, bi, &correct);
        t->lane_loss[(size_t)master * t->n_lanes] = loss; /* the others' stay 0: x + 0 = x */
        t->lane_correct[(size_t)master * t->n_lanes] = correct;
        count[master] = mi->step_samples;
        if (!isfinite(loss))
            return dp_fail(DP_ERR_NUMERIC, "the loss became %s at epoch %d, step %ld (computed on the master replica "
                           "0 in DP mode): training stopped (try a smaller --lr)", isnan(loss) ? "NaN" : "Inf",
                           t->epoch, t->step + 1);
    }
    DP_TRY(dp_broadcast(t->backend, recv, all, 0));
    for (int r = 0; r < t->n_local; r++)
        for (int l = 0; l < t->rep[r].n_active; l++) {
            dp_slot *sl = &t->rep[r].slots[l];
            memcpy(sl->acts.dout[md->output], recv[r] + (size_t)t->rep[r].rank * rec + (size_t)sl->lo * K,
                   (size_t)sl->n * K * sizeof(float));
        }
    DP_TRY(backward_all(t, b, mi, 0, st));
    DP_TRY(add_metrics(t, count, m));
    /* reduce the gradients to the master, which alone steps */
    if (t->world > 1) DP_TRY(dp_reduce(t->backend, slices(t, ARENA_GRADS, 0), md->params.n, DP_SUM, 0));
    if (master >= 0)
        dp_sgd_step(&t->sgd, &md->params, t->rep[master].params, t->rep[master].grads, t->rep[master].momentum, lr);
    return DP_OK;
}

dp_status dp_train_micro(dp_trainer *t, const dp_batch *batches, int b, float lr, dp_step_metrics *m) {
    const int K = t->sampler.plan.accumulate, micro = b % K;
    micro_info mi = {0};
    DP_TRY(assign_lanes(t, batches, b, &mi));
    mi.last = micro == dp_sampler_step_micro(&t->sampler, b) - 1;
    if (t->cfg.mode == DP_MODE_DDP) return ddp_micro(t, batches, &mi, micro, lr, m);
    return dp_micro(t, batches, &mi, b, lr, m);
}

dp_status dp_strategy_finish(dp_trainer *t) {
    /* DP: the replicas hold last step's copies; evaluation and checkpoints read the master's */
    if (t->cfg.mode != DP_MODE_DP || t->world == 1) return DP_OK;
    DP_TRY(dp_broadcast(t->backend, slices(t, ARENA_PARAMS, 0), t->model.params.n, 0));
    if (t->model.buffers.n) DP_TRY(dp_broadcast(t->backend, slices(t, ARENA_BUFFERS, 0), t->model.buffers.n, 0));
    return DP_OK;
}
