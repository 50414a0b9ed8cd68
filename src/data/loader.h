/* loader.h: prefetching batches for the replicas this process drives.
 * `workers` threads assemble batches (gather, normalise, augment) into a bounded ring of
 * slots ahead of the trainer; workers = 0 loads in the caller's thread. The time the caller
 * blocks waiting for a batch is reported, so data wait and compute are measured apart. */
#ifndef DP_LOADER_H
#define DP_LOADER_H

#include <stdint.h>

#include "data/dataset.h"
#include "data/sampler.h"

typedef struct {
    int n;          /* samples in this replica's share of the batch (may be 0) */
    float *x;       /* (n, c, h, w) normalised (not filled with indices_only) */
    int32_t *y;     /* (n) */
    const int32_t *idx; /* (n) the samples' indices in the data set */
} dp_batch;

typedef struct dp_loader dp_loader;

typedef struct {
    const dp_dataset *data;
    dp_sampler *sampler;        /* the loader calls dp_sampler_set_epoch itself; not shared with another loader */
    int n_local;                /* replicas this process drives */
    const int *ranks;           /* (n_local) global replica index of each */
    int workers;                /* 0: synchronous */
    int fill_threads;           /* workers = 0: threads that fill a batch together (<= 1: the caller alone) */
    int prefetch;               /* slots in the ring (>= 1); 2 * workers is a good value */
    dp_augment augment;         /* epoch is set by dp_loader_start_epoch */
    int indices_only;           /* fill idx and y only: the device gathers the images (no augmentation) */
} dp_loader_config;

dp_status dp_loader_create(dp_loader **out, const dp_loader_config *cfg);
/* Starts an epoch: workers begin filling batches 0, 1, ... of that epoch's order. */
dp_status dp_loader_start_epoch(dp_loader *l, int epoch);
/* The same, from batch first_batch (0..batches per epoch): a resumed run continues mid-epoch
 * with exactly the batches (order, augmentation) the uninterrupted run would have seen next. */
dp_status dp_loader_start_epoch_at(dp_loader *l, int epoch, int first_batch);
/* Blocks until the next batch is ready; batches[i] is local replica i's share. Returns DP_DONE
 * after the last batch of the epoch. *wait_s (may be NULL) receives the seconds spent blocked
 * (with workers = 0: the seconds spent loading the batch).
 * The batch stays valid until the next call of dp_loader_next or dp_loader_start_epoch. */
dp_status dp_loader_next(dp_loader *l, const dp_batch **batches, double *wait_s);
/* Stops the workers (an epoch may be abandoned midway) and frees everything. NULL is fine. */
void dp_loader_destroy(dp_loader *l);

#endif
