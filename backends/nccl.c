/* nccl.c: the NCCL backend (issue #8): one replica per process and per GPU, launched plainly (one
 * process, one GPU), by torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT: the
 * unique id goes over TCP or torchrun's agent store, backends/rendezvous.h) or by an MPI launcher
 * (mpirun, mpiexec, srun --mpi=pmix: the unique id goes over MPI; backends/launch_env.h).
 * Collectives are queued on the trainer's CUDA stream (core/device.h), in stream order after the
 * kernels that wrote their buffers, so the host never waits for them.
 *
 * The all-reduce and reduce sum in the canonical order (data/chunks.h), as the sim and MPI
 * backends do: a reduce-scatter in which the owner of each shard receives every rank's piece
 * (grouped ncclSend/ncclRecv) and adds them with the fixed tree (the table's tree_sum kernel),
 * then the finished shards go to every rank (all-reduce) or to the root (reduce). NCCL's own
 * ncclAllReduce adds in an order of its own, which would break the bitwise equality between
 * replica counts.
 *
 * The communicator is non-blocking (ncclConfig_t.blocking = 0): every NCCL call that returns
 * ncclInProgress is polled with ncclCommGetAsyncError until done, and after --timeout seconds the
 * communicator is aborted with a message naming the rank and the collective, never a silent
 * hang. Not yet run on a GPU (no GPU session had device time left for it): see docs/gpu.md. */
#include "dp_config.h"

#if DP_HAVE_NCCL

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backend.h"
#include "backends/nccl.h"
#include "backends/nccl_memory.h"
#include "backends/nccl_sidechan.h"
#include "backends/nccl_watchdog.h"
#include "backends/rendezvous.h"
#include "core/device.h"

#if DP_HAVE_MPI
#include <mpi.h>
#endif

typedef struct {
    dp_launch l;
    int gpu;
    char where[32]; /* "GPU 0", or "host memory" under the test double */
    ncclComm_t comm;
    dp_dev *dev;         /* where its collectives run: the device's collective stream (core/device.h: coll) */
    dp_dev *home;        /* the trainer's device; its waits call nccl_watch while this backend lives */
    float *scratch;  /* the shard owner's receive buffer: world pieces of the largest shard */
    size_t scratch_n;
    double timeout_s;
    int we_initialised_mpi;
    int in_group; /* between ncclGroupStart and ncclGroupEnd: a failure must not abort yet */
    dp_nccl_watchdog *wd; /* ends the process if a call below outlives --timeout and a grace period */
    char abort_what[1200]; /* what the watchdog says while an abort runs */
    dp_sidechan *sc;       /* tells the other ranks at once when this one fails, and this one when they do */
    unsigned long long allowance; /* added to home->reserved: NCCL's lazy buffers (nccl_memory.h) */
} nccl_impl;

static nccl_impl *impl_of(dp_backend_t b) { return (nccl_impl *)b->impl; }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Ends the communicator at once: the other ranks may be gone, so nothing waits for them. Called
 * after the failure was recorded (dp_fail), whose message the watchdog repeats if the abort
 * itself never returns. */
static void abort_comm(nccl_impl *m) {
    dp_sidechan_fail(m->sc, dp_last_error());
    if (m->comm) {
        snprintf(m->abort_what, sizeof m->abort_what, "aborting the communicator (ncclCommAbort) after \"%s\"",
                 dp_last_error());
        dp_nccl_watchdog_enter_brief(m->wd, m->abort_what);
        ncclCommAbort(m->comm);
        dp_nccl_watchdog_leave(m->wd);
    }
    m->comm = NULL;
}

/* NCCL's last message, copied: the communicator that holds it may be aborted next. */
static const char *last_error(const nccl_impl *m, char *buf, size_t cap) {
    const char *last = m->comm ? ncclGetLastError(m->comm) : NULL;
    snprintf(buf, cap, "%s%s", last && *last ? ": " : "", last ? last : "");
    return buf;
}

