/* stepmetrics.c: a step's loss, hits, sample count and stop flags over every replica of every
 * process. On host memory (the CPU) they are summed on the host and all-reduced as any host
 * array. On a device each replica's values are summed where its lanes computed them, completed
 * with the host's values (uploaded from pinned memory, so nothing waits), all-reduced on the
 * devices by the backend, and replica 0's sums come down once: one host round trip a step
 * instead of a download of the lanes and another of the all-reduced array. The sums are the
 * same in both: the fixed tree over the lanes, then the backend's over the replicas. A device's
 * check of the gradients for NaN/Inf rides in the same buffer (the CPU's SGD step makes its own). */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "core/treesum.h"
#include "exec/executor_impl.h"
#include "exec/launch.h"

static int host_memory(const dp_executor *ex) { return (ex->dev->caps & DP_CAP_HOST_MEMORY) != 0; }

dp_status dp_exec_metrics_alloc(dp_executor *ex) {
    DP_ALLOC(ex->step_bufs, ex->n_local, "metrics");
    for (int r = 0; r < ex->n_local; r++) DP_ALLOC(ex->step_bufs[r], DP_STEP_METRICS, "metrics");
    if (host_memory(ex)) return DP_OK;
    DP_ALLOC(ex->d_metrics, ex->n_local, "step metrics");
    DP_ALLOC(ex->h_metrics_up, ex->n_local, "step metrics");
    for (int r = 0; r < ex->n_local; r++) {
        const dp_dev *d = dp_exec_dev(ex, r);
        DP_TRY(d->alloc(d, &ex->d_metrics[r], DP_EXEC_METRICS, "step metrics"));
        DP_TRY(d->host_alloc(d, (void **)&ex->h_metrics_up[r], DP_EXEC_METRICS * sizeof(float), "step metrics"));
    }
    return ex->dev->host_alloc(ex->dev, (void **)&ex->h_metrics_down, DP_EXEC_METRICS * sizeof(float), "step metrics");
}

void dp_exec_metrics_free(dp_executor *ex) {
    for (int r = 0; ex->rep && r < ex->n_local; r++) {
        const dp_dev *d = ex->rep[r].dev;
        if (!d) continue;
        if (ex->d_metrics) d->free(d, ex->d_metrics[r]);
        if (ex->h_metrics_up) d->host_free(d, ex->h_metrics_up[r]);
    }
    if (ex->h_metrics_down) ex->dev->host_free(ex->dev, ex->h_metrics_down);
    for (int r = 0; ex->step_bufs && r < ex->n_local; r++) free(ex->step_bufs[r]);
    free(ex->step_bufs), ex->step_bufs = NULL;
    free(ex->d_metrics), free(ex->h_metrics_up);
    ex->d_metrics = ex->h_metrics_up = NULL, ex->h_metrics_down = NULL;
}

/* Replica r's loss and hits from the lanes' host copies (the tree leaves its partial sums there). */
static void host_sums(dp_executor *ex, int r, float *out) {
    const size_t L = (size_t)ex->n_lanes;
    long correct = 0;
    for (size_t l = 0; l < L; l++) correct += ex->lane_correct[(size_t)r * L + l];
    out[0] = dp_tree_sum_scalars(ex->lane_loss + (size_t)r * L, ex->n_lanes, 1);
    out[1] = (float)correct;
}

