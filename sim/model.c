/* model.c: the overhead model's formulas (docs/overhead-model.md, section by section). */
#include "sim/model.h"

#include <math.h>
#include <string.h>

static double log2_ceil(int n) {
    int k = 0;
    while ((1 << k) < n) k++;
    return k;
}

/* Expected maximum of n independent standard normal samples (0 for n = 1): by quadrature of
 * n x phi(x) Phi(x)^(n-1) over [-10, 10]. */
double dp_expected_max_normal(int n) {
    if (n < 2) return 0;
    const int steps = 4000;
    const double lo = -10, h = 20.0 / steps;
    double sum = 0;
    for (int i = 0; i <= steps; i++) {
        double x = lo + i * h, phi = exp(-0.5 * x * x) / sqrt(2 * M_PI), Phi = 0.5 * erfc(-x / sqrt(2));
        double f = x * n * phi * pow(Phi, n - 1);
        sum += (i == 0 || i == steps) ? 0.5 * f : f;
    }
    return sum * h;
}

double dp_sync_wait_seconds(const dp_topology *t, int n) { return t->sync_jitter_s * dp_expected_max_normal(n); }

double dp_coll_seconds(const dp_topology *t, dp_coll_kind kind, double bytes, int n) {
    if (n < 2) return 0;
    const int ki = dp_topology_kind_index(kind);
    if (ki >= 0 && t->kind_bw[ki] > 0) { /* its own fit, to the ring formula it was fitted with */
        const double a = t->kind_latency_s[ki], B = t->kind_bw[ki];
        return kind == DP_COLL_GATHER || kind == DP_COLL_SCATTER ? (n - 1) * (a + bytes / B) : (n - 1) * a + bytes / B;
    }
    const double a = t->latency_s, B = t->bus_bw, nm1 = n - 1;
    const int tree = t->algorithm == DP_ALGO_TREE;
    switch (kind) {
    case DP_COLL_ALLREDUCE: /* ring: reduce-scatter + all-gather; tree: reduce up, broadcast down, pipelined */
        return tree ? 2 * log2_ceil(n) * a + 2 * bytes / B : 2 * nm1 * a + 2 * nm1 / n * bytes / B;
    case DP_COLL_BROADCAST: /* pipelined along the ring (or down the tree): each link carries S once */
    case DP_COLL_REDUCE:
        return (tree ? log2_ceil(n) : nm1) * a + bytes / B;
    case DP_COLL_ALLGATHER: /* every device receives the n - 1 other shares */
        return nm1 * a + nm1 * bytes / B;
    case DP_COLL_GATHER: /* the root's link carries n - 1 shares, one message each */
    case DP_COLL_SCATTER:
        if (t->p2p) return nm1 * (a + bytes / B);
        /* no P2P: each share is staged through host memory, two crossings of a host link */
        return nm1 * 2 * (t->host_latency_s + bytes / t->host_bw);
    default:
        return n > 1 ? log2_ceil(n) * a : 0;
    }
}

double dp_host_scatter_seconds(const dp_topology *t, double share_bytes, int n) {
    if (n < 2) return 0;
    /* processes sharing the host's memory scatter with the backend's scatter: its own fit */
    if (t->shared_memory_bus && t->kind_bw[dp_topology_kind_index(DP_COLL_SCATTER)] > 0)
        return dp_coll_seconds(t, DP_COLL_SCATTER, share_bytes, n);
    int copies = t->shared_memory_bus ? n - 1 : n;
    return copies * (t->host_latency_s + share_bytes / t->host_bw);
}

double dp_ddp_overlap(const double *bwd, int n_nodes, const int *ready_node, const double *comm, int n_buckets,
                      double *exposed) {
    double total = 0;
    for (int i = 0; i < n_nodes; i++) total += bwd[i];
    double end = 0;
    for (int k = 0; k < n_buckets; k++) {
        double ready = 0; /* backward runs from the last node down to ready_node[k] */
        for (int i = n_nodes - 1; i >= ready_node[k] && i >= 0; i--) ready += bwd[i];
        double start = ready > end ? ready : end;
        end = start + comm[k];
    }
    *exposed = end > total ? end - total : 0;
    return end;
}

/* One device's share of the global batch (the largest, which sets the pace). */
static int share_of(int global_batch, int n) { return (global_batch + n - 1) / n; }

/* A device's compute. On a CPU its share of b samples is cut into `lanes` chunks of
 * ceil(b / lanes) samples; `workers` threads run them, so a node takes ceil(lanes / workers)
 * lane-times, and the lanes' gradients are then added with the lane tree: lanes - 1 additions
 * of the gradient arena. On a GPU (lanes = workers = 1) a node takes at least its kernels'
 * launches (launch_mult devices' worth when one host thread launches for several, as
 * DataParallel's does); the launch time above the kernels' own is host time. */
