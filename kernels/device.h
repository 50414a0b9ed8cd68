/* device.h: where a replica's memory lives and its kernels run: the device seam. The executor,
 * evaluation and the backends allocate arenas and activations and move bytes only through a
 * dp_dev: the CPU one (kernels/cpu/device.c) is plain memory (every copy a memcpy, every wait
 * free); the CUDA one (kernels/cuda/device.cu) is cudaMalloc'd memory, a main stream on which
 * compute is queued in program order, lane streams, and a collective stream. A device names its
 * kernel table (kernels/kernels.h), its streams (dp_dev_stream: each with the context its kernels
 * run with), and what it can do (caps): only the executor (src/exec/) reads the caps. Only its
 * opener writes a device; how its waits poll is the opener's wait policy (dp_wait_policy).
 *
 * Devices are found by name in one registry (src/exec/devices.h): each device folder adds one
 * line to the build's list (CMake: DP_DEVICES), and tests may register devices of their own. */
#ifndef DP_DEVICE_H
#define DP_DEVICE_H

#include <stddef.h>

#include "core/status.h"
#include "kernels/kernels.h"

typedef struct dp_dev dp_dev;
typedef struct dp_dev_stream dp_dev_stream;

/* Streams a device runs independent lanes on at once (data/chunks.h: a step's chunks). */
#define DP_DEV_LANES 8

/* What a device can do (dp_dev.caps: DP_CAP_*). */
enum {
    DP_CAP_HOST_MEMORY = 1 << 0, /* its memory is the host's: host code may read and write it directly */
    DP_CAP_ASYNC = 1 << 1,       /* work is queued: results are the host's only after wait or download */
    DP_CAP_LANES = 1 << 2,       /* lane streams with fork and join (n_lanes of them) */
    DP_CAP_GRAPHS = 1 << 3,      /* capture_begin, capture_end, replay, graph_free */
    DP_CAP_EVENTS = 1 << 4,      /* timing events */
    DP_CAP_COLL_STREAM = 1 << 5, /* a collective stream (dp_dev.coll) */
};

/* A stream of a device: what is queued on it runs in the order queued, and the host or another
 * stream of the device waits for it. Its kernels run with kc (dp_kernels: dev->k); its memory is
 * its device's. A device's streams share one table of these operations (dp_dev_streams_init). */
struct dp_dev_stream {
    const dp_dev *dev; /* NULL: the device has no such stream */
    dp_kctx kc;
    void *impl;        /* the device's own (CUDA: the event other streams wait on) */
    /* n floats of the device's memory (freed with dev->free), zeroed in this stream's order */
    dp_status (*alloc)(const dp_dev_stream *, float **p, size_t n, const char *what);
    /* host -> device and device -> device, queued; `src` of an upload must stay valid until the next wait */
    dp_status (*upload)(const dp_dev_stream *, void *dst, const void *src, size_t bytes);
    dp_status (*copy)(const dp_dev_stream *, void *dst, const void *src, size_t bytes);
    /* the host waits for the work queued here and learns the first failure (the wait policy polls) */
    dp_status (*wait)(const dp_dev_stream *);
    /* Optional (DP_CAP_EVENTS): timing event i queued here (dev->event_elapsed reads it) */
    dp_status (*record)(const dp_dev_stream *, void *events, int i);
    /* Optional (NULL where work runs as called): this stream waits for the work queued on `on`
       (another stream of the device) so far, by an event recorded there */
    dp_status (*wait_for)(const dp_dev_stream *, const dp_dev_stream *on);
};

/* How a device's waits end: with no watch they block; with one, a wait polls the device and calls
 * watch(ctx, seconds waited) now and then, and a failure it returns (a peer's error, the deadline)
 * ends the wait with it. The device's opener owns it and hands it to open; whoever may leave a wait
 * hanging on other processes (a backend's collectives: dp_backend_config.waits) sets the watch. */
typedef struct dp_wait_policy {
    dp_status (*watch)(void *ctx, double waited_s);
    void *ctx;
} dp_wait_policy;

