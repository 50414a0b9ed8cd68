/* replica.h: one replica's state: its four arenas (parameters, gradients, momentum, BN
 * buffers, all with the model's layouts) and its activations. */
#ifndef DP_REPLICA_H
#define DP_REPLICA_H

#include "nn/model.h"

typedef struct {
    int rank;           /* global replica index */
    float *params, *grads, *momentum, *buffers;
    dp_acts acts;
    float *eval_x;      /* (max_batch, c, h, w) input for evaluation */
    int32_t *eval_y;
} dp_replica;

dp_status dp_replica_create(dp_replica *r, const dp_model *m, int rank, int max_batch, int nthreads);
void dp_replica_free(dp_replica *r);

#endif
