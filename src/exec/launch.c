/* launch.c: several optimizer steps as one graph launch (launch.h). */
#include "exec/launch.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "exec/executor_impl.h"

#define M DP_STEP_METRICS

int dp_exec_launch_possible(const dp_executor *ex) { return dp_exec_no_launch_reason(ex) == NULL; }

const char *dp_exec_no_launch_reason(const dp_executor *ex) {
    if (!(ex->dev->caps & DP_CAP_GRAPHS)) return "the device records no graphs (--device cuda does)";
    /* one device: the indices and the launch's graph are its own (make_resident, graphs_on) */
    if (ex->multi_dev) return "one process drives several GPUs (--gpus)";
    if (!ex->graphs_on)
        return "graphs are off in this run (--no-graph, --predict or --save-profile, or a backend whose collectives "
               "cannot be recorded)";
    if (!ex->resident) return "the training set is not on the device (--augment)";
    return NULL;
}

int dp_exec_records_graphs(const dp_executor *ex) { return (ex->dev->caps & DP_CAP_GRAPHS) != 0; }

int dp_exec_launch_slot(const dp_executor *ex) { return ex->launch.k ? ex->launch.slot : -1; }

static size_t idx_per_step(const dp_executor *ex) { return (size_t)ex->n_local * (size_t)ex->max_local; }

/* The floats of replica r's copy aside: parameters, momentum, BN buffers. */
static size_t snap_floats(const dp_executor *ex) { return 2 * ex->model->params.n + ex->model->buffers.n; }

dp_status dp_exec_launch_alloc(dp_executor *ex, int k, int micros) {
    dp_launch_state *L = &ex->launch;
    if (!dp_exec_launch_possible(ex))
        return dp_fail(DP_ERR_INTERNAL, "launches of several steps where graphs or the data on the device are off");
    if (k < 2 || k > DP_LAUNCH_MAX) return dp_fail(DP_ERR_INTERNAL, "a launch of %d steps (2 to %d)", k, DP_LAUNCH_MAX);
    const dp_dev *d = ex->dev;
    if (micros < k) return dp_fail(DP_ERR_INTERNAL, "a launch of %d steps in %d micro-steps", k, micros);
    L->k = k, L->micros = micros, L->slot = -1;
    const size_t ni = (size_t)micros * idx_per_step(ex);
    DP_TRY(d->host_alloc(d, (void **)&L->h_idx, ni * sizeof(int32_t), "the launch's indices"));
    DP_TRY(d->alloc(d, (float **)&L->d_idx, ni, "the launch's indices on the device"));
    DP_TRY(d->host_alloc(d, (void **)&L->h_down, (size_t)k * M * sizeof(float), "the launch's metrics"));
    DP_ALLOC(L->h_up, ex->n_local, "the launch's metrics");
    DP_ALLOC(L->d_m, ex->n_local, "the launch's metrics");
    DP_ALLOC(L->snap, ex->n_local, "the launch's copies of the state");
    for (int r = 0; r < ex->n_local; r++) {
        DP_TRY(d->host_alloc(d, (void **)&L->h_up[r], (size_t)k * M * sizeof(float), "the launch's metrics"));
        memset(L->h_up[r], 0, (size_t)k * M * sizeof(float));
        DP_TRY(d->alloc(d, &L->d_m[r], (size_t)k * M, "the launch's metrics on the device"));
        DP_TRY(d->alloc(d, &L->snap[r], snap_floats(ex), "the state's copy at a launch's start"));
    }
    return DP_OK;
}

void dp_exec_launch_free(dp_executor *ex) {
    dp_launch_state *L = &ex->launch;
    const dp_dev *d = ex->dev;
    if (!L->k) return;
    d->host_free(d, L->h_idx), d->free(d, L->d_idx), d->host_free(d, L->h_down);
    for (int r = 0; r < ex->n_local; r++) {
        if (L->h_up) d->host_free(d, L->h_up[r]);
        if (L->d_m) d->free(d, L->d_m[r]);
        if (L->snap) d->free(d, L->snap[r]);
    }
    free(L->h_up), free(L->d_m), free(L->snap);
    memset(L, 0, sizeof *L);
}

