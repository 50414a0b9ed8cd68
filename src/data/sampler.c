/* sampler.c: DistributedSampler's partition of an epoch over replicas, cut into global batches. */
#include "data/sampler.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

/* Stream id of the shuffle, kept apart from the augmentation and synthetic-data streams. */
#define SAMPLER_STREAM 0x5A3D1E00ull

dp_status dp_sampler_init(dp_sampler *s, int n_samples, int n_replicas, int global_batch, int shuffle,
                          int drop_last, uint64_t seed) {
    memset(s, 0, sizeof *s);
    if (n_replicas < 1)
        return dp_fail(DP_ERR_USAGE, "--replicas %d: at least one replica is needed", n_replicas);
    if (global_batch < n_replicas)
        return dp_fail(DP_ERR_USAGE, "--batch-size %d is smaller than the %d replicas: each replica needs a sample",
                       global_batch, n_replicas);
    if (n_samples < n_replicas)
        return dp_fail(DP_ERR_USAGE, "--replicas %d: the data set has only %d samples, fewer than the replicas",
                       n_replicas, n_samples);
    long long total = drop_last ? (long long)(n_samples / n_replicas) * n_replicas
                                : ((long long)n_samples + n_replicas - 1) / n_replicas * n_replicas;
    if (total > INT_MAX)
        return dp_fail(DP_ERR_USAGE, "--replicas %d: %d samples padded to a multiple of the replicas overflow",
                       n_replicas, n_samples);
    s->n_samples = n_samples, s->n_replicas = n_replicas, s->global_batch = global_batch;
    s->shuffle = shuffle, s->drop_last = drop_last, s->seed = seed;
    s->total = (int)total;
    /* drop_last also drops the short last batch, so that every batch is full (may leave 0 batches:
     * the caller reports that with the flags it knows). */
    s->n_batches = drop_last ? s->total / global_batch
                             : (int)(((long long)s->total + global_batch - 1) / global_batch);
    DP_ALLOC(s->order, s->total > n_samples ? s->total : n_samples, "the sampler's order");
    dp_sampler_set_epoch(s, 0);
    return DP_OK;
}

void dp_sampler_set_epoch(dp_sampler *s, int epoch) {
    s->epoch = epoch;
    if (!s->order) return;
    /* order holds max(n_samples, total) entries: the whole permutation, of which drop_last keeps
     * the first `total`. */
    const int n = s->n_samples;
    int *perm = s->order;
    for (int i = 0; i < n; i++) perm[i] = i;
    if (s->shuffle) {
        dp_rng r;
        dp_rng_seed(&r, s->seed, dp_rng_mix(SAMPLER_STREAM, (uint64_t)(uint32_t)epoch));
        for (int i = n - 1; i > 0; i--) { /* Fisher-Yates */
            int j = (int)dp_rng_below(&r, (uint32_t)i + 1);
            int t = perm[i];
            perm[i] = perm[j], perm[j] = t;
        }
    }
    /* Padding repeats the start of the order, wrapping if the padding exceeds the set. */
    for (int i = n; i < s->total; i++) perm[i] = perm[i - n];
}

int dp_sampler_batch_size(const dp_sampler *s, int b) {
    if (b < 0 || b >= s->n_batches) return 0;
    long long left = (long long)s->total - (long long)b * s->global_batch;
    return left < s->global_batch ? (int)left : s->global_batch;
}

int dp_sampler_max_local(const dp_sampler *s) { return (s->global_batch + s->n_replicas - 1) / s->n_replicas; }

int dp_sampler_local(const dp_sampler *s, int b, int replica, int *idx, int *pos) {
    const int N = s->n_replicas;
    if (b < 0 || b >= s->n_batches || replica < 0 || replica >= N) return 0;
    const int begin = b * s->global_batch, end = begin + dp_sampler_batch_size(s, b);
    int count = 0;
    /* First position >= begin that is congruent to replica mod N. */
    for (int p = begin + ((replica - begin % N) % N + N) % N; p < end; p += N) {
        idx[count] = s->order[p];
        if (pos) pos[count] = p;
        count++;
    }
    return count;
}

void dp_sampler_free(dp_sampler *s) {
    if (!s) return;
    free(s->order);
    s->order = NULL;
}
