/* profile.h: the compute side of the overhead model: per-node forward and backward seconds of
 * one worker (a GPU, or one CPU core) at some batch sizes, the loss and the optimizer step, and
 * the shape of the work (parameter and buffer floats, gradient buckets and the node after whose
 * backward each is ready, input and output floats per sample). A sim run or `dptrain predict`
 * measures one; `--save-profile` writes it and `--compute FILE` reads it, so a CPU-only machine
 * can predict GPUs from a profile recorded on one. Text format: see dp_profile_save. */
#ifndef DP_SIM_PROFILE_H
#define DP_SIM_PROFILE_H

#include <stddef.h>

#include "core/status.h"

#define DP_PROFILE_MAX_NODES 256
#define DP_PROFILE_MAX_ROWS 16
#define DP_PROFILE_MAX_BUCKETS 256

typedef struct {
    int batch;        /* samples the worker ran per step */
    int concurrent;   /* workers that ran at the same time (sharing the memory bus on a CPU) */
    double fwd_s[DP_PROFILE_MAX_NODES], bwd_s[DP_PROFILE_MAX_NODES];
    double loss_s;    /* softmax cross-entropy and its gradient over `batch` samples */
    double opt_s;     /* one SGD step over every parameter */
    double sum_s;     /* one lane's gradients added into another's (and cleared): the lane tree's unit */
    long steps;       /* steps the figures are the median of */
} dp_profile_row;

typedef struct {
    char model[32];
    char device[64];  /* "cpu", "h100", ...: where the times were measured */
    char path[4096];  /* the file it was read from ("" when measured here); PATH_MAX: any path a file opens by */
    int input_chw[3]; /* the sample shape the times are of (C, H, W) */
    int bf16, tf32;   /* the numerics they are of: --precision bf16, --tf32 (a file without the lines: fp32, off) */
    int n_nodes;
    char node_names[DP_PROFILE_MAX_NODES][32];
    int kernels_fwd[DP_PROFILE_MAX_NODES], kernels_bwd[DP_PROFILE_MAX_NODES]; /* launches on a GPU */
    size_t input_floats;  /* per sample */
    int n_classes;        /* output floats per sample */
    size_t param_floats, buffer_floats;
    int n_buckets;        /* DDP buckets in the order they become ready */
    size_t bucket_floats[DP_PROFILE_MAX_BUCKETS];
    int bucket_node[DP_PROFILE_MAX_BUCKETS]; /* node after whose backward the bucket is complete */
    /* the CPU trainer's own cost per step beyond the nodes' compute (data hand-off, thread
       wake-ups and barriers, logging, and what sharing the host with the other processes costs it),
       per (lanes, threads) of a process: measured by real steps on the host at hand, as many
       processes of the shape at once as it stands for; the model adds it on shared-memory (CPU
       process) topologies */
    int n_overheads;
    struct {
        int lanes, workers;
        double seconds;
    } overheads[DP_PROFILE_MAX_ROWS];
    int n_rows;
    dp_profile_row rows[DP_PROFILE_MAX_ROWS];
} dp_profile;

/* A row for (batch, concurrent), added if absent; NULL (with dp_fail) when the table is full. */
dp_profile_row *dp_profile_row_for(dp_profile *p, int batch, int concurrent);
/* One worker's forward / backward seconds of node i at `batch` samples with `concurrent` workers
 * busy: from the rows of the nearest concurrency, interpolated linearly in batch between rows and
 * proportionally outside them. Same for the loss; the optimizer step does not depend on batch. */
void dp_profile_node(const dp_profile *p, int node, int batch, int concurrent, double *fwd, double *bwd);
double dp_profile_loss(const dp_profile *p, int batch, int concurrent);
double dp_profile_opt(const dp_profile *p, int concurrent);
double dp_profile_lane_sum(const dp_profile *p, int concurrent);
/* The step overhead of a process running `lanes` lanes on `workers` threads: the entry with the
 * nearest (lanes, workers); 0 when the profile has none. */
double dp_profile_overhead(const dp_profile *p, int lanes, int workers);
/* Sets (or replaces) that entry; fails when the table is full. */
dp_status dp_profile_set_overhead(dp_profile *p, int lanes, int workers, double seconds);
int dp_profile_has_overhead(const dp_profile *p, int lanes, int workers);
/* Sum over nodes of forward + backward (+ loss) at batch: one worker's compute per step. */
double dp_profile_compute(const dp_profile *p, int batch, int concurrent);

/* Refuses a profile read from a file (flag: the option that named it) that is not of this run's
 * model as `run` describes it (dp_profile_describe): the model, the input shape, the precision and
 * tf32, the classes, the parameters, the buffers and the nodes (names and kernel launches) must all
 * be the same, or the
 * times are another computation's. Names the file, the field, both values and how to record a
 * profile of this run. The bucket plan is this run's (--bucket-mb), not the recorded device's:
 * it is taken from `run`. */
dp_status dp_profile_match(const char *flag, dp_profile *p, const dp_profile *run);

/* Writes p atomically (io/atomic.h: a regular file only); `flag` names the option in messages. */
dp_status dp_profile_save(const char *flag, const char *path, const dp_profile *p);
/* Reads a profile: a path, or a device name looked up with the presets: for model M (may be NULL),
 * h100 -> presets/h100-M.profile if there is one, else presets/h100.profile. Every number is
 * checked against its range, every setting and index given once (sim/settings_file.h), the lines
 * against each other (input_floats = C x H x W, the buckets hold the parameters, a time for every
 * node in every row); a FIFO or device is refused by name. p->path is the file read. */
dp_status dp_profile_load(const char *name_or_path, const char *model, dp_profile *p);
dp_status dp_profile_parse(const char *text, const char *origin, dp_profile *p);

#endif
