/* strategy.h: how the replicas share a step, as a table the trainer calls without asking which:
 *   DDP (ddp.c): buffers broadcast from rank 0, forward, loss, backward with each gradient
 *        bucket all-reduced (sum; the loss is already scaled by 1/global batch) as soon as it is
 *        complete, then every replica steps its own optimizer.
 *   DP (dp.c): parameters and buffers replicated from rank 0, the input scattered from it,
 *        forward, logits gathered to rank 0 only, loss there over the whole batch, logit
 *        gradients scattered back, backward, gradients reduced to rank 0, only rank 0 steps:
 *        what PyTorch's DataParallel moves.
 * A strategy sees a step context, not the trainer: the executor (exec/executor.h), which runs the
 * passes, the collectives, the optimizer step and the loss it asks for, the model, and the
 * micro-step. It keeps its buffers in a state of its own. */
#ifndef DP_STRATEGY_H
#define DP_STRATEGY_H

#include <math.h>

#include "data/loader.h"
#include "exec/executor.h"
#include "optim/sgd.h"
#include "train/config.h"

typedef struct {
    dp_executor *ex;
    const dp_model *model;
    const dp_sampler *sampler; /* the lanes of every rank (DP's master computes them all) */
    const dp_sgd *sgd;
    int world;                 /* replicas over all processes */
    int overlap;               /* --overlap: a bucket's all-reduce starts as backward completes it */
    /* the micro-step (unset for alloc, finish and free) */
    const dp_batch *b;         /* the local replicas' batches, where the device computes */
    const dp_micro_info *mi;
    float lr;
    dp_step_in in;             /* the step's stop request and test hooks; the strategy adds the rest */
    dp_step_sums *sums;        /* out, on the last micro-step: the step's sums (dp_exec_step_sums) */
} dp_step_ctx;

typedef struct dp_strategy_s {
    const char *name;     /* "ddp", "dp": --mode */
    const char *title;    /* "DDP", "DP": in messages */
    /* the rules the trainer and the options follow without asking which strategy */
    int contiguous_sampler; /* each replica's share is a contiguous block (nn.DataParallel's scatter) */
    const char *no_accumulate; /* why --accumulate K > 1 is refused (NULL: it is possible) */
    const char *no_sync_bn;    /* why --sync-bn is refused (NULL: it is possible) */
    int loss_on_master;   /* the loss is computed on global replica 0 over the whole batch */
    /* the largest host sum a step's collectives make (dp_backend_reserve): every bucket (DDP) or
       the whole gradient (DP) */
    size_t (*largest_collective)(const dp_model *m);
    dp_status (*alloc)(const dp_step_ctx *c, void **state);
    /* One micro-step; the step's last micro-step fills *c->sums with the step's sums over every
     * replica, and applies no update where they say a gradient or the loss is not finite. */
    dp_status (*micro_step)(const dp_step_ctx *c, void *state);
    /* Makes every replica hold what evaluation and checkpoints read (DP: the master's). */
    dp_status (*finish)(const dp_step_ctx *c, void *state);
    void (*free)(const dp_step_ctx *c, void *state);
} dp_strategy;

extern const dp_strategy dp_strategy_ddp, dp_strategy_dp;
/* The strategy of --mode m. */
const dp_strategy *dp_strategy_of(dp_mode m);

/* Whether the step's sums allow its update: finite gradients (a device's check) and loss. */
static inline int dp_step_sums_apply(const dp_step_sums *s) { return !s->nonfinite && isfinite(s->loss); }

#endif