/* An NCCL call's result on the non-blocking communicator: ncclInProgress is polled to the end,
 * up to the deadline (yielding the core: NCCL's own threads may need it on a small host); a
 * failure names the rank, the device, the collective and NCCL's reason. Inside a group the
 * communicator is not aborted here (the group still holds its operations): GROUP_TRY ends the
 * group first, then aborts. */
static dp_status settle_watched(nccl_impl *m, ncclResult_t r, const char *what);
static dp_status settle(nccl_impl *m, ncclResult_t r, const char *what) {
    dp_nccl_watchdog_enter(m->wd, what);
    dp_status s = settle_watched(m, r, what);
    dp_nccl_watchdog_leave(m->wd);
    return s;
}
static dp_status settle_watched(nccl_impl *m, ncclResult_t r, const char *what) {
    const double deadline = now_s() + m->timeout_s;
    for (long polls = 0; r == ncclInProgress; polls++) {
        if (now_s() > deadline) {
            dp_status e = dp_fail(DP_ERR_BACKEND, "nccl: rank %d (%s): %s did not complete within --timeout %.0f s "
                                  "(a rank died or is stuck); the communicator was aborted", m->l.rank, m->where, what,
                                  m->timeout_s);
            if (!m->in_group) abort_comm(m);
            return e;
        }
        if (ncclCommGetAsyncError(m->comm, &r) != ncclSuccess) r = ncclInvalidUsage;
        char why[512];
        if (r == ncclInProgress && dp_sidechan_poll(m->sc, why, sizeof why)) {
            dp_status e = dp_fail(DP_ERR_BACKEND, "nccl: rank %d (%s): %s stopped because another rank failed: %s; the "
                                  "communicator was aborted", m->l.rank, m->where, what, why);
            if (!m->in_group) abort_comm(m);
            return e;
        }
        if (r == ncclInProgress && polls > 64) {
            const struct timespec pause = {0, 50000}; /* 50 us: the collective is already slow to come */
            nanosleep(&pause, NULL);
        }
    }
    if (r != ncclSuccess) {
        char last[600], why[512];
        last_error(m, last, sizeof last);
        /* a peer's closed connection is often a consequence: the side channel may know the cause */
        const int first = dp_sidechan_wait(m->sc, why, sizeof why, r == ncclRemoteError ? 2.0 : 0.0);
        dp_status e = dp_fail(DP_ERR_BACKEND, "nccl: rank %d (%s): %s failed: %s%s%s%s", m->l.rank, m->where, what,
                              ncclGetErrorString(r), last, first ? "; first failure: " : "", first ? why : "");
        if (!m->in_group) abort_comm(m);
        return e;
    }
    return DP_OK;
}

#define NCCL_TRY(m, call, what) DP_TRY(settle((m), (call), (what)))
static dp_status group_start(nccl_impl *m, const char *what) {
    DP_TRY(settle(m, ncclGroupStart(), what));
    m->in_group = 1;
    return DP_OK;
}
static dp_status group_end(nccl_impl *m, const char *what) {
    m->in_group = 0;
    return settle(m, ncclGroupEnd(), what);
}
/* Inside a group: a failure closes the group (its result is not waited for), then aborts. */
#define GROUP_TRY(m, call, what)                                    \
    do {                                                            \
        dp_status g_ = settle((m), (call), (what));                 \
        if (g_ != DP_OK) {                                          \
            (m)->in_group = 0;                                      \
            (void)ncclGroupEnd();                                   \
            abort_comm(m);                                          \
            return g_;                                              \
        }                                                           \
    } while (0)

/* The device's waits poll this: a peer's error or --timeout aborts the communicator, so that a
 * dead rank ends the run with a message instead of a kernel that waits for ever. */
