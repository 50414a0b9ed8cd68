/* replica.h: one replica's state: its four arenas (parameters, gradients, momentum, BN
 * buffers, all with the model's layouts) and its lanes.
 *
 * A lane is a single-threaded slice of the replica's batch with its own activations and
 * gradient arena (lane 0 uses the replica's). When a process has more threads than replicas,
 * each replica's batch is split over lanes that run whole layers in parallel: far fewer
 * synchronisations per step than splitting every kernel over threads, which on a 2-core
 * machine made two threads slower than one. Lanes of a replica share its BN statistics (their
 * sums are added), and their gradients are added into lane 0 bucket by bucket, so a replica
 * computes exactly what it would in one piece, up to float summation order. */
#ifndef DP_REPLICA_H
#define DP_REPLICA_H

#include "nn/model.h"

typedef struct {
    dp_acts acts;
    float *grads;       /* lane 0: the replica's gradient arena (not owned) */
    float *eval_x;      /* (max_batch, c, h, w) input for evaluation */
    int32_t *eval_y;
    int lo, n;          /* this step's slice of the replica's batch */
} dp_lane;

typedef struct {
    int rank;           /* global replica index */
    float *params, *grads, *momentum, *buffers;
    dp_lane *lanes;
    int n_lanes;
} dp_replica;

/* max_batch: the most samples the replica gets in a step; each lane holds ceil(max_batch / n_lanes). */
dp_status dp_replica_create(dp_replica *r, const dp_model *m, int rank, int max_batch, int n_lanes);
void dp_replica_free(dp_replica *r);
/* Splits n samples over the lanes (contiguous, the first n % lanes one larger). */
void dp_replica_split(dp_replica *r, int n);

#endif
