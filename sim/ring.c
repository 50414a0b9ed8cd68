#include "sim/ring.h"

#include <stdint.h>
#include <string.h>

#include "core/arena.h"
#include "core/ordered.h"
#include "core/treesum.h"

/* The ring's chunk of an element follows its address: blocks of SIM_BLOCK floats counted
 * from the arena's alignment boundary, block b in chunk b mod N. An element is therefore
 * summed in the same order however its arena is cut into buckets, which is what makes
 * results independent of --bucket-mb (arenas are aligned to DP_ARENA_ALIGN_BYTES). */
#define SIM_BLOCK 1024

/* Threads for a collective of n floats per buffer: waking a team costs tens of microseconds,
 * more than the copies and sums of a small buffer (SyncBN's sums, the metrics), so those run on
 * the calling thread. */
static int threads_for(size_t n, int nthreads) { return n >= 32768 ? nthreads : 1; }

static size_t origin_of(const float *p) {
    return (size_t)(((uintptr_t)p % DP_ARENA_ALIGN_BYTES) / sizeof(float));
}

/* Calls fn on every [off, off+len) of chunk c in a buffer of n floats whose element 0 has
 * global index g0. */
#define FOR_CHUNK(g0, n, n_rep, c, off, len, body)                                                  \
    do {                                                                                          \
        size_t first_blk_ = (g0) / SIM_BLOCK;                                                     \
        size_t blk_ = first_blk_ + (size_t)((((c) - (long)(first_blk_ % (size_t)(n_rep))) % (n_rep) + (n_rep)) % (n_rep)); \
        for (; blk_ * SIM_BLOCK < (g0) + (n); blk_ += (size_t)(n_rep)) {                           \
            size_t lo_ = blk_ * SIM_BLOCK > (g0) ? blk_ * SIM_BLOCK - (g0) : 0;                     \
            size_t hi_ = (blk_ + 1) * SIM_BLOCK - (g0);                                           \
            if (hi_ > (n)) hi_ = (n);                                                             \
            size_t off = lo_, len = hi_ - lo_;                                                    \
            body;                                                                                 \
        }                                                                                         \
    } while (0)

static void ring_reduce_scatter(float *const *bufs, int n_rep, size_t n, int nthreads) {
    const size_t g0 = origin_of(bufs[0]);
    /* in step s replica r sends chunk (r - s) to r + 1, which adds it: every pair touches a
     * different chunk, so the pairs of a step run in parallel */
    for (int s = 0; s < n_rep - 1; s++) {
#pragma omp parallel for num_threads(nthreads) schedule(static) if (nthreads > 1)
        for (int r = 0; r < n_rep; r++) {
            const int dst = (r + 1) % n_rep;
            const long c = ((r - s) % n_rep + n_rep) % n_rep;
            FOR_CHUNK(g0, n, n_rep, c, off, len, {
                float *restrict d = bufs[dst] + off;
                const float *restrict src = bufs[r] + off;
                for (size_t i = 0; i < len; i++) d[i] += src[i];
            });
        }
    }
}

void sim_ring_allreduce(float *const *bufs, int n_rep, size_t n, int nthreads) {
    if (n_rep < 2 || n == 0) return;
    nthreads = threads_for(n, nthreads);
    ring_reduce_scatter(bufs, n_rep, n, nthreads);
    /* all-gather: replica r holds the full chunk (r + 1); pass it around the ring */
    const size_t g0 = origin_of(bufs[0]);
    for (int s = 0; s < n_rep - 1; s++) {
#pragma omp parallel for num_threads(nthreads) schedule(static) if (nthreads > 1)
        for (int r = 0; r < n_rep; r++) {
            const int dst = (r + 1) % n_rep;
            const long c = ((r + 1 - s) % n_rep + n_rep) % n_rep;
            FOR_CHUNK(g0, n, n_rep, c, off, len, memcpy(bufs[dst] + off, bufs[r] + off, len * sizeof(float)));
        }
    }
}

void sim_reduce(float *const *bufs, int n_rep, size_t n, int root, int nthreads) {
    if (n_rep < 2 || n == 0) return;
    nthreads = threads_for(n, nthreads);
    /* reduce-scatter as in the all-reduce (so the sums are bitwise the all-reduce's), then
     * every replica sends its finished chunk (r + 1) to the root */
    ring_reduce_scatter(bufs, n_rep, n, nthreads);
    const size_t g0 = origin_of(bufs[0]);
#pragma omp parallel for num_threads(nthreads) schedule(static) if (nthreads > 1)
    for (int r = 0; r < n_rep; r++) {
        if (r == root) continue;
        const long c = (r + 1) % n_rep;
        FOR_CHUNK(g0, n, n_rep, c, off, len, memcpy(bufs[root] + off, bufs[r] + off, len * sizeof(float)));
    }
}

