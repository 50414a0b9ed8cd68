/* mpi.c: one replica per MPI rank, on CPUs (what Gloo is to PyTorch). Collectives are MPI's
 * own, in place; DDP buckets use MPI_Iallreduce so they proceed while backward goes on. Every
 * wait polls with a deadline (--timeout): a rank that died makes the others fail with a
 * message naming the collective, instead of hanging in it. */
#include "dp_config.h"

#if DP_HAVE_MPI

#include <limits.h>
#include <mpi.h>
#include <signal.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backend.h"
#include "core/timer.h"

#define MAX_REQS 4096

typedef struct {
    MPI_Comm comm;
    int failed;             /* a collective failed: the job is aborted, not finalised */
    int rank, size;
    double timeout_s;
    int we_initialised;
    MPI_Request reqs[MAX_REQS];
    float *req_buf[MAX_REQS]; /* for DP_AVG: scaled when the request completes */
    size_t req_n[MAX_REQS];
    int req_avg[MAX_REQS];
    int n_reqs;
} mpi_impl;

static mpi_impl *impl_of(dp_backend_t b) { return (mpi_impl *)b->impl; }

static dp_status mpi_error(mpi_impl *m, int rc, const char *what) {
    m->failed = 1;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return dp_fail(DP_ERR_BACKEND, "mpi rank %d: %s failed: %s", m->rank, what, msg);
}

#define MPI_CHECK(m, call, what)                            \
    do {                                                    \
        int rc_ = (call);                                   \
        if (rc_ != MPI_SUCCESS) return mpi_error(m, rc_, what); \
    } while (0)

/* Waits for one request, polling, with the deadline; a rank that stopped answering is named
 * as a probable death rather than hung on. */
static dp_status wait_deadline(mpi_impl *m, MPI_Request *req, const char *what) {
    double start = dp_now();
    /* OpenMPI moves a non-blocking collective forward only inside MPI calls: poll without
     * pause for the first 10 ms (a step's collectives finish well within that), then nap
     * between polls so a long wait for a slow or dead rank does not hold a core */
    struct timespec nap = {0, 100000};
    for (;;) {
        int done = 0;
        MPI_CHECK(m, MPI_Test(req, &done, MPI_STATUS_IGNORE), what);
        if (done) return DP_OK;
        if (dp_now() - start > 0.01) nanosleep(&nap, NULL);
        if (dp_now() - start > m->timeout_s) {
            m->failed = 1;
            return dp_fail(DP_ERR_BACKEND,
                           "mpi rank %d: %s did not complete within --timeout %.0f s: another rank probably died or "
                           "hangs", m->rank, what, m->timeout_s);
        }
    }
}

/* mpirun ends the surviving ranks with SIGTERM when one dies: say so instead of vanishing. */
static char term_msg[128];
static size_t term_len;
static void on_sigterm(int sig) {
    if (write(STDERR_FILENO, term_msg, term_len) < 0) { /* nothing else is safe here */ }
    signal(sig, SIG_DFL);
    raise(sig);
}

static const char *mpi_name(dp_backend_t b) {
    (void)b;
    return "mpi";
}
static int mpi_world(dp_backend_t b) { return impl_of(b)->size; }
static int mpi_n_local(dp_backend_t b) {
    (void)b;
    return 1;
}
static int mpi_rank(dp_backend_t b, int local) {
    (void)local;
    return impl_of(b)->rank;
}
static dp_device mpi_device(dp_backend_t b) {
    (void)b;
    return DP_CPU;
}

static void scale(float *p, size_t n, float s) {
    for (size_t i = 0; i < n; i++) p[i] *= s;
}

/* MPI counts are int: larger buffers go in pieces. */
#define FOR_PIECES(n, off, cnt, body)                                            \
    for (size_t off = 0; off < (n); off += (size_t)INT_MAX) {                    \
        int cnt = (int)((n) - off > (size_t)INT_MAX ? INT_MAX : (n) - off);        \
        body;                                                                    \
    }

