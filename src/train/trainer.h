/* trainer.h: one trainer for every backend and device: the epoch loop, the report, checkpoints
 * and stopping. Data flows data -> sampler -> executor (exec/executor.h: how the device runs the
 * replicas) -> strategy (strategy.h: DDP or DP, which collectives run, when, and who steps) ->
 * backend collectives -> optimizer; the trainer never asks which device or backend it runs on. */
#ifndef DP_TRAINER_H
#define DP_TRAINER_H

#include <stdatomic.h>
#include <stdint.h>

#include "backends/backend.h"
#include "data/loader.h"
#include "nn/model.h"
#include "optim/sgd.h"
#include "report/report.h"
#include "train/config.h"
#include "exec/executor.h"
#include "train/strategy.h"

typedef struct dp_step_metrics {
    double loss_sum;  /* sum of per-sample losses */
    long correct, count;
} dp_step_metrics;

typedef struct dp_trainer {
    dp_config cfg;
    dp_model model;
    dp_dataset train, test;
    int have_train;
    dp_backend_t backend;
    dp_dev *dev;              /* the device opened for the run (kernels/device.h): devs[0] */
    dp_dev *devs[DP_MAX_LOCAL_DEVICES]; /* nccl --gpus: one per local replica; else devs[0] alone */
    int n_devs;
    dp_wait_policy waits;               /* how their waits end: the backend's watch, if it has one */
    int world;                /* replicas over all processes */
    int cores;                /* the cores --threads defaults from (default_threads) */
    char cores_from[640];     /* which limit gave them, for the config line */
    dp_executor *ex;          /* how the device runs the replicas (exec/executor.h) */
    const struct dp_strategy_s *strategy; /* DDP or DP (strategy.h) */
    void *strategy_state;
    dp_sampler sampler;
    dp_loader *loader;
    dp_schedule sched;
    dp_sgd sgd;
    long step;                /* optimizer steps done */
    int epoch;                /* current epoch, from 1 */
    dp_reporter report;
    /* the stop request all-reduced with the last step's metrics (a signal: SIGINT or SIGTERM; 0:
       none), valid until read */
    int stop_folded, stop_folded_valid;
    dp_coll_trace trace;      /* --predict / --save-profile: the collectives of the latest step */
    /* checkpoints and stopping (persist.c) */
    int start_epoch, start_batch; /* where training begins (a resumed run: mid-epoch) */
    int next_epoch, next_batch;   /* where a checkpoint written now would continue */
    long skipped;             /* steps skipped for NaN/Inf (--on-nan skip) */
    long bn_batches;          /* training forward passes (PyTorch's num_batches_tracked) */
    atomic_int nonfinite;     /* set when the step's gradients hold NaN/Inf: by the SGD step on the CPU, by
                                 the step's metrics on a device (strategy.h); no update was applied */
    char data_crc[16];        /* CRC-32 of the training images and labels, hex */
    char last_ckpt[4096];     /* newest checkpoint written or resumed from ("" if none) */
    int stop_signal;          /* the signal that stopped the run (exit 128 + it), 0 if none */
    float **stop_bufs;        /* (n_local) the stop flag's all-reduce */
    int ckpt_lock_fd;         /* rank 0's lock on --checkpoint DIR (io/ckpt_dir.h), -1 when none */
    /* the last evaluation of the test set, after step eval_step (-1: none): the final one reuses it
       when no step came after (the last epoch's test set was evaluated twice) */
    long eval_step;
    dp_step_metrics eval_m;
    long *eval_correct, *eval_count; /* (n_classes) */
    long inject_nan_step;     /* DPTRAIN_INJECT_NAN_STEP=k: a NaN in step k's first input (tests only) */
    long inject_inf_grad_step; /* DPTRAIN_INJECT_INF_GRAD_STEP=k: +Inf in step k's gradients, the loss finite
                                  (tests only) */
    int inject_eval_signal;   /* DPTRAIN_INJECT_SIGNAL_FINAL_EVAL=s: signal s raised as the final evaluation
                                 starts (tests only: a signal there is otherwise a race to hit) */
    long inject_sigterm_step; /* DPTRAIN_INJECT_SIGTERM_STEP=k: SIGTERM raised as step k starts, or the launch
                                 holding it (tests only: a signal mid-run is otherwise a race to hit) */
    float **bn_snapshot;      /* (n_local) each replica's BN buffers before a step, on its device (--on-nan skip) */
    int launch_k;             /* --steps-per-graph where launches run (exec/launch.h); 0: one step at a time */
} dp_trainer;