/* Shard k's owner adds the pieces with the fixed tree. The tree works in place over the
 * replicas' buffers (the sim's stand-in for the owner's receive buffers): the sum ends in
 * bufs[0], the others' pieces are overwritten, as a reduce-scatter leaves them unspecified. */
static void ordered_shards(float *const *bufs, int n_rep, size_t n, int nthreads, int root) {
#pragma omp parallel for num_threads(nthreads) schedule(static) if (nthreads > 1)
    for (int k = 0; k < n_rep; k++) {
        size_t lo, len;
        dp_shard(n, n_rep, k, &lo, &len);
        dp_tree_sum(bufs, n_rep, lo, len, 0);
        /* all-gather (root < 0) or gather to root of the finished shard */
        for (int r = root < 0 ? 1 : root; r < (root < 0 ? n_rep : root + 1); r++)
            if (r != 0) memcpy(bufs[r] + lo, bufs[0] + lo, len * sizeof(float));
    }
}

void sim_ordered_allreduce(float *const *bufs, int n_rep, size_t n, int nthreads) {
    if (n_rep < 2 || n == 0) return;
    ordered_shards(bufs, n_rep, n, threads_for(n, nthreads), -1);
}

void sim_ordered_reduce(float *const *bufs, int n_rep, size_t n, int root, int nthreads) {
    if (n_rep < 2 || n == 0) return;
    ordered_shards(bufs, n_rep, n, threads_for(n, nthreads), root);
}

/* Binary tree: pairs at distance 1, 2, 4, ... add into the lower index; the sum ends in 0. */
static void tree_reduce_to_0(float *const *bufs, int n_rep, size_t n, int nthreads) {
    for (int stride = 1; stride < n_rep; stride *= 2) {
#pragma omp parallel for num_threads(nthreads) schedule(static) if (nthreads > 1)
        for (int r = 0; r < n_rep; r += 2 * stride) {
            if (r + stride >= n_rep) continue;
            float *restrict d = bufs[r];
            const float *restrict src = bufs[r + stride];
            for (size_t i = 0; i < n; i++) d[i] += src[i];
        }
    }
}

void sim_tree_allreduce(float *const *bufs, int n_rep, size_t n, int nthreads) {
    if (n_rep < 2 || n == 0) return;
    nthreads = threads_for(n, nthreads);
    tree_reduce_to_0(bufs, n_rep, n, nthreads);
    int top = 1;
    while (top < n_rep) top *= 2;
    for (int stride = top / 2; stride >= 1; stride /= 2) {
#pragma omp parallel for num_threads(nthreads) schedule(static) if (nthreads > 1)
        for (int r = 0; r < n_rep; r += 2 * stride)
            if (r + stride < n_rep) memcpy(bufs[r + stride], bufs[r], n * sizeof(float));
    }
}

void sim_tree_reduce(float *const *bufs, int n_rep, size_t n, int root, int nthreads) {
    if (n_rep < 2 || n == 0) return;
    nthreads = threads_for(n, nthreads);
    tree_reduce_to_0(bufs, n_rep, n, nthreads);
    if (root != 0) memcpy(bufs[root], bufs[0], n * sizeof(float));
}

void sim_broadcast(float *const *bufs, int n_rep, size_t n, int root, int nthreads) {
    if (n_rep < 2 || n == 0) return;
    nthreads = threads_for(n, nthreads);
#pragma omp parallel for num_threads(nthreads) schedule(static) if (nthreads > 1)
    for (int r = 0; r < n_rep; r++)
        if (r != root) memcpy(bufs[r], bufs[root], n * sizeof(float));
}

void sim_scale(float *const *bufs, int n_rep, size_t n, float s, int nthreads) {
    nthreads = threads_for(n, nthreads);
#pragma omp parallel for num_threads(nthreads) schedule(static) if (nthreads > 1)
    for (int r = 0; r < n_rep; r++)
        for (size_t i = 0; i < n; i++) bufs[r][i] *= s;
}