static dp_status mpi_allreduce_op(dp_backend_t b, float *const *bufs, size_t n, dp_redop op) {
    mpi_impl *m = impl_of(b);
    FOR_PIECES(n, off, cnt, {
        MPI_Request r;
        MPI_CHECK(m, MPI_Iallreduce(MPI_IN_PLACE, bufs[0] + off, cnt, MPI_FLOAT, MPI_SUM, m->comm, &r), "all-reduce");
        DP_TRY(wait_deadline(m, &r, "all-reduce"));
    });
    if (op == DP_AVG) scale(bufs[0], n, 1.0f / (float)m->size);
    return DP_OK;
}

static dp_status mpi_broadcast_op(dp_backend_t b, float *const *bufs, size_t n, int root) {
    mpi_impl *m = impl_of(b);
    FOR_PIECES(n, off, cnt, {
        MPI_Request r;
        MPI_CHECK(m, MPI_Ibcast(bufs[0] + off, cnt, MPI_FLOAT, root, m->comm, &r), "broadcast");
        DP_TRY(wait_deadline(m, &r, "broadcast"));
    });
    return DP_OK;
}

static dp_status mpi_reduce_op(dp_backend_t b, float *const *bufs, size_t n, dp_redop op, int root) {
    mpi_impl *m = impl_of(b);
    FOR_PIECES(n, off, cnt, {
        MPI_Request r;
        const void *send = m->rank == root ? MPI_IN_PLACE : (const void *)(bufs[0] + off);
        MPI_CHECK(m, MPI_Ireduce(send, bufs[0] + off, cnt, MPI_FLOAT, MPI_SUM, root, m->comm, &r), "reduce");
        DP_TRY(wait_deadline(m, &r, "reduce"));
    });
    if (op == DP_AVG && m->rank == root) scale(bufs[0], n, 1.0f / (float)m->size);
    return DP_OK;
}

static dp_status mpi_allgather_op(dp_backend_t b, const float *const *send, float *const *recv, size_t n) {
    mpi_impl *m = impl_of(b);
    if (n > (size_t)INT_MAX) return dp_fail(DP_ERR_BACKEND, "mpi all-gather of %zu floats: too large", n);
    MPI_Request r;
    MPI_CHECK(m, MPI_Iallgather(send[0], (int)n, MPI_FLOAT, recv[0], (int)n, MPI_FLOAT, m->comm, &r), "all-gather");
    return wait_deadline(m, &r, "all-gather");
}

static dp_status mpi_gather_op(dp_backend_t b, const float *const *send, float *const *recv, size_t n, int root) {
    mpi_impl *m = impl_of(b);
    if (n > (size_t)INT_MAX) return dp_fail(DP_ERR_BACKEND, "mpi gather of %zu floats: too large", n);
    MPI_Request r;
    /* the root's own share: in place when it already sits in its slot */
    const int in_place = m->rank == root && send[0] == recv[0] + (size_t)root * n;
    MPI_CHECK(m, MPI_Igather(in_place ? MPI_IN_PLACE : send[0], (int)n, MPI_FLOAT, m->rank == root ? recv[0] : NULL,
                             (int)n, MPI_FLOAT, root, m->comm, &r), "gather");
    return wait_deadline(m, &r, "gather");
}

static dp_status mpi_scatter_op(dp_backend_t b, const float *const *send, float *const *recv, size_t n, int root) {
    mpi_impl *m = impl_of(b);
    if (n > (size_t)INT_MAX) return dp_fail(DP_ERR_BACKEND, "mpi scatter of %zu floats: too large", n);
    MPI_Request r;
    const int in_place = m->rank == root && recv[0] == send[0] + (size_t)root * n;
    MPI_CHECK(m, MPI_Iscatter(m->rank == root ? send[0] : NULL, (int)n, MPI_FLOAT, in_place ? MPI_IN_PLACE : recv[0],
                              (int)n, MPI_FLOAT, root, m->comm, &r), "scatter");
    return wait_deadline(m, &r, "scatter");
}

static dp_status mpi_barrier_op(dp_backend_t b) {
    mpi_impl *m = impl_of(b);
    MPI_Request r;
    MPI_CHECK(m, MPI_Ibarrier(m->comm, &r), "barrier");
    return wait_deadline(m, &r, "barrier");
}

