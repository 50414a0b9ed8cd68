/* backend.h: the pluggable collective-communication interface (ggml-backend style: an opaque
 * handle and one documented table of functions; optional entries may be NULL).
 *
 * A process drives n_local replicas (sim: all N; nccl single-process: one per local GPU;
 * mpi: one). Every collective takes one buffer per LOCAL replica, as NCCL's grouped calls do,
 * so the simulated and the real backends have one shape and one trainer serves them all.
 * Buffers live on the backend's device. Every call is collective: all ranks make it, in the
 * same order, with the same counts. */
#ifndef DP_BACKEND_H
#define DP_BACKEND_H

#include <stddef.h>

#include "core/status.h"

typedef enum { DP_SUM = 0, DP_AVG = 1 } dp_redop;

typedef enum {
    DP_COLL_ALLREDUCE = 0,
    DP_COLL_BROADCAST,
    DP_COLL_REDUCE,
    DP_COLL_ALLGATHER,
    DP_COLL_GATHER,
    DP_COLL_SCATTER,
    DP_COLL_BARRIER,
    DP_COLL_KINDS
} dp_coll_kind;

/* What the collectives cost so far; the trainer reads and resets it per epoch, and the
 * overhead model turns the byte counts into predicted times on real links. */
typedef struct {
    long calls[DP_COLL_KINDS];
    double bytes[DP_COLL_KINDS];      /* payload: floats per replica * 4 */
    double link_bytes[DP_COLL_KINDS]; /* the most any one replica sent over its link */
    double seconds[DP_COLL_KINDS];    /* host time spent inside the calls */
} dp_comm_stats;

/* One collective as the overhead model reads it: what, how big, by which algorithm, and when:
 * issued at `t_issue` (seconds since the trace's t0), done after `seconds` of host time, and,
 * for a DDP bucket, the backward node after which its bucket became ready (-1 otherwise). */
typedef struct {
    dp_coll_kind kind;
    double bytes;          /* payload per replica */
    const char *algorithm; /* "ring", "tree", or the backend's name */
    double t_issue, seconds;
    int ready_node;
} dp_coll_record;

/* Recording is off unless the trainer attaches a trace (--predict / --save-profile): then every
 * wrapped call appends a record; a full trace drops further ones and counts them. */
typedef struct {
    dp_coll_record *recs;
    int n, cap;
    long dropped;
    double t0;
    int ready_node;        /* set by the trainer before a bucket's all-reduce; -1 otherwise */
    const char *algorithm;
} dp_coll_trace;

typedef struct dp_backend *dp_backend_t;
typedef int dp_req; /* a started non-blocking collective; backends define the meaning */

