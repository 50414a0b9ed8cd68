/* strategy.h: how the replicas share a step, as a table the trainer calls without asking which:
 *   DDP (ddp.c): buffers broadcast from rank 0, forward, loss, backward with each gradient
 *        bucket all-reduced (sum; the loss is already scaled by 1/global batch) as soon as it is
 *        complete, then every replica steps its own optimizer.
 *   DP (dp.c): parameters and buffers replicated from rank 0, the input scattered from it,
 *        forward, logits gathered to rank 0 only, loss there over the whole batch, logit
 *        gradients scattered back, backward, gradients reduced to rank 0, only rank 0 steps:
 *        what PyTorch's DataParallel moves.
 * A strategy keeps its buffers in a state of its own; the executor (exec/executor.h) runs the
 * passes and the collectives it asks for. */
#ifndef DP_STRATEGY_H
#define DP_STRATEGY_H

#include "exec/executor.h"

struct dp_trainer;
struct dp_step_metrics;

typedef struct dp_strategy_s {
    const char *name; /* "ddp", "dp" */
    dp_status (*alloc)(struct dp_trainer *t, void **state);
    /* One micro-step on the local replicas' batches b (where the device computes; hb: the
     * loader's, on the host) with learning rate lr; the step's last micro-step adds the step's
     * loss and counts over every replica to *m. */
    dp_status (*micro_step)(struct dp_trainer *t, void *state, const dp_batch *b, const dp_batch *hb,
                            const dp_micro_info *mi, float lr, struct dp_step_metrics *m);
    /* Makes every replica hold what evaluation and checkpoints read (DP: the master's). */
    dp_status (*finish)(struct dp_trainer *t, void *state);
    void (*free)(struct dp_trainer *t, void *state);
} dp_strategy;

extern const dp_strategy dp_strategy_ddp, dp_strategy_dp;

/* Sums [loss, correct, count] of the step over every replica of every process into *m (the
 * lanes' losses with the fixed tree, then the replicas' with the all-reduce's) and stops on a
 * NaN/Inf loss, decided on the sum so every rank stops at the same step (metrics.c). host_lanes:
 * the strategy wrote the lanes' losses and hits into the executor's host copies (DP's master
 * loss); else they are where the lanes computed them. check[r]: local replica r steps with its
 * gradients, final now; on a device they are checked for NaN/Inf in the same round trip, and
 * t->nonfinite set when any holds one: the strategy then applies no update (on the CPU the SGD
 * step checks them itself and sets it). */
dp_status dp_step_add_metrics(struct dp_trainer *t, const int *count, int host_lanes, const int *check,
                              struct dp_step_metrics *m);
/* The floats of a step's metrics: loss, hits, count, stop, SIGTERM, non-finite gradients. */
#define DP_STEP_METRICS 6

#endif
