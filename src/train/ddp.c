/* ddp.c: DistributedDataParallel (strategy.h). Its choices: the buffers broadcast from rank 0 at
 * every forward, the gradients all-reduced bucket by bucket on the last micro-step (started as
 * backward completes each with --overlap), every replica stepping its own optimizer. The executor
 * runs them (exec/executor.h: dp_exec_micro_passes), the passes and the optimizer step each
 * recorded as one graph where the device can. */
#include <stdlib.h>

#include "train/strategy.h"

typedef struct {
    int *step_count; /* (n_local) samples so far this step */
} ddp_state;

static dp_status ddp_micro(const dp_step_ctx *c, void *state) {
    ddp_state *s = state;
    dp_executor *ex = c->ex;
    const int n_local = dp_exec_n_local(ex), reduce = c->world > 1;
    const dp_exec_sync sync = {.broadcast_buffers = reduce, .allreduce = reduce, .overlap = c->overlap};
    DP_TRY(dp_exec_micro_passes(ex, c->b, c->mi, 1.0f / (float)c->mi->step_samples, &sync));
    for (int r = 0; r < n_local; r++) s->step_count[r] += c->b[r].n;
    if (!c->mi->last) return DP_OK;
    int count[n_local], check[n_local];
    for (int r = 0; r < n_local; r++) count[r] = s->step_count[r], s->step_count[r] = 0, check[r] = 1;
    dp_step_in in = c->in;
    in.count = count, in.host_lanes = 0, in.check = check;
    DP_TRY(dp_exec_step_sums(ex, &in, c->sums));
    if (!dp_step_sums_apply(c->sums)) return DP_OK; /* NaN/Inf: nothing is applied */
    return dp_exec_optimizer_step(ex, DP_EXEC_ALL, c->sgd, c->lr);
}

static size_t ddp_largest(const dp_model *m) {
    size_t n = 0;
    for (int k = 0; k < m->params.n_buckets; k++) n = m->params.buckets[k].count > n ? m->params.buckets[k].count : n;
    return n;
}

static dp_status ddp_alloc(const dp_step_ctx *c, void **state) {
    ddp_state *s = calloc(1, sizeof *s);
    *state = s;
    if (!s) return dp_fail(DP_ERR_NOMEM, "out of memory for the DDP state");
    DP_ALLOC(s->step_count, dp_exec_n_local(c->ex), "step sample counts");
    return DP_OK;
}

static dp_status ddp_finish(const dp_step_ctx *c, void *state) {
    (void)c, (void)state; /* every replica stepped: they hold the same parameters */
    return DP_OK;
}

static void ddp_free(const dp_step_ctx *c, void *state) {
    (void)c;
    ddp_state *s = state;
    if (!s) return;
    free(s->step_count);
    free(s);
}

const dp_strategy dp_strategy_ddp = {.name = "ddp", .title = "DDP", .largest_collective = ddp_largest,
                                     .alloc = ddp_alloc, .micro_step = ddp_micro, .finish = ddp_finish,
                                     .free = ddp_free};
