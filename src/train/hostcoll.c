/* hostcoll.c: collectives over small host arrays (metrics, stop flags, resume positions,
 * evaluation counts) whatever the device: on a device the backend's collectives take device
 * memory (backend.h), so the values go up into a scratch buffer per replica and come back.
 * Bookkeeping, not gradient traffic: it calls the backend's table directly and stays out of
 * the communication statistics. */
#include <stdlib.h>
#include <string.h>

#include "core/treesum.h"
#include "train/trainer.h"

static dp_status scratch_for(dp_trainer *t, size_t n) {
    if (n <= t->hc_floats) return DP_OK;
    const dp_dev *d = t->dev;
    for (int r = 0; r < t->n_local; r++) {
        d->free(d, t->hc_scratch[r]);
        t->hc_scratch[r] = NULL;
    }
    for (int r = 0; r < t->n_local; r++) DP_TRY(d->alloc(d, &t->hc_scratch[r], n, "collective scratch"));
    t->hc_floats = n;
    return DP_OK;
}

static dp_status host_coll(dp_trainer *t, float *const *bufs, size_t n, int broadcast) {
    const struct dp_backend_i *b = t->backend->iface;
    if ((t->dev->caps & DP_CAP_HOST_MEMORY))
        return broadcast ? b->broadcast(t->backend, bufs, n, 0) : b->allreduce(t->backend, bufs, n, DP_SUM);
    if (t->n_local == t->world) { /* every replica here (sim): the backend's sums, on the host */
        if (!broadcast) dp_tree_sum(bufs, t->n_local, 0, n, 0);
        for (int r = 1; r < t->n_local; r++) memcpy(bufs[r], bufs[0], n * sizeof(float));
        return DP_OK;
    }
    const dp_dev *d = t->dev;
    DP_TRY(scratch_for(t, n));
    for (int r = 0; r < t->n_local; r++) DP_TRY(d->upload(d, t->hc_scratch[r], bufs[r], n * sizeof(float)));
    DP_TRY(broadcast ? b->broadcast(t->backend, t->hc_scratch, n, 0)
                     : b->allreduce(t->backend, t->hc_scratch, n, DP_SUM));
    for (int r = 0; r < t->n_local; r++) DP_TRY(d->download(d, bufs[r], t->hc_scratch[r], n * sizeof(float)));
    return DP_OK;
}

dp_status dp_host_reserve(dp_trainer *t, size_t n) {
    return (t->dev->caps & DP_CAP_HOST_MEMORY) || t->n_local == t->world ? DP_OK : scratch_for(t, n);
}

dp_status dp_host_allreduce(dp_trainer *t, float *const *bufs, size_t n) { return host_coll(t, bufs, n, 0); }
dp_status dp_host_broadcast(dp_trainer *t, float *const *bufs, size_t n) { return host_coll(t, bufs, n, 1); }

dp_status dp_host_allgather(dp_trainer *t, const float *send, float *recv, size_t n) {
    const struct dp_backend_i *b = t->backend->iface;
    if (t->n_local != 1) return dp_fail(DP_ERR_INTERNAL, "host all-gather: one replica per process expected");
    const float *sp[1] = {send};
    float *rp[1] = {recv};
    if ((t->dev->caps & DP_CAP_HOST_MEMORY)) return b->allgather(t->backend, sp, rp, n);
    const dp_dev *d = t->dev;
    DP_TRY(scratch_for(t, n * (size_t)(t->world + 1)));
    float *ds = t->hc_scratch[0], *dr = ds + n;
    DP_TRY(d->upload(d, ds, send, n * sizeof(float)));
    const float *dsp[1] = {ds};
    float *drp[1] = {dr};
    DP_TRY(b->allgather(t->backend, dsp, drp, n));
    return d->download(d, recv, dr, n * (size_t)t->world * sizeof(float));
}

void dp_host_coll_free(dp_trainer *t) {
    if (!t->hc_scratch) return;
    for (int r = 0; r < t->n_local; r++) t->dev->free(t->dev, t->hc_scratch[r]);
    free(t->hc_scratch);
    t->hc_scratch = NULL;
}
