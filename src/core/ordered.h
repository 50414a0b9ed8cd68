/* ordered.h: the cut and the exchanges of the canonical-order sum, the all-reduce every backend
 * runs the same way so that their results agree bitwise (sim/ring.c's "ordered", backends/mpi.c,
 * backends/nccl_coll.c). n floats on each of w ranks are cut into w shards; rank k owns shard k:
 * every rank sends it its piece of shard k (the reduce-scatter), k adds the w pieces in rank order
 * with the fixed tree of core/treesum.h, then the finished shards go back to every rank (all-reduce)
 * or to the root (reduce). Every element is therefore the tree sum over ranks 0..w-1, whatever w
 * divides and however a buffer is cut into buckets. */
#ifndef DP_CORE_ORDERED_H
#define DP_CORE_ORDERED_H

#include <stddef.h>

/* Shard k of n floats cut into w shards: [*lo, *lo + *len). Shards are contiguous, in rank order,
 * their lengths differ by at most one. */
void dp_shard(size_t n, int w, int k, size_t *lo, size_t *len);

/* What rank `me` exchanges with rank `peer` in one phase. Offsets are in floats: send_* into the
 * rank's own buffer; recv_* into its buffer in the gather, into its receive slots in the scatter. A
 * length of 0 is no transfer. For peer == me the plan names what stays in place (the backends that
 * copy to themselves, as MPI's all-to-all does, use it; the others skip it). */
typedef struct {
    size_t send_lo, send_len;
    size_t recv_lo, recv_len;
} dp_ordered_xfer;

/* The reduce-scatter: me sends its piece of shard `peer`, and receives peer's piece of shard me
 * into receive slot `peer`, `slot` floats apart (at least shard me's length). */
dp_ordered_xfer dp_ordered_scatter(size_t n, int w, int me, int peer, size_t slot);
/* The gather of finished shards: me sends shard me to peer, and receives shard peer from it; to
 * every rank when root < 0 (all-reduce), only to root otherwise (reduce). */
dp_ordered_xfer dp_ordered_gather(size_t n, int w, int me, int peer, int root);

#endif
