/* mpi.c: one replica per MPI rank, on CPUs (what Gloo is to PyTorch). Sums are the ordered
 * all-reduce of sim/ring.h, so that MPI runs give the sim's bits: MPI_Ialltoallv hands rank s
 * every rank's piece of shard s, rank s adds them with the fixed tree (core/treesum.h), and
 * MPI_Iallgatherv (or MPI_Igatherv to the root, for reduce) returns the shards; the bytes are
 * a ring's. MPI_Allreduce's own order is OpenMPI's choice and changes with message size. DDP
 * buckets start the all-to-all when they complete, so it proceeds while backward goes on.
 * Every wait polls with a deadline (--timeout): a rank that died makes the others fail with a
 * message naming the collective, instead of hanging in it. */
#include "backends/backend_kind.h"
#include "dp_config.h"

#include <string.h>

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
#include "backends/launch_env.h"
#include "core/ordered.h"
#include "core/timer.h"
#include "core/treesum.h"

#define MAX_REQS 4096

/* One ordered sum in flight: the all-to-all started, the tree and the gather to come. */
typedef struct {
    MPI_Request req;
    float *buf;          /* the caller's buffer: its shards go out, the sums come back */
    size_t n;
    int avg, root;       /* root < 0: all-gather */
    float *recv;         /* (size, shard) every rank's piece of this rank's shard */
    int *counts, *displs, *rcounts, *rdispls;
} ordered_op;
typedef struct {
    MPI_Comm comm;
    int failed;             /* a collective failed: the job is aborted, not finalised */
    int rank, size;
    double timeout_s;
    int we_initialised;
    ordered_op ops[MAX_REQS];
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
static void scale(float *p, size_t n, float s) {
    for (size_t i = 0; i < n; i++) p[i] *= s;
}

/* MPI counts are int: larger buffers go in pieces. */
#define FOR_PIECES(n, off, cnt, body)                                            \
    for (size_t off = 0; off < (n); off += (size_t)INT_MAX) {                    \
        int cnt = (int)((n) - off > (size_t)INT_MAX ? INT_MAX : (n) - off);        \
        body;                                                                    \
    }

static void op_free(ordered_op *o) {
    free(o->recv), free(o->counts);
    o->recv = NULL, o->counts = NULL;
}

/* Starts an ordered sum of n floats: the all-to-all of the shards. */
static dp_status ordered_start(mpi_impl *m, ordered_op *o, float *buf, size_t n, int avg, int root,
                               const char *what) {
    const int P = m->size;
    memset(o, 0, sizeof *o);
    o->buf = buf, o->n = n, o->avg = avg, o->root = root;
    if (n / (size_t)P + 1 > (size_t)INT_MAX / (size_t)P)
        return dp_fail(DP_ERR_BACKEND, "mpi rank %d: %s of %zu floats: too large", m->rank, what, n);
    size_t lo, mine;
    dp_shard(n, P, m->rank, &lo, &mine);
    o->counts = malloc(4 * (size_t)P * sizeof *o->counts);
    o->recv = malloc((mine * (size_t)P + 1) * sizeof *o->recv);
    if (!o->counts || !o->recv) {
        op_free(o);
        return dp_fail(DP_ERR_NOMEM, "mpi rank %d: out of memory for a %s of %zu floats", m->rank, what, n);
    }
    o->displs = o->counts + P, o->rcounts = o->counts + 2 * P, o->rdispls = o->counts + 3 * P;
    for (int k = 0; k < P; k++) { /* shard k goes to rank k; rank k's piece of mine to slot k */
        const dp_ordered_xfer x = dp_ordered_scatter(n, P, m->rank, k, mine);
        o->counts[k] = (int)x.send_len, o->displs[k] = (int)x.send_lo;
        o->rcounts[k] = (int)x.recv_len, o->rdispls[k] = (int)x.recv_lo;
    }
    int rc = MPI_Ialltoallv(buf, o->counts, o->displs, MPI_FLOAT, o->recv, o->rcounts, o->rdispls, MPI_FLOAT,
                            m->comm, &o->req);
    if (rc != MPI_SUCCESS) {
        op_free(o);
        return mpi_error(m, rc, what);
    }
    return DP_OK;
}

/* Waits for the all-to-all, adds the pieces with the fixed tree, returns the shards. */
static dp_status ordered_finish(mpi_impl *m, ordered_op *o, const char *what) {
    const int P = m->size;
    dp_status st = wait_deadline(m, &o->req, what);
    if (st != DP_OK) {
        op_free(o);
        return st;
    }
    const size_t mine = (size_t)o->rcounts[0];
    float *pieces[P];
    for (int k = 0; k < P; k++) pieces[k] = o->recv + mine * (size_t)k;
    dp_tree_sum(pieces, P, 0, mine, 0);
    if (o->avg) scale(pieces[0], mine, 1.0f / (float)P);
    MPI_Request r;
    int rc = o->root < 0 ? MPI_Iallgatherv(pieces[0], (int)mine, MPI_FLOAT, o->buf, o->counts, o->displs, MPI_FLOAT,
                                           m->comm, &r)
                         : MPI_Igatherv(pieces[0], (int)mine, MPI_FLOAT, o->buf, o->counts, o->displs, MPI_FLOAT,
                                        o->root, m->comm, &r);
    if (rc != MPI_SUCCESS) {
        op_free(o);
        return mpi_error(m, rc, what);
    }
    st = wait_deadline(m, &r, what);
    op_free(o);
    return st;
}

static dp_status ordered_sum(mpi_impl *m, float *buf, size_t n, int avg, int root, const char *what) {
    ordered_op o;
    DP_TRY(ordered_start(m, &o, buf, n, avg, root, what));
    return ordered_finish(m, &o, what);
}

static dp_status mpi_allreduce_op(dp_backend_t b, float *const *bufs, size_t n, dp_redop op) {
    return ordered_sum(impl_of(b), bufs[0], n, op == DP_AVG, -1, "all-reduce");
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
    return ordered_sum(impl_of(b), bufs[0], n, op == DP_AVG, root, "reduce");
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
    if (m->n_reqs == MAX_REQS) {
        *req = -1;
        return mpi_allreduce_op(b, bufs, n, op); /* rare: too many buckets in flight */
    }
    int k = m->n_reqs;
    DP_TRY(ordered_start(m, &m->ops[k], bufs[0], n, op == DP_AVG, -1, "all-reduce of a gradient bucket"));
    m->n_reqs++;
    *req = k;
    return DP_OK;
}

static dp_status mpi_wait(dp_backend_t b, dp_req req) {
    mpi_impl *m = impl_of(b);
    if (req < 0 || req >= m->n_reqs) return DP_OK;
    dp_status st = ordered_finish(m, &m->ops[req], "all-reduce of a gradient bucket");
    /* requests are handed out in order and waited for in order within a step */
    if (req == m->n_reqs - 1 || st != DP_OK) m->n_reqs = 0;
    return st;
}

static void mpi_destroy(dp_backend_t b) {
    mpi_impl *m = impl_of(b);
    int finalized = 0;
    MPI_Finalized(&finalized);
    /* after a failed collective the others may be inside one: finalising would hang (alone, no
       one is: finalise, and spare the user OpenMPI's abort banner after a plain usage error) */
    if (!finalized && (m->failed || b->failed) && m->size > 1) MPI_Abort(m->comm, 1);
    if (!finalized && m->we_initialised) MPI_Finalize();
    free(m);
    free(b);
}

static const struct dp_backend_i mpi_iface = {
    .name = mpi_name,
    .world_size = mpi_world,
    .n_local = mpi_n_local,
    .rank = mpi_rank,
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

static dp_status mpi_create(const dp_backend_config *cfg, dp_backend_t *out) {
    dp_backend_t b = calloc(1, sizeof *b);
    mpi_impl *m = calloc(1, sizeof *m);
    if (!b || !m) {
        free(b), free(m);
        return dp_fail(DP_ERR_NOMEM, "out of memory creating the mpi backend");
    }
    /* read before MPI_Init, which rewrites some of them (PMIX_RANK) when it starts alone */
    dp_launch l;
    dp_status ls0 = dp_launch_from_env(&l);
    if (ls0 != DP_OK) {
        free(b), free(m);
        return ls0;
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
    /* an MPI that did not join the launch comes up as N worlds of one: refuse, not N trainings */
    dp_status ls = dp_launch_check_mpi_world(&l, "mpi", m->rank, m->size);
    if (ls != DP_OK) {
        MPI_Comm_free(&m->comm);
        if (m->we_initialised) MPI_Finalize();
        free(b), free(m);
        return ls;
    }
    m->timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : 300;
    term_len = (size_t)snprintf(term_msg, sizeof term_msg,
                                "dptrain: rank %d: terminated by the MPI launcher (another rank probably died)\n",
                                m->rank);
    if (term_len >= sizeof term_msg) term_len = sizeof term_msg - 1;
    signal(SIGTERM, on_sigterm);
    b->iface = &mpi_iface;
    b->impl = m;
    b->algorithm = "mpi", b->ordered = 1, b->host_buffers = 1;
    b->ends_job = m->size > 1; /* mpi_destroy's MPI_Abort */
    snprintf(b->relaunch, sizeof b->relaunch, "mpirun -np %d ", m->size);
    *out = b;
    return DP_OK;
}

#endif

/* Host memory only: its replicas compute on the CPU. */
static dp_status mpi_devices_ok(const dp_device_request *r, int *ordinals, int *n) {
    (void)ordinals, (void)n;
    if (r->device_flag && strcmp(r->device_flag, "cpu") != 0)
        return dp_fail(DP_ERR_USAGE, "--device %s: --backend mpi moves host memory, so its replicas compute on the CPU "
                       "(drop --device; GPUs across processes are --backend nccl)", r->device_flag);
    return DP_OK;
}

static dp_status mpi_joins_launch(const dp_launch *l, dp_mpi_family fam, const char *replicas, const char *mpi_cannot) {
    (void)replicas;
    if (fam == DP_MPI_NONE) return DP_OK; /* not built: creating it says so */
    if (mpi_cannot) return dp_fail(DP_ERR_USAGE, "%s (%s) but --backend mpi cannot join it: %s", l->seen, l->what, mpi_cannot);
    return DP_OK;
}

const dp_backend_kind dp_mpi_backend = {
    .name = "mpi",
    .built = DP_HAVE_MPI,
    .how_to_get = "install libopenmpi-dev openmpi-bin and rebuild",
    .describe = "cpu",
#if DP_HAVE_MPI
    .create = mpi_create,
#endif
    .devices_ok = mpi_devices_ok,
    .joins_launch = mpi_joins_launch,
};
