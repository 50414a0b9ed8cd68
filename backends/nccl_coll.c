/* nccl_coll.c: the NCCL backend's collectives over the process's local communicators
 * (nccl_impl.h), and the polling of NCCL's non-blocking calls with a deadline.
 *
 * The all-reduce and reduce sum in the canonical order (data/chunks.h), as the sim and MPI
 * backends do: a reduce-scatter in which the owner of each shard receives every rank's piece
 * (grouped ncclSend/ncclRecv) and adds them with the fixed tree (the table's tree_sum kernel, on
 * the owner's device), then the finished shards go to every rank (all-reduce) or to the root
 * (reduce). NCCL's own ncclAllReduce adds in an order of its own, which would break the bitwise
 * equality between replica counts. Every collective is one group over the local communicators:
 * their sends and receives to each other and to other processes progress together. */
#include "dp_config.h"

#if DP_HAVE_NCCL

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "backends/nccl_impl.h"
#include "core/ordered.h"
#include "core/timer.h"

/* Each communicator's abort under a grace period of its own, naming it: aborts run one after the
 * other, and eight slow ones must not add up past one grace. */
void dp_nccl_abort(nccl_impl *m) {
    if (m->warming) dp_nccl_warmup_hint(m); /* the other ranks hear the hints too */
    dp_sidechan_fail(m->sc, dp_last_error());
    for (int i = 0; i < m->n_local; i++) {
        if (!m->loc[i].comm) continue;
        if (m->n_local > 1)
            snprintf(m->abort_what, sizeof m->abort_what, "aborting communicator %d of %d (rank %d, ncclCommAbort) "
                     "after \"%s\"", i + 1, m->n_local, m->loc[i].rank, dp_last_error());
        else
            snprintf(m->abort_what, sizeof m->abort_what, "aborting the communicator (ncclCommAbort) after \"%s\"",
                     dp_last_error());
        dp_nccl_watchdog_enter_brief(m->wd, m->abort_what);
        ncclCommAbort(m->loc[i].comm);
        m->loc[i].comm = NULL;
        dp_nccl_watchdog_leave(m->wd);
    }
}

void dp_nccl_abort_unless_capturing(nccl_impl *m) {
    if (m->b && m->b->capturing) dp_sidechan_fail(m->sc, dp_last_error());
    else dp_nccl_abort(m);
}

static const char *last_of(const nccl_impl *m, int i, char *buf, size_t cap) {
    const char *last = m->loc[i].comm ? ncclGetLastError(m->loc[i].comm) : NULL;
    if (!last || !*last) return NULL;
    if (m->n_local > 1) snprintf(buf, cap, ": rank %d's communicator: %s", m->loc[i].rank, last);
    else snprintf(buf, cap, ": %s", last);
    return buf;
}

const char *dp_nccl_last_error(const nccl_impl *m, int which, char *buf, size_t cap) {
    buf[0] = '\0';
    if (which >= 0 && which < m->n_local && last_of(m, which, buf, cap)) return buf;
    for (int i = 0; i < m->n_local; i++)
        if (last_of(m, i, buf, cap)) break;
    return buf;
}

ncclResult_t dp_nccl_poll(const nccl_impl *m, int *which) {
    ncclResult_t all = ncclSuccess;
    if (which) *which = -1;
    for (int i = 0; i < m->n_local; i++) {
        if (!m->loc[i].comm) continue;
        ncclResult_t r = ncclSuccess;
        if (ncclCommGetAsyncError(m->loc[i].comm, &r) != ncclSuccess) r = ncclInvalidUsage;
        if (r != ncclSuccess && r != ncclInProgress) {
            if (which) *which = i;
            return r;
        }
        if (r == ncclInProgress) all = ncclInProgress;
    }
    return all;
}

