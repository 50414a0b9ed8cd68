/* step.c: one training micro-step on every local replica, node by node in lockstep over all
 * lanes (see replica.h), with the strategy deciding the collectives:
 *   DDP: buffers broadcast from rank 0, forward, loss, backward with each gradient bucket
 *        all-reduced (sum; the loss is already scaled by 1/global batch) as soon as it is
 *        complete, then every replica steps its own optimizer.
 *   DP:  parameters and buffers replicated from rank 0 (10 MiB chunks), the input scattered
 *        from it, forward, logits gathered to rank 0 only, loss there over the whole batch,
 *        logit gradients scattered back, backward, gradients reduced to rank 0, only rank 0
 *        steps: what PyTorch's DataParallel moves. */
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
    if (!(t->dev->caps & DP_CAP_HOST_MEMORY)) return 1; /* one stream: the host only queues */
    const int nq = t->n_local * t->rep[0].n_active;
    return nq < t->cfg.threads ? nq : t->cfg.threads;
}

/* Device lanes: the active slots run on the device's lane streams at once, slot q on stream
 * q mod lane_streams, between a fork from the main stream and a join back into it (0: no
 * streams, the CPU's threads or a single slot run them). */
static int lane_streams(const dp_trainer *t) {
    const int nq = t->n_local * t->rep[0].n_active;
    /* eagerly too: the lanes' small kernels overlap on the GPU (LeNet, H100, --no-graph: 2.46 s
       per epoch against 3.06 s on one stream, two calls apart: docs/gpu.md) */
    if (!t->dev->fork || nq < 2) return 0;
    return nq < t->dev->n_lanes ? nq : t->dev->n_lanes;
}

static const dp_kctx *slot_kc(const dp_trainer *t, int q) {
    const int n = lane_streams(t);
    return n ? &t->dev->lane_kc[q % n] : &t->kc;
}

static dp_status lanes_fork(const dp_trainer *t) {
    const int n = lane_streams(t);
    return n ? t->dev->fork(t->dev, n) : DP_OK;
}

