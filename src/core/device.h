/* device.h: where a replica's memory lives and its kernels run: the device seam. The trainer,
 * the strategies, evaluation and the sim backend allocate arenas and activations and move bytes
 * only through a dp_dev: the CPU one is plain memory (every copy a memcpy, every wait free),
 * the CUDA one (kernels/cuda/device.cu) is cudaMalloc'd memory and one stream on which every
 * kernel, copy and collective of the process is queued in program order. A device names its
 * kernel table (kernels/kernels.h) and the call context its kernels run with. */
#ifndef DP_DEVICE_H
#define DP_DEVICE_H

#include <stddef.h>

#include "core/status.h"
#include "kernels/kernels.h"

typedef struct dp_dev dp_dev;

/* Streams a device runs independent lanes on at once (data/chunks.h: a step's chunks). */
#define DP_DEV_LANES 8

struct dp_dev {
    const char *name;      /* "cpu", "cuda" */
    int is_host;           /* its memory is the host's: pointers may be read directly */
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
    /* Optional, set by a backend whose collectives can wait on other processes (nccl): while a
       wait polls the device it calls watch(watch_ctx, seconds waited), and a failure (a peer's
       error, the deadline) ends the wait with it. NULL: waits block. */
    dp_status (*watch)(void *ctx, double waited_s);
    void *watch_ctx;
    unsigned long long reserved;
    void (*close)(dp_dev *);
    void *impl;
};

/* Opens "cpu" or "cuda" (ordinal: which GPU; tf32: let cuBLAS use TF32). A build without CUDA,
 * or a machine without a GPU, fails with a message that says which and what to do. */
dp_status dp_dev_open(const char *name, int ordinal, int tf32, dp_dev **out);
void dp_dev_close(dp_dev *d);
/* The CPU device (static; never closed). */
dp_dev *dp_dev_cpu(void);

#endif
