/* memory.h: a run's memory estimated before the large allocations (replica arenas, lanes'
 * activations, the loader's batch slots), from the model's plan and the flags, and refused
 * with the figures when it cannot fit: Linux overcommits, so an allocation that succeeds can
 * still get the process killed by the OOM killer later, with no message at all. */
#ifndef DP_EXEC_MEMORY_H
#define DP_EXEC_MEMORY_H

#include <stddef.h>

#include "data/dataset.h"
#include "nn/model.h"

typedef struct {
    unsigned long long data;        /* the data sets in memory (uint8) */
    unsigned long long arenas;      /* per replica: parameters, gradients, momentum, buffers, lanes' gradients */
    unsigned long long acts;        /* per replica: every slot's activations and evaluation batch */
    unsigned long long loader;      /* the loader's prefetched batches (floats) */
    unsigned long long total;
} dp_mem_estimate;

/* How the replicas of this process are laid out (exec/replica.h): n_lanes gradient partials
 * and n_slots activation slots of up to lane_batch samples each per replica; max_local samples a
 * replica gets in a micro-step; loader_slots batches the loader prefetches. */
typedef struct {
    int n_local, n_lanes, n_slots, lane_batch, max_local, loader_slots;
    int per_device;      /* replicas on each device (0: all n_local on one) */
    const dp_kernels *k; /* the device's table (its scratch sizes); NULL: the CPU's */
} dp_mem_shape;

void dp_estimate_memory(const dp_model *m, const dp_dataset *train, const dp_dataset *test, const dp_mem_shape *sh,
                        dp_mem_estimate *out);
/* Fails (DP_ERR_NOMEM) when what is still to be allocated (the estimate, less the data when
 * data_loaded) exceeds the memory available, naming every part and the limit's source. */
dp_status dp_check_memory(const dp_mem_estimate *e, const dp_mem_shape *sh, int data_loaded);
/* A run whose replicas live on a device: the arenas and activations against the device's free
 * memory (free_bytes, less `reserved` for the device's own workspaces), the rest (data, loader,
 * the host copies of parameters) against the host's. */
dp_status dp_check_device_memory(const dp_mem_estimate *e, const dp_mem_shape *sh, int data_loaded,
                                 unsigned long long free_bytes, unsigned long long reserved, const char *device);

#endif
