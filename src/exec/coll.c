/* coll.c: the executor's collectives. On a device with a collective stream each one waits for
 * the compute queued before it (an event the collective stream waits on) and is issued there by
 * the backend (which queues on dp_dev_coll: the device's coll stream); the compute queued after a blocking one waits for
 * it, while an overlapping all-reduce is waited for only by dp_exec_wait_all, so backward runs
 * on beside it. Where work runs as called (the CPU) the ordering calls are absent and the
 * backend's own non-blocking all-reduce (mpi) overlaps instead. With the replicas on several
 * devices, every device's collective stream waits for its main stream, and the other way
 * round; the events that time the collectives are replica 0's device's. */
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "exec/executor_impl.h"

/* Event index of the main stream's end of backward: the last one. */
static int bwd_end_event(const dp_executor *ex) { return 2 * ex->comm.cap; }

dp_status dp_exec_colls_wait_mains(const dp_executor *ex) {
    for (int i = 0; i < dp_exec_n_devs(ex); i++) {
        const dp_dev *d = dp_exec_dev(ex, i);
        if (d->coll.wait_for) DP_TRY(d->coll.wait_for(&d->coll, &d->main));
    }
    return DP_OK;
}

dp_status dp_exec_mains_wait_colls(const dp_executor *ex) {
    for (int i = 0; i < dp_exec_n_devs(ex); i++) {
        const dp_dev *d = dp_exec_dev(ex, i);
        if (d->coll.wait_for) DP_TRY(d->main.wait_for(&d->main, &d->coll));
    }
    return DP_OK;
}

static dp_status coll_begin(dp_executor *ex, dp_coll_kind kind, int overlap) {
    const dp_dev *d = ex->dev;
    DP_TRY(dp_exec_colls_wait_mains(ex));
    if (!ex->comm.timed || ex->comm.n == ex->comm.cap) return DP_OK;
    ex->comm.kind[ex->comm.n] = (unsigned char)kind, ex->comm.overlap[ex->comm.n] = (unsigned char)overlap;
    return d->coll.record(&d->coll, ex->comm.ev, 2 * ex->comm.n);
}

/* After the backend queued the collective: its end event, then (blocking) the main stream waits. */
static dp_status coll_issued(dp_executor *ex, dp_status s) {
    if (s != DP_OK || !ex->comm.timed || ex->comm.n == ex->comm.cap) return s;
    const dp_dev *d = ex->dev;
    s = d->coll.record(&d->coll, ex->comm.ev, 2 * ex->comm.n + 1);
    ex->comm.n++;
    return s;
}

static dp_status coll_end(dp_executor *ex, dp_status s) {
    s = coll_issued(ex, s);
    return s != DP_OK ? s : dp_exec_mains_wait_colls(ex);
}

dp_status dp_exec_coll_timing_start(dp_executor *ex) {
    const dp_dev *d = ex->dev;
    const unsigned need = DP_CAP_ASYNC | DP_CAP_EVENTS | DP_CAP_COLL_STREAM;
    if ((d->caps & need) != need || ex->graphs_on) return DP_OK;
    ex->comm.cap = 256;
    DP_ALLOC(ex->comm.kind, ex->comm.cap, "collective kinds");
    DP_ALLOC(ex->comm.overlap, ex->comm.cap, "collective kinds");
    DP_TRY(d->events_create(d, 2 * ex->comm.cap + 1, &ex->comm.ev));
    ex->comm.timed = 1;
    return DP_OK;
}

void dp_exec_coll_timing_free(dp_executor *ex) {
    if (ex->comm.ev) ex->dev->events_free(ex->dev, ex->comm.ev, 2 * ex->comm.cap + 1);
    free(ex->comm.kind);
    free(ex->comm.overlap);
    ex->comm.ev = NULL, ex->comm.kind = ex->comm.overlap = NULL, ex->comm.timed = 0;
}

