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
#include "optim/sgd.h"
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

/* The executor's state is private to src/exec/ (executor_impl.h): code above it calls the
 * functions below and reads nothing else. */
typedef struct dp_executor dp_executor;

/* The replicas, lanes, staging and scratch for cfg's plan; the backend and model must outlive it.
 * *out is set even when creation fails part way: dp_exec_free releases what was made. */
dp_status dp_exec_create(dp_executor **out, const dp_exec_config *cfg);
void dp_exec_free(dp_executor *ex); /* NULL: nothing */

/* What the executor was built with, for the code above it. */
int dp_exec_n_local(const dp_executor *ex);
int dp_exec_rank(const dp_executor *ex, int r);       /* local replica r's global rank */
int dp_exec_holds_rank(const dp_executor *ex, int rank, int *r); /* 1 and *r: the local replica with that rank */
int dp_exec_n_lanes(const dp_executor *ex);
int dp_exec_max_local(const dp_executor *ex);
int dp_exec_threads_used(const dp_executor *ex);      /* the team every parallel region of a step opens */
int dp_exec_resident(const dp_executor *ex);
int dp_exec_in_process(const dp_executor *ex);        /* every replica of the run is in this process */          /* the training set lives on the device */
const dp_kernels *dp_exec_kernel_table(const dp_executor *ex);
dp_replica *dp_exec_replica(dp_executor *ex, int r);  /* its arenas, slots and host copies */
const int *dp_exec_bucket_nodes(const dp_executor *ex); /* (n_buckets) the node completing each bucket */
/* --predict / --save-profile on the CPU: the per-node seconds (per slot q, node i: forward at
 * (q, 0, i), backward at (q, 1, i)), the runs summed and their samples; NULL: not timed. */
const double *dp_exec_node_times(const dp_executor *ex, long *runs, long *samples);

/* Device memory of replica r's device (r: a local replica), and the copies strategies make on it:
 * host -> device, device -> host, device -> device (each in the device's stream order). */
dp_status dp_exec_alloc(dp_executor *ex, int r, size_t n, const char *what, void *out);
void dp_exec_dealloc(dp_executor *ex, int r, void *p);
dp_status dp_exec_upload(dp_executor *ex, int r, void *dst, const void *host_src, size_t bytes);
dp_status dp_exec_download(dp_executor *ex, int r, void *host_dst, const void *src, size_t bytes);
dp_status dp_exec_copy(dp_executor *ex, int r, void *dst, const void *src, size_t bytes);

/* Replica r's device, and the distinct devices of the local replicas: devices 0..n-1 are
 * dp_exec_dev(ex, 0..n-1) (one for all, or one per replica). */
const dp_dev *dp_exec_dev(const dp_executor *ex, int r);
int dp_exec_n_devs(const dp_executor *ex);

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

/* Both, as a micro-step begins: batch b's lanes assigned (*mi), its batches staged (*out). */
dp_status dp_exec_begin_micro(dp_executor *ex, const dp_sampler *sp, const dp_batch *bt, int b, dp_micro_info *mi,
                              const dp_batch **out);

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

/* A step's sums over every replica of every process, what its last micro-step tells the trainer. */
typedef struct {
    float loss;         /* the loss sum: the fixed tree over the lanes, then the replicas' all-reduce */
    long hits, count;
    int stop;           /* a stop request of any rank, folded: SIGTERM if any was, else SIGINT, else 0 */
    int nonfinite;      /* a device found NaN/Inf in the gradients checked (no update may be applied) */
} dp_step_sums;
typedef struct {
    const int *count;   /* (n_local) each replica's samples of the step */
    int host_lanes;     /* DP_LANES_*: where the step's loss and hits come from */
    const int *check;   /* (n_local) replica r steps with its gradients, final now: check them on a
                           device for NaN/Inf in the same round trip (the CPU's SGD step checks itself) */
    int (*stop_request)(void); /* this process's pending stop signal (0: none); may be NULL */
    int inject_inf;     /* tests (DPTRAIN_INJECT_INF_GRAD_STEP): +Inf in the first checked gradient first */
} dp_step_in;
/* The floats of a step's sums: loss, hits, count, stop, SIGTERM, non-finite gradients. */
#define DP_STEP_METRICS 6
/* The step's sums in one host round trip (dp_exec_step_metrics): the stop request rides along. */
dp_status dp_exec_step_sums(dp_executor *ex, const dp_step_in *in, dp_step_sums *out);
/* Where a step's loss and hits come from (dp_step_in.host_lanes): the lanes', summed on their device
 * (or the host); the lanes' host copies, which the strategy wrote (dp_exec_set_lane_sums); or what
 * the strategy gave on the device (dp_exec_set_step_loss). */
