/* dp.c: DataParallel (strategy.h): what PyTorch's nn.DataParallel moves each step. The master
 * (global rank 0) replicates its parameters and buffers (in 10 MiB chunks, as PyTorch
 * coalesces them), scatters the input, gathers the logits, computes the loss over the whole
 * batch, scatters the logits' gradients back, and after backward reduces the gradients to
 * itself and steps alone. The executor runs the device part (exec/dppasses.h), recorded as one
 * graph where the device can, and the optimizer step as another. */
#include <stdlib.h>

#include "exec/dppasses.h"
#include "train/strategy.h"

typedef struct {
    dp_exec_dp_plan plan;
    dp_exec_dp *bufs;
    int n_local;
} dp_state;

/* PyTorch coalesces DataParallel's broadcasts (and gradient reduces) in chunks of 10 MiB. */
#define COALESCE_FLOATS ((size_t)10 * 1024 * 1024 / sizeof(float))

static dp_status dp_alloc_state(const dp_step_ctx *c, void **state) {
    dp_state *s = calloc(1, sizeof *s);
    *state = s;
    if (!s) return dp_fail(DP_ERR_NOMEM, "out of memory for the DataParallel state");
    dp_executor *ex = c->ex;
    s->n_local = dp_exec_n_local(ex);
    s->plan = (dp_exec_dp_plan){.world = c->world, .master = -1, .coalesce = COALESCE_FLOATS, .sampler = c->sampler};
    for (int r = 0; r < s->n_local; r++)
        if (dp_exec_rank(ex, r) == 0) s->plan.master = r; /* the master: global rank 0, where it is local */
    return dp_exec_dp_alloc(ex, &s->plan, &s->bufs);
}

static void dp_free_state(const dp_step_ctx *c, void *state) {
    dp_state *s = state;
    if (!s) return;
    dp_exec_dp_free(c->ex, s->bufs);
    free(s);
}

static dp_status dp_micro(const dp_step_ctx *c, void *state) {
    dp_state *s = state;
    dp_executor *ex = c->ex;
    const int n_local = s->n_local, master = s->plan.master;
    DP_TRY(dp_exec_dp_passes(ex, s->bufs, &s->plan, c->b, c->mi));
    /* the master alone holds the step's loss and the reduced gradients, and steps */
    int count[n_local], check[n_local];
    for (int r = 0; r < n_local; r++) count[r] = r == master ? c->mi->step_samples : 0, check[r] = r == master;
    dp_step_in sin = c->in;
    sin.count = count, sin.host_lanes = DP_LANES_GIVEN, sin.check = check;
    DP_TRY(dp_exec_step_sums(ex, &sin, c->sums));
    if (master >= 0 && dp_step_sums_apply(c->sums)) /* NaN/Inf: nothing is applied */
        DP_TRY(dp_exec_optimizer_step(ex, master, c->sgd, c->lr));
    return DP_OK;
}

static dp_status dp_finish(const dp_step_ctx *c, void *state) {
    (void)state;
    /* the replicas hold last step's copies; evaluation and checkpoints read the master's */
    if (c->world == 1) return DP_OK;
    dp_executor *ex = c->ex;
    DP_TRY(dp_exec_broadcast(ex, dp_exec_slices(ex, DP_ARENA_PARAMS, 0), c->model->params.n, 0));
    if (c->model->buffers.n) DP_TRY(dp_exec_broadcast(ex, dp_exec_slices(ex, DP_ARENA_BUFFERS, 0), c->model->buffers.n, 0));
    return DP_OK;
}

static size_t dp_largest(const dp_model *m) { return m->params.n; }

const dp_strategy dp_strategy_dp = {.name = "dp", .title = "DP", .contiguous_sampler = 1, .loss_on_master = 1,
                                    .no_accumulate = "DataParallel has no no_sync",
                                    .no_sync_bn = "DataParallel has no SyncBatchNorm",
                                    .largest_collective = dp_largest, .alloc = dp_alloc_state, .micro_step = dp_micro,
                                    .finish = dp_finish, .free = dp_free_state};
