/* ring.h: collectives over N in-memory buffers, moving the data as a real system would:
 * the ring all-reduce is N-1 reduce-scatter steps then N-1 all-gather steps, chunk by chunk
 * between neighbouring replicas, so its copies and additions are real, measurable work.
 * Every pair in a step touches distinct chunks, so a step runs in parallel over the pairs. */
#ifndef DP_SIM_RING_H
#define DP_SIM_RING_H

#include <stddef.h>

#include "kernels/device.h"

/* Sum over the N buffers, result in all of them. An element of chunk c is added in the order
 * c+1, c+2, ..., c (mod N), the same on every replica, so all end bitwise equal; the chunk
 * depends on the element's place in its arena only (see ring.c). */
void sim_ring_allreduce(float *const *bufs, int n_rep, size_t n, int nthreads);
/* The ordered all-reduce (the default): a reduce-scatter in which the owner of each shard adds
 * the N replicas' pieces with the fixed tree of core/treesum.h, then an all-gather. It moves
 * the bytes of the ring, and every element is summed in the one order that makes N replicas
 * equal one (data/chunks.h), whatever the bucket it travels in. */
void sim_ordered_allreduce(float *const *bufs, int n_rep, size_t n, int nthreads);
/* The same sums into bufs[root] only (DP's gradient reduce): bitwise the ordered all-reduce's. */
void sim_ordered_reduce(float *const *bufs, int n_rep, size_t n, int root, int nthreads);
/* Binary-tree reduce to buffer 0, then a tree broadcast back. */
void sim_tree_allreduce(float *const *bufs, int n_rep, size_t n, int nthreads);
/* Sum into bufs[root]: the ring reduce-scatter, then the chunks sent to the root; bitwise the
 * same sums as sim_ring_allreduce. The other buffers are left holding partial sums. */
void sim_reduce(float *const *bufs, int n_rep, size_t n, int root, int nthreads);
/* Binary-tree reduce: bitwise the same sums as sim_tree_allreduce. */
void sim_tree_reduce(float *const *bufs, int n_rep, size_t n, int root, int nthreads);
void sim_broadcast(float *const *bufs, int n_rep, size_t n, int root, int nthreads);
/* On a device (sim/ring_device.c): the ordered sums of sim_ordered_allreduce (root < 0) or
 * sim_ordered_reduce (into bufs[root]) as kernels queued on stream q of the buffers' device. */
dp_status sim_device_ordered(const dp_dev_stream *q, float *const *bufs, int n_rep, size_t n, int root);
void sim_scale(float *const *bufs, int n_rep, size_t n, float s, int nthreads);

#endif
