/* nccl_impl.h: what backends/nccl.c (set-up, the watch, tear-down) and backends/nccl_coll.c (the
 * collectives, and the polling of NCCL's non-blocking calls) share; private to those two files.
 *
 * A process drives n_local ranks: one GPU per process (n_local 1, the launch says which), or the
 * GPUs listed with --gpus, one communicator each, all initialised in one group with the job's
 * unique id: ranks first .. first + n_local - 1 of world, first = process rank x n_local, world =
 * processes x n_local (every process lists as many). Every collective is one ncclGroupStart/End
 * over the local communicators, as NCCL requires when one thread drives several devices. The
 * watchdog and the side channel are the process's: one each, whatever n_local. */
#ifndef DP_NCCL_IMPL_H
#define DP_NCCL_IMPL_H

#include <nccl.h>

#include "backends/backend.h"
#include "backends/nccl.h"
#include "backends/nccl_sidechan.h"
#include "backends/nccl_watchdog.h"
#include "backends/rendezvous.h"
#include "kernels/device.h"

typedef struct {
    ncclComm_t comm;
    int rank;        /* its global rank */
    int gpu;         /* its CUDA ordinal (-1 under the test double, whose ranks move host memory) */
    const dp_dev_stream *st; /* where its collectives, copies and sums run: the device's collective stream (dp_dev_coll) */
    const dp_dev *home;      /* the trainer's device (its memory) */
    float *scratch;  /* the shard owner's receive buffer: world pieces of the largest shard */
    size_t scratch_n;
} nccl_local;

typedef struct {
    dp_backend_t b;  /* the backend this is the impl of (its capturing flag) */
    dp_launch l;     /* the process's launch: process l.rank of l.world */
    dp_nccl_which loaded; /* the real NCCL or its test double (nccl.h), looked up once, in create */
    int n_local, first, world;
    nccl_local loc[DP_MAX_LOCAL_DEVICES];
    char who[160];   /* "rank 1 (GPU 1)", "ranks 0-3 (GPUs 0,1,2,3)", "rank 0 (host memory)" */
    double timeout_s;
    int we_initialised_mpi;
    int creating;           /* inside dp_nccl_backend_create: a failure there is not printed by the caller before MPI_Abort */
    int in_group;    /* between ncclGroupStart and ncclGroupEnd: a failure must not abort yet */
    int warming;     /* inside the warm-up at start (nccl_warmup.c): a failure carries its hints */
    dp_nccl_watchdog *wd;  /* ends the process if a call below outlives --timeout and a grace period */
    char abort_what[1200]; /* what the watchdog says while an abort, or the teardown after one, runs */
    int torn_down;         /* abort (backend.h) ran: the devices are released, the watchdog on until destroy */
    dp_sidechan *sc;       /* tells the other processes at once when this one fails, and this one when they do */
    unsigned long long allowance; /* NCCL's lazy buffers (nccl_memory.h): b->comm_memory_reserved */
    int host_buffers;      /* the devices' memory is the host's (dp_backend_config.host_memory) */
    dp_wait_policy *waits; /* the devices' opener's: its watch is nccl_watch while this backend lives (or NULL) */
} nccl_impl;

static inline nccl_impl *dp_nccl_impl(dp_backend_t b) { return (nccl_impl *)b->impl; }

/* An NCCL call's result on the non-blocking communicators: ncclInProgress is polled on every
 * local communicator to the end, up to --timeout; a failure names the ranks, the devices, the
 * collective and NCCL's reason, and aborts the communicators (inside a group: not yet, see
 * NCCL_GROUP_TRY). */
dp_status dp_nccl_settle(nccl_impl *m, ncclResult_t r, const char *what);
/* Ends every local communicator at once (the other ranks may be gone: nothing waits for them),
 * after the failure was recorded with dp_fail; tells the other processes through the side channel. */
void dp_nccl_abort(nccl_impl *m);
/* dp_nccl_abort, unless a step is being recorded into a graph (b->capturing): ncclCommAbort frees
 * and synchronises, which CUDA refuses on a thread whose capture is open (and the capture is lost),
 * so then only the other processes are told; the failure reaches the trainer once the recording
 * has ended, and its teardown (backend.h: abort) aborts the communicators. */
void dp_nccl_abort_unless_capturing(nccl_impl *m);
/* NCCL's last message as ": message" (or ""): that of local communicator `which` (the one whose
 * result failed, dp_nccl_poll), else of the first that has one; with several local communicators
 * it names the communicator's rank. */
const char *dp_nccl_last_error(const nccl_impl *m, int which, char *buf, size_t cap);
/* The first failing local communicator's asynchronous error (ncclInProgress while any is busy);
 * *which (may be NULL) receives its index, -1 if none failed. */
ncclResult_t dp_nccl_poll(const nccl_impl *m, int *which);

dp_status dp_nccl_group_start(nccl_impl *m, const char *what);
dp_status dp_nccl_group_end(nccl_impl *m, const char *what);
/* Inside a group: ncclInProgress waits for the group's end (polled there, not here); a failure
 * closes the group (its result is not waited for), then aborts. */
#define NCCL_GROUP_TRY(m, call, what)                               \
    do {                                                            \
        ncclResult_t r_ = (call);                                   \
        dp_status g_ = r_ == ncclInProgress ? DP_OK : dp_nccl_settle((m), r_, (what)); \
        if (g_ != DP_OK) {                                          \
            (m)->in_group = 0;                                      \
            (void)ncclGroupEnd();                                   \
            dp_nccl_abort_unless_capturing(m);                      \
            return g_;                                              \
        }                                                           \
    } while (0)

/* The shard owners' receive buffers for the largest sum of the run (a bucket or the gradient,
 * SyncBN's sums, the step metrics, the evaluation's counts), sized at set-up and never grown after:
 * a longer sum is an internal error naming the collective. */
dp_status dp_nccl_reserve(dp_backend_t b, size_t max_floats);
dp_status dp_nccl_allreduce(dp_backend_t b, float *const *bufs, size_t n, dp_redop op);
dp_status dp_nccl_reduce(dp_backend_t b, float *const *bufs, size_t n, dp_redop op, int root);
dp_status dp_nccl_broadcast(dp_backend_t b, float *const *bufs, size_t n, int root);
dp_status dp_nccl_allgather(dp_backend_t b, const float *const *send, float *const *recv, size_t n);
dp_status dp_nccl_gather(dp_backend_t b, const float *const *send, float *const *recv, size_t n, int root);
dp_status dp_nccl_scatter(dp_backend_t b, const float *const *send, float *const *recv, size_t n, int root);
dp_status dp_nccl_barrier(dp_backend_t b);

/* The warm-up at start (nccl_warmup.c), after the communicators are created: one canonical sum
 * of `world` floats (every pair of ranks, both ways), a broadcast, an all-gather and a barrier,
 * under a deadline of min(--timeout, 60 s); a failure ends the rank with NCCL_DEBUG, P2P, SHM and
 * socket hints. *measured: the most device memory any local device lost meanwhile (what NCCL's
 * connections took), *known 0 where the devices cannot say (host memory). Nothing at world 1. */
dp_status dp_nccl_warmup(dp_backend_t b, unsigned long long *measured, int *known);
/* Each local device's memory in use now (total - free, its mem_info): 0 where a device cannot say. */
int dp_nccl_device_used(const nccl_impl *m, unsigned long long used[]);
/* Adds the warm-up's hints to the failure just recorded (dp_last_error), unless it has them:
 * dp_nccl_abort calls it while the warm-up runs, before the other ranks hear of the failure. */
void dp_nccl_warmup_hint(const nccl_impl *m);

#endif