static dp_status nccl_watch(void *ctx, double waited_s) {
    nccl_impl *m = ctx;
    if (!m->comm) return DP_OK;
    ncclResult_t r = ncclSuccess;
    if (ncclCommGetAsyncError(m->comm, &r) != ncclSuccess) r = ncclInvalidUsage;
    if (r != ncclSuccess && r != ncclInProgress) {
        char last[600];
        last_error(m, last, sizeof last);
        dp_status e = dp_fail(DP_ERR_BACKEND, "nccl: rank %d (%s): a collective failed: %s%s; the communicator was "
                              "aborted", m->l.rank, m->where, ncclGetErrorString(r), last);
        abort_comm(m);
        return e;
    }
    char why[512];
    if (dp_sidechan_poll(m->sc, why, sizeof why)) {
        dp_status e = dp_fail(DP_ERR_BACKEND, "nccl: rank %d (%s): stopped waiting for a collective because another "
                              "rank failed: %s; the communicator was aborted", m->l.rank, m->where, why);
        abort_comm(m);
        return e;
    }
    if (waited_s > m->timeout_s) {
        dp_status e = dp_fail(DP_ERR_BACKEND, "nccl: rank %d (%s): the GPU waited %.0f s (--timeout) for a collective "
                              "(a rank died or is stuck); the communicator was aborted", m->l.rank, m->where, waited_s);
        abort_comm(m);
        return e;
    }
    return DP_OK;
}

static cudaStream_t stream_of(const nccl_impl *m) { return (cudaStream_t)m->dev->kc.stream; }

/* Shard k of n floats cut into w shards (the sim's and the MPI backend's cut). */
static void shard(size_t n, int w, int k, size_t *lo, size_t *len) {
    *lo = n * (size_t)k / (size_t)w;
    *len = n * (size_t)(k + 1) / (size_t)w - *lo;
}

static dp_status ensure_scratch(nccl_impl *m, size_t n) {
    if (n <= m->scratch_n) return DP_OK;
    m->dev->free(m->dev, m->scratch);
    m->scratch = NULL, m->scratch_n = 0;
    DP_TRY(m->dev->alloc(m->dev, &m->scratch, n, "the nccl all-reduce's receive buffer"));
    m->scratch_n = n;
    return DP_OK;
}

/* The canonical-order sum of buf over every rank: into every rank's buf (root < 0) or root's. */
static dp_status ordered_sum(nccl_impl *m, float *buf, size_t n, int root, const char *what) {
    const int w = m->l.world, me = m->l.rank;
    if (w == 1 || n == 0) return DP_OK;
    const size_t piece = n / (size_t)w + 1;
    DP_TRY(ensure_scratch(m, piece * (size_t)w));
    size_t mlo, mlen;
    shard(n, w, me, &mlo, &mlen);
    /* reduce-scatter: my piece of shard k goes to rank k; rank q's piece of my shard lands in slot q */
    DP_TRY(group_start(m, what));
    for (int k = 0; k < w; k++) {
        size_t lo, len;
        shard(n, w, k, &lo, &len);
        if (k != me && len) GROUP_TRY(m, ncclSend(buf + lo, len, ncclFloat, k, m->comm, stream_of(m)), what);
        if (k != me && mlen)
            GROUP_TRY(m, ncclRecv(m->scratch + (size_t)k * piece, mlen, ncclFloat, k, m->comm, stream_of(m)), what);
    }
    DP_TRY(group_end(m, what));
    /* the fixed tree over the ranks' pieces, in rank order; my own piece stays in buf */
    float *v[w];
    for (int q = 0; q < w; q++) v[q] = q == me ? buf + mlo : m->scratch + (size_t)q * piece;
    if (mlen) m->dev->k->tree_sum(&m->dev->kc, v, w, 0, mlen, 0);
    if (v[0] != buf + mlo) DP_TRY(m->dev->copy(m->dev, buf + mlo, v[0], mlen * sizeof(float)));
    /* the finished shards: to everyone, or to the root */
    DP_TRY(group_start(m, what));
    for (int k = 0; k < w; k++) {
        if (k == me) continue;
        size_t lo, len;
        shard(n, w, k, &lo, &len);
        if ((root < 0 || k == root) && mlen)
            GROUP_TRY(m, ncclSend(buf + mlo, mlen, ncclFloat, k, m->comm, stream_of(m)), what);
        if ((root < 0 || me == root) && len)
            GROUP_TRY(m, ncclRecv(buf + lo, len, ncclFloat, k, m->comm, stream_of(m)), what);
    }
    DP_TRY(group_end(m, what));
    return DP_OK;
}