typedef struct {
    double fwd, bwd, loss, lane_sums, launch_excess;
    double bwd_nodes[DP_PROFILE_MAX_NODES];
} compute_t;

static compute_t compute_of(const dp_profile *p, const dp_topology *t, int batch, int lanes, int workers,
                            int concurrent, int launch_mult) {
    compute_t c = {0};
    if (lanes < 1) lanes = 1;
    if (workers < 1) workers = 1;
    const int lane_batch = (batch + lanes - 1) / lanes, rounds = (lanes + workers - 1) / workers;
    for (int i = 0; i < p->n_nodes; i++) {
        double f, b;
        dp_profile_node(p, i, lane_batch, concurrent, &f, &b);
        f *= rounds, b *= rounds;
        double lf = launch_mult * p->kernels_fwd[i] * t->launch_s, lb = launch_mult * p->kernels_bwd[i] * t->launch_s;
        if (lf > f) c.launch_excess += lf - f, f = lf;
        if (lb > b) c.launch_excess += lb - b, b = lb;
        c.fwd += f, c.bwd += b;
        c.bwd_nodes[i] = b;
    }
    c.loss = rounds * dp_profile_loss(p, lane_batch, concurrent);
    c.lane_sums = (lanes - 1) * dp_profile_lane_sum(p, concurrent);
    /* the trainer splits a large lane tree over its threads (step.c: sum_lanes) */
    if ((double)p->param_floats * lanes > 262144) c.lane_sums /= workers;
    /* more workers than the shared host has cores: they take turns */
    if (t->shared_memory_bus && concurrent > t->devices) {
        double f = (double)concurrent / t->devices;
        c.fwd *= f, c.bwd *= f, c.loss *= f, c.lane_sums *= f;
        for (int i = 0; i < p->n_nodes; i++) c.bwd_nodes[i] *= f;
    }
    return c;
}

/* Workers busy at once: all devices' threads on a shared host, one per GPU otherwise. */
static int concurrency(const dp_topology *t, const dp_predict_query *q) {
    if (!t->shared_memory_bus) return 1;
    int lanes = q->lanes > 0 ? q->lanes : 1, workers = q->workers > 0 ? q->workers : 1;
    return q->devices * (workers < lanes ? workers : lanes);
}

static dp_status check(const dp_profile *p, const dp_predict_query *q) {
    if (q->devices < 1 || q->global_batch < q->devices)
        return dp_fail(DP_ERR_USAGE, "predict: %d devices need a global batch of at least as many samples (got %d)",
                       q->devices, q->global_batch);
    if (p->n_nodes < 1 || p->n_rows < 1) return dp_fail(DP_ERR_USAGE, "predict: the compute profile is empty");
    return DP_OK;
}

/* The CPU trainer's step overhead for a process of this query's lanes and threads: only for
 * CPU processes (shared-memory topologies); a GPU's host costs are its launches and calls. */
static double overhead(const dp_profile *p, const dp_topology *t, const dp_predict_query *q) {
    if (!t->shared_memory_bus) return 0;
    return dp_profile_overhead(p, q->lanes > 0 ? q->lanes : 1, q->workers > 0 ? q->workers : 1);
}

/* DDP: buffers broadcast, forward, loss, backward with bucketed all-reduces overlapping it on a
 * communication stream, every replica steps; plus dptrain's per-step metrics all-reduce. */
static void predict_ddp(const dp_profile *p, const dp_topology *t, const dp_predict_query *q, dp_prediction *o) {
    const int n = q->devices, conc = concurrency(t, q);
    compute_t c = compute_of(p, t, share_of(q->global_batch, n), q->lanes, q->workers, conc, 1);
    double opt = dp_profile_opt(p, conc);
    double comm[DP_PROFILE_MAX_BUCKETS], exposed = 0, comm_total = 0;
    long calls = 0;
    if (n > 1) {
        /* each bucket's all-reduce also waits for the slowest rank to reach it */
        const double wait = dp_sync_wait_seconds(t, n);
        for (int k = 0; k < p->n_buckets; k++)
            comm_total += comm[k] = dp_coll_seconds(t, DP_COLL_ALLREDUCE, 4.0 * p->bucket_floats[k], n) + wait;
        dp_ddp_overlap(c.bwd_nodes, p->n_nodes, p->bucket_node, comm, p->n_buckets, &exposed);
        calls += p->n_buckets;
        double bb = p->buffer_floats ? dp_coll_seconds(t, DP_COLL_BROADCAST, 4.0 * p->buffer_floats, n) : 0;
        double metrics = dp_coll_seconds(t, DP_COLL_ALLREDUCE, 12, n);
        calls += (p->buffer_floats ? 1 : 0) + 1;
        exposed += bb + metrics, comm_total += bb + metrics;
    }
    /* the optimizer's first pass over the gradients the all-reduce wrote */
    if (n > 1) opt += t->touch_allreduce_s_per_byte * 4.0 * p->param_floats;
    /* the lane sums of the buckets finish before their all-reduces start: on the critical path */
    o->compute_s = c.fwd + c.loss + c.bwd + c.lane_sums + opt;
    o->loss_opt_s = c.loss + opt;
    o->exposed_comm_s = exposed;
    o->serial_s = 0;
    const double over = overhead(p, t, q);
    o->host_s = calls * t->host_call_s + c.launch_excess + over;
    o->comm_s = comm_total;
    o->collectives = calls;
    o->step_s = o->compute_s + o->exposed_comm_s + calls * t->host_call_s + over;
}

