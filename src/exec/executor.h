/* executor.h: how a device runs a step, and the only code that asks what a device can do
 * (kernels/device.h: caps). It owns the replicas this process drives (replica.h: arenas, lanes,
 * slots), runs their lanes over threads (the CPU) or lane streams (a GPU) between fork and
 * join, zeroes and tree-sums the lanes' gradients, stages uploads through the device's pinned
 * memory, records and replays step graphs (graph.h), runs the forward and backward passes in
 * stretches between synchronisation points and reports each gradient bucket as it becomes
 * complete, and issues every collective on the device's collective stream, ordered by events:
 *
 *   data -> sampler -> executor -> strategy (train/ddp.c, train/dp.c) -> backend collectives -> optimizer
 *
 * A collective waits for the compute queued before it (coll_wait_main) and, unless it was
 * started to overlap, the compute queued after it waits for it (main_wait_coll): a bucket's
 * all-reduce runs on the collective stream while backward goes on, and the optimizer waits for
 * all of them. On the CPU, whose work runs as called, the same calls order nothing and the
 * backend's non-blocking all-reduce (mpi) overlaps instead.
 *
 * The replicas live on one device (the sim, one GPU per process) or one device each (nccl
 * --gpus: one process driving several GPUs): each replica's kernels, lanes, zeroing, staging,
 * tree sums, downloads and the ordering of its collectives go to its own device (rep[r].dev),
 * and a collective orders every device's streams around it. */
#ifndef DP_EXECUTOR_H
#define DP_EXECUTOR_H

#include <stdint.h>

#include "backends/backend.h"
#include "kernels/device.h"
#include "data/loader.h"
#include "exec/graph.h"
#include "exec/replica.h"
#include "nn/model.h"
#include "exec/memory.h"

/* Copies of the pinned upload staging (h_stage, h_idx), used in turn. */
#define DP_EXEC_STAGES 2
/* A device's staging events: one per staging copy, then the step metrics' (h_metrics_up). */
#define DP_EXEC_STAGE_EVENTS (DP_EXEC_STAGES + 1)

/* What a micro-step is: its share of its optimizer step. */
typedef struct {
    int step_samples;   /* samples of the whole optimizer step (the loss is their mean) */
    int micro_samples;  /* samples of this micro-step over all replicas (SyncBN's count) */
    int batch;          /* the batch of the epoch it computes */
    int micro;          /* its index in the step (--accumulate) */
    int last;           /* the micro-step that reduces and steps */
} dp_micro_info;

typedef struct {
    dp_dev *dev;              /* not owned; the device of every replica unless devs says otherwise */
    dp_dev *const *devs;      /* (n_local) local replica r's device, one each (nccl --gpus); NULL: all on dev */
    dp_backend_t backend;     /* not owned */
    const dp_model *model;    /* not owned */
    int threads;              /* CPU threads for the lanes and the host-side loops */
    int sync_bn;              /* BN sums all-reduced over every replica */
    int n_lanes, n_slots, lane_batch, max_local; /* the lane plan (replica.h) */
    int graphs;               /* record step graphs where device and backend allow it */
    /* the training set, and whether it may live on the device (no augmentation): an async device
       then holds it and gathers each batch itself from the samples' indices */
    const dp_dataset *train;
    int resident;
    int time_nodes;           /* --predict / --save-profile: time each node call with the clock */
} dp_exec_config;