/* Polled with yields of the core (NCCL's own threads may need it on a small host). */
static dp_status settle_watched(nccl_impl *m, ncclResult_t r, const char *what) {
    const double deadline = dp_now() + m->timeout_s;
    int which = -1; /* the communicator whose result failed; -1: the call's own result */
    for (long polls = 0; r == ncclInProgress; polls++) {
        if (dp_now() > deadline) {
            dp_status e = dp_fail(DP_ERR_BACKEND, "nccl: %s: %s did not complete within --timeout %.0f s (a rank died "
                                  "or is stuck); the communicator was aborted", m->who, what, m->timeout_s);
            if (!m->in_group) dp_nccl_abort_unless_capturing(m);
            return e;
        }
        r = dp_nccl_poll(m, &which);
        char why[512];
        if (r == ncclInProgress && dp_sidechan_poll(m->sc, why, sizeof why)) {
            dp_status e = dp_fail(DP_ERR_BACKEND, "nccl: %s: %s stopped because another rank failed: %s; the "
                                  "communicator was aborted", m->who, what, why);
            if (!m->in_group) dp_nccl_abort_unless_capturing(m);
            return e;
        }
        if (r == ncclInProgress && polls > 64) {
            const struct timespec pause = {0, 50000}; /* 50 us: the collective is already slow to come */
            nanosleep(&pause, NULL);
        }
    }
    if (r != ncclSuccess) {
        char last[600], why[512];
        if (which < 0) dp_nccl_poll(m, &which); /* a call's own result: the communicator it left in error */
        dp_nccl_last_error(m, which, last, sizeof last);
        /* a peer's closed connection is often a consequence: the side channel may know the cause */
        const int first = dp_sidechan_wait(m->sc, why, sizeof why, r == ncclRemoteError ? 2.0 : 0.0);
        dp_status e = dp_fail(DP_ERR_BACKEND, "nccl: %s: %s failed: %s%s%s%s", m->who, what, ncclGetErrorString(r),
                              last, first ? "; first failure: " : "", first ? why : "");
        if (!m->in_group) dp_nccl_abort_unless_capturing(m);
        return e;
    }
    return DP_OK;
}

dp_status dp_nccl_settle(nccl_impl *m, ncclResult_t r, const char *what) {
    dp_nccl_watchdog_enter(m->wd, what);
    dp_status s = settle_watched(m, r, what);
    dp_nccl_watchdog_leave(m->wd);
    return s;
}

dp_status dp_nccl_group_start(nccl_impl *m, const char *what) {
    DP_TRY(dp_nccl_settle(m, ncclGroupStart(), what));
    m->in_group = 1;
    return DP_OK;
}

dp_status dp_nccl_group_end(nccl_impl *m, const char *what) {
    m->in_group = 0;
    return dp_nccl_settle(m, ncclGroupEnd(), what);
}

static cudaStream_t stream_of(const nccl_local *x) { return (cudaStream_t)x->st->kc.stream; }

/* The receive buffers grow only here, at set-up: growing one mid-run would free and reallocate
 * device memory (cudaFree synchronises the device, outside every watch; and a recorded step may not
 * allocate at all). */
dp_status dp_nccl_reserve(dp_backend_t b, size_t max_floats) {
    nccl_impl *m = dp_nccl_impl(b);
    const size_t w = (size_t)m->world, n = (max_floats / w + 1) * w;
    for (int i = 0; i < m->n_local && w > 1; i++) {
        nccl_local *x = &m->loc[i];
        if (n <= x->scratch_n) continue;
        x->st->dev->free(x->st->dev, x->scratch);
        x->scratch = NULL, x->scratch_n = 0;
        DP_TRY(x->st->alloc(x->st, &x->scratch, n, "the nccl all-reduce's receive buffer"));
        x->scratch_n = n;
    }
    return DP_OK;
}

/* Whether the receive buffers reserved at set-up hold a sum of n floats (its pieces, world of them);
 * if not, the reserve was sized wrongly: an internal error naming the collective, never a growth. */
static dp_status scratch_holds(const nccl_impl *m, size_t need, size_t n, const char *what) {
    for (int i = 0; i < m->n_local; i++)
        if (need > m->loc[i].scratch_n)
            return dp_fail(DP_ERR_INTERNAL, "nccl: %s: the %s of %zu floats needs a receive buffer of %zu floats, but "
                           "%zu were reserved at start (dp_backend_reserve: the run's largest sum); growing it now "
                           "would free and reallocate device memory mid-run", m->who, what, n, need,
                           m->loc[i].scratch_n);
    return DP_OK;
}

