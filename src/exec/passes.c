/* passes.c: the forward and backward passes of a micro-step on every local replica, node by
 * node in lockstep over all lanes (replica.h). The lanes run independently between
 * synchronisation points, which are only the nodes with sums (BN) and, on the micro-step that
 * reduces, the nodes that complete gradient buckets: each stretch runs every active slot
 * through its nodes in parallel, over threads on the CPU (each slot single-threaded, into its
 * own arenas, so which thread runs which slot changes no result). On a device whose table runs
 * lanes (dp_kernels.lanes), the slots' kernel calls are recorded (kernels/kcall.h) and each call
 * of all the device's slots is issued as one lanes() call on its main stream at the end of the
 * stretch, so a step's launches do not grow with the lanes; else over the device's lane streams
 * between a fork from the main stream and a join back into it. */
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "core/timer.h"
#include "exec/executor_impl.h"
#include "kernels/kcall.h"

/* Runs the body for every active slot q = (replica r, slot l) of every local replica, in
 * parallel over slots (the executor must be named ex), between the fork and the join of the
 * devices' lane streams (each device's by the thread that runs its slots; the caller then checks
 * stretch_status). On the CPU slot q runs on thread q mod the
 * team, so that sum_lanes can add lanes on the thread that wrote them; with the replicas on
 * several devices (--gpus), every slot of replica r is issued by thread r, a host thread per GPU
 * (executor.h: dp_exec_dev_team), so the GPUs' launches are queued at once, each device's in its
 * program order. */
#define FOR_SLOTS(ex, r, l)                                                                                        \
    _Pragma("omp parallel num_threads(slot_team(ex)) if (slot_team(ex) > 1)")                                       \
    for (int open_ = stretch_open(ex); open_; open_ = stretch_close(ex))                                            \
        for (int q_ = 0; q_ < n_slots(ex); q_++)                                                                    \
            if (slot_owner(ex, q_) == omp_get_thread_num())                                                        \
                for (int r = q_ / ex->rep[0].n_active, l = q_ % ex->rep[0].n_active, once_ = 1; once_; once_ = 0)

static int n_slots(const dp_executor *ex) { return ex->n_local * ex->rep[0].n_active; }

static int slot_team(const dp_executor *ex) {
    if (n_slots(ex) < 2) return 1;
    return (ex->dev->caps & DP_CAP_ASYNC) ? dp_exec_dev_team(ex) : dp_exec_team(ex, n_slots(ex));
}

/* The thread of the team that runs slot q (the team may be smaller than asked). */
static int slot_owner(const dp_executor *ex, int q) {
    const int nt = omp_get_num_threads();
    return (ex->dev->caps & DP_CAP_ASYNC) ? q / ex->rep[0].n_active % nt : q % nt;
}

/* A slot's failure on a thread of the team: its message, which is that thread's, for the caller. */
static void keep_error(dp_executor *ex, dp_status s) {
    if (s == DP_OK || omp_get_thread_num() == 0) return;
#pragma omp critical(dp_exec_slot_error)
    if (!ex->slot_error[0]) snprintf(ex->slot_error, sizeof ex->slot_error, "%s", dp_last_error());
}

/* Device lanes: the active slots of each device run on its lane streams at once, slot q on
 * stream q mod lane_streams (q counted on that device), between a fork from the device's main
 * stream and a join back into it (0: no streams, the CPU's threads or a single slot run them).
 * Eagerly too: the lanes' small kernels overlap on the GPU. */
static int slots_per_dev(const dp_executor *ex) { return ex->multi_dev ? ex->rep[0].n_active : n_slots(ex); }

/* Whether the slots' calls are recorded and issued a call for all of a device's slots at a time:
 * on a device whose table has lanes(), unless nodes are timed one by one (node_s). */
static int batched(const dp_executor *ex) {
    return (ex->dev->caps & DP_CAP_ASYNC) && ex->dev->k->lanes && !ex->node_s && slots_per_dev(ex) > 1;
}

static int lane_streams(const dp_executor *ex) {
    const int nq = slots_per_dev(ex);
    if (!(ex->dev->caps & DP_CAP_LANES) || nq < 2 || batched(ex)) return 0;
    return nq < ex->dev->n_lanes ? nq : ex->dev->n_lanes;
}