typedef struct dp_executor {
    dp_dev *dev;              /* replica 0's device (every replica's, unless multi_dev) */
    int multi_dev;            /* the replicas are on different devices, one each */
    const dp_kernels *k;      /* the devices' kernel table (one kind for all) */
    dp_kctx kc;               /* and the context of the executor's own kernel calls (main stream) */
    dp_backend_t backend;
    const dp_model *model;
    int threads, sync_bn;
    int team;                 /* threads of every parallel region a step opens (dp_exec_team_size) */
    int n_local, world;
    int n_lanes;              /* lanes (gradient partials) per replica and step */
    int max_local;            /* the most samples a replica gets in a micro-step */
    dp_replica *rep;          /* (n_local) */
    float **ptrs;             /* (n_local) scratch for collectives over per-replica pointers */
    int *bucket_node;         /* (n_buckets) node after whose backward the bucket is complete */
    /* each lane's loss sum and hits this step (n_local x n_lanes, on the host), and per replica
       where its loss kernels write them (its device; views of the host arrays on host memory) */
    float *lane_loss, **d_lane_loss;
    int32_t *lane_correct, **d_lane_correct;
    int lanes_clear;          /* lanes 1.. hold zeros (the last step's tree cleared them) */
    dp_batch *d_batches;      /* (n_local) an async device's copy of the loader's batches */
    dp_batch *h_stage;        /* (DP_EXEC_STAGES x n_local) the pinned staging its uploads read */
    /* the training set on the device (resident): its pixels, labels and normalisation table, and
       per replica the batch's indices (device, and their pinned staging) */
    int resident;
    uint8_t *d_pixels, *d_labels;
    float *d_lut;
    int32_t **d_idx, **h_idx; /* h_idx: DP_EXEC_STAGES x n_local */
    int data_c, data_hw;
    /* the next staging copy: two, so that a micro-step fills one while the other's uploads may
       still run; before a copy (or h_metrics_up[r]) is written again, the event its device
       recorded after the uploads from it is queried, and waited for only if not done (on every
       device: the step's one wait is for replica 0's, and what other devices did is known from
       it only through the collective's data flow) */
    int stage_next;
    void **stage_ev;          /* (n_devs) DP_EXEC_STAGE_EVENTS events each; NULL: the device has none */
    unsigned char *stage_rec; /* (n_devs x DP_EXEC_STAGE_EVENTS) recorded since the last wait for it */
    dp_graph_cache graphs;
    int graphs_on;
    float **hc_scratch;       /* (n_local) device scratch of the host collectives, hc_floats each */
    /* not host memory: each replica's step metrics on its device (DP_EXEC_METRICS floats), the
       pinned host memory their host-known values go up from, and where the sums come down to */
    float **d_metrics, **h_metrics_up, *h_metrics_down;
    int coll_drained;         /* coll_n when a download last waited for every collective of the step */
    size_t hc_floats;
    /* multi_dev: replica 0's parameters and BN buffers on each other replica's device, which
       evaluation reads (dp_exec_eval_weights); NULL elsewhere */
    float **eval_params, **eval_buffers;
    /* --predict / --save-profile on the CPU: per slot q, node i's forward (q, 0, i) and backward
       (q, 1, i) seconds summed over the run; NULL: not timing */
    double *node_s;
    long node_runs, node_samples;
    double comm_overlap_s;    /* seconds of collectives issued while backward work remained */
    char slot_error[512];     /* the first failure's message on a thread of the passes' team */
    dp_status stretch_status; /* a lane fork's or join's failure in the current stretch (passes.c) */
    /* An async device's collectives timed by events on the collective stream (eager runs; a
       replayed graph's are not): a pair per collective this step, and the main stream's end of
       backward; their seconds, and the part of the overlapped ones before that end, summed per
       kind over the epoch. coll_timed: these replace the backend's host seconds. */
    int coll_timed;
    void *coll_ev;
    int coll_n, coll_cap;
    unsigned char *coll_kind, *coll_overlap;
    int bwd_end_recorded;
    double coll_s[DP_COLL_KINDS], coll_hidden_s;
} dp_executor;

/* The replicas, lanes, staging and scratch for cfg's plan; the backend and model must outlive it. */
dp_status dp_exec_create(dp_executor *ex, const dp_exec_config *cfg);
void dp_exec_free(dp_executor *ex);

/* Replica r's device, and the distinct devices of the local replicas: devices 0..n-1 are
 * dp_exec_dev(ex, 0..n-1) (one for all, or one per replica). */
static inline const dp_dev *dp_exec_dev(const dp_executor *ex, int r) { return ex->rep[r].dev; }
static inline int dp_exec_n_devs(const dp_executor *ex) { return ex->multi_dev ? ex->n_local : 1; }

/* Whether the clock read around a kernel call times its work (the host runs it as called). */
int dp_exec_clock_times_work(const dp_executor *ex);
/* The one team size every parallel region of a step opens on device d: the threads, but no more
 * than the local slots (n_local x n_slots), the widest work a step has; 1 where the host only
 * queues work. One size because libgomp ends the threads a smaller team leaves out and creates
 * them again for the next larger one: regions of 8 and 16 threads in turn started 8 threads per
 * step (clone3 counted with strace), 2-3.4x slower on 16 cores than 8 threads alone. */
int dp_exec_team_size(const dp_dev *d, int threads, int n_local, int n_slots);
/* Threads for a host-side loop over n independent items: the team, or 1 (a serial loop, which
 * leaves libgomp's pool as it is) where n is 1 or the host only queues work. Items fewer than the
 * team leave threads idle at the region's end rather than resizing the pool. */