/* The shard owner's receive buffer for the largest sum of the run, sized once at start. */
static dp_status nccl_reserve(dp_backend_t b, size_t max_floats) {
    nccl_impl *m = impl_of(b);
    const size_t w = (size_t)m->l.world;
    return w > 1 ? ensure_scratch(m, (max_floats / w + 1) * w) : DP_OK;
}

static const char *nccl_name(dp_backend_t b) {
    (void)b;
    return "nccl";
}
static int nccl_world(dp_backend_t b) { return impl_of(b)->l.world; }
static int nccl_n_local(dp_backend_t b) {
    (void)b;
    return 1;
}
static int nccl_rank(dp_backend_t b, int local) {
    (void)local;
    return impl_of(b)->l.rank;
}
static dp_status nccl_allreduce(dp_backend_t b, float *const *bufs, size_t n, dp_redop op) {
    if (op != DP_SUM) return dp_fail(DP_ERR_UNSUPPORTED, "nccl: all-reduce with averaging");
    return ordered_sum(impl_of(b), bufs[0], n, -1, "all-reduce");
}

static dp_status nccl_reduce(dp_backend_t b, float *const *bufs, size_t n, dp_redop op, int root) {
    if (op != DP_SUM) return dp_fail(DP_ERR_UNSUPPORTED, "nccl: reduce with averaging");
    return ordered_sum(impl_of(b), bufs[0], n, root, "reduce");
}

static dp_status nccl_broadcast(dp_backend_t b, float *const *bufs, size_t n, int root) {
    nccl_impl *m = impl_of(b);
    if (m->l.world == 1 || n == 0) return DP_OK;
    NCCL_TRY(m, ncclBroadcast(bufs[0], bufs[0], n, ncclFloat, root, m->comm, stream_of(m)), "broadcast");
    return DP_OK;
}

static dp_status nccl_allgather(dp_backend_t b, const float *const *send, float *const *recv, size_t n) {
    nccl_impl *m = impl_of(b);
    if (m->l.world == 1) return m->dev->copy(m->dev, recv[0], send[0], n * sizeof(float));
    NCCL_TRY(m, ncclAllGather(send[0], recv[0], n, ncclFloat, m->comm, stream_of(m)), "all-gather");
    return DP_OK;
}

/* DataParallel's gather and scatter: grouped point-to-point (NCCL has no gather or scatter). */
static dp_status nccl_gather(dp_backend_t b, const float *const *send, float *const *recv, size_t n, int root) {
    nccl_impl *m = impl_of(b);
    const int me = m->l.rank;
    if (me == root) DP_TRY(m->dev->copy(m->dev, recv[0] + (size_t)me * n, send[0], n * sizeof(float)));
    if (m->l.world == 1 || n == 0) return DP_OK;
    DP_TRY(group_start(m, "gather"));
    if (me == root) {
        for (int q = 0; q < m->l.world; q++)
            if (q != me) GROUP_TRY(m, ncclRecv(recv[0] + (size_t)q * n, n, ncclFloat, q, m->comm, stream_of(m)), "gather");
    } else {
        GROUP_TRY(m, ncclSend(send[0], n, ncclFloat, root, m->comm, stream_of(m)), "gather");
    }
    DP_TRY(group_end(m, "gather"));
    return DP_OK;
}

