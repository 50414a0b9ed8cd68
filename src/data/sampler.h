/* sampler.h: which samples each replica sees, with torch.utils.data.DistributedSampler's
 * semantics: an epoch's order is a permutation of the data set from seed + epoch (or file
 * order with shuffle off), padded by repeating its start to a multiple of the replica count
 * (or cut to one with drop_last, which also drops the short last global batch: with
 * --drop-last every batch is full); replica r owns positions r, r+N, r+2N, ...
 * Batches are cut from the global order: global batch b is positions [b*B, (b+1)*B) and
 * replica r takes those of its positions that fall inside. So the union of the replicas'
 * batches is the same set of samples whatever N is, which is what makes N replicas
 * equivalent to one; when N divides B every replica takes exactly B/N. */
#ifndef DP_SAMPLER_H
#define DP_SAMPLER_H

#include <stdint.h>

#include "core/status.h"

typedef struct {
    int n_samples, n_replicas, global_batch;
    int shuffle, drop_last;
    uint64_t seed;
    int epoch;
    int total;      /* positions in the epoch after padding or cutting */
    int n_batches;  /* batches per epoch (the last may be short unless drop_last) */
    int *order;     /* (total) sample index at each position */
} dp_sampler;

/* Fails with DP_ERR_USAGE (naming --batch-size / --replicas) when global_batch < n_replicas
 * or there are fewer samples than replicas. */
dp_status dp_sampler_init(dp_sampler *s, int n_samples, int n_replicas, int global_batch, int shuffle,
                          int drop_last, uint64_t seed);
void dp_sampler_set_epoch(dp_sampler *s, int epoch);
/* Samples of global batch b (all replicas). */
int dp_sampler_batch_size(const dp_sampler *s, int b);
/* Largest count any replica gets in any batch: ceil(B / N). */
int dp_sampler_max_local(const dp_sampler *s);
/* Writes replica r's sample indices (and their positions, if pos != NULL) of batch b; returns the count. */
int dp_sampler_local(const dp_sampler *s, int b, int replica, int *idx, int *pos);
void dp_sampler_free(dp_sampler *s);

#endif
