/* executor_impl.h: the executor's state, private to src/exec/ (tests/include_arrows.sh checks
 * that nothing outside it includes this header); everything else goes through executor.h. */
#ifndef DP_EXECUTOR_IMPL_H
#define DP_EXECUTOR_IMPL_H

#include "exec/executor.h"

/* The one owner of the run's communication statistics (coll.c; read by dp_exec_comm_read): the
 * backend's calls, bytes and host-timed seconds (backend->stats; a replayed graph adds what its
 * recording added, graph.c), the seconds of all-reduces started while backward work remained, and
 * an async device's collectives timed by events on the collective stream (eager runs; a replayed
 * graph's are not): a pair per collective this step, and the main stream's end of backward; their
 * seconds, and the part of the overlapped ones before that end, summed per kind over the epoch.
 * timed: these replace the backend's host seconds. */
typedef struct {
    double overlap_s;         /* host seconds of all-reduces issued while backward work remained */
    int timed;
    void *ev;
    int n, cap;
    unsigned char *kind, *overlap;
    int bwd_end_recorded;
    double s[DP_COLL_KINDS], hidden_s;
    int drained;              /* n when a download last waited for every collective of the step */
} dp_comm_meter;

/* Several steps as one launch (launch.h): the pinned staging of k steps' indices and of the host's
 * part of their metrics, the device's copies, each replica's metrics blocks on its device, where
 * replica 0's blocks come down to, and each replica's state copied aside at a launch's start. */
typedef struct {
    int k;                    /* steps a launch may hold; 0: not allocated */
    int micros;               /* and micro-steps (k x --accumulate) */
    int slot;                 /* the step being queued inside a launch; -1 outside one */
    int micro;                /* the next micro-step's slot of indices inside a launch */
    int32_t *h_idx, *d_idx;   /* (micros x n_local x max_local) */
    float **h_up, **d_m;      /* (n_local) k x DP_STEP_METRICS each */
    float *h_down;            /* (k x DP_STEP_METRICS) */
    float **snap;             /* (n_local) parameters, momentum, BN buffers */
    int lanes_clear;          /* ex->lanes_clear at the last launch's start */
} dp_launch_state;

struct dp_executor {
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
    dp_req *bucket_req;       /* (n_buckets) the bucket's all-reduce in flight (dp_exec_micro_passes) */
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
    float **step_bufs;        /* (n_local) DP_STEP_METRICS floats each: dp_exec_step_sums' */
    size_t hc_floats;
    /* multi_dev: replica 0's parameters and BN buffers on each other replica's device, which
       evaluation reads (dp_exec_eval_weights); NULL elsewhere */
    float **eval_params, **eval_buffers;
    /* --predict / --save-profile on the CPU: per slot q, node i's forward (q, 0, i) and backward
       (q, 1, i) seconds summed over the run; NULL: not timing */
    double *node_s;
    long node_runs, node_samples;
    char slot_error[512];     /* the first failure's message on a thread of the passes' team */
    dp_status stretch_status; /* a lane fork's or join's failure in the current stretch (passes.c) */
    dp_comm_meter comm;       /* the communication statistics (coll.c) */
    dp_launch_state launch;   /* launch.c */
};

/* (coll.c) An all-reduce that overlaps (ready_node: the backward node that completed its data, for the
 * collective trace; more_backward: backward work remains to hide it): it waits for the compute before it; nothing waits for it until
 * dp_exec_wait_all, which waits for requests 0..n-1 and makes the compute after it wait too. */
dp_status dp_exec_allreduce_start(dp_executor *ex, float *const *bufs, size_t n, dp_req *req, int ready_node,
                                  int more_backward);
dp_status dp_exec_wait_all(dp_executor *ex, const dp_req *reqs, int n);
/* The keys of the recorded parts (graph.h): a micro-step's passes, the optimizer step. */
enum { DP_EXEC_PART_PASSES = 0, DP_EXEC_PART_OPTIMIZER = 1 };

/* Allocated and freed with the executor (stepmetrics.c, coll.c). */
dp_status dp_exec_metrics_alloc(dp_executor *ex);
void dp_exec_metrics_free(dp_executor *ex);

#endif