dp_status dp_exec_launch_put(dp_executor *ex, int q, int j, int first, const dp_batch *b, dp_batch *kept) {
    dp_launch_state *L = &ex->launch;
    if (j < 0 || j >= L->k || q < 0 || q >= L->micros)
        return dp_fail(DP_ERR_INTERNAL, "step %d, micro-step %d of a launch of at most %d, %d", j, q, L->k, L->micros);
    for (int r = 0; r < ex->n_local; r++) {
        if (b[r].n > ex->max_local)
            return dp_fail(DP_ERR_INTERNAL, "replica %d's %d samples, more than %d", r, b[r].n, ex->max_local);
        int32_t *at = L->h_idx + (size_t)q * idx_per_step(ex) + (size_t)r * ex->max_local;
        memcpy(at, b[r].idx, (size_t)b[r].n * sizeof(int32_t));
        kept[r] = (dp_batch){.n = b[r].n, .idx = at};
        float *m = L->h_up[r] + (size_t)j * M;
        if (first) memset(m, 0, M * sizeof(float)); /* [0], [1], [5]: the device's; [3], [4]: the last step's */
        m[2] += (float)b[r].n;
    }
    return DP_OK;
}

typedef struct {
    dp_executor *ex;
    int n, micros;
    dp_status (*fn)(void *arg, int j);
    void *arg;
} launch_body;

/* What a launch queues (and a recording holds): the state's copies, the uploads from the pinned
 * staging, the steps, the blocks' all-reduces. */
static dp_status run_body(void *p) {
    launch_body *a = p;
    dp_executor *ex = a->ex;
    dp_launch_state *L = &ex->launch;
    const dp_dev *d = ex->dev;
    const dp_model *md = ex->model;
    const size_t pn = md->params.n * sizeof(float);
    for (int r = 0; r < ex->n_local; r++) {
        const dp_replica *rp = &ex->rep[r];
        DP_TRY(d->copy(d, L->snap[r], rp->params, pn));
        if (rp->momentum) DP_TRY(d->copy(d, L->snap[r] + md->params.n, rp->momentum, pn));
        if (md->buffers.n) DP_TRY(d->copy(d, L->snap[r] + 2 * md->params.n, rp->buffers, md->buffers.n * sizeof(float)));
    }
    DP_TRY(d->upload(d, L->d_idx, L->h_idx, (size_t)a->micros * idx_per_step(ex) * sizeof(int32_t)));
    L->micro = 0;
    for (int r = 0; r < ex->n_local; r++) DP_TRY(d->upload(d, L->d_m[r], L->h_up[r], (size_t)a->n * M * sizeof(float)));
    for (int j = 0; j < a->n; j++) {
        L->slot = j;
        dp_status s = a->fn(a->arg, j);
        L->slot = -1;
        DP_TRY(s);
    }
    /* block by block, as each step's own all-reduce sums them: the same order, the same bits */
    const struct dp_backend_i *b = ex->backend->iface;
    float *blk[ex->n_local];
    DP_TRY(dp_exec_colls_wait_mains(ex));
    for (int j = 0; j < a->n; j++) {
        for (int r = 0; r < ex->n_local; r++) blk[r] = L->d_m[r] + (size_t)j * M;
        DP_TRY(b->allreduce(ex->backend, blk, M, DP_SUM));
    }
    return dp_exec_mains_wait_colls(ex);
}