static dp_status nccl_scatter(dp_backend_t b, const float *const *send, float *const *recv, size_t n, int root) {
    nccl_impl *m = impl_of(b);
    const int me = m->l.rank;
    if (me == root) DP_TRY(m->dev->copy(m->dev, recv[0], send[0] + (size_t)me * n, n * sizeof(float)));
    if (m->l.world == 1 || n == 0) return DP_OK;
    DP_TRY(group_start(m, "scatter"));
    if (me == root) {
        for (int q = 0; q < m->l.world; q++)
            if (q != me) GROUP_TRY(m, ncclSend(send[0] + (size_t)q * n, n, ncclFloat, q, m->comm, stream_of(m)), "scatter");
    } else {
        GROUP_TRY(m, ncclRecv(recv[0], n, ncclFloat, root, m->comm, stream_of(m)), "scatter");
    }
    DP_TRY(group_end(m, "scatter"));
    return DP_OK;
}

static dp_status nccl_barrier(dp_backend_t b) {
    nccl_impl *m = impl_of(b);
    if (m->l.world == 1) return DP_OK;
    DP_TRY(ensure_scratch(m, 1));
    NCCL_TRY(m, ncclAllReduce(m->scratch, m->scratch, 1, ncclFloat, ncclSum, m->comm, stream_of(m)), "barrier");
    return m->dev->wait(m->dev);
}

static void nccl_destroy(dp_backend_t b) {
    nccl_impl *m = impl_of(b);
    if (b->failed) dp_sidechan_fail(m->sc, dp_last_error()); /* a failure outside NCCL (a checkpoint write) */
    if (m->comm) {
        if (b->failed || m->dev->wait(m->dev) != DP_OK) {
            abort_comm(m); /* the other ranks may be gone: do not wait for them */
        } else if (settle(m, ncclCommFinalize(m->comm), "finalising the communicator") == DP_OK) {
            dp_nccl_watchdog_enter(m->wd, "destroying the communicator (ncclCommDestroy)");
            ncclCommDestroy(m->comm);
            dp_nccl_watchdog_leave(m->wd);
            m->comm = NULL;
        }
    }
    dp_sidechan_close(m->sc, !b->failed && !m->comm);
    dp_nccl_watchdog_stop(m->wd);
    if (m->scratch) m->dev->free(m->dev, m->scratch);
    if (m->home && m->home->watch_ctx == m) m->home->watch = NULL, m->home->watch_ctx = NULL;
    if (m->home) m->home->reserved -= m->allowance;
#if DP_HAVE_MPI
    int finalized = 0;
    MPI_Finalized(&finalized);
    /* MPI_Finalize is collective: after a failure the other ranks may never come, so abort the job */
    if (m->we_initialised_mpi && !finalized) {
        if (b->failed) MPI_Abort(MPI_COMM_WORLD, 1);
        else MPI_Finalize();
    }
#endif
    free(m);
    free(b);
}

static const struct dp_backend_i nccl_iface = {
    .name = nccl_name,
    .world_size = nccl_world,
    .n_local = nccl_n_local,
    .rank = nccl_rank,
    .allreduce = nccl_allreduce,
    .broadcast = nccl_broadcast,
    .reduce = nccl_reduce,
    .allgather = nccl_allgather,
    .gather = nccl_gather,
    .scatter = nccl_scatter,
    .barrier = nccl_barrier,
    .allreduce_start = NULL, /* queued on the stream already: the registry's blocking fallback waits for nothing */
    .wait = NULL,
    .reserve = nccl_reserve,
    .destroy = nccl_destroy,
};

/* The test double (tests/nccl_double/) says it moves host memory; real NCCL has no such symbol. */
int dp_nccl_moves_host_memory(void) {
    int (*f)(void) = NULL;
    *(void **)&f = dlsym(RTLD_DEFAULT, "dp_nccl_double_host_memory");
    return f && f();
}