/* The canonical-order sum of bufs over every rank: into every rank's buffer (root < 0) or root's. */
static dp_status ordered_sum(nccl_impl *m, float *const *bufs, size_t n, int root, const char *what) {
    const int w = m->world;
    if (w == 1 || n == 0) return DP_OK;
    const size_t piece = n / (size_t)w + 1;
    DP_TRY(scratch_holds(m, piece * (size_t)w, n, what));
    /* reduce-scatter: my piece of shard k goes to rank k; rank q's piece of my shard lands in slot q */
    DP_TRY(dp_nccl_group_start(m, what));
    for (int i = 0; i < m->n_local; i++) {
        const nccl_local *x = &m->loc[i];
        for (int k = 0; k < w; k++) {
            if (k == x->rank) continue;
            const dp_ordered_xfer p = dp_ordered_scatter(n, w, x->rank, k, piece);
            if (p.send_len)
                NCCL_GROUP_TRY(m, ncclSend(bufs[i] + p.send_lo, p.send_len, ncclFloat, k, x->comm, stream_of(x)), what);
            if (p.recv_len)
                NCCL_GROUP_TRY(m, ncclRecv(x->scratch + p.recv_lo, p.recv_len, ncclFloat, k, x->comm, stream_of(x)),
                               what);
        }
    }
    DP_TRY(dp_nccl_group_end(m, what));
    /* the fixed tree over the ranks' pieces, in rank order, on each owner's device; its own piece stays in buf */
    for (int i = 0; i < m->n_local; i++) {
        const nccl_local *x = &m->loc[i];
        size_t mlo, mlen;
        dp_shard(n, w, x->rank, &mlo, &mlen);
        float *v[w];
        for (int q = 0; q < w; q++) v[q] = q == x->rank ? bufs[i] + mlo : x->scratch + (size_t)q * piece;
        if (mlen) x->st->dev->k->tree_sum(&x->st->kc, v, w, 0, mlen, 0);
        if (v[0] != bufs[i] + mlo) DP_TRY(x->st->copy(x->st, bufs[i] + mlo, v[0], mlen * sizeof(float)));
    }
    /* the finished shards: to everyone, or to the root */
    DP_TRY(dp_nccl_group_start(m, what));
    for (int i = 0; i < m->n_local; i++) {
        const nccl_local *x = &m->loc[i];
        for (int k = 0; k < w; k++) {
            if (k == x->rank) continue;
            const dp_ordered_xfer p = dp_ordered_gather(n, w, x->rank, k, root);
            if (p.send_len)
                NCCL_GROUP_TRY(m, ncclSend(bufs[i] + p.send_lo, p.send_len, ncclFloat, k, x->comm, stream_of(x)), what);
            if (p.recv_len)
                NCCL_GROUP_TRY(m, ncclRecv(bufs[i] + p.recv_lo, p.recv_len, ncclFloat, k, x->comm, stream_of(x)), what);
        }
    }
    return dp_nccl_group_end(m, what);
}

dp_status dp_nccl_allreduce(dp_backend_t b, float *const *bufs, size_t n, dp_redop op) {
    if (op != DP_SUM) return dp_fail(DP_ERR_UNSUPPORTED, "nccl: all-reduce with averaging");
    return ordered_sum(dp_nccl_impl(b), bufs, n, -1, "all-reduce");
}

dp_status dp_nccl_reduce(dp_backend_t b, float *const *bufs, size_t n, dp_redop op, int root) {
    if (op != DP_SUM) return dp_fail(DP_ERR_UNSUPPORTED, "nccl: reduce with averaging");
    return ordered_sum(dp_nccl_impl(b), bufs, n, root, "reduce");
}

/* One call per local communicator in one group; one process, one GPU: the call alone, as before. */
#define EACH_LOCAL(m, what, call)                                                     \
    do {                                                                              \
        if ((m)->n_local == 1) {                                                      \
            const int i = 0;                                                          \
            const nccl_local *x = &(m)->loc[0];                                       \
            (void)i;                                                                  \
            DP_TRY(dp_nccl_settle((m), (call), (what)));                              \
            break;                                                                    \
        }                                                                             \
        DP_TRY(dp_nccl_group_start((m), (what)));                                     \
        for (int i = 0; i < (m)->n_local; i++) {                                      \
            const nccl_local *x = &(m)->loc[i];                                       \
            NCCL_GROUP_TRY((m), (call), (what));                                      \
        }                                                                             \
        DP_TRY(dp_nccl_group_end((m), (what)));                                       \
    } while (0)

