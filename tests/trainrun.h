/* trainrun.h: training runs inside a test, and their comparison: the final parameters and momentum
 * of replica 0 (read through its device, so CPU and GPU runs compare alike), whether every replica
 * holds the same parameters, and every step's logged loss. */
#ifndef DP_TEST_TRAINRUN_H
#define DP_TEST_TRAINRUN_H

#include "train/trainer.h"

typedef struct {
    float *params, *momentum; /* replica 0's */
    size_t n;
    int all_equal;            /* every replica's parameters bitwise equal to replica 0's */
    double losses[64];
    int n_losses;
    dp_layout layout;         /* a copy of the tensor table, for per-tensor messages */
    int data_on_device;       /* the run's config line: the training set was held on the device */
    char config[4096];        /* the run's config line */
} tr_result;

/* The suites' common run: synthetic data shaped for the model, 20 SGD steps of batch 64 with
 * momentum and weight decay, 2 threads, no loader thread, quiet. */
void tr_base_config(dp_config *c, const char *model);
/* Trains c (its log_path is set to a scratch file) and collects the result; fails the test on error. */
tr_result tr_run(dp_config *c);
void tr_free(tr_result *r);
/* Bitwise: parameters (per tensor in the message), momentum and every step's loss. */
void tr_assert_same(const tr_result *a, const tr_result *b, const char *what);
/* Per tensor max |a-b| / max |b| <= tol, and the losses within tol relative; prints the worst tensor. */
void tr_assert_close(const tr_result *a, const tr_result *b, double tol, const char *what);
/* A "within float rounding" tolerance for runs of tr_base_config: fp32_tol, or 10x it under
 * DP_TEST_PRECISION=bf16, where a last-bit difference in an fp32 sum can move a value rounded to
 * bf16 by one bf16 unit (2^-8 relative) when it lies on a rounding boundary. */
double tr_round_tol(double fp32_tol);

#endif