struct dp_backend_i {
    const char *(*name)(dp_backend_t);
    int (*world_size)(dp_backend_t);        /* replicas over all processes */
    int (*n_local)(dp_backend_t);           /* replicas this process drives */
    int (*rank)(dp_backend_t, int local);   /* global rank of local replica `local` */
    dp_status (*allreduce)(dp_backend_t, float *const *bufs, size_t n, dp_redop op);
    dp_status (*broadcast)(dp_backend_t, float *const *bufs, size_t n, int root);
    /* Result in the buffer of global rank `root`; the other buffers are left unspecified. */
    dp_status (*reduce)(dp_backend_t, float *const *bufs, size_t n, dp_redop op, int root);
    /* recv[i] receives world_size * n floats: rank r's send at r * n. */
    dp_status (*allgather)(dp_backend_t, const float *const *send, float *const *recv, size_t n);
    /* To global rank `root` only (DataParallel's gather of outputs): recv[i] of the replica that
     * is root receives world_size * n floats, rank r's send at r * n; other recv[i] are untouched
     * and may be NULL. */
    dp_status (*gather)(dp_backend_t, const float *const *send, float *const *recv, size_t n, int root);
    /* From global rank `root` (DataParallel's scatter of inputs and output gradients): the root's
     * send[i] holds world_size * n floats; every replica's recv[i] receives its rank's n. Other
     * send[i] may be NULL. */
    dp_status (*scatter)(dp_backend_t, const float *const *send, float *const *recv, size_t n, int root);
    dp_status (*barrier)(dp_backend_t);
    /* (optional) non-blocking allreduce; the buffers must not be touched until wait returns. */
    dp_status (*allreduce_start)(dp_backend_t, float *const *bufs, size_t n, dp_redop op, dp_req *req);
    dp_status (*wait)(dp_backend_t, dp_req req);
    /* (optional) the largest collective the run will make, in floats, known once the model is
       built: a backend with scratch of its own sizes it here, once, instead of growing it mid-run
       (on a GPU a free is a device-wide synchronisation, and no allocation may happen inside a
       recorded graph) */
    dp_status (*reserve)(dp_backend_t, size_t max_floats);
    /* (optional) after a failure, before the caller frees device memory and closes its devices:
       ends every collective at once (the other ranks may be gone) and releases the backend's own
       device memory, but keeps its watchdog on what the caller does next (a cudaFree or a stream
       synchronisation waits for a collective kernel, which after an abort may never end) until
       destroy, which the caller then runs after closing the devices */
    void (*abort)(dp_backend_t);
    void (*destroy)(dp_backend_t);
};

struct dp_backend {
    const struct dp_backend_i *iface;
    const struct dp_backend_kind *kind; /* its row of the backend table (backend_kind.h), set by dp_backend_create */
    void *impl;
    dp_comm_stats stats;
    dp_coll_trace *trace; /* NULL: not recording (the default; one branch per call) */
    int failed;   /* set by the trainer when this process fails: a multi-process backend then
                     aborts the job on destroy rather than leave the other ranks waiting */
    int ends_job; /* set by the backend: destroying it after a failure ends the process (MPI_Abort)
                     before its caller can print why, so the caller prints it first; else the
                     caller prints it once, after (main) */
    /* set by the backend's constructor, so that nobody above asks for it by name */
    const char *algorithm; /* how its all-reduce sums: "ordered", "ring", "tree" (sim), else its name */
    int ordered;           /* its sums follow the canonical order (data/chunks.h): bitwise across N */
    int capturable;        /* its collectives on a device may be recorded into a graph (exec/graph.h) */
    int capturing;         /* set by exec/graph.c while a step is recorded: a failure then must not abort
                              the communicators (the abort's frees would break the capture); the caller
                              aborts after the recording ends (backend.h: abort) */
    int host_buffers;      /* its collectives move host memory (the CPU's processes share its bus) */
    char relaunch[64];     /* what runs the command again across its processes ("mpirun -np 4 "), or "" */
    /* nccl: the device memory its library took while its communicators were created and during
       the warm-up at start (the most over the local devices, in bytes; known 0: not measured, as
       on host memory), and what it adds to each device's reserve for what it may still take
       (added to kernels/device.h's reserved where memory is checked); the config line logs them */
    int comm_memory_known;
    unsigned long long comm_memory_init, comm_memory_measured, comm_memory_reserved;
    /* OpenMP threads its host copies and sums open: the config's nthreads, then the trainer's step
       team (exec/executor.h: every region of a step opens one team size) */
    int threads;
};

/* The most devices one process drives (nccl --gpus). */
#define DP_MAX_LOCAL_DEVICES 16

