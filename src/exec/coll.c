/* coll.c: the executor's collectives. On a device with a collective stream each one waits for
 * the compute queued before it (an event the collective stream waits on) and is issued there by
 * the backend (which queues on dp_dev_coll); the compute queued after a blocking one waits for
 * it, while an overlapping all-reduce is waited for only by dp_exec_wait_all, so backward runs
 * on beside it. Where work runs as called (the CPU) the ordering calls are absent and the
 * backend's own non-blocking all-reduce (mpi) overlaps instead. */
#include "core/timer.h"
#include "exec/executor.h"

static dp_status coll_begin(dp_executor *ex) {
    return ex->dev->coll_wait_main ? ex->dev->coll_wait_main(ex->dev) : DP_OK;
}

static dp_status coll_end(dp_executor *ex, dp_status s) {
    if (s != DP_OK || !ex->dev->main_wait_coll) return s;
    return ex->dev->main_wait_coll(ex->dev);
}

dp_status dp_exec_allreduce(dp_executor *ex, float *const *bufs, size_t n) {
    DP_TRY(coll_begin(ex));
    return coll_end(ex, dp_allreduce(ex->backend, bufs, n, DP_SUM));
}

dp_status dp_exec_broadcast(dp_executor *ex, float *const *bufs, size_t n, int root) {
    DP_TRY(coll_begin(ex));
    return coll_end(ex, dp_broadcast(ex->backend, bufs, n, root));
}

dp_status dp_exec_reduce(dp_executor *ex, float *const *bufs, size_t n, int root) {
    DP_TRY(coll_begin(ex));
    return coll_end(ex, dp_reduce(ex->backend, bufs, n, DP_SUM, root));
}

dp_status dp_exec_gather(dp_executor *ex, const float *const *send, float *const *recv, size_t n, int root) {
    DP_TRY(coll_begin(ex));
    return coll_end(ex, dp_gather(ex->backend, send, recv, n, root));
}

dp_status dp_exec_scatter(dp_executor *ex, const float *const *send, float *const *recv, size_t n, int root) {
    DP_TRY(coll_begin(ex));
    return coll_end(ex, dp_scatter(ex->backend, send, recv, n, root));
}

dp_status dp_exec_allreduce_start(dp_executor *ex, float *const *bufs, size_t n, dp_req *req) {
    DP_TRY(coll_begin(ex));
    return dp_allreduce_start(ex->backend, bufs, n, DP_SUM, req);
}

dp_status dp_exec_wait_all(dp_executor *ex, const dp_req *reqs, int n) {
    for (int k = 0; k < n; k++) DP_TRY(dp_wait(ex->backend, reqs[k]));
    return coll_end(ex, DP_OK);
}
