/* config.h: everything a run is told, filled by the command line (src/cli/options.c) and read
 * by the trainer. Each setting's flag, default and destinations are its row of the settings
 * table (train/settings.c); dp_config_defaults fills the defaults from it. */
#ifndef DP_TRAIN_CONFIG_H
#define DP_TRAIN_CONFIG_H

#include <stdint.h>

#include "backends/backend.h"
#include "data/dataset.h"
#include "optim/schedule.h"

typedef enum { DP_MODE_DDP = 0, DP_MODE_DP = 1 } dp_mode;
/* --precision, as the index of its choice (settings.c) */
enum { DP_PRECISION_FP32 = 0, DP_PRECISION_BF16 = 1 };

/* The tests' fault injections and hooks: no flag sets them; the command line takes them from the
 * environment (src/cli/test_hooks.h), a test program sets them in its config. 0: off. */
typedef struct {
    long nan_step;        /* DPTRAIN_INJECT_NAN_STEP=k: a NaN in step k's first input (resident data off) */
    long inf_grad_step;   /* DPTRAIN_INJECT_INF_GRAD_STEP=k: +Inf in step k's gradients, the loss finite */
    int eval_signal;      /* DPTRAIN_INJECT_SIGNAL_FINAL_EVAL=s: signal s raised as the final evaluation starts */
    long sigterm_step;    /* DPTRAIN_INJECT_SIGTERM_STEP=k: SIGTERM raised as step k starts (or the launch holding it) */
    size_t reserve_floats; /* DPTRAIN_TEST_RESERVE_FLOATS=n: the backend's reserve sized wrongly, to show its guard */
} dp_test_hooks;

typedef struct {
    int eval_only;            /* `dptrain eval` */
    const char *model;
    dp_data_spec data;        /* name, dir, synthetic shape */
    int epochs;
    long max_steps;           /* 0: no limit */
    int batch_size;           /* global batch */
    float lr, momentum, weight_decay;
    int nesterov;
    int lr_steps[DP_MAX_LR_STEPS];
    int n_lr_steps;
    float lr_gamma;
    int lr_scale_linear;
    int lr_ref_batch;
    double warmup_epochs;
    uint64_t seed;
    int workers;
    int threads;              /* OpenMP threads for compute (0: all cores) */
    int shuffle, drop_last, augment;
    const char *backend;
    const char *device;  /* "cpu" (default) or "cuda" */
    int gpu;             /* --gpu: the CUDA ordinal (-1: not given) */
    int gpus[DP_MAX_LOCAL_DEVICES]; /* --gpus: the GPUs this process drives, one replica each (nccl) */
    int n_gpus;          /* 0: --gpus not given */
    int tf32;
    int precision;       /* --precision: DP_PRECISION_* */
    int graphs;          /* device runs: record and replay each micro-step (--no-graph: 0) */
    int steps_per_graph; /* --steps-per-graph: DDP steps recorded and replayed as one launch (exec/launch.h) */
    int replicas;
    dp_mode mode;
    double bucket_mb;
    int overlap;
    int accumulate;
    int sync_bn;
    const char *allreduce_algo;
    int chunks;               /* C: the step's samples are summed in C fixed chunks (data/chunks.h) */
    double timeout_s;
    const char *log_path;
    const char *log_flag;     /* how the log's flag was spelled (--log-file, or its alias --log), for messages */
    const char *save_path;
    const char *load_path;     /* eval: the checkpoint to evaluate */
    const char *init_path;     /* train --init-from (or the old train --load): initial weights */
    const char *checkpoint_dir;/* --checkpoint: where periodic checkpoints go */
    long save_every;           /* --save-every N: every N optimizer steps (0: see save_every_epochs) */
    int save_every_epochs;     /* --save-every Ne */
    int keep;                  /* --keep: checkpoints kept in checkpoint_dir */
    const char *resume_path;   /* --resume DIR|FILE */
    int on_nan_skip;           /* --on-nan skip (default stop) */
    int progress;             /* -1 auto (a terminal), 0 off, 1 on */
    int quiet;                /* no console output (tests) */
    /* the overhead model (docs/overhead-model.md) */
    const char *predict_topos;   /* --predict / --topology: comma-separated presets or paths */
    const char *save_profile;    /* --save-profile FILE: the compute profile measured here */
    const char *compute_profile; /* --compute FILE|DEVICE: predict with that profile's compute */
    const char *plot_path;       /* --plot FILE.svg */
    int predict_only;            /* `dptrain predict`: a short timing run, no training */
    int predict_replicas;        /* `dptrain predict --replicas N`: N is predicted besides 1, 2, 4, 8 */
    double measured_epoch_s;     /* predict --measured-epoch S: another framework's single-device epoch (0: none) */
    double measured_step_s;      /* predict --measured-step S: its single-device step (0: none) */
    int measured_batch;          /* predict --measured-batch B: that run's batch (0: --batch-size) */
    const char *framework;       /* predict --framework FILE|NAME: that framework's DP and DDP per-step costs */
    int calibrate;               /* `dptrain calibrate`: measure the backend's collectives */
    const char *calibrate_out;   /* --out FILE: the topology file calibrate writes */
    int *argc;                /* for backends that take the command line (MPI_Init) */
    char ***argv;
    dp_test_hooks test;       /* tests only: not a setting */
} dp_config;

void dp_config_defaults(dp_config *c);
/* Whether the run's GEMMs and convolutions use TF32: --tf32, or --precision bf16 on CUDA (TF32 is
 * exact on bf16 values). The trainer opens its devices with it; a compute profile records it. */
int dp_config_uses_tf32(const dp_config *c);

#endif