int dp_exec_team(const dp_executor *ex, int n);
/* Host threads that queue the replicas' device work: one per device with the replicas on several
 * (--gpus: thread r issues replica r's passes and optimizer step, so that one process keeps every
 * GPU fed), else 1 (one device's queue needs one thread; the CPU computes with dp_exec_team's). */
int dp_exec_dev_team(const dp_executor *ex);
/* The loader threads --workers defaults to on device d: 0 where the replicas compute on `threads`
 * of the host's `cores` and leave none idle (the compute threads fill each batch between steps: a
 * loader thread would take a core from them), else 1 (it fills ahead while the device computes). */
int dp_exec_default_workers(const dp_dev *d, int threads, int cores);

/* Gives each replica's slots the lanes of batch b of the sampler, checking the loader's counts. */
dp_status dp_exec_assign(dp_executor *ex, const dp_sampler *sp, const dp_batch *bt, int b, dp_micro_info *mi);
/* The loader's batches where the device computes: the same on host memory; else uploaded through
 * the pinned staging (reused only once its last uploads are done), or with the training set on
 * the device (resident) only their indices go up and the device gathers the batch. */
dp_status dp_exec_stage(dp_executor *ex, const dp_batch *b, const dp_batch **out);

/* Pinned staging `slot` (0..DP_EXEC_STAGES-1: a copy of h_stage / h_idx; DP_EXEC_STAGES:
 * h_metrics_up) of device i: before the host writes it, ready returns once the uploads queued from
 * it last have run (an event query, a wait only if they have not); after queueing uploads from
 * it, queued records the event. */
dp_status dp_exec_staging_ready(dp_executor *ex, int i, int slot);
dp_status dp_exec_staging_queued(dp_executor *ex, int i, int slot);

/* Zeroes every lane's gradient partial (lanes 1.. only if not already clear) and the lanes' losses. */
dp_status dp_exec_zero_grads(dp_executor *ex);
/* Forward and each lane's loss (scale: the gradient's, 1/step samples; the loss itself is a sum). */
dp_status dp_exec_forward(dp_executor *ex, const dp_batch *b, const dp_micro_info *mi, float scale);

/* Called when gradient bucket k is complete on every local replica (its lanes summed): `node` is
 * the backward node that completed it, more_backward whether backward work remains to hide a
 * collective started now. */
typedef dp_status (*dp_bucket_ready_fn)(void *ctx, int k, int node, int more_backward);
/* Backward from the logits' gradients in the slots' dout; on the micro-step that reduces
 * (mi->last), the lanes' partials are summed bucket by bucket as backward completes them, and
 * ready(ctx, k, ...) is called for each (ready may be NULL). */
dp_status dp_exec_backward(dp_executor *ex, const dp_batch *b, const dp_micro_info *mi, dp_bucket_ready_fn ready,
                           void *ctx);
/* The lanes' losses and hits into their host copies (waits for the device). */
dp_status dp_exec_fetch_lane_losses(dp_executor *ex);

/* The most floats of a step's metrics (dp_exec_step_metrics). */
#define DP_EXEC_METRICS 8
/* A step's metrics summed over every replica of every process, in one host round trip: bufs[r]
 * holds replica r's n (2 <= n <= DP_EXEC_METRICS) floats, [0] and [1] its lanes' loss (the
 * fixed tree) and hits, filled here from the lanes where they were computed (or, host_lanes,
 * from their host copies, which the caller wrote), [2..n) the caller's; on return every
 * bufs[r] holds the sums over all replicas. On host memory: the host's sums and
 * dp_exec_host_allreduce. Elsewhere: each replica's buffer is summed and completed on its
 * device, all-reduced there by the backend, and replica 0's comes down once (pinned), the
 * step's only wait; the lanes' host copies are then not updated (dp_exec_fetch_lane_losses).
 * check (NULL: none; not on host memory, where the SGD step checks the gradients itself,
 * optim/sgd.h): the replicas r with check[r] set have their gradient arena checked for NaN/Inf
 * on their device (the kernel table's nonfinite) into [check_at], which the caller set to 0, so
 * that the sum says whether any was, with no wait of its own. */
dp_status dp_exec_step_metrics(dp_executor *ex, float *const *bufs, size_t n, int host_lanes, const int *check,
                               size_t check_at);
dp_status dp_exec_metrics_alloc(dp_executor *ex);
void dp_exec_metrics_free(dp_executor *ex);
/* The step's collectives' event times into coll_s and coll_hidden_s (waits for the collective
 * stream, whose work the step has already waited for where it reads a result). */
