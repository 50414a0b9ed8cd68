/* dppasses.h: DataParallel's device work in a micro-step, which train/dp.c decides and this runs:
 * the master's parameters and buffers replicated to every replica (coalesced broadcasts), the
 * input scattered from it, the forwards, the logits and labels gathered to it, its loss over the
 * whole batch, the logits' gradients scattered back, the backwards and the gradients reduced to
 * it; one graph where the device records (dp_exec_run_graph). It owns the buffers this moves. */
#ifndef DP_EXEC_DPPASSES_H
#define DP_EXEC_DPPASSES_H

#include "exec/executor.h"

/* What the strategy chose, set once. */
typedef struct {
    int world;                 /* replicas over all processes */
    int master;                /* the local replica that is global rank 0; -1: none here */
    size_t coalesce;           /* floats per broadcast of the replication */
    const dp_sampler *sampler; /* the lanes of every rank: the master's loss runs lane by lane */
} dp_exec_dp_plan;

/* DataParallel's buffers on the replicas' devices: gather records, scattered input, the master's
 * batch, logit gradients, lane losses and hits. */
typedef struct dp_exec_dp_s dp_exec_dp;

/* *out is set as soon as it exists, so that dp_exec_dp_free frees a partial one after a failure. */
dp_status dp_exec_dp_alloc(dp_executor *ex, const dp_exec_dp_plan *p, dp_exec_dp **out);
void dp_exec_dp_free(dp_executor *ex, dp_exec_dp *d);
/* One micro-step's device part, from the replication to the gradients' reduce (b: the local
 * replicas' batches, where the device computes); the step's loss as the master computed it
 * (dp_exec_set_step_loss), for dp_exec_step_sums with DP_LANES_GIVEN. */
dp_status dp_exec_dp_passes(dp_executor *ex, dp_exec_dp *d, const dp_exec_dp_plan *p, const dp_batch *b,
                            const dp_micro_info *mi);

#endif