dp_status dp_exec_collect_coll_times(dp_executor *ex) {
    if (!ex->comm.timed || !ex->comm.n) return DP_OK;
    const dp_dev *d = ex->dev;
    const dp_dev_stream *c = &d->coll;
    if (ex->comm.drained != ex->comm.n) { /* else the step metrics' download waited for them all */
        DP_TRY(c->wait(c));
        if (ex->comm.bwd_end_recorded) DP_TRY(d->wait(d)); /* the end of backward is the main stream's */
    }
    for (int i = 0; i < ex->comm.n; i++) {
        double s = 0;
        DP_TRY(d->event_elapsed(d, ex->comm.ev, 2 * i, 2 * i + 1, &s));
        ex->comm.s[ex->comm.kind[i]] += s;
        if (!ex->comm.overlap[i] || !ex->comm.bwd_end_recorded) continue;
        /* the part of it before backward ended: hidden behind compute */
        double before = 0;
        DP_TRY(d->event_elapsed(d, ex->comm.ev, 2 * i, bwd_end_event(ex), &before));
        ex->comm.hidden_s += before <= 0 ? 0 : before < s ? before : s;
    }
    ex->comm.n = 0, ex->comm.bwd_end_recorded = 0, ex->comm.drained = -1;
    return DP_OK;
}

dp_status dp_exec_allreduce(dp_executor *ex, float *const *bufs, size_t n) {
    DP_TRY(coll_begin(ex, DP_COLL_ALLREDUCE, 0));
    return coll_end(ex, dp_allreduce(ex->backend, bufs, n, DP_SUM));
}

dp_status dp_exec_broadcast(dp_executor *ex, float *const *bufs, size_t n, int root) {
    DP_TRY(coll_begin(ex, DP_COLL_BROADCAST, 0));
    return coll_end(ex, dp_broadcast(ex->backend, bufs, n, root));
}

dp_status dp_exec_reduce(dp_executor *ex, float *const *bufs, size_t n, int root) {
    DP_TRY(coll_begin(ex, DP_COLL_REDUCE, 0));
    return coll_end(ex, dp_reduce(ex->backend, bufs, n, DP_SUM, root));
}

dp_status dp_exec_gather(dp_executor *ex, const float *const *send, float *const *recv, size_t n, int root) {
    DP_TRY(coll_begin(ex, DP_COLL_GATHER, 0));
    return coll_end(ex, dp_gather(ex->backend, send, recv, n, root));
}

dp_status dp_exec_scatter(dp_executor *ex, const float *const *send, float *const *recv, size_t n, int root) {
    DP_TRY(coll_begin(ex, DP_COLL_SCATTER, 0));
    return coll_end(ex, dp_scatter(ex->backend, send, recv, n, root));
}

dp_status dp_exec_allreduce_start(dp_executor *ex, float *const *bufs, size_t n, dp_req *req, int ready_node,
                                  int more_backward) {
    const double t0 = dp_now();
    dp_coll_trace *tr = ex->backend->trace;
    DP_TRY(coll_begin(ex, DP_COLL_ALLREDUCE, 1));
    if (tr) tr->ready_node = ready_node;
    dp_status st = coll_issued(ex, dp_allreduce_start(ex->backend, bufs, n, DP_SUM, req));
    if (tr) tr->ready_node = -1;
    DP_TRY(st);
    if (more_backward) ex->comm.overlap_s += dp_now() - t0; /* backward work remained to hide it */
    return DP_OK;
}

void dp_exec_comm_reset(dp_executor *ex) {
    memset(&ex->backend->stats, 0, sizeof ex->backend->stats);
    ex->comm.overlap_s = 0, ex->comm.hidden_s = 0;
    memset(ex->comm.s, 0, sizeof ex->comm.s);
}

void dp_exec_comm_read(const dp_executor *ex, dp_comm_stats *stats, double *hidden_s) {
    *stats = ex->backend->stats;
    *hidden_s = ex->comm.overlap_s;
    if (!ex->comm.timed) return;
    /* what the collective stream's events measured, not the host's enqueueing */
    for (int k = 0; k < DP_COLL_KINDS; k++) stats->seconds[k] = ex->comm.s[k];
    *hidden_s = ex->comm.hidden_s;
}

dp_status dp_exec_wait_all(dp_executor *ex, const dp_req *reqs, int n) {
    if (ex->comm.timed) { /* the end of backward on the main stream: what hid the all-reduces */
        DP_TRY(ex->dev->event_record(ex->dev, ex->comm.ev, bwd_end_event(ex)));
        ex->comm.bwd_end_recorded = 1;
    }
    for (int k = 0; k < n; k++) DP_TRY(dp_wait(ex->backend, reqs[k]));
    return dp_exec_mains_wait_colls(ex);
}
