/* treesum.h: the one fixed pairwise tree every cross-sample sum of a step goes through (the
 * lanes of a replica, the replicas in the all-reduce, the metrics); see data/chunks.h for why
 * this order makes results independent of how the work is split. */
#ifndef DP_CORE_TREESUM_H
#define DP_CORE_TREESUM_H

#include <stddef.h>

/* The fixed pairwise tree over n vectors, into v[0], on elements [lo, lo + count): with
 * h = ceil(m / 2) for m = n, h, ...: v[i] += v[i + h] for i < m - h. For n a power of two it
 * pairs i with i + n/2 first: the canonical order of data/chunks.h. The other vectors are
 * overwritten; with `clear` they are left zero (cheaper than zeroing them apart: each element
 * is zeroed while it is in cache). */
void dp_tree_sum(float *const *v, int n, size_t lo, size_t count, int clear);
/* The same tree over n scalars spaced `stride` apart (metrics, losses); returns the sum. */
float dp_tree_sum_scalars(float *x, int n, size_t stride);

#endif