/* DataParallel: one process drives every device and nothing overlaps: replicate (parameters
 * and buffers broadcast in 10 MiB chunks), scatter the input from host memory, forward, gather
 * the outputs to the master, loss there over the whole batch, scatter the output gradients,
 * backward, reduce the gradients to the master (10 MiB chunks), the master steps alone. */
static void predict_dp(const dp_profile *p, const dp_topology *t, const dp_predict_query *q, dp_prediction *o) {
    const int n = q->devices, conc = concurrency(t, q);
    const int b = share_of(q->global_batch, n);
    /* one host thread launches for all devices: n devices' launches per node */
    compute_t c = compute_of(p, t, b, q->lanes, q->workers, conc, t->shared_memory_bus ? 1 : n);
    double loss = n > 1 ? dp_profile_loss(p, q->global_batch, 1) : c.loss;
    double opt = dp_profile_opt(p, 1);
    double serial = 0;
    long calls = 0;
    if (n > 1) {
        double pbytes = 4.0 * (p->param_floats + p->buffer_floats);
        double chunks = ceil(pbytes / DP_COALESCE_BYTES), gchunks = ceil(4.0 * p->param_floats / DP_COALESCE_BYTES);
        serial += chunks * dp_coll_seconds(t, DP_COLL_BROADCAST, pbytes / chunks, n);
        serial += dp_host_scatter_seconds(t, 4.0 * b * p->input_floats, n);
        serial += dp_coll_seconds(t, DP_COLL_GATHER, 4.0 * b * (p->n_classes + 1), n); /* logits and labels */
        serial += dp_coll_seconds(t, DP_COLL_SCATTER, 4.0 * b * p->n_classes, n);
        serial += gchunks * dp_coll_seconds(t, DP_COLL_REDUCE, 4.0 * p->param_floats / gchunks, n);
        serial += dp_coll_seconds(t, DP_COLL_ALLREDUCE, 12, n); /* dptrain's per-step metrics */
        /* the gather follows the replicas' forward, the reduce their backward: each waits for the
           slowest; the others follow the master's own work, already on the path */
        serial += 2 * dp_sync_wait_seconds(t, n);
        /* the master's optimizer writes the parameters the replicas read at the step's start */
        opt += t->touch_broadcast_s_per_byte * 4.0 * p->param_floats;
        calls = (long)chunks + 3 + (long)gchunks + 1;
    }
    o->compute_s = c.fwd + loss + c.bwd + c.lane_sums + opt;
    o->loss_opt_s = loss + opt;
    o->exposed_comm_s = 0;
    o->serial_s = serial;
    const double over = overhead(p, t, q);
    o->host_s = calls * t->host_call_s + c.launch_excess + over;
    o->comm_s = serial;
    o->collectives = calls;
    o->step_s = o->compute_s + serial + calls * t->host_call_s + over;
}

dp_status dp_predict(const dp_profile *p, const dp_topology *t, const dp_predict_query *q, dp_prediction *out) {
    DP_TRY(check(p, q));
    memset(out, 0, sizeof *out);
    if (q->mode == DP_PREDICT_DP) predict_dp(p, t, q, out);
    else predict_ddp(p, t, q, out);
    out->epoch_s = out->step_s * (double)q->steps_per_epoch;
    return DP_OK;
}

dp_status dp_predict_sweep(const dp_profile *p, const dp_topology *t, const dp_predict_query *q, const int *devices,
                           int n, dp_prediction *out) {
    dp_predict_query one = *q;
    one.devices = 1;
    dp_prediction base;
    DP_TRY(dp_predict(p, t, &one, &base));
    for (int i = 0; i < n; i++) {
        dp_predict_query qi = *q;
        qi.devices = devices[i];
        DP_TRY(dp_predict(p, t, &qi, &out[i]));
        out[i].speedup = out[i].step_s > 0 ? base.step_s / out[i].step_s : 0;
        out[i].efficiency = out[i].speedup / devices[i];
    }
    return DP_OK;
}