dp_status dp_exec_step_metrics(dp_executor *ex, float *const *bufs, size_t n, int host_lanes, const int *check,
                               size_t check_at) {
    if (n < 2 || n > DP_EXEC_METRICS)
        return dp_fail(DP_ERR_INTERNAL, "step metrics of %zu floats (2 to %d)", n, DP_EXEC_METRICS);
    if (check && (check_at < 2 || check_at >= n))
        return dp_fail(DP_ERR_INTERNAL, "the gradients' check at %zu of %zu step metrics", check_at, n);
    if (host_memory(ex) || host_lanes == DP_LANES_HOST)
        for (int r = 0; r < ex->n_local; r++) host_sums(ex, r, bufs[r]);
    /* not through the backend's statistics: bookkeeping, not gradient traffic */
    if (host_memory(ex)) return dp_exec_host_allreduce(ex, bufs, n);
    const size_t skip = host_lanes == DP_LANES_HOST ? 0 : 2; /* what the device holds already */
    for (int r = 0; r < ex->n_local; r++) {
        const dp_dev *d = dp_exec_dev(ex, r);
        if (host_lanes == DP_LANES_DEVICE) d->k->lane_metrics(&d->main.kc, ex->n_lanes, ex->d_lane_loss[r], ex->d_lane_correct[r], ex->d_metrics[r]);
        /* the last step's upload from this pinned copy is done: on replica 0's device the step's
           download proved it, elsewhere the device's event says so (the collective need not have
           made replica 0's sums wait for it) */
        const int i = ex->multi_dev ? r : 0;
        DP_TRY(dp_exec_staging_ready(ex, i, DP_EXEC_STAGES));
        memcpy(ex->h_metrics_up[r], bufs[r], n * sizeof(float));
        DP_TRY(d->upload(d, ex->d_metrics[r] + skip, ex->h_metrics_up[r] + skip, (n - skip) * sizeof(float)));
        if (ex->multi_dev || r == ex->n_local - 1) DP_TRY(dp_exec_staging_queued(ex, i, DP_EXEC_STAGES));
        /* after the upload, in stream order: it wrote the flag's 0 */
        if (check && check[r]) d->k->nonfinite(&d->main.kc, ex->model->params.n, ex->rep[r].grads, ex->d_metrics[r] + check_at);
    }
    const struct dp_backend_i *b = ex->backend->iface;
    DP_TRY(dp_exec_colls_wait_mains(ex));
    DP_TRY(b->allreduce(ex->backend, ex->d_metrics, n, DP_SUM));
    DP_TRY(dp_exec_mains_wait_colls(ex));
    /* the one wait: replica 0's sums, which every replica's work before the all-reduce fed */
    DP_TRY(ex->dev->download(ex->dev, ex->h_metrics_down, ex->d_metrics[0], n * sizeof(float)));
    for (int r = 0; r < ex->n_local; r++) memcpy(bufs[r], ex->h_metrics_down, n * sizeof(float));
    /* what the step's timed collectives waited for is done */
    ex->comm.drained = ex->comm.n;
    return DP_OK;
}

void dp_exec_set_lane_sums(dp_executor *ex, int r, float loss, int32_t hits) {
    for (int l = 0; l < ex->n_lanes; l++) ex->lane_loss[(size_t)r * ex->n_lanes + l] = 0;
    for (int l = 0; l < ex->n_lanes; l++) ex->lane_correct[(size_t)r * ex->n_lanes + l] = 0;
    ex->lane_loss[(size_t)r * ex->n_lanes] = loss; /* the others stay 0: x + 0 = x */
    ex->lane_correct[(size_t)r * ex->n_lanes] = hits;
}

dp_status dp_exec_nonfinite_rank(dp_executor *ex, int *rank) {
    /* the lanes' values (the tree's partial sums, a non-finite one among them), fetched only now
       where they stayed on the device */
    DP_TRY(dp_exec_fetch_lane_losses(ex));
    *rank = -1;
    for (int r = 0; r < ex->n_local && *rank < 0; r++)
        for (int l = 0; l < ex->n_lanes; l++)
            if (!isfinite(ex->lane_loss[(size_t)r * ex->n_lanes + (size_t)l])) {
                *rank = ex->rep[r].rank;
                break;
            }
    return DP_OK;
}

/* DPTRAIN_INJECT_INF_GRAD_STEP (tests only): +Inf in the first gradient of each replica the step
 * checks, once its gradients are final: a NaN/Inf gradient with a finite loss. Queued as any
 * upload (on a device: no wait). */
static dp_status inject_grad_fault(dp_executor *ex, const int *check) {
    static const float inf = INFINITY; /* an upload's source stays valid until the next wait */
    for (int r = 0; r < ex->n_local; r++) {
        const dp_dev *d = dp_exec_dev(ex, r);
        if (check[r]) DP_TRY(d->upload(d, ex->rep[r].grads, &inf, sizeof inf));
    }
    return DP_OK;
}

dp_status dp_exec_step_sums(dp_executor *ex, const dp_step_in *in, dp_step_sums *out) {
    float **m = ex->step_bufs;
    if (in->inject_inf) DP_TRY(inject_grad_fault(ex, in->check));
    if (dp_exec_launch_slot(ex) >= 0) return dp_exec_launch_sums(ex, in, out); /* read after the launch */
    /* the stop request rides along: one host all-reduce per step, not two */
    const int pending = in->stop_request ? in->stop_request() : 0;
    for (int r = 0; r < ex->n_local; r++) {
        m[r][2] = (float)in->count[r];
        m[r][3] = pending != 0;
        m[r][4] = pending == SIGTERM;
        m[r][5] = 0; /* a device's check of the gradients adds 1 */
    }
    /* the lanes' sums [0], [1], the gradients' check [5] and the all-reduce, in one round trip
       where the lanes are not the host's */
    DP_TRY(dp_exec_step_metrics(ex, m, DP_STEP_METRICS, in->host_lanes, in->check, 5));
    out->stop = m[0][3] > 0 ? (m[0][4] > 0 ? SIGTERM : SIGINT) : 0;
    out->nonfinite = m[0][5] > 0;
    out->loss = m[0][0];
    out->hits = lrintf(m[0][1]);
    out->count = lrintf(m[0][2]);
    return DP_OK;
}