static dp_status mpi_allreduce_start(dp_backend_t b, float *const *bufs, size_t n, dp_redop op, dp_req *req) {
    mpi_impl *m = impl_of(b);
    if (n > (size_t)INT_MAX || m->n_reqs == MAX_REQS) {
        *req = -1;
        return mpi_allreduce_op(b, bufs, n, op); /* rare: a bucket over 8 GiB, or too many in flight */
    }
    int k = m->n_reqs++;
    MPI_CHECK(m, MPI_Iallreduce(MPI_IN_PLACE, bufs[0], (int)n, MPI_FLOAT, MPI_SUM, m->comm, &m->reqs[k]),
              "all-reduce of a gradient bucket");
    m->req_buf[k] = bufs[0], m->req_n[k] = n, m->req_avg[k] = op == DP_AVG;
    *req = k;
    return DP_OK;
}

static dp_status mpi_wait(dp_backend_t b, dp_req req) {
    mpi_impl *m = impl_of(b);
    if (req < 0 || req >= m->n_reqs) return DP_OK;
    DP_TRY(wait_deadline(m, &m->reqs[req], "all-reduce of a gradient bucket"));
    if (m->req_avg[req]) scale(m->req_buf[req], m->req_n[req], 1.0f / (float)m->size);
    /* requests are handed out in order and waited for in order within a step */
    if (req == m->n_reqs - 1) m->n_reqs = 0;
    return DP_OK;
}

static void mpi_destroy(dp_backend_t b) {
    mpi_impl *m = impl_of(b);
    int finalized = 0;
    MPI_Finalized(&finalized);
    /* after a failed collective the others may be inside one: finalising would hang */
    if (!finalized && (m->failed || b->failed)) MPI_Abort(m->comm, 1);
    if (!finalized && m->we_initialised) MPI_Finalize();
    free(m);
    free(b);
}

static const struct dp_backend_i mpi_iface = {
    .name = mpi_name,
    .world_size = mpi_world,
    .n_local = mpi_n_local,
    .rank = mpi_rank,
    .device = mpi_device,
    .allreduce = mpi_allreduce_op,
    .broadcast = mpi_broadcast_op,
    .reduce = mpi_reduce_op,
    .allgather = mpi_allgather_op,
    .gather = mpi_gather_op,
    .scatter = mpi_scatter_op,
    .barrier = mpi_barrier_op,
    .allreduce_start = mpi_allreduce_start,
    .wait = mpi_wait,
    .destroy = mpi_destroy,
};

dp_status dp_mpi_backend_create(const dp_backend_config *cfg, dp_backend_t *out) {
    dp_backend_t b = calloc(1, sizeof *b);
    mpi_impl *m = calloc(1, sizeof *m);
    if (!b || !m) {
        free(b), free(m);
        return dp_fail(DP_ERR_NOMEM, "out of memory creating the mpi backend");
    }
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided;
        /* only the training thread calls MPI; loader threads never do */
        if (MPI_Init_thread(cfg->argc, cfg->argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
            free(b), free(m);
            return dp_fail(DP_ERR_BACKEND, "mpi: MPI_Init_thread failed (was dptrain started with mpirun?)");
        }
        m->we_initialised = 1;
    }
    /* errors come back as codes, so they are reported with the rank instead of aborting the job */
    MPI_Comm_dup(MPI_COMM_WORLD, &m->comm);
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(m->comm, &m->rank);
    MPI_Comm_size(m->comm, &m->size);
    m->timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : 300;
    term_len = (size_t)snprintf(term_msg, sizeof term_msg,
                                "dptrain: rank %d: terminated by the MPI launcher (another rank probably died)\n",
                                m->rank);
    if (term_len >= sizeof term_msg) term_len = sizeof term_msg - 1;
    signal(SIGTERM, on_sigterm);
    b->iface = &mpi_iface;
    b->impl = m;
    *out = b;
    return DP_OK;
}

#endif