/* Slot q (replica q / n_active) runs on its replica's device. */
static const dp_kctx *slot_kc(const dp_executor *ex, int q) {
    const int n = lane_streams(ex), r = q / ex->rep[0].n_active;
    if (batched(ex)) return &ex->rep[r].slots[q % ex->rep[0].n_active].rec_kc;
    const dp_dev *d = dp_exec_dev(ex, r);
    const int on_dev = ex->multi_dev ? q % ex->rep[0].n_active : q;
    return n ? &d->lanes[on_dev % n].kc : &d->main.kc;
}

/* The device thread t of a team of nt drives (its slots' device): device i's by thread i mod nt with
 * the replicas on several devices, the one device's by thread 0 (the team is one thread then). */
static int drives(const dp_executor *ex, int i) {
    return (ex->multi_dev ? i % omp_get_num_threads() : 0) == omp_get_thread_num();
}

/* A fork's or join's failure on any thread of the team: the first, for stretch_status. */
static void note_stretch(dp_executor *ex, dp_status s) {
    if (s == DP_OK) return;
    keep_error(ex, s);
#pragma omp critical(dp_exec_stretch)
    if (ex->stretch_status == DP_OK) ex->stretch_status = s;
}

/* The slots q in [*lo, *hi) device i runs. */
static void dev_slots(const dp_executor *ex, int i, int *lo, int *hi) {
    *lo = ex->multi_dev ? i * ex->rep[0].n_active : 0;
    *hi = ex->multi_dev ? *lo + ex->rep[0].n_active : n_slots(ex);
}

static dp_kcall_rec *slot_rec(dp_executor *ex, int q) {
    return &ex->rep[q / ex->rep[0].n_active].slots[q % ex->rep[0].n_active].rec;
}

/* Device i's slots' recorded calls, issued on its main stream: call j of every slot as one lanes()
 * call, slots in order. Where the records do not line up call by call (a slot that failed part
 * way), each slot's calls run one by one instead, which is what the lanes would have run. */
static dp_status flush_dev(dp_executor *ex, int i) {
    const dp_dev *d = dp_exec_dev(ex, i);
    int lo, hi;
    dev_slots(ex, i, &lo, &hi);
    const int ns = hi - lo;
    int aligned = 1;
    for (int q = lo; q < hi; q++) {
        const dp_kcall_rec *r = slot_rec(ex, q);
        if (r->out_of_memory) return dp_fail(DP_ERR_NOMEM, "out of memory recording a lane's kernel calls");
        if (r->refused)
            return dp_fail(DP_ERR_INTERNAL, "a layer called the kernel %s, which the lanes' recording does not take",
                           r->refused);
        aligned = aligned && r->n == slot_rec(ex, lo)->n;
    }
    const int n = slot_rec(ex, lo)->n;
    for (int j = 0; aligned && j < n; j++)
        for (int q = lo + 1; aligned && q < hi; q++)
            aligned = dp_kcall_same(&slot_rec(ex, lo)->calls[j], &slot_rec(ex, q)->calls[j]);
    const dp_kcall *calls[ns];
    for (int j = 0; aligned && j < n; j++) {
        for (int q = lo; q < hi; q++) calls[q - lo] = &slot_rec(ex, q)->calls[j];
        d->k->lanes(&d->main.kc, ns, calls);
    }
    for (int q = lo; !aligned && q < hi; q++)
        for (int j = 0; j < slot_rec(ex, q)->n; j++) dp_kcall_run(d->k, &d->main.kc, &slot_rec(ex, q)->calls[j]);
    return DP_OK;
}

/* Before this thread's slots: its devices' lane streams wait for their main streams (fork), or
 * their slots' records start empty; 1. */
static int stretch_open(dp_executor *ex) {
    for (int i = 0; batched(ex) && i < dp_exec_n_devs(ex); i++)
        if (drives(ex, i)) {
            int lo, hi;
            dev_slots(ex, i, &lo, &hi);
            for (int q = lo; q < hi; q++) dp_kcall_rec_reset(slot_rec(ex, q));
        }
    const int n = lane_streams(ex);
    for (int i = 0; n && i < dp_exec_n_devs(ex); i++)
        if (drives(ex, i)) note_stretch(ex, dp_exec_dev(ex, i)->fork(dp_exec_dev(ex, i), n));
    return 1;
}