dp_status dp_nccl_broadcast(dp_backend_t b, float *const *bufs, size_t n, int root) {
    nccl_impl *m = dp_nccl_impl(b);
    if (m->world == 1 || n == 0) return DP_OK;
    EACH_LOCAL(m, "broadcast", ncclBroadcast(bufs[i], bufs[i], n, ncclFloat, root, x->comm, stream_of(x)));
    return DP_OK;
}

dp_status dp_nccl_allgather(dp_backend_t b, const float *const *send, float *const *recv, size_t n) {
    nccl_impl *m = dp_nccl_impl(b);
    if (m->world == 1) return m->loc[0].st->copy(m->loc[0].st, recv[0], send[0], n * sizeof(float));
    EACH_LOCAL(m, "all-gather", ncclAllGather(send[i], recv[i], n, ncclFloat, x->comm, stream_of(x)));
    return DP_OK;
}

/* DataParallel's gather and scatter: grouped point-to-point (NCCL has no gather or scatter). */
dp_status dp_nccl_gather(dp_backend_t b, const float *const *send, float *const *recv, size_t n, int root) {
    nccl_impl *m = dp_nccl_impl(b);
    for (int i = 0; i < m->n_local; i++)
        if (m->loc[i].rank == root)
            DP_TRY(m->loc[i].st->copy(m->loc[i].st, recv[i] + (size_t)root * n, send[i], n * sizeof(float)));
    if (m->world == 1 || n == 0) return DP_OK;
    DP_TRY(dp_nccl_group_start(m, "gather"));
    for (int i = 0; i < m->n_local; i++) {
        const nccl_local *x = &m->loc[i];
        if (x->rank != root) {
            NCCL_GROUP_TRY(m, ncclSend(send[i], n, ncclFloat, root, x->comm, stream_of(x)), "gather");
            continue;
        }
        for (int q = 0; q < m->world; q++)
            if (q != root)
                NCCL_GROUP_TRY(m, ncclRecv(recv[i] + (size_t)q * n, n, ncclFloat, q, x->comm, stream_of(x)), "gather");
    }
    return dp_nccl_group_end(m, "gather");
}

dp_status dp_nccl_scatter(dp_backend_t b, const float *const *send, float *const *recv, size_t n, int root) {
    nccl_impl *m = dp_nccl_impl(b);
    for (int i = 0; i < m->n_local; i++)
        if (m->loc[i].rank == root)
            DP_TRY(m->loc[i].st->copy(m->loc[i].st, recv[i], send[i] + (size_t)root * n, n * sizeof(float)));
    if (m->world == 1 || n == 0) return DP_OK;
    DP_TRY(dp_nccl_group_start(m, "scatter"));
    for (int i = 0; i < m->n_local; i++) {
        const nccl_local *x = &m->loc[i];
        if (x->rank != root) {
            NCCL_GROUP_TRY(m, ncclRecv(recv[i], n, ncclFloat, root, x->comm, stream_of(x)), "scatter");
            continue;
        }
        for (int q = 0; q < m->world; q++)
            if (q != root)
                NCCL_GROUP_TRY(m, ncclSend(send[i] + (size_t)q * n, n, ncclFloat, q, x->comm, stream_of(x)), "scatter");
    }
    return dp_nccl_group_end(m, "scatter");
}

dp_status dp_nccl_barrier(dp_backend_t b) {
    nccl_impl *m = dp_nccl_impl(b);
    if (m->world == 1) return DP_OK;
    DP_TRY(scratch_holds(m, 1, 1, "barrier"));
    EACH_LOCAL(m, "barrier", ncclAllReduce(x->scratch, x->scratch, 1, ncclFloat, ncclSum, x->comm, stream_of(x)));
    for (int i = 0; i < m->n_local; i++) DP_TRY(m->loc[i].st->wait(m->loc[i].st));
    return DP_OK;
}

#endif
