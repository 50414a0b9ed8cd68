/* step.c: one training micro-step: the executor assigns the sampler's lanes to the replicas'
 * slots and stages the batches where the device computes; the strategy does the rest. */
#include "train/strategy.h"
#include "train/trainer.h"

dp_status dp_train_micro(dp_trainer *t, const dp_batch *batches, int b, float lr, dp_step_metrics *m) {
    dp_micro_info mi = {0};
    DP_TRY(dp_exec_assign(&t->ex, &t->sampler, batches, b, &mi));
    const dp_batch *db;
    DP_TRY(dp_exec_stage(&t->ex, batches, &db));
    DP_TRY(t->strategy->micro_step(t, t->strategy_state, db, batches, &mi, lr, m));
    return mi.last ? dp_exec_collect_coll_times(&t->ex) : DP_OK;
}
