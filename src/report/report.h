/* report.h: what a run tells its user: one line per epoch and a final per-class report on the
 * console, a progress bar when stdout is a terminal, and JSON lines in --log for other tools.
 * Only the process that holds rank 0 reports. */
#ifndef DP_REPORT_H
#define DP_REPORT_H

#include <stdio.h>

#include "backends/backend.h"
#include "core/status.h"

typedef struct {
    FILE *log;
    int console;        /* epoch lines and the final report on stdout */
    int progress;       /* progress bar (only on a terminal unless forced) */
    double last_draw;   /* when the bar was last drawn */
} dp_reporter;

typedef struct {
    int epoch, epochs;
    long steps;             /* optimizer steps so far */
    double lr;
    double train_loss, train_acc, test_loss, test_acc;
    double seconds;         /* training loop only, evaluation excluded */
    double eval_seconds;
    double images_per_s;
    double data_wait_s, compute_s;
    dp_comm_stats comm;     /* this epoch's collectives */
    double comm_hidden_s;   /* collectives issued while backward work remained */
    long skipped_steps;     /* steps skipped for a NaN/Inf so far (--on-nan skip) */
} dp_epoch_report;

/* Opens the log (if path != NULL) for writing, or appending (a resumed run continues its log);
 * nothing is created when this fails. */
dp_status dp_report_open(dp_reporter *r, const char *log_path, int append, int console, int progress);
/* The run's settings as the first log object (a JSON object body without braces). */
void dp_report_config(dp_reporter *r, const char *json_fields);
void dp_report_step(dp_reporter *r, int epoch, long step, double loss, double lr);
/* Redraws the progress bar at most ten times a second. */
void dp_report_progress(dp_reporter *r, int epoch, int batch, int n_batches, double running_loss, double images_per_s);
void dp_report_epoch(dp_reporter *r, const dp_epoch_report *e);
void dp_report_final(dp_reporter *r, const char *dataset, double test_acc, int n_classes, const long *correct,
                     const long *count, const char *const *class_names);
void dp_report_error(dp_reporter *r, const char *message);
/* A log object {"event":event,<json_fields>} (checkpoint, resume, stopped), flushed at once. */
void dp_report_event(dp_reporter *r, const char *event, const char *json_fields);
/* Flushes and closes the log; fails if the data could not be written (disk full). */
dp_status dp_report_close(dp_reporter *r, const char *log_path);
/* Writes s as a JSON string literal (quotes included). */
void dp_json_string(FILE *f, const char *s);

#endif
