/* checkpoint.h: a model's parameters, BN buffers and momentum in one file, checked on load.
 * Layout (little-endian): "DPCKPT01", header (dp_ckpt_header), params, buffers, momentum
 * floats, then the CRC-32 (zlib) of everything before it. Written to a temporary name and
 * renamed, so a failed or interrupted save never leaves a partial file. */
#ifndef DP_CHECKPOINT_H
#define DP_CHECKPOINT_H

#include <stdint.h>

#include "nn/model.h"

typedef struct {
    char model[32];
    int32_t c, h, w, n_classes;
    int64_t n_params, n_buffers;
    int64_t step;
    int32_t epoch, has_momentum;
} dp_ckpt_header;

dp_status dp_checkpoint_save(const char *path, const dp_model *m, const float *params, const float *buffers,
                             const float *momentum, int epoch, long step);
/* Checks the file against the model (name, input shape, classes, sizes) and fills the arenas;
 * momentum may be NULL. Every failure names the file and what did not match. */
dp_status dp_checkpoint_load(const char *path, const dp_model *m, float *params, float *buffers, float *momentum,
                             dp_ckpt_header *hdr_out);

#endif
