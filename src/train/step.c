/* step.c: one training micro-step: the executor assigns the sampler's lanes to the replicas'
 * slots and stages the batches where the device computes; the strategy does the rest; the step's
 * sums come back here, where a NaN/Inf stops the run (or the step, --on-nan skip). */
#include <math.h>

#include <string.h>

#include "exec/launch.h"
#include "train/signals.h"
#include "train/strategy.h"
#include "train/trainer.h"

/* A NaN/Inf loss, decided on the all-reduced sum so that every rank stops (or skips) at the same
 * step; the message names a local replica whose loss it was, if any. */
static dp_status check_loss(dp_trainer *t, float global_sum) {
    if (isfinite(global_sum)) return DP_OK;
    const char *what = isnan(global_sum) ? "NaN" : "Inf";
    if (t->strategy->loss_on_master)
        return dp_fail(DP_ERR_NUMERIC, "the loss became %s at epoch %d, step %ld (computed on the master replica 0 in "
                       "%s mode): training stopped (try a smaller --lr)", what, t->epoch, t->step + 1,
                       t->strategy->title);
    int rank;
    DP_TRY(dp_exec_nonfinite_rank(t->ex, &rank));
    if (rank >= 0)
        return dp_fail(DP_ERR_NUMERIC, "the loss of replica %d became %s at epoch %d, step %ld: training "
                       "stopped (try a smaller --lr)", rank, what, t->epoch, t->step + 1);
    return dp_fail(DP_ERR_NUMERIC, "the loss of another rank's replica became %s at epoch %d, step %ld: training "
                   "stopped (try a smaller --lr)", what, t->epoch, t->step + 1);
}

dp_step_ctx dp_train_step_ctx(dp_trainer *t) {
    return (dp_step_ctx){.ex = t->ex, .model = &t->model, .sampler = &t->sampler, .sgd = &t->sgd, .world = t->world,
                         .overlap = t->cfg.overlap};
}

dp_status dp_train_micro(dp_trainer *t, const dp_batch *batches, int b, float lr, dp_step_metrics *m) {
    dp_micro_info mi = {0};
    const dp_batch *db;
    DP_TRY(dp_exec_begin_micro(t->ex, &t->sampler, batches, b, &mi, &db));
    dp_step_sums sums = {0};
    dp_step_ctx c = dp_train_step_ctx(t);
    c.b = db, c.mi = &mi, c.lr = lr, c.sums = &sums;
    c.in.stop_request = dp_signals_pending;
    c.in.inject_inf = t->inject_inf_grad_step && t->step + 1 == t->inject_inf_grad_step;
    DP_TRY(t->strategy->micro_step(&c, t->strategy_state));
    if (!mi.last) return DP_OK;
    t->stop_folded = sums.stop;
    t->stop_folded_valid = 1;
    /* a device's gradients hold NaN/Inf: the strategy applied nothing (the CPU's SGD step refuses
       them itself), and the trainer stops or skips as for the CPU's (--on-nan) */
    if (sums.nonfinite) atomic_store(&t->nonfinite, 1);
    DP_TRY(check_loss(t, sums.loss));
    m->loss_sum += sums.loss;
    m->correct += sums.hits;
    m->count += sums.count;
    return dp_exec_collect_coll_times(t->ex);
}

typedef struct {
    dp_trainer *t;
    const dp_batch *hb; /* (micros x n_local) the micro-steps' batches */
    int first;          /* the first step's first batch in the epoch */
    const float *lr;    /* (n) */
} launch_args;

/* Step j of a launch: its micro-steps (--accumulate; batches first + j * accumulate on) queued as
 * dp_train_micro queues them, their batches gathered from their slots, the step's sums summed into
 * its own block (launch.h). */
static dp_status launch_step(void *arg, int j) {
    const launch_args *a = arg;
    dp_trainer *t = a->t;
    const int A = t->cfg.accumulate, b0 = a->first + j * A, m = dp_sampler_step_micro(&t->sampler, b0);
    for (int i = 0; i < m; i++) {
        const dp_batch *hb = a->hb + (size_t)(j * A + i) * dp_exec_n_local(t->ex);
        dp_micro_info mi = {0};
        const dp_batch *db;
        DP_TRY(dp_exec_begin_micro(t->ex, &t->sampler, hb, b0 + i, &mi, &db));
        dp_step_sums sums = {0};
        dp_step_ctx c = dp_train_step_ctx(t);
        c.b = db, c.mi = &mi, c.lr = a->lr[j], c.sums = &sums;
        c.in.inject_inf = t->inject_inf_grad_step && t->step + 1 + j == t->inject_inf_grad_step;
        DP_TRY(t->strategy->micro_step(&c, t->strategy_state));
    }
    return DP_OK;
}

dp_status dp_train_launch(dp_trainer *t, const dp_batch *hb, int first, int n, int micros, const float *lr,
                          dp_step_sums *sums) {
    const int nl = dp_exec_n_local(t->ex), A = t->cfg.accumulate;
    /* what the recorded micro-steps depend on beyond the values staged for them: their step's
       learning rate, their lanes and every replica's count (the lanes' state is the executor's) */
    uint64_t key = DP_GRAPH_KEY0;
    for (int q = 0; q < micros; q++) {
        int v[5 + nl], lane0, lanes;
        dp_sampler_micro_lanes(&t->sampler, first + q, &lane0, &lanes);
        memcpy(&v[0], &lr[q / A], sizeof v[0]);
        v[1] = dp_sampler_step_samples(&t->sampler, first + q), v[2] = dp_sampler_batch_size(&t->sampler, first + q);
        v[3] = lane0, v[4] = lanes;
        for (int r = 0; r < nl; r++) v[5 + r] = hb[(size_t)q * nl + r].n;
        key = dp_graph_key(key, v, 5 + nl);
    }
    /* a test's injected fault runs eagerly, never recorded (a recording would replay it) */
    const int record = !(t->inject_inf_grad_step > t->step && t->inject_inf_grad_step <= t->step + n);
    launch_args a = {t, hb, first, lr};
    DP_TRY(dp_exec_launch_run(t->ex, n, micros, key, record, dp_signals_pending(), launch_step, &a, sums));
    return dp_exec_collect_coll_times(t->ex);
}
