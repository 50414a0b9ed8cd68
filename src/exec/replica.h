/* replica.h: one replica's state: its arenas (parameters, gradients, momentum, BN buffers, all
 * with the model's layouts), its lanes' gradient partials and its activation slots.
 *
 * A lane is a fixed chunk of the step's samples (data/chunks.h) whose weight gradients are
 * summed into a gradient arena of its own; lane 0's is the replica's. At the end of a step
 * the lanes' partials are added with the fixed tree (core/treesum.h), so the replica's
 * gradient does not depend on which thread ran which lane. A slot is the activation memory
 * that runs one lane at a time: a micro-step runs up to n_slots lanes at once, in parallel
 * over threads, each single-threaded. */
#ifndef DP_REPLICA_H
#define DP_REPLICA_H

#include "kernels/device.h"
#include "kernels/kcall.h"
#include "nn/model.h"

typedef struct {
    dp_acts acts;
    float *grads;       /* the gradient arena of the lane the slot runs now (not owned) */
    float *eval_x;      /* (max_batch, c, h, w) input for evaluation, on the device */
    int32_t *eval_y;    /* its labels, on the host (evaluation's loss is computed there) */
    int lane;           /* the lane it runs in this micro-step */
    int lo, n;          /* that lane's samples in the replica's batch */
    /* on a device that runs lanes in one launch: the slot's kernel calls, recorded (kernels/kcall.h),
       and the kctx that names the record to the recording table */
    dp_kcall_rec rec;
    dp_kctx rec_kc;
} dp_slot;

typedef struct {
    int rank;           /* global replica index */
    const dp_dev *dev;  /* where the arenas, partials and slots live */
    float *params, *grads, *momentum, *buffers;
    /* host copies of params, buffers and momentum for checkpoints and initialisation
       (dp_replica_pull / push); the arenas themselves on a host device */
    float *h_params, *h_buffers, *h_momentum;
    float **lane_grads; /* (n_lanes) each lane's partial; [0] is grads */
    int n_lanes;
    dp_slot *slots;
    int n_slots;        /* slots in use this micro-step: n_active of them */
    int n_active;
} dp_replica;

/* lane_batch: the most samples a lane holds; n_lanes gradient partials, n_slots activation slots. */
dp_status dp_replica_create(dp_replica *r, const dp_model *m, const dp_dev *dev, int rank, int lane_batch, int n_lanes,
                            int n_slots);
/* The device's params, buffers and momentum into the host copies (waits), and back (queued). */
dp_status dp_replica_pull(dp_replica *r, const dp_model *m);
dp_status dp_replica_push(dp_replica *r, const dp_model *m);
void dp_replica_free(dp_replica *r);
/* Assigns lanes [first, first + count) to slots for a micro-step; counts[i] samples each, in
 * that order in the replica's batch. */
void dp_replica_assign(dp_replica *r, int first, int count, const int *counts);

#endif