static dp_status lanes_join(const dp_trainer *t) {
    const int n = lane_streams(t);
    return n ? t->dev->join(t->dev, n) : DP_OK;
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
    const dp_kctx *kc = slot_kc(t, r * rep->n_active + l);
    x.stream = kc->stream;
    x.blas = kc->blas;
    x.tf32 = kc->tf32;
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

/* The loss of one lane: its samples' losses summed in order, as a float (the unit the trees
 * add), into loss[0] and its hits into correct[0], both in the device's memory. */
static void lane_loss(const dp_trainer *t, const dp_kctx *kc, int n, int K, const float *logits, const int32_t *y,
                      float scale, float *dlogits, float *loss, int32_t *correct) {
    t->k->softmax_xent(kc, n, K, logits, y, scale, dlogits, loss, correct);
}

/* Forward and loss. The slots run independently between synchronisation points, which are
 * only the nodes with sums (BN): each parallel region runs a slot through a stretch of nodes
 * and ends with the next BN node's local sums; the loss ends the last stretch. LeNet is one
 * region per step, not one per layer. Each lane's loss goes to t->lane_loss. */
static dp_status forward_all(dp_trainer *t, const dp_batch *b, const micro_info *mi, float scale, dp_status *st) {
    const dp_model *m = &t->model;
    const int nq = t->n_local * t->rep[0].n_active;
    if (t->node_s) { /* the lanes this micro-step runs, for the per-node means */
        t->node_runs += nq;
        for (int r = 0; r < t->n_local; r++)
            for (int l = 0; l < t->rep[r].n_active; l++) t->node_samples += t->rep[r].slots[l].n;
    }
    if (dp_node_has_sums(m, 0)) {
        DP_TRY(lanes_fork(t));
        FOR_SLOTS(t, r, l) {
            dp_exec x = exec_of(t, r, l, b, mi, 1);
            dp_node_forward_sums(m, 0, &t->rep[r].slots[l].acts, &x, slot_input(t, b, r, l));
        }
        DP_TRY(lanes_join(t));
        DP_TRY(reduce_sums(t, 0));
    }
    for (int i = 0; i < m->n_nodes;) {
        int j = i + 1;
        while (j < m->n_nodes && !dp_node_has_sums(m, j)) j++;
        DP_TRY(lanes_fork(t));
        FOR_SLOTS(t, r, l) {
            dp_slot *sl = &t->rep[r].slots[l];
            dp_exec x = exec_of(t, r, l, b, mi, 1);
            const float *in = slot_input(t, b, r, l);
            st[q_] = DP_OK;
            for (int k = i; k < j && st[q_] == DP_OK; k++) {
                const double t0 = t->node_s ? dp_now() : 0; /* the clock only when the model asks */
                st[q_] = dp_node_forward(m, k, &sl->acts, &x, in);
                if (t->node_s) t->node_s[(size_t)q_ * 2 * m->n_nodes + k] += dp_now() - t0;
            }
            if (j < m->n_nodes) {
                dp_node_forward_sums(m, j, &sl->acts, &x, in);
            } else {
                const size_t at = (size_t)r * t->n_lanes + (size_t)sl->lane;
                lane_loss(t, slot_kc(t, q_), sl->n, m->n_classes, sl->acts.out[m->output], b[r].y + sl->lo, scale,
                          sl->acts.dout[m->output], t->d_lane_loss + at, t->d_lane_correct + at);
            }
        }
        DP_TRY(lanes_join(t));
        DP_TRY(first_error(st, nq));
        if (j < m->n_nodes) DP_TRY(reduce_sums(t, j));
        i = j;
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
    /* the CPU cuts a bucket into pieces for its threads; a device sums it in one call */
    const size_t piece = (t->dev->caps & DP_CAP_HOST_MEMORY) ? 16384 : (s->count ? s->count : 1), n_pieces = (s->count + piece - 1) / piece;
    const long total = (long)n_pieces * t->n_local;
#pragma omp parallel for num_threads(t->cfg.threads) schedule(static) if (total > 1 && s->count * L > 262144 && (t->dev->caps & DP_CAP_HOST_MEMORY))
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
        DP_TRY(lanes_fork(t));
        FOR_SLOTS(t, r, l) {
            dp_exec x = exec_of(t, r, l, b, mi, 1);
            dp_node_backward_sums(m, m->n_nodes - 1, &t->rep[r].slots[l].acts, &x, slot_input(t, b, r, l));
        }
        DP_TRY(lanes_join(t));
        DP_TRY(reduce_sums(t, m->n_nodes - 1));
    }
    for (int i = m->n_nodes - 1; i >= 0;) {
        /* the stretch i, i-1, ..., j+1: it ends after a node that completes a bucket, or
         * before a BN node j (whose local sums the lanes then compute) */
        int j = i - 1;
        if (!completes(t, last, next, i))
            while (j >= 0 && !dp_node_has_sums(m, j) && !completes(t, last, next, j)) j--;
        if (j >= 0 && completes(t, last, next, j) && !dp_node_has_sums(m, j)) j--; /* j completes: include it */
        DP_TRY(lanes_fork(t));
        FOR_SLOTS(t, r, l) {
            dp_slot *sl = &t->rep[r].slots[l];
            dp_exec x = exec_of(t, r, l, b, mi, 1);
            const float *in = slot_input(t, b, r, l);
            st[q_] = DP_OK;
            for (int k = i; k > j && st[q_] == DP_OK; k--) {
                const double t0 = t->node_s ? dp_now() : 0;
                st[q_] = dp_node_backward(m, k, &sl->acts, &x, in);
                if (t->node_s) t->node_s[((size_t)q_ * 2 + 1) * m->n_nodes + k] += dp_now() - t0;
            }
            if (j >= 0 && dp_node_has_sums(m, j)) dp_node_backward_sums(m, j, &sl->acts, &x, in);
        }
        DP_TRY(lanes_join(t));
        DP_TRY(first_error(st, nq));
        for (; completes(t, last, next, j + 1); next++) {
            sum_lanes(t, next);
            if (!allreduce || !t->cfg.overlap) continue;
            const dp_slice *s = &L->buckets[next];
            double t0 = dp_now();
            if (t->backend->trace) t->backend->trace->ready_node = j + 1; /* the node that completed it */
            dp_status ss = dp_allreduce_start(t->backend, slices(t, ARENA_GRADS, s->offset), s->count, DP_SUM,
                                              &t->bucket_req[next]);
            if (t->backend->trace) t->backend->trace->ready_node = -1;
            DP_TRY(ss);
            if (j >= 0) t->comm_overlap_s += dp_now() - t0; /* backward work remained to hide it */
        }
        if (j >= 0 && dp_node_has_sums(m, j)) DP_TRY(reduce_sums(t, j));
        i = j;
    }
    if (last) t->lanes_clear = 1; /* every bucket went through the clearing tree */
    if (!last || !allreduce) return DP_OK;
    for (int k = 0; k < L->n_buckets && !t->cfg.overlap; k++) {
        const dp_slice *s = &L->buckets[k];
        if (t->backend->trace) t->backend->trace->ready_node = 0; /* --no-overlap: after the last node */
        DP_TRY(dp_allreduce_start(t->backend, slices(t, ARENA_GRADS, s->offset), s->count, DP_SUM,
                                  &t->bucket_req[k]));
    }
    for (int k = 0; k < L->n_buckets; k++) DP_TRY(dp_wait(t->backend, t->bucket_req[k]));
    return DP_OK;
}

/* Every lane's partial starts at zero (the kernels accumulate, as PyTorch's .grad). The tree
 * of the last step left lanes 1.. zero, unless that step stopped before it. */
static dp_status zero_grads(dp_trainer *t) {
    const int lanes = t->lanes_clear ? 1 : t->n_lanes;
    const long total = (long)t->n_local * lanes;
    const size_t nl = (size_t)t->n_local * (size_t)t->n_lanes;
    if ((t->dev->caps & DP_CAP_HOST_MEMORY)) {
#pragma omp parallel for num_threads(t->cfg.threads) schedule(static) if (total > 1)
        for (long q = 0; q < total; q++)
            memset(t->rep[q / lanes].lane_grads[q % lanes], 0, t->model.params.n * sizeof(float));
    } else {
        for (long q = 0; q < total; q++)
            DP_TRY(t->dev->zero(t->dev, t->rep[q / lanes].lane_grads[q % lanes], t->model.params.n * sizeof(float)));
        DP_TRY(t->dev->zero(t->dev, t->d_lane_loss, nl * sizeof(float)));
        DP_TRY(t->dev->zero(t->dev, t->d_lane_correct, nl * sizeof(int32_t)));
    }
    t->lanes_clear = 0;
    for (size_t i = 0; i < nl; i++) t->lane_loss[i] = 0, t->lane_correct[i] = 0;
    return DP_OK;
}

/* DDP: the lanes' losses and hits from where the loss kernels wrote them. */
static dp_status fetch_lane_losses(dp_trainer *t) {
    const size_t nl = (size_t)t->n_local * (size_t)t->n_lanes;
    t->stage_busy = 0; /* the downloads wait for everything queued */
    DP_TRY(t->dev->download(t->dev, t->lane_loss, t->d_lane_loss, nl * sizeof(float)));
    return t->dev->download(t->dev, t->lane_correct, t->d_lane_correct, nl * sizeof(int32_t));
}

/* A NaN/Inf loss, decided on the all-reduced sum so that every rank stops (or skips) at the same
 * step; the message names a local replica whose loss it was, if any. */
static dp_status check_loss(const dp_trainer *t, float global_sum) {
    if (isfinite(global_sum)) return DP_OK;
    const char *what = isnan(global_sum) ? "NaN" : "Inf";
    if (t->cfg.mode == DP_MODE_DP)
        return dp_fail(DP_ERR_NUMERIC, "the loss became %s at epoch %d, step %ld (computed on the master replica 0 in "
                       "DP mode): training stopped (try a smaller --lr)", what, t->epoch, t->step + 1);
    for (int r = 0; r < t->n_local; r++)
        for (int l = 0; l < t->n_lanes; l++)
            if (!isfinite(t->lane_loss[(size_t)r * t->n_lanes + (size_t)l]))
                return dp_fail(DP_ERR_NUMERIC, "the loss of replica %d became %s at epoch %d, step %ld: training "
                               "stopped (try a smaller --lr)", t->rep[r].rank, what, t->epoch, t->step + 1);
    return dp_fail(DP_ERR_NUMERIC, "the loss of another rank's replica became %s at epoch %d, step %ld: training "
                   "stopped (try a smaller --lr)", what, t->epoch, t->step + 1);
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
    DP_TRY(dp_host_allreduce(t, t->metric_bufs, 3));
    DP_TRY(check_loss(t, t->metric_bufs[0][0]));
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

/* DDP's device work of a micro-step, up to the gradients all-reduced (graph.h may record it). */
typedef struct {
    dp_trainer *t;
    const dp_batch *b;
    const micro_info *mi;
    int micro;
    float lr;
} ddp_args;

static dp_status ddp_device_part(void *arg) {
    ddp_args *a = arg;
    dp_trainer *t = a->t;
    dp_status st[t->n_local * t->rep[0].n_active + 1];
    if (a->micro == 0) DP_TRY(zero_grads(t));
    /* PyTorch's broadcast_buffers: rank 0's BN statistics at every forward */
    if (t->world > 1 && t->model.buffers.n)
        DP_TRY(dp_broadcast(t->backend, slices(t, ARENA_BUFFERS, 0), t->model.buffers.n, 0));
    DP_TRY(forward_all(t, a->b, a->mi, 1.0f / (float)a->mi->step_samples, st));
    return backward_all(t, a->b, a->mi, t->world > 1, st);
}

static dp_status ddp_optimizer_part(void *arg) {
    ddp_args *a = arg;
    dp_trainer *t = a->t;
#pragma omp parallel for num_threads(t->cfg.threads) schedule(static) if (t->n_local > 1 && (t->dev->caps & DP_CAP_HOST_MEMORY))
    for (int r = 0; r < t->n_local; r++)
        dp_sgd_step(&t->sgd, &t->model.params, t->rep[r].params, t->rep[r].grads, t->rep[r].momentum, a->lr);
    return DP_OK;
}

/* What the recorded device work depends on: the lanes and their counts, the micro-step's place,
 * whether lanes 1.. start clear; and (part 1) the learning rate. */
static uint64_t ddp_key(const dp_trainer *t, const dp_batch *b, const micro_info *mi, int micro, int part, float lr) {
    int v[8 + t->n_local];
    int32_t lr_bits;
    memcpy(&lr_bits, &lr, sizeof lr_bits);
    v[0] = part, v[1] = micro, v[2] = mi->last, v[3] = mi->step_samples, v[4] = mi->micro_samples;
    v[5] = part ? lr_bits : t->lanes_clear;
    v[6] = t->rep[0].n_active, v[7] = t->rep[0].n_active ? t->rep[0].slots[0].lane : 0;
    for (int r = 0; r < t->n_local; r++) v[8 + r] = b[r].n;
    return dp_graph_key(DP_GRAPH_KEY0, v, 8 + t->n_local);
}

static dp_status ddp_micro(dp_trainer *t, const dp_batch *b, const micro_info *mi, int micro, float lr,
                           dp_step_metrics *m) {
    int count[t->n_local];
    ddp_args a = {t, b, mi, micro, lr};
    /* NCCL's non-blocking communicator inside a recorded graph is untried: nccl runs eagerly */
    const int graphs = t->cfg.graphs && !t->backend->trace && !t->node_s &&
                       strcmp(dp_backend_name(t->backend), "nccl") != 0;
    DP_TRY(dp_graph_run(&t->graphs, t->dev, t->backend, graphs, ddp_key(t, b, mi, micro, 0, lr), ddp_device_part, &a));
    /* a replay skips the host's bookkeeping of zero_grads and backward_all: keep it */
    t->lanes_clear = mi->last ? 1 : micro == 0 ? 0 : t->lanes_clear;
    for (int r = 0; r < t->n_local; r++) t->step_count[r] += b[r].n;
    if (!mi->last) return DP_OK;
    for (int r = 0; r < t->n_local; r++) count[r] = t->step_count[r], t->step_count[r] = 0;
    DP_TRY(fetch_lane_losses(t));
    DP_TRY(add_metrics(t, count, m));
    return dp_graph_run(&t->graphs, t->dev, t->backend, graphs, ddp_key(t, b, mi, micro, 1, lr), ddp_optimizer_part,
                        &a);
}

/* DP's gather record per replica: its logits (max_local, K), labels (max_local) and count. */
static size_t dp_record_floats(const dp_trainer *t) {
    return (size_t)t->max_local * (size_t)(t->model.n_classes + 1) + 1;
}

/* A device array of n elements of 4 bytes. */
static dp_status dev_alloc(dp_trainer *t, void *out, size_t n, const char *what) {
    return t->dev->alloc(t->dev, (float **)out, n, what);
}

dp_status dp_strategy_alloc(dp_trainer *t) {
    const size_t lanes = (size_t)t->n_local * (size_t)t->n_lanes;
    const int max_lanes = t->rep[0].n_slots;
    DP_ALLOC(t->lane_loss, lanes, "lane losses");
    DP_ALLOC(t->lane_correct, lanes, "lane accuracy counts");
    DP_ALLOC(t->step_count, t->n_local, "step sample counts");
    if ((t->dev->caps & DP_CAP_HOST_MEMORY)) {
        t->d_lane_loss = t->lane_loss, t->d_lane_correct = t->lane_correct;
    } else {
        DP_TRY(dev_alloc(t, &t->d_lane_loss, lanes, "lane losses"));
        DP_TRY(dev_alloc(t, &t->d_lane_correct, lanes, "lane accuracy counts"));
        const size_t per = dp_shape_size(t->model.input);
        DP_ALLOC(t->d_batches, t->n_local, "device batches");
        DP_ALLOC(t->h_stage, t->n_local, "upload staging");
        for (int r = 0; r < t->n_local; r++) {
            DP_TRY(dev_alloc(t, &t->d_batches[r].x, (size_t)t->max_local * per, "the batch on the device"));
            DP_TRY(dev_alloc(t, &t->d_batches[r].y, (size_t)t->max_local, "the labels on the device"));
            DP_TRY(t->dev->host_alloc(t->dev, (void **)&t->h_stage[r].x, (size_t)t->max_local * per * sizeof(float),
                                      "upload staging"));
            DP_TRY(t->dev->host_alloc(t->dev, (void **)&t->h_stage[r].y, (size_t)t->max_local * sizeof(int32_t),
                                      "upload staging"));
        }
    }
    if (t->cfg.mode != DP_MODE_DP) return DP_OK;
    const size_t rec = dp_record_floats(t), in = (size_t)t->max_local * dp_shape_size(t->model.input);
    const size_t all = (size_t)t->world * (size_t)max_lanes;
    DP_TRY(dev_alloc(t, &t->dp_send, (size_t)t->n_local * rec, "DataParallel gather buffers"));
    DP_TRY(dev_alloc(t, &t->dp_recv, (size_t)t->n_local * rec * (size_t)t->world, "DataParallel gather buffers"));
    DP_TRY(dev_alloc(t, &t->dp_in, (size_t)t->n_local * in, "DataParallel input scatter buffers"));
    DP_TRY(dev_alloc(t, &t->dp_in_all, (size_t)t->world * in, "DataParallel input scatter buffers"));
    DP_ALLOC(t->dp_host_rec, rec * (size_t)t->world, "DataParallel master records");
    DP_ALLOC(t->dp_tail, (size_t)t->n_local * ((size_t)t->max_local + 1), "DataParallel labels");
    DP_ALLOC(t->h_labels, (size_t)t->world * (size_t)t->max_local, "DataParallel labels");
    DP_ALLOC(t->h_dp_loss, all, "DataParallel lane losses");
    DP_ALLOC(t->h_dp_correct, all, "DataParallel lane hits");
    DP_TRY(dev_alloc(t, &t->d_labels, (size_t)t->world * (size_t)t->max_local, "DataParallel labels"));
    DP_TRY(dev_alloc(t, &t->d_dlogits, (size_t)dp_chunk_max_lane(&t->sampler.plan) * (size_t)t->model.n_classes,
                     "DataParallel logit gradients"));
    DP_TRY(dev_alloc(t, &t->d_dp_loss, all, "DataParallel lane losses"));
    DP_TRY(dev_alloc(t, &t->d_dp_correct, all, "DataParallel lane hits"));
    return DP_OK;
}

void dp_strategy_free(dp_trainer *t) {
    const dp_dev *d = t->dev;
    if (!d) return;
    if (!(d->caps & DP_CAP_HOST_MEMORY)) {
        d->free(d, t->d_lane_loss);
        d->free(d, t->d_lane_correct);
    }
    for (int r = 0; t->d_batches && r < t->n_local; r++) {
        d->free(d, t->d_batches[r].x);
        d->free(d, t->d_batches[r].y);
    }
    free(t->d_batches);
    for (int r = 0; t->h_stage && r < t->n_local; r++) {
        d->host_free(d, t->h_stage[r].x);
        d->host_free(d, t->h_stage[r].y);
    }
    free(t->h_stage);
    t->h_stage = NULL;
    d->free(d, t->dp_send);
    d->free(d, t->dp_recv);
    d->free(d, t->dp_in);
    d->free(d, t->dp_in_all);
    d->free(d, t->d_labels);
    d->free(d, t->d_dlogits);
    d->free(d, t->d_dp_loss);
    d->free(d, t->d_dp_correct);
    free(t->dp_host_rec);
    free(t->dp_tail);
    free(t->h_labels);
    free(t->h_dp_loss);
    free(t->h_dp_correct);
    t->d_batches = NULL;
}

/* PyTorch coalesces DataParallel's broadcasts (and gradient reduces) in chunks of 10 MiB. */
#define DP_COALESCE_FLOATS ((size_t)10 * 1024 * 1024 / sizeof(float))

static dp_status broadcast_coalesced(dp_trainer *t, int which, size_t n) {
    for (size_t off = 0; off < n; off += DP_COALESCE_FLOATS)
        DP_TRY(dp_broadcast(t->backend, slices(t, which, off), n - off < DP_COALESCE_FLOATS ? n - off : DP_COALESCE_FLOATS,
                            0));
    return DP_OK;
}

/* DataParallel's scatter of the input from the master: the master's copy of the batch goes out
 * in shares, one per replica. A process that holds every replica (sim) packs the real shares
 * and every replica computes on what it received. With one replica per process (MPI) each rank
 * reads its own shard from its data files, so the master holds only its own: the scatter still
 * moves a share's bytes to every rank (its cost is measured), and each rank keeps its own
 * shard, the same samples. *in receives the batches to compute on. */
static dp_status scatter_input(dp_trainer *t, const dp_batch *b, dp_batch *in) {
    const dp_dev *d = t->dev;
    const size_t per = dp_shape_size(t->model.input), share = (size_t)t->max_local * per;
    const int all_here = t->n_local == t->world;
    const float *send[t->n_local];
    float *recv[t->n_local];
    for (int r = 0; r < t->n_local; r++) {
        in[r] = b[r];
        if (t->rep[r].rank == 0)
            for (int q = 0; q < t->n_local; q++)
                DP_TRY(d->copy(d, t->dp_in_all + (size_t)t->rep[q].rank * share, b[q].x,
                               (size_t)b[q].n * per * sizeof(float)));
        send[r] = t->rep[r].rank == 0 ? t->dp_in_all : NULL;
        recv[r] = t->dp_in + (size_t)r * share;
    }
    DP_TRY(dp_scatter(t->backend, send, recv, share, 0));
    if (all_here)
        for (int r = 0; r < t->n_local; r++) in[r].x = recv[r];
    return DP_OK;
}

/* The master's loss over every replica's gathered record g (on the device): per lane, then the
 * lanes' tree, then the replicas' tree, the additions DDP makes in its lanes and its
 * all-reduce. The record's logits are replaced by their gradients. The labels and counts are
 * read from a host copy of the records; the lanes' losses are computed where the logits are. */
static dp_status master_loss(dp_trainer *t, float *g, size_t rec, const micro_info *mi, int b, float *loss,
                             int *correct) {
    const dp_dev *d = t->dev;
    const int K = t->model.n_classes, maxb = t->max_local;
    const dp_sampler *sp = &t->sampler;
    int first, count;
    dp_sampler_micro_lanes(sp, b, &first, &count);
    float reps[t->world];
    const float *h = t->dp_host_rec;
    DP_TRY(d->download(d, t->dp_host_rec, g, rec * (size_t)t->world * sizeof(float)));
    for (int q = 0; q < t->world; q++) {
        const float *hq = h + (size_t)q * rec;
        const int n = (int)hq[rec - 1];
        for (int i = 0; i < n; i++) t->h_labels[(size_t)q * maxb + i] = (int32_t)hq[(size_t)maxb * K + i];
    }
    DP_TRY(d->upload(d, t->d_labels, t->h_labels, (size_t)t->world * (size_t)maxb * sizeof(int32_t)));
    for (int q = 0; q < t->world; q++) {
        float *rq = g + (size_t)q * rec;
        for (int i = 0, lo = 0; i < count; i++) {
            const int ni = dp_chunk_lane_count(&sp->plan, mi->step_samples, q, first + i);
            const size_t at = (size_t)q * (size_t)count + (size_t)i;
            lane_loss(t, &t->kc, ni, K, rq + (size_t)lo * K, t->d_labels + (size_t)q * maxb + lo,
                      1.0f / (float)mi->step_samples, t->d_dlogits, t->d_dp_loss + at, t->d_dp_correct + at);
            /* logits become their gradients */
            DP_TRY(d->copy(d, rq + (size_t)lo * K, t->d_dlogits, (size_t)ni * K * sizeof(float)));
            lo += ni;
        }
    }
    const size_t nl = (size_t)t->world * (size_t)count;
    DP_TRY(d->download(d, t->h_dp_loss, t->d_dp_loss, nl * sizeof(float)));
    DP_TRY(d->download(d, t->h_dp_correct, t->d_dp_correct, nl * sizeof(int32_t)));
    *correct = 0;
    for (int q = 0; q < t->world; q++) {
        for (int i = 0; i < count; i++) *correct += t->h_dp_correct[(size_t)q * count + i];
        /* the lanes of a DP step are all of the replica's (no accumulation) */
        reps[q] = dp_tree_sum_scalars(t->h_dp_loss + (size_t)q * count, count, 1);
    }
    *loss = dp_tree_sum_scalars(reps, t->world, 1);
    return DP_OK;
}

static dp_status dp_micro(dp_trainer *t, const dp_batch *b, const dp_batch *hb, const micro_info *mi, int bi, float lr,
                          dp_step_metrics *m) {
    const dp_dev *d = t->dev;
    const dp_model *md = &t->model;
    const int K = md->n_classes, maxb = t->max_local;
    const size_t rec = dp_record_floats(t), all = rec * (size_t)t->world;
    dp_status st[t->n_local * t->rep[0].n_active + 1];
    int count[t->n_local];
    /* replicate: the master's parameters and buffers to every replica, every step */
    dp_batch in[t->n_local];
    if (t->world > 1) {
        DP_TRY(broadcast_coalesced(t, ARENA_PARAMS, md->params.n));
        if (md->buffers.n) DP_TRY(broadcast_coalesced(t, ARENA_BUFFERS, md->buffers.n));
        DP_TRY(scatter_input(t, b, in));
        b = in;
    }
    DP_TRY(zero_grads(t));
    /* the slots' own loss is not used: the master computes it over the whole batch */
    DP_TRY(forward_all(t, b, mi, 1.0f, st));
    /* gather outputs (and labels, as floats, from the host's copy) to the master */
    const float *send[t->n_local];
    float *recv[t->n_local];
    for (int r = 0; r < t->n_local; r++) {
        float *s = t->dp_send + (size_t)r * rec;
        for (int l = 0; l < t->rep[r].n_active; l++) {
            const dp_slot *sl = &t->rep[r].slots[l];
            DP_TRY(d->copy(d, s + (size_t)sl->lo * K, sl->acts.out[md->output], (size_t)sl->n * K * sizeof(float)));
        }
        /* a tail per replica: no upload reads memory the next one overwrites (the step's later
           downloads wait for all of them before the next step refills it) */
        float *tail = t->dp_tail + (size_t)r * ((size_t)maxb + 1);
        memset(tail, 0, ((size_t)maxb + 1) * sizeof(float));
        for (int i = 0; i < hb[r].n; i++) tail[i] = (float)hb[r].y[i];
        tail[maxb] = (float)hb[r].n;
        DP_TRY(d->upload(d, s + (size_t)maxb * K, tail, ((size_t)maxb + 1) * sizeof(float)));
        send[r] = s;
        recv[r] = t->dp_recv + (size_t)r * all;
    }
    DP_TRY(dp_gather(t->backend, send, recv, rec, 0));
    /* the loss over the whole batch, on the master; its logit gradients are scattered back */
    int master = -1;
    for (int r = 0; r < t->n_local; r++) {
        for (int l = 0; l < t->n_lanes; l++) t->lane_loss[(size_t)r * t->n_lanes + l] = 0;
        for (int l = 0; l < t->n_lanes; l++) t->lane_correct[(size_t)r * t->n_lanes + l] = 0;
        count[r] = 0;
        if (t->rep[r].rank == 0) master = r;
    }
    if (master >= 0) {
        int correct = 0;
        float loss = 0;
        DP_TRY(master_loss(t, recv[master], rec, mi, bi, &loss, &correct));
        t->lane_loss[(size_t)master * t->n_lanes] = loss; /* the others' stay 0: x + 0 = x */
        t->lane_correct[(size_t)master * t->n_lanes] = correct;
        count[master] = mi->step_samples; /* a NaN/Inf is caught after the metrics' all-reduce, on every rank */
    }
    const float *from[t->n_local];
    float *back[t->n_local];
    for (int r = 0; r < t->n_local; r++) {
        from[r] = r == master ? recv[r] : NULL;
        back[r] = t->dp_send + (size_t)r * rec; /* sent already: reused for the gradients */
    }
    DP_TRY(dp_scatter(t->backend, from, back, rec, 0));
    for (int r = 0; r < t->n_local; r++)
        for (int l = 0; l < t->rep[r].n_active; l++) {
            dp_slot *sl = &t->rep[r].slots[l];
            DP_TRY(d->copy(d, sl->acts.dout[md->output], back[r] + (size_t)sl->lo * K, (size_t)sl->n * K * sizeof(float)));
        }
    DP_TRY(backward_all(t, b, mi, 0, st));
    DP_TRY(add_metrics(t, count, m));
    /* reduce the gradients to the master, which alone steps */
    if (t->world > 1) DP_TRY(dp_reduce(t->backend, slices(t, ARENA_GRADS, 0), md->params.n, DP_SUM, 0));
    if (master >= 0)
        dp_sgd_step(&t->sgd, &md->params, t->rep[master].params, t->rep[master].grads, t->rep[master].momentum, lr);
    return DP_OK;
}

/* A device run's copy of the loader's batches: the samples and labels go up in stream order. */
static dp_status to_device(dp_trainer *t, const dp_batch *b, const dp_batch **out) {
    *out = b;
    if ((t->dev->caps & DP_CAP_HOST_MEMORY)) return DP_OK;
    const size_t per = dp_shape_size(t->model.input);
    /* through pinned staging, so the copies do not wait for the GPU; the staging is reused only
       once the last uploads from it are done (a micro-step that reads no loss does not wait) */
    if (t->stage_busy) DP_TRY(t->dev->wait(t->dev));
    for (int r = 0; r < t->n_local; r++) {
        dp_batch *db = &t->d_batches[r], *hs = &t->h_stage[r];
        const size_t nx = (size_t)b[r].n * per * sizeof(float), ny = (size_t)b[r].n * sizeof(int32_t);
        db->n = b[r].n;
        memcpy(hs->x, b[r].x, nx);
        memcpy(hs->y, b[r].y, ny);
        DP_TRY(t->dev->upload(t->dev, db->x, hs->x, nx));
        DP_TRY(t->dev->upload(t->dev, db->y, hs->y, ny));
    }
    t->stage_busy = 1;
    *out = t->d_batches;
    return DP_OK;
}

dp_status dp_train_micro(dp_trainer *t, const dp_batch *batches, int b, float lr, dp_step_metrics *m) {
    const int K = t->sampler.plan.accumulate, micro = b % K;
    micro_info mi = {0};
    DP_TRY(assign_lanes(t, batches, b, &mi));
    mi.last = micro == dp_sampler_step_micro(&t->sampler, b) - 1;
    const dp_batch *db;
    DP_TRY(to_device(t, batches, &db));
    if (t->cfg.mode == DP_MODE_DDP) return ddp_micro(t, db, &mi, micro, lr, m);
    return dp_micro(t, db, batches, &mi, b, lr, m);
}

dp_status dp_strategy_finish(dp_trainer *t) {
    /* DP: the replicas hold last step's copies; evaluation and checkpoints read the master's */
    if (t->cfg.mode != DP_MODE_DP || t->world == 1) return DP_OK;
    DP_TRY(dp_broadcast(t->backend, slices(t, ARENA_PARAMS, 0), t->model.params.n, 0));
    if (t->model.buffers.n) DP_TRY(dp_broadcast(t->backend, slices(t, ARENA_BUFFERS, 0), t->model.buffers.n, 0));
    return DP_OK;
}
