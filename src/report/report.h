/* report.h: what a run tells its user: one line per epoch and a final per-class report on the
 * console, a progress bar when stdout is a terminal, and JSON lines in --log for other tools.
 * Only the process that holds rank 0 reports.
 *
 * The log is written a whole line at a time (lines are built in memory, then handed to
 * write(2) in batches that end at a line boundary, at the latest after every epoch): a write
 * error (disk full) fails the run at once with the path and how much was kept, and a line the
 * disk took only in part is cut off again, so the file holds complete lines only. */
#ifndef DP_REPORT_H
#define DP_REPORT_H

#include <stdio.h>

#include "backends/backend.h"
#include "core/status.h"
#include "report/json.h"

typedef struct {
    int has_log;            /* --log given and open (a zeroed reporter has none) */
    int fd;
    char path[4096];
    const char *flag;       /* the log's flag as given (--log-file or --log), for messages */
    struct {
        char *p;
        size_t len, cap;
    } pending;              /* complete lines not yet written */
    long long written;      /* bytes of complete lines in the file */
    long lines;             /* complete lines in the file */
    dp_status failed;       /* sticky: the log failed, later writes are skipped */
    int console;            /* epoch lines and the final report on stdout */
    int progress;           /* progress bar (only on a terminal unless forced) */
    double last_draw;       /* when the bar was last drawn */
    int bar_width;          /* the terminal's width when the bar was drawn */
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
    int first_batch;        /* > 0: a resumed epoch, trained here from this batch on (the train
                               figures cover only those batches) */
    int n_batches;          /* batches per epoch */
} dp_epoch_report;

/* Checks, before any work, that the log can be created: its directory exists and is writable,
 * and the path is not a directory. Creates nothing. */
dp_status dp_report_check_path(const char *flag, const char *log_path);
/* Opens the log (if path != NULL) for writing, or appending (a resumed run continues its log);
 * nothing is created when this fails. */
dp_status dp_report_open(dp_reporter *r, const char *flag, const char *log_path, int append, int console,
                         int progress);
/* seconds: the step's wall time, from the end of the previous step (data wait included). */
dp_status dp_report_step(dp_reporter *r, int epoch, long step, double loss, double lr, double seconds);
/* Whether a line handed to dp_report_json would be written (a log is open and has not failed):
 * lines built only for the log (the config, the overhead model's) are built only then. */
int dp_report_logging(const dp_reporter *r);
/* Writes a line built with dp_json_* (json.h) and frees it, also when there is no log. now: the line
 * (and those pending) reach the file at once (the config, resume, checkpoint and stopped events);
 * otherwise in the next batch (step, collective and prediction lines). A line whose building ran out
 * of memory fails the log, naming it. */
dp_status dp_report_json(dp_reporter *r, dp_json *line, int now);
/* Redraws the progress bar at most ten times a second. */
dp_status dp_report_progress(dp_reporter *r, int epoch, int epochs, int batch, int n_batches, double running_loss,
                             double images_per_s, double elapsed_s);
dp_status dp_report_epoch(dp_reporter *r, const dp_epoch_report *e);
dp_status dp_report_final(dp_reporter *r, const char *dataset, double test_acc, int n_classes, const long *correct,
                          const long *count, const char *const *class_names);
/* Best effort: the error line is written if the log still works. */
void dp_report_error(dp_reporter *r, const char *message);
/* Writes what is pending and closes the log; fails if the data could not be written. */
dp_status dp_report_close(dp_reporter *r);
/* Closes without writing what is pending (tear-down after a failure). */
void dp_report_discard(dp_reporter *r);

#endif