struct dp_dev {
    const char *name;      /* "cpu", "cuda" */
    unsigned caps;         /* DP_CAP_* */
    const dp_kernels *k;   /* its kernel table */
    /* The main stream, where the device's own operations below queue (the CPU: its kernels run on
       the calling thread, main.kc 1 thread). */
    dp_dev_stream main;
    /* Optional (n_lanes 0 on the CPU, whose lanes are threads): lane streams, each with its own
       math library handle and workspace; fork makes lane streams 0..n-1 wait for the main stream's
       work so far, join makes the main stream wait for theirs. Recorded graphs keep the fork and join. */
    int n_lanes;
    dp_dev_stream lanes[DP_DEV_LANES];
    /* Optional (DP_CAP_COLL_STREAM): the collective stream, where backends issue their collectives,
       copies and sums (dp_dev_coll); a collective waits for the compute it reads (coll.wait_for
       main) and the compute that reads its result for it (main.wait_for coll), while other
       compute goes on. */
    dp_dev_stream coll;
    dp_status (*fork)(const dp_dev *, int n);
    dp_status (*join)(const dp_dev *, int n);
    char desc[256];        /* "NVIDIA H100 80GB HBM3 (cuda:0, sm_90, 79.1 GiB, TF32 off)" */
    /* n floats, zeroed, 2 MiB aligned on the CPU (core/arena.h); fails naming `what` */
    dp_status (*alloc)(const dp_dev *, float **p, size_t n, const char *what);
    void (*free)(const dp_dev *, void *p);
    /* host memory that uploads read without the driver's own staging copy (CUDA: pinned) */
    dp_status (*host_alloc)(const dp_dev *, void **p, size_t bytes, const char *what);
    void (*host_free)(const dp_dev *, void *p);
    /* the main stream's operations (dp_dev_stream's), and zeroing and downloads */
    dp_status (*upload)(const dp_dev *, void *dst, const void *src, size_t bytes);
    dp_status (*copy)(const dp_dev *, void *dst, const void *src, size_t bytes);
    dp_status (*zero)(const dp_dev *, void *p, size_t bytes);
    /* device -> host: waits for the queued work, then copies */
    dp_status (*download)(const dp_dev *, void *dst, const void *src, size_t bytes);
    /* waits for the queued work and reports the first failed kernel, copy or library call */
    dp_status (*wait)(const dp_dev *);
    /* Optional (NULL on the CPU): records the work queued between capture_begin and capture_end
       as one graph (a CUDA graph), which replay queues again with the same pointers and sizes. */
    dp_status (*capture_begin)(const dp_dev *);
    dp_status (*capture_end)(const dp_dev *, void **graph);
    dp_status (*replay)(const dp_dev *, void *graph);
    void (*graph_free)(const dp_dev *, void *graph);
    /* Optional (NULL on the CPU): the device's free and total memory in bytes, and what its own
       workspaces (cuBLAS, cuDNN, lane streams) take besides the run's arenas */
    dp_status (*mem_info)(const dp_dev *, unsigned long long *free_b, unsigned long long *total_b);
    /* Optional (NULL on the CPU, whose work is timed with the clock as it runs): n timing events;
       event_record queues event i on the main stream (it completes when the work queued before it
       does); after a wait, event_elapsed gives the seconds from event i to event j. */
    dp_status (*events_create)(const dp_dev *, int n, void **events);
    dp_status (*event_record)(const dp_dev *, void *events, int i);
    dp_status (*event_elapsed)(const dp_dev *, void *events, int i, int j, double *seconds);
    void (*events_free)(const dp_dev *, void *events, int n);
    /* Optional (with events): returns once event i's last recording has run, at once when it has
       (a query first), else after a wait (polled under the wait policy): how the host learns that
       uploads queued before the recording have read their pinned source, before it writes there again. */
    dp_status (*event_wait)(const dp_dev *, void *events, int i);
    /* device memory its own workspaces take besides the run's arenas (exec/memory.h) */
    unsigned long long reserved;
    /* the opener's wait policy (never NULL once open) */
    const dp_wait_policy *waits;
    void (*close)(dp_dev *);
    void *impl;
};

/* A device kind: what the registry knows of a device before it is opened. */
typedef struct {
    const char *name;  /* what --device names */
    /* opens it (ordinal: which one of its kind; tf32: matrix products may use TF32; waits: how its
       waits end, the caller's, valid until close; NULL: they block) */
    dp_status (*open)(int ordinal, int tf32, const dp_wait_policy *waits, dp_dev **out);
} dp_dev_kind;

/* The CPU device (static; never closed). */
dp_dev *dp_dev_cpu(void);
/* The stream collectives are issued on: the collective stream when the device has one, else main. */
static inline const dp_dev_stream *dp_dev_coll(const dp_dev *d) { return d->coll.dev ? &d->coll : &d->main; }

/* Fills an opened device's streams, each with the operations of `ops` and its own kernel context:
 * main, n_lanes lanes (lane_kc[i]) and, unless coll_kc is NULL, the collective stream. */
static inline void dp_dev_streams_init(dp_dev *d, const dp_dev_stream *ops, dp_kctx main_kc, const dp_kctx *lane_kc,
                                       int n_lanes, const dp_kctx *coll_kc) {
    d->main = *ops, d->main.dev = d, d->main.kc = main_kc;
    d->n_lanes = n_lanes;
    for (int i = 0; i < n_lanes; i++) d->lanes[i] = *ops, d->lanes[i].dev = d, d->lanes[i].kc = lane_kc[i];
    if (coll_kc) d->coll = *ops, d->coll.dev = d, d->coll.kc = *coll_kc;
}

#endif