/* After them: the main streams wait for the lanes (join), or the records are issued; 0, which ends
 * FOR_SLOTS's one round. */
static int stretch_close(dp_executor *ex) {
    for (int i = 0; batched(ex) && i < dp_exec_n_devs(ex); i++)
        if (drives(ex, i)) note_stretch(ex, flush_dev(ex, i));
    const int n = lane_streams(ex);
    for (int i = 0; n && i < dp_exec_n_devs(ex); i++)
        if (drives(ex, i)) note_stretch(ex, dp_exec_dev(ex, i)->join(dp_exec_dev(ex, i), n));
    return 0;
}

/* The stretch's fork or join failure (its message made this thread's), or DP_OK; cleared. */
static dp_status stretch_status(dp_executor *ex) {
    const dp_status s = ex->stretch_status;
    ex->stretch_status = DP_OK;
    if (s != DP_OK && ex->slot_error[0]) dp_set_error(ex->slot_error), ex->slot_error[0] = '\0';
    return s;
}

/* Samples each BN statistic covers: the replica's batch, or the micro-batch with SyncBN. */
static dp_exec exec_of(const dp_executor *ex, int r, int l, const dp_batch *b, const dp_micro_info *mi) {
    const dp_replica *rep = &ex->rep[r];
    dp_exec x = {0};
    x.batch = rep->slots[l].n;
    x.stat_batch = ex->sync_bn ? mi->micro_samples : b[r].n;
    x.training = 1;
    x.update_stats = l == 0;
    x.k = batched(ex) ? &dp_kcall_recorder : ex->k;
    x.kc = *slot_kc(ex, r * rep->n_active + l);
    x.params = rep->params;
    x.grads = rep->slots[l].grads;
    x.buffers = rep->buffers;
    return x;
}

static const float *slot_input(const dp_executor *ex, const dp_batch *b, int r, int l) {
    return b[r].x + (size_t)ex->rep[r].slots[l].lo * dp_shape_size(ex->model->input);
}

static dp_status first_error(dp_executor *ex, const dp_status *st, int n) {
    for (int i = 0; i < n; i++)
        if (st[i] != DP_OK) {
            if (ex->slot_error[0]) dp_set_error(ex->slot_error), ex->slot_error[0] = '\0';
            return st[i];
        }
    return DP_OK;
}

/* The reduction of a node's sums (BN): the active slots' sums added with the fixed tree into
 * slot 0, over all replicas with --sync-bn, and handed back to every slot. */
static dp_status reduce_sums(dp_executor *ex, int i) {
    const size_t n = ex->model->nodes[i].sync_floats;
    const int na = ex->rep[0].n_active;
    for (int r = 0; r < ex->n_local; r++) {
        float *v[na];
        for (int l = 0; l < na; l++) v[l] = ex->rep[r].slots[l].acts.sync[i];
        ex->k->tree_sum(&dp_exec_dev(ex, r)->main.kc, v, na, 0, n, 0);
        ex->ptrs[r] = v[0];
    }
    if (ex->sync_bn) DP_TRY(dp_exec_allreduce(ex, ex->ptrs, n));
    for (int r = 0; r < ex->n_local; r++) {
        const dp_dev *d = dp_exec_dev(ex, r);
        if (batched(ex) && na > 2) { /* the copies to the other slots as one lanes() call */
            dp_kcall rec[na];
            const dp_kcall *calls[na];
            for (int l = 1; l < na; l++) {
                rec[l] = (dp_kcall){.kind = DP_KC_COPY, .z = n};
                rec[l].p[0] = ex->rep[r].slots[0].acts.sync[i], rec[l].p[1] = ex->rep[r].slots[l].acts.sync[i];
                calls[l - 1] = &rec[l];
            }
            d->k->lanes(&d->main.kc, na - 1, calls);
            continue;
        }
        for (int l = 1; l < na; l++)
            ex->k->copy(&d->main.kc, n, ex->rep[r].slots[0].acts.sync[i], ex->rep[r].slots[l].acts.sync[i]);
    }
    return DP_OK;
}

