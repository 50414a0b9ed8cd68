/* device.h: where a replica's memory lives and its kernels run: the device seam. The executor,
 * evaluation and the backends allocate arenas and activations and move bytes only through a
 * dp_dev: the CPU one (kernels/cpu/device.c) is plain memory (every copy a memcpy, every wait
 * free); the CUDA one (kernels/cuda/device.cu) is cudaMalloc'd memory, a main stream on which
 * compute is queued in program order, lane streams, and a collective stream. A device names its
 * kernel table (kernels/kernels.h), the call context its kernels run with, and what it can do
 * (caps): only the executor (src/exec/) reads the caps.
 *
 * Devices are found by name in one registry (src/exec/devices.h): each device folder adds one
 * line to the build's list (CMake: DP_DEVICES), and tests may register devices of their own. */
#ifndef DP_DEVICE_H
#define DP_DEVICE_H

#include <stddef.h>

#include "core/status.h"
#include "kernels/kernels.h"

typedef struct dp_dev dp_dev;

/* Streams a device runs independent lanes on at once (data/chunks.h: a step's chunks). */
#define DP_DEV_LANES 8

/* What a device can do (dp_dev.caps: DP_CAP_*). */
enum {
    DP_CAP_HOST_MEMORY = 1 << 0, /* its memory is the host's: host code may read and write it directly */
    DP_CAP_ASYNC = 1 << 1,       /* work is queued: results are the host's only after wait or download */
    DP_CAP_LANES = 1 << 2,       /* lane streams with fork and join (n_lanes of them) */
    DP_CAP_GRAPHS = 1 << 3,      /* capture_begin, capture_end, replay, graph_free */
    DP_CAP_EVENTS = 1 << 4,      /* timing events */
    DP_CAP_COLL_STREAM = 1 << 5, /* a collective stream: coll, coll_wait_main, main_wait_coll */
};

struct dp_dev {
    const char *name;      /* "cpu", "cuda" */
    unsigned caps;         /* DP_CAP_* */
    const dp_kernels *k;   /* its kernel table */
    dp_kctx kc;            /* the stream and cuBLAS handle its kernels run on (CPU: 1 thread) */
    /* Optional (n_lanes 0 on the CPU, whose lanes are threads): lane streams, each with its own
       cuBLAS handle and workspace; fork makes lane streams 0..n-1 wait for the main stream's work
       so far, join makes the main stream wait for theirs. Recorded graphs keep the fork and join. */
    int n_lanes;
    dp_kctx lane_kc[DP_DEV_LANES];
    dp_status (*fork)(const dp_dev *, int n);
    dp_status (*join)(const dp_dev *, int n);
    char desc[256];        /* "NVIDIA H100 80GB HBM3 (cuda:0, sm_90, 79.1 GiB, TF32 off)" */
    /* n floats, zeroed, 2 MiB aligned on the CPU (core/arena.h); fails naming `what` */
    dp_status (*alloc)(const dp_dev *, float **p, size_t n, const char *what);
    void (*free)(const dp_dev *, void *p);
    /* host memory that uploads read without the driver's own staging copy (CUDA: pinned) */
    dp_status (*host_alloc)(const dp_dev *, void **p, size_t bytes, const char *what);
    void (*host_free)(const dp_dev *, void *p);
    /* host -> device and device -> device: queued in stream order; `src` of an upload must stay
       valid until the next wait */
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
       (a query first), else after a wait (polled under a watch): how the host learns that uploads
       queued before the recording have read their pinned source, before it writes there again. */
    dp_status (*event_wait)(const dp_dev *, void *events, int i);
    /* Optional, set by a backend whose collectives can wait on other processes (nccl): while a
       wait polls the device it calls watch(watch_ctx, seconds waited), and a failure (a peer's
       error, the deadline) ends the wait with it. NULL: waits block. */
    dp_status (*watch)(void *ctx, double waited_s);
    void *watch_ctx;
    unsigned long long reserved;
    /* Optional (DP_CAP_COLL_STREAM): the collective stream. `coll` is a view of this device
       (the same memory) whose kernels (coll->kc), copies, zeroing, waits and timing events are
       queued on the collective stream; backends issue their collectives there. coll_wait_main
       makes the collective stream wait for the main stream's work queued so far (an event
       recorded there), main_wait_coll the reverse: a collective runs after the work it reads
       and before the work that reads its result, and meanwhile compute goes on. */
    struct dp_dev *coll;
    dp_status (*coll_wait_main)(const dp_dev *);
    dp_status (*main_wait_coll)(const dp_dev *);
    void (*close)(dp_dev *);
    void *impl;
};

/* A device kind: what the registry knows of a device before it is opened. */
typedef struct {
    const char *name;  /* what --device names */
    /* opens it (ordinal: which one of its kind; tf32: matrix products may use TF32) */
    dp_status (*open)(int ordinal, int tf32, dp_dev **out);
} dp_dev_kind;

/* The CPU device (static; never closed). */
dp_dev *dp_dev_cpu(void);
/* The device collectives are issued on: d->coll when it has a collective stream, else d. */
static inline const dp_dev *dp_dev_coll(const dp_dev *d) { return d->coll ? d->coll : d; }

#endif
