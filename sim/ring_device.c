/* ring_device.c: the sim's ordered all-reduce and reduce on a device. The CPU version
 * (ring.c) cuts the buffer into one shard per replica and has each shard's owner add the N
 * pieces with the fixed tree; the tree is the same for every element, so on a GPU one tree
 * over the whole buffer (the table's tree_sum kernel) gives the same sums as the shards would,
 * then the result is copied to the other replicas (all-reduce) or to the root (reduce). Every
 * step is queued on the stream q (the device's collective stream): nothing waits. */
#include "sim/ring.h"

dp_status sim_device_ordered(const dp_dev_stream *q, float *const *bufs, int n_rep, size_t n, int root) {
    if (n_rep < 2 || n == 0) return DP_OK;
    q->dev->k->tree_sum(&q->kc, bufs, n_rep, 0, n, 0);
    for (int r = root < 0 ? 1 : root; r < (root < 0 ? n_rep : root + 1); r++)
        if (r != 0) DP_TRY(q->copy(q, bufs[r], bufs[0], n * sizeof(float)));
    return DP_OK;
}