dp_status dp_nccl_precheck(int *gpu) {
    dp_launch l;
    DP_TRY(dp_launch_from_env(&l));
    if (dp_nccl_moves_host_memory()) { /* no GPU to pick: the ranks' memory is the host's */
        *gpu = -1;
        return DP_OK;
    }
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    if (e != cudaSuccess || n < 1)
        return dp_fail(DP_ERR_BACKEND, "--backend nccl: rank %d: no usable CUDA device (%s; CUDA_VISIBLE_DEVICES %s%s)",
                       l.rank, e != cudaSuccess ? cudaGetErrorString(e) : "0 devices", visible ? "=" : "unset",
                       visible ? visible : "");
    return dp_launch_pick_gpu(&l, n, visible, gpu);
}

/* The unique id from rank 0 to every rank: over TCP (or torchrun's agent store) under torchrun,
 * over MPI under any MPI launcher (mpirun, mpiexec, srun --mpi=pmix: main has refused the launches
 * this build's MPI cannot join, backends/launch_env.h). */
/* What rank 0 hands every rank: NCCL's unique id and where its side channel listens. */
typedef struct {
    ncclUniqueId id;
    dp_sidechan_addr hub;
} shared_blob;

static dp_status share_id(nccl_impl *m, shared_blob *id, const dp_backend_config *cfg) {
    if (m->l.world == 1) return DP_OK;
    if (m->l.kind == DP_LAUNCH_TORCHRUN) return dp_rendezvous_share(&m->l, id, sizeof *id, m->timeout_s);
#if DP_HAVE_MPI
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided;
        if (MPI_Init_thread(cfg->argc, cfg->argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return dp_fail(DP_ERR_BACKEND, "--backend nccl: rank %d: MPI_Init_thread failed", m->l.rank);
        m->we_initialised_mpi = 1;
    }
    int mpi_rank = 0, mpi_size = 0;
    if (MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank) != MPI_SUCCESS || MPI_Comm_size(MPI_COMM_WORLD, &mpi_size) != MPI_SUCCESS)
        return dp_fail(DP_ERR_BACKEND, "--backend nccl: rank %d: MPI_Comm_rank or MPI_Comm_size failed", m->l.rank);
    /* an MPI that did not join the launch is a world of one: its broadcast would hang no one, wrongly */
    DP_TRY(dp_launch_check_mpi_world(&m->l, "nccl", mpi_rank, mpi_size));
    m->l.world = mpi_size; /* a PMIx launch may not say its size: MPI does */
    if (MPI_Bcast(id, (int)sizeof *id, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        return dp_fail(DP_ERR_BACKEND, "--backend nccl: rank %d: the unique id's MPI_Bcast failed", m->l.rank);
    return DP_OK;
#else
    (void)cfg;
    return dp_fail(DP_ERR_UNSUPPORTED, "--backend nccl under mpirun: this build has no MPI to hand out NCCL's unique "
                   "id; launch with torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT)");
#endif
}

/* The libnccl loaded at run time, not only the header built against, must be 2.19 or newer: older
 * ones lack parts of the non-blocking communicator API that every wait here relies on. */
#define DP_NCCL_MIN_VERSION 21900 /* major * 10000 + minor * 100 + patch, NCCL's code since 2.9 */
static dp_status nccl_version_check(void) {
    int v = 0;
    ncclResult_t r = ncclGetVersion(&v);
    if (r != ncclSuccess)
        return dp_fail(DP_ERR_BACKEND, "--backend nccl: ncclGetVersion failed: %s", ncclGetErrorString(r));
    if (v < DP_NCCL_MIN_VERSION)
        return dp_fail(DP_ERR_UNSUPPORTED, "--backend nccl: the libnccl loaded is %d.%d.%d; dptrain needs NCCL 2.19 or "
                       "newer (put a newer libnccl.so.2 first on LD_LIBRARY_PATH)", v / 10000, v / 100 % 100, v % 100);
    return DP_OK;
}

dp_status dp_nccl_backend_create(const dp_backend_config *cfg, dp_backend_t *out) {
    *out = NULL;
    const int nvls = dp_nccl_env_defaults(); /* before NCCL reads its environment */
    DP_TRY(nccl_version_check());
    int gpu = 0;
    DP_TRY(dp_nccl_precheck(&gpu));
    const int host = dp_nccl_moves_host_memory();
    if (!cfg->dev || (!host && ((cfg->dev->caps & DP_CAP_HOST_MEMORY) || strcmp(cfg->dev->name, "cuda") != 0)))
        return dp_fail(DP_ERR_UNSUPPORTED, "--backend nccl: its collectives take CUDA memory, so it needs the trainer's "
                       "CUDA device (--device cuda)");
    dp_backend_t b = calloc(1, sizeof *b);
    nccl_impl *m = calloc(1, sizeof *m);
    if (!b || !m) {
        free(b), free(m);
        return dp_fail(DP_ERR_NOMEM, "out of memory creating the nccl backend");
    }
    b->iface = &nccl_iface;
    b->impl = m;
    /* a non-blocking communicator inside a recorded graph is untried: nccl steps run eagerly */
    b->algorithm = "nccl", b->ordered = 1, b->capturable = 0, b->host_buffers = host;
    m->dev = (dp_dev *)dp_dev_coll(cfg->dev); /* collectives, their copies and sums: the collective stream */
    m->home = cfg->dev;
    m->gpu = gpu;
    if (gpu >= 0) snprintf(m->where, sizeof m->where, "GPU %d", gpu);
    else snprintf(m->where, sizeof m->where, "host memory");
    m->timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : 300;
    dp_status s = dp_launch_from_env(&m->l);
    unsigned long long allowance = 0; /* a malformed DPTRAIN_NCCL_RESERVE_MIB is refused before any rendezvous */
    if (s == DP_OK) s = dp_nccl_allowance(2, nvls, getenv("DPTRAIN_NCCL_RESERVE_MIB"), &allowance);
    if (s == DP_OK) {
        char who[96];
        snprintf(who, sizeof who, "rank %d (%s)", m->l.rank, m->where);
        /* the grace: time for an abort that was started at the deadline to return */
        s = dp_nccl_watchdog_start(who, m->timeout_s, 5 + 0.1 * m->timeout_s, &m->wd);
    }
    shared_blob blob;
    memset(&blob, 0, sizeof blob);
    if (s == DP_OK && m->l.rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&blob.id);
        if (r != ncclSuccess)
            s = dp_fail(DP_ERR_BACKEND, "nccl: rank 0: ncclGetUniqueId failed: %s", ncclGetErrorString(r));
        if (s == DP_OK && m->l.world > 1) dp_sidechan_listen(&blob.hub, &m->sc);
    }
    if (s == DP_OK) s = share_id(m, &blob, cfg);
    if (s == DP_OK && m->l.world > 1) dp_sidechan_connect(&m->sc, &blob.hub, m->l.rank, m->l.world, m->timeout_s);
    if (s == DP_OK) {
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0; /* every wait polls, with a deadline: no silent hang */
        s = settle(m, ncclCommInitRankConfig(&m->comm, m->l.world, blob.id, m->l.rank, &config),
                   "creating the communicator (ncclCommInitRankConfig)");
    }
    if (s == DP_OK && !host) { /* the start-time memory check counts what NCCL allocates later */
        s = dp_nccl_allowance(m->l.world, nvls, getenv("DPTRAIN_NCCL_RESERVE_MIB"), &m->allowance);
        if (s == DP_OK) m->home->reserved += m->allowance;
    }
    if (s != DP_OK) {
        b->failed = 1;
        nccl_destroy(b);
        return s;
    }
    m->home->watch = nccl_watch, m->home->watch_ctx = m; /* every wait on the device polls it */
    *out = b;
    return DP_OK;
}

#endif
