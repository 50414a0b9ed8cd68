/* hostcoll.c: collectives over small host arrays (metrics, stop flags, resume positions,
 * evaluation counts) whatever the device: on a device the backend's collectives take device
 * memory (backend.h), so the values go up into a scratch buffer per replica and come back.
 * Bookkeeping, not gradient traffic: it calls the backend's table directly and stays out of
 * the communication statistics. */
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/treesum.h"
#include "exec/executor_impl.h"

/* Each replica's scratch, on its device. */
static dp_status scratch_for(dp_executor *ex, size_t n) {
    if (n <= ex->hc_floats) return DP_OK;
    for (int r = 0; r < ex->n_local; r++) {
        dp_exec_dev(ex, r)->free(dp_exec_dev(ex, r), ex->hc_scratch[r]);
        ex->hc_scratch[r] = NULL;
    }
    for (int r = 0; r < ex->n_local; r++)
        DP_TRY(dp_exec_dev(ex, r)->alloc(dp_exec_dev(ex, r), &ex->hc_scratch[r], n, "collective scratch"));
    ex->hc_floats = n;
    return DP_OK;
}

static dp_status host_coll(dp_executor *ex, float *const *bufs, size_t n, int broadcast) {
    const struct dp_backend_i *b = ex->backend->iface;
    if (ex->dev->caps & DP_CAP_HOST_MEMORY)
        return broadcast ? b->broadcast(ex->backend, bufs, n, 0) : b->allreduce(ex->backend, bufs, n, DP_SUM);
    if (dp_backend_in_process(ex->backend)) { /* every replica here (sim, nccl --gpus): the backend's sums, on the host */
        if (!broadcast) dp_tree_sum(bufs, ex->n_local, 0, n, 0);
        for (int r = 1; r < ex->n_local; r++) memcpy(bufs[r], bufs[0], n * sizeof(float));
        return DP_OK;
    }
    DP_TRY(scratch_for(ex, n));
    for (int r = 0; r < ex->n_local; r++)
        DP_TRY(dp_exec_dev(ex, r)->upload(dp_exec_dev(ex, r), ex->hc_scratch[r], bufs[r], n * sizeof(float)));
    DP_TRY(dp_exec_colls_wait_mains(ex)); /* after the uploads */
    DP_TRY(broadcast ? b->broadcast(ex->backend, ex->hc_scratch, n, 0)
                     : b->allreduce(ex->backend, ex->hc_scratch, n, DP_SUM));
    DP_TRY(dp_exec_mains_wait_colls(ex)); /* before the downloads */
    for (int r = 0; r < ex->n_local; r++)
        DP_TRY(dp_exec_dev(ex, r)->download(dp_exec_dev(ex, r), bufs[r], ex->hc_scratch[r], n * sizeof(float)));
    return DP_OK;
}

dp_status dp_exec_host_reserve(dp_executor *ex, size_t n) {
    return (ex->dev->caps & DP_CAP_HOST_MEMORY) || dp_backend_in_process(ex->backend) ? DP_OK : scratch_for(ex, n);
}

dp_status dp_exec_host_allreduce(dp_executor *ex, float *const *bufs, size_t n) { return host_coll(ex, bufs, n, 0); }
dp_status dp_exec_host_broadcast(dp_executor *ex, float *const *bufs, size_t n) { return host_coll(ex, bufs, n, 1); }

/* Each local replica sends the same n floats; recv receives every rank's (rank r's at r n). */
dp_status dp_exec_host_allgather(dp_executor *ex, const float *send, float *recv, size_t n) {
    const struct dp_backend_i *b = ex->backend->iface;
    const int L = ex->n_local;
    const size_t all = n * (size_t)ex->world;
    const float *sp[L];
    float *rp[L];
    if (ex->dev->caps & DP_CAP_HOST_MEMORY) { /* the other replicas' copies of the result: dropped */
        float *extra = NULL;
        if (L > 1) DP_TRY(dp_alloc_floats(&extra, all * (size_t)(L - 1), "the all-gather's other copies"));
        for (int r = 0; r < L; r++) sp[r] = send, rp[r] = r ? extra + all * (size_t)(r - 1) : recv;
        dp_status s = b->allgather(ex->backend, sp, rp, n);
        dp_free(extra);
        return s;
    }
    DP_TRY(scratch_for(ex, n + all));
    for (int r = 0; r < L; r++) {
        float *ds = ex->hc_scratch[r];
        DP_TRY(dp_exec_dev(ex, r)->upload(dp_exec_dev(ex, r), ds, send, n * sizeof(float)));
        sp[r] = ds, rp[r] = ds + n;
    }
    DP_TRY(dp_exec_colls_wait_mains(ex)); /* after the uploads */
    DP_TRY(b->allgather(ex->backend, sp, rp, n));
    DP_TRY(dp_exec_mains_wait_colls(ex)); /* before the downloads */
    return ex->dev->download(ex->dev, recv, rp[0], all * sizeof(float));
}

void dp_exec_host_coll_free(dp_executor *ex) {
    if (!ex->hc_scratch) return;
    for (int r = 0; r < ex->n_local; r++)
        if (ex->rep && ex->rep[r].dev) ex->rep[r].dev->free(ex->rep[r].dev, ex->hc_scratch[r]);
    free(ex->hc_scratch);
    ex->hc_scratch = NULL;
}
