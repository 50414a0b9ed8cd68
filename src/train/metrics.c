/* metrics.c: a step's loss and accuracy over every replica of every process, and the NaN/Inf
 * checks on it: of the loss, and of a device's gradients. */
#include <math.h>
#include <signal.h>

#include "train/signals.h"
#include "train/strategy.h"
#include "train/trainer.h"

/* A NaN/Inf loss, decided on the all-reduced sum so that every rank stops (or skips) at the same
 * step; the message names a local replica whose loss it was, if any. */
static dp_status check_loss(dp_trainer *t, float global_sum) {
    if (isfinite(global_sum)) return DP_OK;
    const dp_executor *ex = &t->ex;
    const char *what = isnan(global_sum) ? "NaN" : "Inf";
    if (t->cfg.mode == DP_MODE_DP)
        return dp_fail(DP_ERR_NUMERIC, "the loss became %s at epoch %d, step %ld (computed on the master replica 0 in "
                       "DP mode): training stopped (try a smaller --lr)", what, t->epoch, t->step + 1);
    /* which replica: its lanes' values (the tree's partial sums, a non-finite one among them), fetched
       only now where they stayed on the device */
    DP_TRY(dp_exec_fetch_lane_losses(&t->ex));
    for (int r = 0; r < ex->n_local; r++)
        for (int l = 0; l < ex->n_lanes; l++)
            if (!isfinite(ex->lane_loss[(size_t)r * ex->n_lanes + (size_t)l]))
                return dp_fail(DP_ERR_NUMERIC, "the loss of replica %d became %s at epoch %d, step %ld: training "
                               "stopped (try a smaller --lr)", ex->rep[r].rank, what, t->epoch, t->step + 1);
    return dp_fail(DP_ERR_NUMERIC, "the loss of another rank's replica became %s at epoch %d, step %ld: training "
                   "stopped (try a smaller --lr)", what, t->epoch, t->step + 1);
}

/* DPTRAIN_INJECT_INF_GRAD_STEP=k (tests only): +Inf in the first gradient of each replica the step
 * checks, at step k, once its gradients are final: a NaN/Inf gradient with a finite loss. Queued
 * as any upload (on a device: no wait). */
static dp_status inject_grad_fault(dp_trainer *t, const int *check) {
    static const float inf = INFINITY; /* an upload's source stays valid until the next wait */
    if (!t->inject_inf_grad_step || t->step + 1 != t->inject_inf_grad_step) return DP_OK;
    for (int r = 0; r < t->ex.n_local; r++) {
        const dp_dev *d = dp_exec_dev(&t->ex, r);
        if (check[r]) DP_TRY(d->upload(d, t->ex.rep[r].grads, &inf, sizeof inf));
    }
    return DP_OK;
}

dp_status dp_step_add_metrics(dp_trainer *t, const int *count, int host_lanes, const int *check, dp_step_metrics *m) {
    dp_executor *ex = &t->ex;
    DP_TRY(inject_grad_fault(t, check));
    /* the stop request rides along (persist.c): one host all-reduce per step, not two */
    const int pending = dp_signals_pending();
    for (int r = 0; r < ex->n_local; r++) {
        t->metric_bufs[r][2] = (float)count[r];
        t->metric_bufs[r][3] = pending != 0;
        t->metric_bufs[r][4] = pending == SIGTERM;
        t->metric_bufs[r][5] = 0; /* a device's check of the gradients adds 1 */
    }
    /* the lanes' sums [0], [1], the gradients' check [5] and the all-reduce, in one round trip
       where the lanes are not the host's */
    DP_TRY(dp_exec_step_metrics(ex, t->metric_bufs, DP_STEP_METRICS, host_lanes, check, 5));
    t->stop_folded = t->metric_bufs[0][3] > 0 ? (t->metric_bufs[0][4] > 0 ? SIGTERM : SIGINT) : 0;
    t->stop_folded_valid = 1;
    /* a device's gradients hold NaN/Inf: the strategy applies nothing (the CPU's SGD step refuses
       them itself), and the trainer stops or skips as for the CPU's (--on-nan) */
    if (t->metric_bufs[0][5] > 0) atomic_store(&t->nonfinite, 1);
    DP_TRY(check_loss(t, t->metric_bufs[0][0]));
    m->loss_sum += t->metric_bufs[0][0];
    m->correct += lrintf(t->metric_bufs[0][1]);
    m->count += lrintf(t->metric_bufs[0][2]);
    return DP_OK;
}