/* A node's forward (phase 0) or backward (1) on one slot, timed with the clock when asked. */
static dp_status timed_node(dp_executor *ex, int q, int phase, int k, dp_slot *sl, dp_exec *x, const float *in) {
    const dp_model *m = ex->model;
    if (!ex->node_s) return phase ? dp_node_backward(m, k, &sl->acts, x, in) : dp_node_forward(m, k, &sl->acts, x, in);
    const double t0 = dp_now();
    dp_status s = phase ? dp_node_backward(m, k, &sl->acts, x, in) : dp_node_forward(m, k, &sl->acts, x, in);
    ex->node_s[((size_t)q * 2 + (size_t)phase) * m->n_nodes + k] += dp_now() - t0;
    return s;
}

/* One stretch on every active slot: phase 0 runs nodes from .. to-1 forward, phase 1 nodes from
 * down to to+1 backward; then node sums_at's local sums (forward or backward; -1: none), or, when
 * the forward reaches the last node, the lane's loss (its samples' losses summed in order, as a
 * float). The first failure of a slot, or of the stretch's fork or join. */
static dp_status run_stretch(dp_executor *ex, const dp_batch *b, const dp_micro_info *mi, float scale, int phase,
                             int from, int to, int sums_at) {
    const dp_model *m = ex->model;
    const int nq = n_slots(ex), step = phase ? -1 : 1;
    dp_status st[nq + 1];
    FOR_SLOTS(ex, r, l) {
        dp_slot *sl = &ex->rep[r].slots[l];
        dp_exec x = exec_of(ex, r, l, b, mi);
        const float *in = slot_input(ex, b, r, l);
        st[q_] = DP_OK;
        for (int k = from; k != to && st[q_] == DP_OK; k += step) st[q_] = timed_node(ex, q_, phase, k, sl, &x, in);
        keep_error(ex, st[q_]);
        if (sums_at >= 0 && phase == 0) dp_node_forward_sums(m, sums_at, &sl->acts, &x, in);
        else if (sums_at >= 0) dp_node_backward_sums(m, sums_at, &sl->acts, &x, in);
        else if (phase == 0 && to == m->n_nodes)
            m->head->loss(x.k, slot_kc(ex, q_), sl->n, m->n_classes, sl->acts.out[m->output], b[r].y + sl->lo, scale,
                          sl->acts.dout[m->output], ex->d_lane_loss[r] + sl->lane, ex->d_lane_correct[r] + sl->lane);
    }
    DP_TRY(stretch_status(ex));
    return first_error(ex, st, nq);
}

dp_status dp_exec_forward(dp_executor *ex, const dp_batch *b, const dp_micro_info *mi, float scale) {
    const dp_model *m = ex->model;
    if (ex->node_s) { /* the lanes this micro-step runs, for the per-node means */
        ex->node_runs += n_slots(ex);
        for (int r = 0; r < ex->n_local; r++)
            for (int l = 0; l < ex->rep[r].n_active; l++) ex->node_samples += ex->rep[r].slots[l].n;
    }
    if (dp_node_has_sums(m, 0)) {
        DP_TRY(run_stretch(ex, b, mi, scale, 0, 0, 0, 0)); /* no node: the first one's sums */
        DP_TRY(reduce_sums(ex, 0));
    }
    for (int i = 0; i < m->n_nodes;) {
        int j = i + 1;
        while (j < m->n_nodes && !dp_node_has_sums(m, j)) j++;
        DP_TRY(run_stretch(ex, b, mi, scale, 0, i, j, j < m->n_nodes ? j : -1));
        if (j < m->n_nodes) DP_TRY(reduce_sums(ex, j));
        i = j;
    }
    return DP_OK;
}

/* Adds the lanes' partials of bucket k into lane 0 (the replica's arena) with the fixed tree,
 * leaving the other lanes zero for the next step: on the CPU in parallel over replicas and
 * pieces of the bucket (the tree is per element), on a device in one call per replica, on the
 * replica's device. On the CPU the tree's first levels, whose pairs (i, i + h) with h a multiple
 * of the team ran on one thread (FOR_SLOTS: slot q on thread q mod T), are added by that thread
 * first: each lane's partial is then read where it was written, not pulled across cores (or
 * across a machine's L3 domains), and only the last levels' few lanes are cut into pieces. The
 * sums are the tree's, level by level, whoever adds them. */