dp_status dp_exec_collect_coll_times(dp_executor *ex);
dp_status dp_exec_coll_timing_start(dp_executor *ex);
void dp_exec_coll_timing_free(dp_executor *ex);
/* fn(arg): recorded once its key repeats and replayed after (graph.h), where graphs are on. */
dp_status dp_exec_run_graph(dp_executor *ex, uint64_t key, dp_status (*fn)(void *), void *arg);
/* Runs fn(arg, r) for every local replica, in parallel over threads on the CPU and over the devices'
 * threads with the replicas on several devices (dp_exec_dev_team). */
dp_status dp_exec_for_replicas(dp_executor *ex, dp_status (*fn)(void *arg, int r), void *arg);

/* The same slice of every local replica's arena, for one collective. */
enum { DP_ARENA_PARAMS = 0, DP_ARENA_GRADS = 1, DP_ARENA_BUFFERS = 2 };
float *const *dp_exec_slices(dp_executor *ex, int which, size_t offset);

/* Collectives on the collective stream: each waits for the compute queued before it, and the
 * compute queued after it waits for it. */
dp_status dp_exec_allreduce(dp_executor *ex, float *const *bufs, size_t n);
dp_status dp_exec_broadcast(dp_executor *ex, float *const *bufs, size_t n, int root);
dp_status dp_exec_reduce(dp_executor *ex, float *const *bufs, size_t n, int root);
dp_status dp_exec_gather(dp_executor *ex, const float *const *send, float *const *recv, size_t n, int root);
dp_status dp_exec_scatter(dp_executor *ex, const float *const *send, float *const *recv, size_t n, int root);
/* An all-reduce that overlaps: it waits for the compute before it; nothing waits for it until
 * dp_exec_wait_all, which waits for requests 0..n-1 and makes the compute after it wait too. */
dp_status dp_exec_allreduce_start(dp_executor *ex, float *const *bufs, size_t n, dp_req *req);
dp_status dp_exec_wait_all(dp_executor *ex, const dp_req *reqs, int n);
/* Every local device's collective stream waits for its main stream's work so far, or the reverse. */
dp_status dp_exec_colls_wait_mains(const dp_executor *ex);
dp_status dp_exec_mains_wait_colls(const dp_executor *ex);

/* Collectives over small host arrays (metrics, stop flags, resume positions, evaluation
 * counts) on any device; every rank calls them. Bookkeeping: out of the statistics. */
dp_status dp_exec_host_allreduce(dp_executor *ex, float *const *bufs, size_t n);
dp_status dp_exec_host_broadcast(dp_executor *ex, float *const *bufs, size_t n);
/* Every rank's n floats of send (the local replicas send the same), rank r's at recv + r n. */
dp_status dp_exec_host_allgather(dp_executor *ex, const float *send, float *recv, size_t n);
/* Sizes their device scratch for n floats (at create), and frees it. */
dp_status dp_exec_host_reserve(dp_executor *ex, size_t n);
void dp_exec_host_coll_free(dp_executor *ex);

/* Evaluation's traffic: host -> replica r's dst (nothing where dst is that host memory), and
 * replica r's src readable on the host (*out: src itself on host memory, else host_buf). */
dp_status dp_exec_put(dp_executor *ex, int r, float *dst, const float *host_src, size_t bytes);
dp_status dp_exec_view(dp_executor *ex, int r, float *host_buf, const float *src, size_t bytes, const float **out);
/* The weights evaluation runs with: replica 0's parameters and BN buffers, where replica r
 * computes (after dp_exec_eval_prepare, which copies them to the other devices when the
 * replicas are on several). */
dp_status dp_exec_eval_prepare(dp_executor *ex);
void dp_exec_eval_weights(const dp_executor *ex, int r, float **params, float **buffers);
/* A host buffer of n floats for filling what dp_exec_put sends to dst: dst itself on host memory. */
dp_status dp_exec_host_buffer(dp_executor *ex, float *dst, size_t n, float **out);
void dp_exec_host_buffer_free(dp_executor *ex, float *dst, float *buf);

/* The run's memory against what the devices (each one's free memory, for the replicas on it:
 * sh->per_device) or the host can give. */
dp_status dp_exec_check_memory(dp_dev *const *devs, int n_devs, const dp_mem_estimate *e, const dp_mem_shape *sh,
                               int data_loaded);

#endif
