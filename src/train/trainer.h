/* trainer.h: one trainer for every backend. It drives the replicas this process owns through
 * data -> sampler -> replicas -> backend collectives -> optimizer, in lockstep node by node,
 * and never asks which backend it runs on. DDP and DP differ only in the strategy
 * (src/train/step.c): which collectives run, when, and who steps. */
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
#include "train/graph.h"
#include "train/replica.h"

typedef struct {
    double loss_sum;  /* sum of per-sample losses */
    long correct, count;
} dp_step_metrics;

typedef struct dp_trainer {
    dp_config cfg;
    dp_model model;
    dp_dataset train, test;
    int have_train;
    dp_backend_t backend;
    dp_dev *dev;              /* where the replicas compute (core/device.h) */
    const dp_kernels *k;      /* the device's kernel table */
    dp_kctx kc;               /* and the context of the trainer's own kernel calls */
    int n_local, world;
    int n_lanes;              /* lanes (gradient partials) per replica and step (replica.h) */
    int max_local;            /* the most samples a replica gets in a micro-step */
    dp_replica *rep;          /* (n_local) */
    dp_sampler sampler;
    dp_loader *loader;
    dp_schedule sched;
    dp_sgd sgd;
    long step;                /* optimizer steps done */
    int epoch;                /* current epoch, from 1 */
    dp_reporter report;
    /* DP: per local replica, its gather record and the gathered records of all replicas */
    float *dp_send, *dp_recv;
    float *dp_in, *dp_in_all; /* DP: each local replica's scattered input; the master's whole batch */
    /* DP, the master's loss: the gathered records on the host, each replica's label tail, every
       replica's labels (host and device), one lane's logit gradients, the lanes' losses and hits */
    float *dp_host_rec, *dp_tail;
    int32_t *h_labels, *d_labels;
    float *d_dlogits, *h_dp_loss, *d_dp_loss;
    int32_t *h_dp_correct, *d_dp_correct;
    float **ptrs;             /* (n_local) scratch for collectives over per-replica pointers */
    int *bucket_node;         /* (n_buckets) node after whose backward the bucket is complete */
    dp_req *bucket_req;       /* (n_buckets) the bucket's all-reduce in flight */
    float **metric_bufs;      /* (n_local) [loss_sum, correct, count] per replica */
    float *lane_loss;         /* (n_local, n_lanes) each lane's loss sum this step (host) */
    int *lane_correct;        /* (n_local, n_lanes) */
    float *d_lane_loss;       /* where the loss kernels write them: on the device (the host arrays on a CPU) */
    int32_t *d_lane_correct;
    dp_batch *d_batches;      /* (n_local) device runs: the loader's batches copied to the device */
    dp_graph_cache graphs;    /* device runs: the recorded micro-steps (graph.h) */
    dp_batch *h_stage;        /* (n_local) device runs: pinned copies of the batches the uploads read */
    int stage_busy;           /* an upload from h_stage may still be in flight (no wait since) */
    float **hc_scratch;       /* (n_local) device scratch of hostcoll.c, hc_floats each */
    size_t hc_floats;
    int *step_count;          /* (n_local) samples so far this step */
    int lanes_clear;          /* lanes 1.. hold zeros (the last step's tree cleared them) */
    /* --predict / --save-profile: per slot q, node i's forward (q, 0, i) and backward (q, 1, i)
       seconds summed over the run, timed around each node call; NULL: not timing */
    double *node_s;
    long node_runs, node_samples; /* lane-runs timed, and the samples they held */
    dp_coll_trace trace;      /* --predict / --save-profile: the collectives of the latest step */
    double comm_overlap_s;    /* host time of collectives issued during backward (could hide behind it) */
    /* checkpoints and stopping (persist.c) */
    int start_epoch, start_batch; /* where training begins (a resumed run: mid-epoch) */
    int next_epoch, next_batch;   /* where a checkpoint written now would continue */
    long skipped;             /* steps skipped for NaN/Inf (--on-nan skip) */
    long bn_batches;          /* training forward passes (PyTorch's num_batches_tracked) */
    atomic_int nonfinite;     /* set by the SGD step when it refused a NaN/Inf gradient */
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
    int inject_eval_signal;   /* DPTRAIN_INJECT_SIGNAL_FINAL_EVAL=s: signal s raised as the final evaluation
                                 starts (tests only: a signal there is otherwise a race to hit) */
    float *bn_snapshot;       /* (n_local * buffers.n) BN buffers before a step, for --on-nan skip */
} dp_trainer;

/* Loads data, builds the model, the backend and the replicas, initialises parameters (or
 * loads --load), all before anything is written. */
dp_status dp_trainer_create(const dp_config *cfg, dp_trainer **out);
/* Trains cfg->epochs epochs (or until max_steps), evaluating after each; or evaluates only. */
dp_status dp_trainer_run(dp_trainer *t);
void dp_trainer_destroy(dp_trainer *t);

/* Batch b of the epoch on the local replicas' shares (the loader's batches): one micro-step
 * of its optimizer step (--accumulate K: K batches a step). The gradient is that of the mean
 * loss over the step's samples; the step's last micro-step reduces and steps with learning
 * rate lr, and adds the step's loss and accuracy counts over all replicas to *m. */
dp_status dp_train_micro(dp_trainer *t, const dp_batch *batches, int b, float lr, dp_step_metrics *m);
/* Fails, naming the ranks, when processes were started with different flags, model or data. */
dp_status dp_check_consistency(dp_trainer *t);
/* Strategy buffers (DP's gather records); called once at setup. */
dp_status dp_strategy_alloc(dp_trainer *t);
void dp_strategy_free(dp_trainer *t);
/* Makes every replica hold the master's parameters (DP) before evaluation or a checkpoint. */
dp_status dp_strategy_finish(dp_trainer *t);
/* The overhead model after a run (--predict, --save-profile) or instead of one (dptrain
 * predict): times the model here (or reads --compute), predicts, reports (src/train/predict.c). */
dp_status dp_trainer_predict(dp_trainer *t);
/* At start: --save-profile can be written, --predict's topologies and --compute's profile read
 * and fit this run's model (a typo must not cost the whole training run). */
dp_status dp_predict_precheck(const dp_config *c);
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

/* Collectives over small host arrays on any device (hostcoll.c): sum over all replicas, and
 * rank 0's values to all; every rank calls them. */
dp_status dp_host_allreduce(dp_trainer *t, float *const *bufs, size_t n);
/* Sizes the device scratch of these collectives for n floats, once at start. */
dp_status dp_host_reserve(dp_trainer *t, size_t n);
dp_status dp_host_broadcast(dp_trainer *t, float *const *bufs, size_t n);
/* One replica per process: every rank's n floats of send, rank r's at recv + r n. */
dp_status dp_host_allgather(dp_trainer *t, const float *send, float *recv, size_t n);
void dp_host_coll_free(dp_trainer *t);

/* Test-set accuracy with replica 0's parameters; per_class_correct/count may be NULL. */
dp_status dp_evaluate(dp_trainer *t, const dp_dataset *d, dp_step_metrics *m, long *per_class_correct,
                      long *per_class_count);

#endif