/* Loads data, builds the model, the backend and the replicas, initialises parameters (or
 * loads --load), all before anything is written. */
dp_status dp_trainer_create(const dp_config *cfg, dp_trainer **out);
/* The threads a run uses without --threads: the cores this process may use, shared with the other
 * ranks on its node when the launcher did not bind them. */
int dp_default_threads(void);
/* Trains cfg->epochs epochs (or until max_steps), evaluating after each; or evaluates only;
 * then closes the report (dp_trainer_train, then dp_trainer_close). */
dp_status dp_trainer_run(dp_trainer *t);
/* The run alone, the report left open for what the caller adds (the overhead model). */
dp_status dp_trainer_train(dp_trainer *t);
/* Reports s when it is a failure (and marks the backend failed), then closes the report. */
dp_status dp_trainer_close(dp_trainer *t, dp_status s);
/* Whether this process drives global replica 0 (it writes the log, checkpoints, predictions). */
int dp_trainer_holds_rank0(const dp_trainer *t);
void dp_trainer_destroy(dp_trainer *t);

/* Batch b of the epoch on the local replicas' shares (the loader's batches): one micro-step
 * of its optimizer step (--accumulate K: K batches a step). The gradient is that of the mean
 * loss over the step's samples; the step's last micro-step reduces and steps with learning
 * rate lr, and adds the step's loss and accuracy counts over all replicas to *m. */
dp_status dp_train_micro(dp_trainer *t, const dp_batch *batches, int b, float lr, dp_step_metrics *m);
/* n whole steps, `micros` micro-steps (--accumulate), from batch `first` of the epoch (a step's
 * first) as one launch (exec/launch.h): hb (micros x n_local) their batches as dp_exec_launch_put
 * kept them, lr (n) the steps' learning rates;
 * sums[j] gets step j's all-reduced sums after the launch. A step whose loss or gradients went
 * NaN/Inf did not stop the ones after it: the caller undoes the launch (dp_exec_launch_undo) and
 * runs its steps again with dp_train_micro. */
dp_status dp_train_launch(dp_trainer *t, const dp_batch *hb, int first, int n, int micros, const float *lr,
                          dp_step_sums *sums);
/* What the strategy's functions see of the trainer (strategy.h), the micro-step's fields unset. */
dp_step_ctx dp_train_step_ctx(dp_trainer *t);
/* Fails, naming the ranks, when processes were started with different flags, model or data. */
dp_status dp_check_consistency(dp_trainer *t);
/* The flags every rank must share, one "with --lr 0.05" / "without --nesterov" line each. */
void dp_consistency_flags(const dp_config *c, char *buf, size_t cap);
/* persist.c: the checkpoints of a run. Which settings a checkpoint records and checks on resume. */
dp_status dp_persist_setup(dp_trainer *t);
/* Writes a checkpoint continuing at (next_epoch, next_batch) into --checkpoint DIR (path NULL) or
 * path, from rank 0; every process calls it. */
dp_status dp_persist_save(dp_trainer *t, const char *flag, const char *path);
/* --resume: restores the newest good checkpoint on every replica of every process. */
dp_status dp_persist_resume(dp_trainer *t);
/* Whether any process received SIGINT/SIGTERM (collective when processes are several). */
dp_status dp_persist_stop_requested(dp_trainer *t, int *sig);
/* The command that resumes this run, for the stop message. */
void dp_persist_resume_command(const dp_trainer *t, char *buf, size_t n);

/* The floats of dp_evaluate's one host all-reduce over data set d (sized at start: no device
 * memory is allocated mid-run). */
size_t dp_evaluate_floats(const dp_trainer *t, const dp_dataset *d);
/* Test-set accuracy with replica 0's parameters; per_class_correct/count may be NULL. */
dp_status dp_evaluate(dp_trainer *t, const dp_dataset *d, dp_step_metrics *m, long *per_class_correct,
                      long *per_class_count);

#endif