typedef struct {
    const char *name;      /* "sim", "mpi", "nccl" */
    int replicas;          /* sim: N logical replicas */
    int nthreads;          /* OpenMP threads the backend may use for its copies and sums */
    const char *algorithm; /* sim: "ring" (default) or "tree" */
    double timeout_s;      /* mpi: how long a collective may wait for a dead rank */
    struct dp_dev *dev;    /* where the replicas' buffers live (kernels/device.h; NULL: the host) */
    int host_memory;       /* with dev: 1 if its memory is the host's (exec/devices.h: dp_dev_host_memory) */
    /* the wait policy the devices were opened with (kernels/device.h), or NULL: a backend whose
       collectives may wait on other processes (nccl) sets its watch there while it lives */
    struct dp_wait_policy *waits;
    /* nccl: the devices this process drives, one replica each (devs[0] is dev), and their
       ordinals (--gpus, or the one GPU the launch gives); n_devs 0: dev alone */
    struct dp_dev *const *devs;
    const int *ordinals;
    int n_devs;
    int *argc;             /* mpi: for MPI_Init */
    char ***argv;
} dp_backend_config;

/* Which devices a backend computes on, from --device (NULL: not given), --gpu (-1: not given) and --gpus (n_gpus
 * ordinals; 0: not given), as its row of the backend table says (backend_kind.h: default_device, devices_ok,
 * takes_gpus): nccl one GPU per process (--gpu alone, else the launch says which) or the listed GPUs of
 * this machine, one replica each; mpi the CPU; sim one device. Refused, with what to use, when
 * the flags ask for something else (--gpus with another backend than nccl, a GPU the machine
 * does not have). *device receives the kind, ordinals[0..*n) the devices to open (at most
 * DP_MAX_LOCAL_DEVICES). */
dp_status dp_backend_device(const char *backend, const char *device_flag, int gpu_flag, const int *gpus, int n_gpus,
                            const char **device, int *ordinals, int *n);
/* Creates the named backend. An unknown name, or one not compiled into this build, fails with
 * DP_ERR_USAGE / DP_ERR_UNSUPPORTED and a message that says how to get it. */
dp_status dp_backend_create(const dp_backend_config *cfg, dp_backend_t *out);
void dp_backend_destroy(dp_backend_t b);
/* 1 when every replica of the run is in this process: the backend's kind keeps them all here (sim), or
 * this process drives the whole world (nccl --gpus alone, one MPI rank). */
int dp_backend_in_process(dp_backend_t b);
/* "sim (cpu), mpi: not built, nccl: not built" for --version. */
void dp_backend_describe(char *buf, size_t n);

/* Convenience wrappers over the table; allreduce_start falls back to a blocking allreduce. */
static inline const char *dp_backend_name(dp_backend_t b) { return b->iface->name(b); }
static inline int dp_backend_world(dp_backend_t b) { return b->iface->world_size(b); }
static inline dp_status dp_backend_reserve(dp_backend_t b, size_t max_floats) {
    return b->iface->reserve ? b->iface->reserve(b, max_floats) : DP_OK;
}
/* 1 when the backend has an abort (above): its destroy then comes after the devices close. */
static inline int dp_backend_abort(dp_backend_t b) {
    if (!b || !b->iface->abort) return 0;
    b->iface->abort(b);
    return 1;
}
static inline int dp_backend_n_local(dp_backend_t b) { return b->iface->n_local(b); }
static inline int dp_backend_rank(dp_backend_t b, int local) { return b->iface->rank(b, local); }
dp_status dp_allreduce(dp_backend_t b, float *const *bufs, size_t n, dp_redop op);
dp_status dp_broadcast(dp_backend_t b, float *const *bufs, size_t n, int root);
dp_status dp_reduce(dp_backend_t b, float *const *bufs, size_t n, dp_redop op, int root);
dp_status dp_allgather(dp_backend_t b, const float *const *send, float *const *recv, size_t n);
dp_status dp_gather(dp_backend_t b, const float *const *send, float *const *recv, size_t n, int root);
dp_status dp_scatter(dp_backend_t b, const float *const *send, float *const *recv, size_t n, int root);
dp_status dp_barrier(dp_backend_t b);
dp_status dp_allreduce_start(dp_backend_t b, float *const *bufs, size_t n, dp_redop op, dp_req *req);
dp_status dp_wait(dp_backend_t b, dp_req req);

#endif
