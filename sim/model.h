/* model.h: the overhead model: a pure function from a compute profile (what one worker's nodes
 * cost), a topology (what the links and the host cost) and a query (mode, devices, batch) to a
 * predicted step: the collectives each mode issues, when each can start, what overlaps and
 * what is exposed. No clocks, no I/O: every formula is in docs/overhead-model.md and is
 * unit-tested on synthetic inputs (tests/test_overhead_model.c). */
#ifndef DP_SIM_MODEL_H
#define DP_SIM_MODEL_H

#include "backends/backend.h"
#include "sim/profile.h"
#include "sim/topology.h"

typedef enum { DP_PREDICT_DDP = 0, DP_PREDICT_DP = 1 } dp_predict_mode;

/* PyTorch coalesces DataParallel's broadcasts and reduces in chunks of this many bytes. */
#define DP_COALESCE_BYTES (10.0 * 1024 * 1024)

typedef struct {
    dp_predict_mode mode;
    int devices;
    int global_batch;
    long steps_per_epoch;
    int lanes;            /* CPU: fixed chunks of a device's share, each summed apart and then added with
                             the lane tree (data/chunks.h); 1 on a GPU */
    int workers;          /* CPU: threads per device that run the lanes, single-threaded each; 1 on a GPU */
} dp_predict_query;

/* The expected maximum of n independent standard normal samples (0 for n < 2; 0.564 for 2,
 * 1.029 for 4, 1.424 for 8, 1.766 for 16). */
double dp_expected_max_normal(int n);
/* The wait at one synchronisation point that follows the ranks' own compute: the slowest of n
 * ranks arrives sync_jitter x E[max of n normals] after their mean (0 for n = 1). */
double dp_sync_wait_seconds(const dp_topology *t, int n);

/* Seconds of one collective of `bytes` per replica over n devices (0 for n = 1). For gather and
 * scatter, bytes is one replica's share; the root's link carries n - 1 of them. */
double dp_coll_seconds(const dp_topology *t, dp_coll_kind kind, double bytes, int n);
/* DataParallel's input scatter from host memory: n shares over the host link (n - 1 when the
 * devices share the host's memory, as MPI processes do: the master's share does not move). */
double dp_host_scatter_seconds(const dp_topology *t, double share_bytes, int n);

/* DDP's overlap on one communication stream. Backward runs nodes n_nodes-1 .. 0 taking bwd[i]
 * seconds each; bucket k (in order) is ready after node ready_node[k] and its all-reduce takes
 * comm[k]; it starts when it is ready and bucket k-1 is done. Returns when the last one ends,
 * measured from the start of backward; *exposed is what runs past the end of backward. */
double dp_ddp_overlap(const double *bwd, int n_nodes, const int *ready_node, const double *comm, int n_buckets,
                      double *exposed);

typedef struct {
    double step_s, epoch_s;
    double compute_s;       /* forward, loss, backward, optimizer on the critical path */
    double loss_opt_s;      /* of which the loss and the optimizer (a measured step cannot be shorter) */
    double exposed_comm_s;  /* DDP: communication not hidden behind backward (buffers broadcast included) */
    double serial_s;        /* DP: the chain of replicate, scatter, gather, scatter, reduce */
    double host_s;          /* host costs per collective call and kernel launches not hidden */
    double comm_s;          /* all communication, hidden or not */
    long collectives;       /* calls per step */
    double speedup, efficiency; /* against one device (filled by dp_predict_sweep) */
} dp_prediction;

/* One step of the query's mode on query->devices devices. */
dp_status dp_predict(const dp_profile *p, const dp_topology *t, const dp_predict_query *q, dp_prediction *out);
/* dp_predict for each of n device counts, with speedup and efficiency against 1 device. */
dp_status dp_predict_sweep(const dp_profile *p, const dp_topology *t, const dp_predict_query *q, const int *devices,
                           int n, dp_prediction *out);

#endif
