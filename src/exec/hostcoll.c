/* hostcoll.c: collectives over small host arrays (metrics, stop flags, resume positions,
 * evaluation counts) whatever the device: on a device the backend's collectives take device
 * memory (backend.h), so the values go up into a scratch buffer per replica and come back.
 * Bookkeeping, not gradient traffic: it calls the backend's table directly and stays out of
 * the communication statistics. */
#include <stdlib.h>
#include <string.h>

#include "core/treesum.h"
#include "exec/executor.h"

static dp_status scratch_for(dp_executor *ex, size_t n) {
    if (n <= ex->hc_floats) return DP_OK;
    const dp_dev *d = ex->dev;
    for (int r = 0; r < ex->n_local; r++) {
        d->free(d, ex->hc_scratch[r]);
        ex->hc_scratch[r] = NULL;
    }
    for (int r = 0; r < ex->n_local; r++) DP_TRY(d->alloc(d, &ex->hc_scratch[r], n, "collective scratch"));
    ex->hc_floats = n;
    return DP_OK;
}

/* the collective stream waits for the uploads, and the downloads for it */
static dp_status coll_begin(const dp_dev *d) { return d->coll_wait_main ? d->coll_wait_main(d) : DP_OK; }
static dp_status coll_end(const dp_dev *d) { return d->main_wait_coll ? d->main_wait_coll(d) : DP_OK; }

static dp_status host_coll(dp_executor *ex, float *const *bufs, size_t n, int broadcast) {
    const struct dp_backend_i *b = ex->backend->iface;
    if (ex->dev->caps & DP_CAP_HOST_MEMORY)
        return broadcast ? b->broadcast(ex->backend, bufs, n, 0) : b->allreduce(ex->backend, bufs, n, DP_SUM);
    if (ex->n_local == ex->world) { /* every replica here (sim): the backend's sums, on the host */
        if (!broadcast) dp_tree_sum(bufs, ex->n_local, 0, n, 0);
        for (int r = 1; r < ex->n_local; r++) memcpy(bufs[r], bufs[0], n * sizeof(float));
        return DP_OK;
    }
    const dp_dev *d = ex->dev;
    DP_TRY(scratch_for(ex, n));
    for (int r = 0; r < ex->n_local; r++) DP_TRY(d->upload(d, ex->hc_scratch[r], bufs[r], n * sizeof(float)));
    DP_TRY(coll_begin(d));
    DP_TRY(broadcast ? b->broadcast(ex->backend, ex->hc_scratch, n, 0)
                     : b->allreduce(ex->backend, ex->hc_scratch, n, DP_SUM));
    DP_TRY(coll_end(d));
    for (int r = 0; r < ex->n_local; r++) DP_TRY(d->download(d, bufs[r], ex->hc_scratch[r], n * sizeof(float)));
    return DP_OK;
}

dp_status dp_exec_host_reserve(dp_executor *ex, size_t n) {
    return (ex->dev->caps & DP_CAP_HOST_MEMORY) || ex->n_local == ex->world ? DP_OK : scratch_for(ex, n);
}

dp_status dp_exec_host_allreduce(dp_executor *ex, float *const *bufs, size_t n) { return host_coll(ex, bufs, n, 0); }
dp_status dp_exec_host_broadcast(dp_executor *ex, float *const *bufs, size_t n) { return host_coll(ex, bufs, n, 1); }

dp_status dp_exec_host_allgather(dp_executor *ex, const float *send, float *recv, size_t n) {
    const struct dp_backend_i *b = ex->backend->iface;
    if (ex->n_local != 1) return dp_fail(DP_ERR_INTERNAL, "host all-gather: one replica per process expected");
    const float *sp[1] = {send};
    float *rp[1] = {recv};
    if (ex->dev->caps & DP_CAP_HOST_MEMORY) return b->allgather(ex->backend, sp, rp, n);
    const dp_dev *d = ex->dev;
    DP_TRY(scratch_for(ex, n * (size_t)(ex->world + 1)));
    float *ds = ex->hc_scratch[0], *dr = ds + n;
    DP_TRY(d->upload(d, ds, send, n * sizeof(float)));
    const float *dsp[1] = {ds};
    float *drp[1] = {dr};
    DP_TRY(coll_begin(d));
    DP_TRY(b->allgather(ex->backend, dsp, drp, n));
    DP_TRY(coll_end(d));
    return d->download(d, recv, dr, n * (size_t)ex->world * sizeof(float));
}

void dp_exec_host_coll_free(dp_executor *ex) {
    if (!ex->hc_scratch) return;
    for (int r = 0; r < ex->n_local; r++) ex->dev->free(ex->dev, ex->hc_scratch[r]);
    free(ex->hc_scratch);
    ex->hc_scratch = NULL;
}
