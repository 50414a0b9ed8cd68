/* state_dict.h: a model's tensors under the names and shapes PyTorch's state_dict() gives its
 * twin (examples/pytorch/): conv1.weight (out, in, k, k), fc1.bias (out), bn1.running_var (C),
 * bn1.num_batches_tracked (an int64 scalar PyTorch keeps per BatchNorm), in module order. */
#ifndef DP_STATE_DICT_H
#define DP_STATE_DICT_H

#include <stdint.h>

#include "nn/model.h"

typedef enum { DP_SD_PARAM = 0, DP_SD_BUFFER = 1, DP_SD_COUNTER = 2 } dp_sd_kind;

typedef struct {
    char name[64];
    dp_sd_kind kind;       /* which arena; COUNTER: num_batches_tracked, not stored in an arena */
    int ndim;
    int64_t shape[4];
    size_t offset, count;  /* floats in the arena */
} dp_sd_entry;

/* The model's entries (malloc'd, caller frees). */
dp_status dp_state_dict(const dp_model *m, dp_sd_entry **out, int *n);

#endif
