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
    dp_sampler_set_plan(s, 1, 1);
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

/* Positions the epoch uses: drop_last cuts the short last batch. */
static long long used_positions(const dp_sampler *s) {
    long long full = (long long)s->n_batches * s->global_batch;
    return full < s->total ? full : s->total;
}

static long long step_begin(const dp_sampler *s, int b) {
    return (long long)(b / s->plan.accumulate) * s->plan.accumulate * s->global_batch;
}

int dp_sampler_step_samples(const dp_sampler *s, int b) {
    if (b < 0 || b >= s->n_batches) return 0;
    long long left = used_positions(s) - step_begin(s, b), E = (long long)s->plan.accumulate * s->global_batch;
    return (int)(left < E ? left : E);
}

int dp_sampler_step_micro(const dp_sampler *s, int b) {
    if (b < 0 || b >= s->n_batches) return 0;
    const int K = s->plan.accumulate, first = b - b % K;
    return s->n_batches - first < K ? s->n_batches - first : K;
}

void dp_sampler_micro_lanes(const dp_sampler *s, int b, int *first, int *count) {
    dp_chunk_micro_lanes(&s->plan, b % s->plan.accumulate, dp_sampler_step_micro(s, b), first, count);
}

int dp_sampler_batch_size(const dp_sampler *s, int b) {
    if (b < 0 || b >= s->n_batches) return 0;
    const int E = dp_sampler_step_samples(s, b);
    int first, count, n = 0;
    dp_sampler_micro_lanes(s, b, &first, &count);
    for (int r = 0; r < s->n_replicas; r++)
        for (int i = first; i < first + count; i++) n += dp_chunk_lane_count(&s->plan, E, r, i);
    return n;
}

int dp_sampler_max_local(const dp_sampler *s) { return s->max_local; }

void dp_sampler_set_plan(dp_sampler *s, int chunks, int accumulate) {
    dp_chunk_plan_init(&s->plan, s->n_replicas, chunks, accumulate, s->global_batch, s->contiguous);
    /* the most lanes in a micro-step: a full step's, or the short last step's if it has fewer
     * micro-steps (its lanes are then smaller, but there are more of them at once) */
    int lanes = 0;
    for (int n_micro = s->plan.accumulate; n_micro >= 1; n_micro--) {
        if (n_micro != s->plan.accumulate && n_micro != dp_sampler_step_micro(s, s->n_batches - 1)) continue;
        for (int mu = 0; mu < n_micro; mu++) {
            int first, count;
            dp_chunk_micro_lanes(&s->plan, mu, n_micro, &first, &count);
            if (count > lanes) lanes = count;
        }
    }
    s->max_lanes = lanes < 1 ? 1 : lanes;
    s->max_local = s->max_lanes * dp_chunk_max_lane(&s->plan);
    if (s->max_local > s->global_batch * s->plan.accumulate) s->max_local = s->global_batch * s->plan.accumulate;
}

int dp_sampler_local(const dp_sampler *s, int b, int replica, int *idx, int *pos) {
    if (b < 0 || b >= s->n_batches || replica < 0 || replica >= s->n_replicas) return 0;
    const long long begin = step_begin(s, b);
    const int E = dp_sampler_step_samples(s, b);
    int first, lanes, count = 0;
    dp_sampler_micro_lanes(s, b, &first, &lanes);
    for (int i = first; i < first + lanes; i++) {
        const int n = dp_chunk_lane_count(&s->plan, E, replica, i);
        for (int t = 0; t < n; t++) {
            const int p = (int)(begin + dp_chunk_lane_pos(&s->plan, E, replica, i, t));
            idx[count] = s->order[p];
            if (pos) pos[count] = p;
            count++;
        }
    }
    return count;
}

void dp_sampler_free(dp_sampler *s) {
    if (!s) return;
    free(s->order);
    s->order = NULL;
}
