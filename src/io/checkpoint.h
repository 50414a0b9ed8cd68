/* checkpoint.h: a model's state in a safetensors file (io/safetensors.h) that PyTorch can load.
 *   - tensors: the model's state_dict (io/state_dict.h) as F32, num_batches_tracked as I64;
 *   - optimizer.momentum.<name>: SGD's momentum buffer of each parameter. PyTorch's
 *     load_state_dict(strict=True) would reject these keys, so loaders drop keys starting with
 *     "optimizer." (examples/pytorch/safetensors_io.py does);
 *   - __metadata__ (strings): "dptrain.epoch", "dptrain.next_batch", "dptrain.step", ... (the
 *     position) and "dptrain.arg.<flag>" (the run's settings, checked on resume), the training
 *     data's CRC-32, and the CRC-32 of the tensor bytes (dptrain.data_crc32).
 * There is no random generator state to store: every stream is derived from --seed and the
 * epoch (sampler) or the sample's position in the epoch (augmentation), see core/rng.h.
 * Files of the old DPCKPT01 format (checkpoint_v1.c) are still read for weights. */
#ifndef DP_CHECKPOINT_H
#define DP_CHECKPOINT_H

#include <stdint.h>

#include "io/safetensors.h"
#include "kernels/conv_algos.h" /* DP_CONV_ALGOS_RECORD_MAX */
#include "nn/model.h"

typedef struct {
    int epoch;        /* the epoch in progress, from 1 */
    int next_batch;   /* its first batch not trained yet (== batches per epoch: the epoch's training is done) */
    long step;        /* optimizer steps done */
    long skipped;     /* steps skipped for a NaN/Inf (--on-nan skip) */
    long bn_batches;  /* training forward passes: PyTorch's num_batches_tracked */
} dp_train_pos;

/* The largest position a checkpoint may record: --epochs is at most 100000 (a finished run records
 * the epoch after its last), and counts travel between ranks as three 20-bit floats. */
#define DP_CKPT_MAX_EPOCH 100001L
#define DP_CKPT_MAX_COUNT 0x7fffffffffffL

/* Writes path atomically (io/atomic.h). momentum may be NULL. meta: the run's settings. */
dp_status dp_checkpoint_save(const char *flag, const char *path, const dp_model *m, const float *params,
                             const float *buffers, const float *momentum, const dp_train_pos *pos,
                             const dp_st_meta *meta, int n_meta);

/* A weights file given to flag (--load, --init-from) before anything else is read: a directory is
 * refused naming its newest checkpoint (usage), a FIFO or other non-regular file as such. */
dp_status dp_checkpoint_check_path(const char *flag, const char *path);

/* Weights and BN buffers from a safetensors state_dict (dptrain's or one PyTorch wrote) or an old
 * DPCKPT01 file. Names, dtypes and shapes must match the model exactly (as strict=True); keys
 * starting with "optimizer." or "dptrain." are ignored. `flag` names the option in messages.
 * bn_batches (may be NULL) gets the file's num_batches_tracked (0 without BatchNorm), so that
 * --init-from continues PyTorch's count. */
dp_status dp_checkpoint_load_weights(const char *flag, const char *path, const dp_model *m, float *params,
                                     float *buffers, long *bn_batches);

/* A setting the checkpoint recorded without it being checked (how the run was spread: replicas,
 * --chunks, kernels), copied out for the caller: value "" when the file has none. */
typedef struct {
    const char *key;
    char value[DP_CONV_ALGOS_RECORD_MAX]; /* the convolution algorithm record (kernels/conv_algos.h) is the longest */
} dp_ckpt_recorded;

/* Everything needed to continue: weights, buffers, momentum and position. Fails with DP_ERR_USAGE
 * naming the file and the setting when an entry of `expect` differs from what the file was written
 * with, with DP_ERR_FORMAT or DP_ERR_IO when the file is damaged. The n_rec entries of rec (may be
 * NULL) get the file's values of their keys. */
dp_status dp_checkpoint_load_resume(const char *path, const dp_model *m, float *params, float *buffers,
                                    float *momentum, dp_train_pos *pos, const dp_st_meta *expect, int n_expect,
                                    dp_ckpt_recorded *rec, int n_rec);

/* The old format (read only). */
typedef struct {
    char model[32];
    int32_t c, h, w, n_classes;
    int64_t n_params, n_buffers;
    int64_t step;
    int32_t epoch, has_momentum;
} dp_ckpt_v1_header;
dp_status dp_checkpoint_v1_load(const char *path, const dp_model *m, float *params, float *buffers, float *momentum,
                                dp_ckpt_v1_header *hdr_out);

#endif