static void sum_lanes(dp_executor *ex, int k) {
    const int L = ex->n_lanes;
    if (L == 1) return;
    const dp_slice *s = &ex->model->params.buckets[k];
    const int host = !(ex->dev->caps & DP_CAP_ASYNC);
    int m = L; /* lanes the tree still has to add */
    const int T = host ? dp_exec_team(ex, n_slots(ex)) : 1, na = ex->rep[0].n_active;
    if (T > 1 && (L + 1) / 2 % T == 0) {
#pragma omp parallel num_threads(T)
        {
            const int t = omp_get_thread_num();
            for (int r = 0; r < ex->n_local; r++)
                for (int mm = L, h = (L + 1) / 2; mm > 1 && h % T == 0; mm = h, h = (h + 1) / 2)
                    for (int i = 0; i < mm - h; i++)
                        if ((r * na + i) % T == t) {
                            float *const pair[2] = {ex->rep[r].lane_grads[i], ex->rep[r].lane_grads[i + h]};
                            ex->k->tree_sum(&ex->dev->main.kc, pair, 2, s->offset, s->count, 1);
                        }
        }
        while (m > 1 && (m + 1) / 2 % T == 0) m = (m + 1) / 2;
        if (m == 1) return;
    }
    /* on the host, pieces of at most 16K floats, as many per replica as keeps every thread busy */
    size_t piece = s->count ? s->count : 1;
    if (host) {
        const size_t per_rep = (size_t)(ex->team > ex->n_local ? ex->team / ex->n_local : 1);
        size_t n = (s->count + 16383) / 16384;
        n = (n + per_rep - 1) / per_rep * per_rep;
        piece = ((s->count + n - 1) / n + 15) / 16 * 16;
        if (!piece) piece = 16;
    }
    const size_t n_pieces = (s->count + piece - 1) / piece;
    const long total = (long)n_pieces * ex->n_local;
#pragma omp parallel for num_threads(ex->team) schedule(static) if (host && total > 1 && s->count * m > 262144)
    for (long q = 0; q < total; q++) {
        const int r = (int)(q / (long)n_pieces);
        const size_t lo = (size_t)(q % (long)n_pieces) * piece;
        ex->k->tree_sum(&dp_exec_dev(ex, r)->main.kc, ex->rep[r].lane_grads, m, s->offset + lo,
                        lo + piece < s->count ? piece : s->count - lo, 1);
    }
}

/* Whether bucket `next` (the next to complete) is completed by node i's backward. */
static int completes(const dp_executor *ex, int last, int next, int i) {
    return last && next < ex->model->params.n_buckets && ex->bucket_node[next] == i;
}

dp_status dp_exec_backward(dp_executor *ex, const dp_batch *b, const dp_micro_info *mi, dp_bucket_ready_fn ready,
                           void *ctx) {
    const dp_model *m = ex->model;
    const int last = mi->last, n = m->n_nodes;
    int next = 0;
    if (dp_node_has_sums(m, n - 1)) {
        DP_TRY(run_stretch(ex, b, mi, 0.0f, 1, n - 1, n - 1, n - 1)); /* no node: the last one's sums */
        DP_TRY(reduce_sums(ex, n - 1));
    }
    for (int i = n - 1; i >= 0;) {
        /* the stretch i, i-1, ..., j+1: it ends after a node that completes a bucket, or before a
           BN node j (whose local sums the lanes then compute) */
        int j = i - 1;
        if (!completes(ex, last, next, i))
            while (j >= 0 && !dp_node_has_sums(m, j) && !completes(ex, last, next, j)) j--;
        if (j >= 0 && completes(ex, last, next, j) && !dp_node_has_sums(m, j)) j--; /* j completes: include it */
        DP_TRY(run_stretch(ex, b, mi, 0.0f, 1, i, j, j >= 0 && dp_node_has_sums(m, j) ? j : -1));
        for (; completes(ex, last, next, j + 1); next++) {
            sum_lanes(ex, next);
            if (ready) DP_TRY(ready(ctx, next, j + 1, j >= 0));
        }
        if (j >= 0 && dp_node_has_sums(m, j)) DP_TRY(reduce_sums(ex, j));
        i = j;
    }
    if (last) ex->lanes_clear = 1; /* every bucket went through the clearing tree */
    return DP_OK;
}