enum { DP_LANES_DEVICE = 0, DP_LANES_HOST = 1, DP_LANES_GIVEN = 2 };
/* Replica r's lanes' loss and hits written on the host (host_lanes): lane 0 gets them, the others 0. */
void dp_exec_set_lane_sums(dp_executor *ex, int r, float loss, int32_t hits);
/* The step's loss and hits as a strategy computed them on local replica r's device (DataParallel's
 * master; r < 0: none here), for dp_exec_step_sums with DP_LANES_GIVEN: the fixed tree over each
 * of `groups` groups of `per` lane losses (loss, contiguous), then over the groups (the additions
 * DDP makes in its lanes and its all-reduce), and the hits summed; every other local replica's are
 * 0. Queued on the device, no wait (a graph may record it); loss is overwritten; pairs: 2 x groups
 * floats of scratch on r's device. */
dp_status dp_exec_set_step_loss(dp_executor *ex, int r, int groups, int per, float *loss, const int32_t *hits,
                                float *pairs);
/* After a NaN/Inf loss sum: the global rank of a local replica with a non-finite lane loss (the lanes
 * fetched from the device for it), -1 when another process's was. */
dp_status dp_exec_nonfinite_rank(dp_executor *ex, int *rank);
/* The step's collectives' event times into the comm meter (waits for the collective stream, whose
 * work the step has already waited for where it reads a result). */
dp_status dp_exec_collect_coll_times(dp_executor *ex);
dp_status dp_exec_coll_timing_start(dp_executor *ex);
void dp_exec_coll_timing_free(dp_executor *ex);
/* fn(arg), a micro-step's passes (zeroing on micro-step 0, forward, backward and the collectives
 * among them), recorded once its key repeats and replayed after (graph.h), where graphs are on. The
 * key is what the recorded work depends on: the micro-step's place (mi), the lanes and their counts
 * (b: the local replicas' batches) and whether lanes 1.. start clear. After it, the lanes'
 * bookkeeping a replay skipped is kept. */
dp_status dp_exec_run_graph(dp_executor *ex, const dp_batch *b, const dp_micro_info *mi, dp_status (*fn)(void *),
                            void *arg);
/* How a micro-step's passes keep the replicas' gradients equal (a strategy's choice, made once):
 * rank 0's BN buffers broadcast before each forward (PyTorch's broadcast_buffers), and on the last
 * micro-step every gradient bucket all-reduced (sum), each started as soon as backward completes it
 * (overlap) or all after backward; the passes end once every all-reduce is done. */
typedef struct {
    int broadcast_buffers;
    int allreduce;
    int overlap;
} dp_exec_sync;
/* One micro-step's passes: zeroing (micro-step 0), the buffers' broadcast, forward (scale: the
 * gradient's, 1/step samples), backward with the buckets' all-reduces as sync says; one graph where
 * the device records (dp_exec_run_graph). */
dp_status dp_exec_micro_passes(dp_executor *ex, const dp_batch *b, const dp_micro_info *mi, float scale,
                               const dp_exec_sync *sync);
/* Runs fn(arg, r) for every local replica, in parallel over threads on the CPU and over the devices'
 * threads with the replicas on several devices (dp_exec_dev_team). */
dp_status dp_exec_for_replicas(dp_executor *ex, dp_status (*fn)(void *arg, int r), void *arg);

/* The optimizer step of local replica r on its device (its stream), or of every local replica
 * (DP_EXEC_ALL, over dp_exec_for_replicas' threads), with o's settings and learning rate lr; one
 * graph where the device records (keyed by r and lr). */
#define DP_EXEC_ALL (-1)
dp_status dp_exec_optimizer_step(dp_executor *ex, int r, const dp_sgd *o, float lr);
/* Replica r's logits of this micro-step, its slots' rows packed in lane order, copied to dst (on
 * its device, max_local x n_classes floats); and the reverse for their gradients from src into
 * the slots, where backward starts. */
dp_status dp_exec_logits(dp_executor *ex, int r, float *dst);
dp_status dp_exec_set_dlogits(dp_executor *ex, int r, const float *src);
/* The loss (the model's head, nn/head.h) of n rows of logits with int32 labels, all on
 * replica r's device: *loss the sum, *hits the correct, dlogits (n x classes) the gradient of
 * scale x the sum. */
dp_status dp_exec_loss(dp_executor *ex, int r, int n, const float *logits, const int32_t *labels, float scale,
                       float *dlogits, float *loss, int32_t *hits);

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
/* The run's communication statistics, one owner: the backend's calls and bytes (a replayed graph's
 * added), and their seconds: the collective stream's events where an async device times them, else
 * the backend's host-timed calls; *hidden_s: the seconds of all-reduces started while backward work
 * remained (events: the part of them before backward ended). Reset at each epoch's start. */
void dp_exec_comm_reset(dp_executor *ex);
void dp_exec_comm_read(const dp_executor *ex, dp_comm_stats *stats, double *hidden_s);
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

/* The run's memory against what the devices (each one's free memory, less its reserve and what
 * the backend may still take there, for the replicas on it: sh->per_device) or the host can give. */
dp_status dp_exec_check_memory(dp_dev *const *devs, int n_devs, dp_backend_t backend, const dp_mem_estimate *e,
                               const dp_mem_shape *sh, int data_loaded);

#endif
