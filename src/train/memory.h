/* memory.h: a run's memory estimated before the large allocations (replica arenas, lanes'
 * activations, the loader's batch slots), from the model's plan and the flags, and refused
 * with the figures when it cannot fit: Linux overcommits, so an allocation that succeeds can
 * still get the process killed by the OOM killer later, with no message at all. */
#ifndef DP_TRAIN_MEMORY_H
#define DP_TRAIN_MEMORY_H

#include <stddef.h>

#include "data/dataset.h"
#include "nn/model.h"

typedef struct {
    unsigned long long data;        /* the data sets in memory (uint8) */
    unsigned long long arenas;      /* per replica: parameters, gradients, momentum, buffers, lanes' gradients */
    unsigned long long acts;        /* per replica: every lane's activations and evaluation batch */
    unsigned long long loader;      /* the loader's prefetched batches (floats) */
    unsigned long long total;
} dp_mem_estimate;

/* n_local replicas in this process, each split over n_lanes lanes of up to
 * ceil(max_local / n_lanes) samples; slots: the loader's prefetched batches. */
void dp_estimate_memory(const dp_model *m, const dp_dataset *train, const dp_dataset *test, int n_local, int n_lanes,
                        int max_local, int slots, dp_mem_estimate *out);
/* Fails (DP_ERR_NOMEM) when what is still to be allocated (the estimate, less the data when
 * data_loaded) exceeds the memory available, naming every part and the limit's source. */
dp_status dp_check_memory(const dp_mem_estimate *e, int data_loaded, int n_local, int n_lanes, int max_local);

#endif