dp_status dp_exec_launch_run(dp_executor *ex, int n, int micros, uint64_t key, int record, int stop,
                             dp_status (*fn)(void *arg, int j), void *arg, dp_step_sums *sums) {
    dp_launch_state *L = &ex->launch;
    if (n < 1 || n > L->k || micros < n || micros > L->micros)
        return dp_fail(DP_ERR_INTERNAL, "a launch of %d steps in %d micro-steps (1 to %d in %d)", n, micros, L->k,
                       L->micros);
    for (int r = 0; r < ex->n_local; r++) { /* the stop request rides in the last step's block only */
        L->h_up[r][(size_t)(n - 1) * M + 3] = stop != 0;
        L->h_up[r][(size_t)(n - 1) * M + 4] = stop == SIGTERM;
    }
    L->lanes_clear = ex->lanes_clear;
    const int v[4] = {0x4c61756e, n, micros, ex->lanes_clear};
    launch_body a = {ex, n, micros, fn, arg};
    DP_TRY(dp_graph_run_launch(&ex->graphs, ex->dev, ex->backend, ex->graphs_on && record, dp_graph_key(key, v, 4),
                               run_body, &a));
    ex->lanes_clear = 1; /* each step ended with its last micro-step, whose tree cleared lanes 1.. */
    /* the one wait: replica 0's blocks, which every replica's work before the all-reduces fed */
    DP_TRY(ex->dev->download(ex->dev, L->h_down, L->d_m[0], (size_t)n * M * sizeof(float)));
    ex->comm.drained = ex->comm.n;
    for (int j = 0; j < n; j++) {
        const float *m = L->h_down + (size_t)j * M;
        sums[j] = (dp_step_sums){.loss = m[0], .hits = lrintf(m[1]), .count = lrintf(m[2]),
                                 .stop = m[3] > 0 ? (m[4] > 0 ? SIGTERM : SIGINT) : 0, .nonfinite = m[5] > 0};
    }
    return DP_OK;
}

dp_status dp_exec_launch_undo(dp_executor *ex) {
    dp_launch_state *L = &ex->launch;
    const dp_dev *d = ex->dev;
    const dp_model *md = ex->model;
    const size_t pn = md->params.n * sizeof(float);
    for (int r = 0; r < ex->n_local; r++) {
        const dp_replica *rp = &ex->rep[r];
        DP_TRY(d->copy(d, rp->params, L->snap[r], pn));
        if (rp->momentum) DP_TRY(d->copy(d, rp->momentum, L->snap[r] + md->params.n, pn));
        if (md->buffers.n) DP_TRY(d->copy(d, rp->buffers, L->snap[r] + 2 * md->params.n, md->buffers.n * sizeof(float)));
    }
    ex->lanes_clear = L->lanes_clear;
    return DP_OK;
}

dp_status dp_exec_launch_stage(dp_executor *ex, const dp_batch *b, const dp_batch **out) {
    dp_launch_state *L = &ex->launch;
    const int q = L->micro++;
    if (q >= L->micros) return dp_fail(DP_ERR_INTERNAL, "micro-step %d of a launch of %d", q, L->micros);
    for (int r = 0; r < ex->n_local; r++) {
        dp_batch *db = &ex->d_batches[r];
        db->n = b[r].n;
        const int32_t *idx = L->d_idx + (size_t)q * idx_per_step(ex) + (size_t)r * ex->max_local;
        ex->k->gather_batch(&ex->kc, b[r].n, ex->data_c, ex->data_hw, ex->d_pixels, ex->d_labels, idx, ex->d_lut,
                            db->x, db->y);
    }
    *out = ex->d_batches;
    return DP_OK;
}

dp_status dp_exec_launch_sums(dp_executor *ex, const dp_step_in *in, dp_step_sums *out) {
    const dp_launch_state *L = &ex->launch;
    if (in->host_lanes) return dp_fail(DP_ERR_INTERNAL, "a launched step with the lanes' sums on the host");
    for (int r = 0; r < ex->n_local; r++) {
        const dp_dev *d = dp_exec_dev(ex, r);
        float *m = L->d_m[r] + (size_t)L->slot * M;
        d->k->lane_metrics(&d->main.kc, ex->n_lanes, ex->d_lane_loss[r], ex->d_lane_correct[r], m);
        if (in->check && in->check[r]) d->k->nonfinite(&d->main.kc, ex->model->params.n, ex->rep[r].grads, m + 5);
    }
    *out = (dp_step_sums){0}; /* finite, no stop: the step applies its update; its sums come after the launch */
    return DP_OK;
}
