/* sampler.h: which samples each replica sees, with torch.utils.data.DistributedSampler's
 * semantics: an epoch's order is a permutation of the data set from seed + epoch (or file
 * order with shuffle off), padded by repeating its start to a multiple of the replica count
 * (or cut to one with drop_last, which also drops the short last global batch: with
 * --drop-last every batch is full). Batches are cut from the global order: global batch b is
 * positions [b*B, (b+1)*B), and replica r takes the positions r, r+N, r+2N, ... counted from
 * the start of its optimizer step (DistributedSampler's own positions when N divides B). So
 * the union of the replicas' batches is the same set of samples whatever N is, which is what
 * makes N replicas equivalent to one; when N divides B every replica takes exactly B/N.
 *
 * The chunk plan (dp_sampler_set_plan, data/chunks.h) orders a replica's share: an optimizer
 * step is K batches (--accumulate) covering positions [s*K*B, (s+1)*K*B); replica r's share of
 * it is its positions r mod N, ordered lane by lane (chunk-major), and micro-step mu takes a
 * contiguous range of the lanes. With C = K = 1 (the default until a plan is set) that is
 * DistributedSampler's order. With `contiguous` (--mode dp) a replica's share of a batch is one
 * contiguous block of it instead, as nn.DataParallel scatters (data/chunks.h). */
#ifndef DP_SAMPLER_H
#define DP_SAMPLER_H

#include <stdint.h>

#include "core/status.h"
#include "data/chunks.h"

typedef struct {
    int n_samples, n_replicas, global_batch;
    int shuffle, drop_last;
    uint64_t seed;
    int epoch;
    int total;      /* positions in the epoch after padding or cutting */
    int n_batches;  /* batches per epoch (the last may be short unless drop_last) */
    int *order;     /* (total) sample index at each position */
    dp_chunk_plan plan;
    int max_local;  /* the most samples a replica gets in one batch */
    int max_lanes;  /* the most lanes one micro-step runs per replica */
    int contiguous; /* DataParallel's scatter (data/chunks.h): set before dp_sampler_set_plan */
} dp_sampler;

/* Fails with DP_ERR_USAGE (naming --batch-size / --replicas) when global_batch < n_replicas
 * or there are fewer samples than replicas. */
dp_status dp_sampler_init(dp_sampler *s, int n_samples, int n_replicas, int global_batch, int shuffle,
                          int drop_last, uint64_t seed);
void dp_sampler_set_epoch(dp_sampler *s, int epoch);
/* Sets the chunk plan: C chunks (a power of two), K batches per optimizer step. */
void dp_sampler_set_plan(dp_sampler *s, int chunks, int accumulate);
/* Batch b's step: its samples over all micro-steps, and how many micro-steps it has. */
int dp_sampler_step_samples(const dp_sampler *s, int b);
int dp_sampler_step_micro(const dp_sampler *s, int b);
/* The lanes batch b runs on every replica: [*first, *first + *count). */
void dp_sampler_micro_lanes(const dp_sampler *s, int b, int *first, int *count);
/* Samples of global batch b (all replicas). */
int dp_sampler_batch_size(const dp_sampler *s, int b);
/* Largest count any replica gets in any batch (ceil(B / N) without a plan). */
int dp_sampler_max_local(const dp_sampler *s);
/* Writes replica r's sample indices (and their positions, if pos != NULL) of batch b, lane by
 * lane; returns the count. */
int dp_sampler_local(const dp_sampler *s, int b, int replica, int *idx, int *pos);
void dp_sampler_free(dp_sampler *s);

#endif
