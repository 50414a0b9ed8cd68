/* report.c: the console lines, the progress bar's drawing, and the --log file: lines are
 * built whole (json.c, cJSON) and written a batch of complete lines at a time, every write checked. */
#include "report/report.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/timer.h"
#include "report/progress.h"

#define LOG_BATCH_BYTES (64 * 1024) /* step lines are written when this much is pending */

dp_status dp_report_check_path(const char *flag, const char *log_path) {
    if (!log_path) return DP_OK;
    if (!*log_path) return dp_fail(DP_ERR_USAGE, "%s: empty file name", flag);
    struct stat st;
    if (stat(log_path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return dp_fail(DP_ERR_IO, "%s %s: is a directory, expected a file name", flag, log_path);
        if (access(log_path, W_OK) != 0)
            return dp_fail(DP_ERR_IO, "%s %s: cannot write: %s", flag, log_path, strerror(errno));
        return DP_OK;
    }
    char copy[4096];
    if (strlen(log_path) >= sizeof copy) return dp_fail(DP_ERR_USAGE, "%s: file name longer than 4095 bytes", flag);
    snprintf(copy, sizeof copy, "%s", log_path);
    const char *dir = dirname(copy);
    if (stat(dir, &st) != 0)
        return dp_fail(DP_ERR_IO, "%s %s: directory %s: %s", flag, log_path, dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return dp_fail(DP_ERR_IO, "%s %s: %s is not a directory", flag, log_path, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return dp_fail(DP_ERR_IO, "%s %s: cannot create a file in directory %s: %s", flag, log_path, dir, strerror(errno));
    return DP_OK;
}

/* A run killed (SIGKILL) in the middle of a write may have left a partial last line: cut the file back
 * to its last newline before a resumed run appends, so that every line still parses. */
static off_t drop_partial_line(int fd, off_t size) {
    char buf[4096];
    off_t end = size;
    while (end > 0) {
        off_t from = end > (off_t)sizeof buf ? end - (off_t)sizeof buf : 0;
        ssize_t n = pread(fd, buf, (size_t)(end - from), from);
        if (n <= 0) return size;
        for (ssize_t i = n - 1; i >= 0; i--)
            if (buf[i] == '\n') {
                off_t keep = from + i + 1;
                if (keep != size && ftruncate(fd, keep) != 0) return size;
                return keep;
            }
        end = from;
    }
    return ftruncate(fd, 0) == 0 ? 0 : size;
}

dp_status dp_report_open(dp_reporter *r, const char *flag, const char *log_path, int append, int console,
                         int progress) {
    memset(r, 0, sizeof *r);
    r->console = console;
    r->progress = progress;
    if (log_path) {
        DP_TRY(dp_report_check_path(flag, log_path));
        /* O_NONBLOCK: a FIFO without a reader fails here instead of blocking the run */
        /* appending to a regular file reads it too (drop_partial_line); a FIFO keeps O_WRONLY's semantics */
        struct stat pre;
        int rw = append && stat(log_path, &pre) == 0 && S_ISREG(pre.st_mode) ? O_RDWR : O_WRONLY;
        int fd = open(log_path, rw | (append ? O_APPEND : O_TRUNC) | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644);
        if (fd < 0 && errno == ENXIO) /* O_NONBLOCK on a FIFO nobody reads */
            return dp_fail(DP_ERR_IO, "%s %s: is a FIFO (named pipe) that no process reads; start its reader first, "
                           "or give a regular file", flag, log_path);
        if (fd < 0) return dp_fail(DP_ERR_IO, "%s %s: cannot open for writing: %s", flag, log_path, strerror(errno));
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
        r->fd = fd;
        r->has_log = 1;
        struct stat st;
        if (append && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) r->written = drop_partial_line(fd, st.st_size);
        snprintf(r->path, sizeof r->path, "%s", log_path);
        r->flag = flag;
    }
    return DP_OK;
}

/* Writes the pending lines. A short write leaves part of a line: cut the file back to the last
 * complete line (a regular file; a device or pipe keeps what it took) and fail naming the path. */
static dp_status write_pending(dp_reporter *r) {
    if (!r->has_log || r->failed) return r->failed;
    size_t done = 0;
    const char *p = r->pending.p;
    const size_t len = r->pending.len;
    while (done < len) {
        ssize_t k = write(r->fd, p + done, len - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int err = k < 0 ? errno : ENOSPC;
            if (done > 0 || k == 0) {
                /* count the complete lines that did land, then drop the partial one */
                long long keep = r->written;
                long lines = r->lines;
                for (size_t i = 0; i < done; i++)
                    if (p[i] == '\n') keep = r->written + (long long)i + 1, lines++;
                struct stat st;
                if (fstat(r->fd, &st) == 0 && S_ISREG(st.st_mode)) {
                    if (ftruncate(r->fd, keep) == 0) r->written = keep, r->lines = lines;
                } else {
                    r->written += (long long)done, r->lines = lines;
                }
            }
            r->failed = dp_fail(DP_ERR_IO, "%s %s: writing failed after %lld bytes (%ld complete lines kept): %s",
                                r->flag, r->path, r->written, r->lines, strerror(err));
            return r->failed;
        }
        done += (size_t)k;
    }
    r->written += (long long)len;
    for (size_t i = 0; i < len; i++) r->lines += p[i] == '\n';
    r->pending.len = 0;
    return DP_OK;
}

static int append_pending(dp_reporter *r, const char *text, size_t n) {
    if (r->pending.len + n + 1 > r->pending.cap) {
        size_t cap = r->pending.cap ? r->pending.cap : 4096;
        while (cap < r->pending.len + n + 1) cap *= 2;
        char *p = realloc(r->pending.p, cap);
        if (!p) return 0;
        r->pending.p = p, r->pending.cap = cap;
    }
    memcpy(r->pending.p + r->pending.len, text, n);
    r->pending.len += n;
    return 1;
}

int dp_report_logging(const dp_reporter *r) { return r->has_log && !r->failed; }

/* Prints the finished line into the pending batch and frees it; writes the batch when asked or large. */
dp_status dp_report_json(dp_reporter *r, dp_json *line, int now) {
    if (!dp_report_logging(r)) {
        dp_json_free(line);
        return r->failed;
    }
    char *text = dp_json_print(line);
    dp_json_free(line);
    if (!text) return r->failed = dp_fail(DP_ERR_NOMEM, "%s %s: out of memory building a log line", r->flag, r->path);
    int ok = append_pending(r, text, strlen(text)) && append_pending(r, "\n", 1);
    cJSON_free(text);
    if (!ok) return r->failed = dp_fail(DP_ERR_NOMEM, "%s %s: out of memory buffering lines", r->flag, r->path);
    if (now || r->pending.len >= LOG_BATCH_BYTES) return write_pending(r);
    return DP_OK;
}

/* stdout is checked after every console write: with SIGPIPE ignored (main), a reader that went
 * away shows up here as EPIPE and ends the run with a message instead of killing it. */
static dp_status check_stdout(void) {
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout)) return DP_OK;
    int err = errno;
    if (err == EPIPE)
        return dp_fail(DP_ERR_IO, "standard output was closed (broken pipe): stopping; the --log file, if any, is "
                       "complete up to here");
    return dp_fail(DP_ERR_IO, "writing to standard output failed: %s", err ? strerror(err) : "stream error");
}

/* The formats of the reals in the log: a float at 9 significant digits (enough to tell every float
 * apart), a double measurement at 9, a fraction or a time in seconds to the microsecond. */
#define F_FLOAT "%.9g"
#define F_REAL "%.9g"
#define F_FRAC "%.6f"
#define F_SECONDS "%.6f"

dp_status dp_report_step(dp_reporter *r, int epoch, long step, double loss, double lr, double seconds) {
    if (!r->has_log) return DP_OK;
    dp_json j = dp_json_begin("step");
    dp_json_int(&j, "epoch", epoch);
    dp_json_int(&j, "step", step);
    dp_json_real(&j, "loss", F_FLOAT, (float)loss);
    dp_json_real(&j, "lr", F_FLOAT, (float)lr);
    dp_json_real(&j, "seconds", "%.6g", seconds);
    return dp_report_json(r, &j, 0);
}

static dp_status clear_bar(dp_reporter *r) {
    if (r->progress && r->last_draw > 0) {
        printf("\r%*s\r", r->bar_width > 1 ? r->bar_width - 1 : 0, "");
        r->last_draw = 0;
        return check_stdout();
    }
    return DP_OK;
}

dp_status dp_report_progress(dp_reporter *r, int epoch, int epochs, int batch, int n_batches, double running_loss,
                             double images_per_s, double elapsed_s) {
    if (!r->progress) return DP_OK;
    double now = dp_now();
    if (r->last_draw > 0 && now - r->last_draw < 0.1 && batch < n_batches) return DP_OK;
    r->last_draw = now;
    r->bar_width = dp_terminal_width(STDOUT_FILENO); /* every draw: follows a resized window */
    dp_progress p = {.epoch = epoch, .epochs = epochs, .batch = batch, .n_batches = n_batches, .loss = running_loss,
                     .images_per_s = images_per_s, .elapsed_s = elapsed_s};
    char line[1024];
    dp_progress_render(line, sizeof line, r->bar_width, &p);
    printf("\r%s\033[K", line); /* erase to the end: a shorter line leaves no tail of the last */
    return check_stdout();
}

dp_status dp_report_epoch(dp_reporter *r, const dp_epoch_report *e) {
    DP_TRY(clear_bar(r));
    long calls = 0;
    double bytes = 0, comm_s = 0;
    for (int k = 0; k < DP_COLL_KINDS; k++) {
        calls += e->comm.calls[k];
        bytes += e->comm.bytes[k];
        comm_s += e->comm.seconds[k];
    }
    double hidden = comm_s > 0 ? e->comm_hidden_s / comm_s : 0;
    if (r->console) {
        /* three short lines rather than one of 130-170 columns that wraps on an 80- or 120-column terminal */
        printf("epoch %d/%d", e->epoch, e->epochs);
        /* a resumed epoch's train figures are those of its batches trained here: say which */
        if (e->first_batch > 0) printf(" (resumed: batches %d-%d)", e->first_batch + 1, e->n_batches);
        printf("  train loss %.4f  train acc %.4f  test acc %.4f  %.2f s\n", e->train_loss, e->train_acc, e->test_acc,
               e->seconds);
        printf("  %.0f img/s, data wait %.2f s, compute %.2f s", e->images_per_s, e->data_wait_s, e->compute_s);
        if (e->skipped_steps) printf(", NaN/Inf steps skipped: %ld", e->skipped_steps);
        printf("\n");
        if (calls)
            printf("  comm %ld calls, %.1f MB, %.2f s, %.0f%% during backward\n", calls, bytes / 1e6, comm_s, 100 * hidden);
        DP_TRY(check_stdout());
    }
    if (r->has_log) {
        dp_json j = dp_json_begin("epoch");
        dp_json_int(&j, "epoch", e->epoch);
        dp_json_int(&j, "steps", e->steps);
        dp_json_real(&j, "lr", F_REAL, e->lr);
        dp_json_real(&j, "train_loss", F_REAL, e->train_loss);
        dp_json_real(&j, "train_acc", F_FRAC, e->train_acc);
        dp_json_real(&j, "test_loss", F_REAL, e->test_loss);
        dp_json_real(&j, "test_acc", F_FRAC, e->test_acc);
        dp_json_real(&j, "seconds", F_SECONDS, e->seconds);
        dp_json_real(&j, "eval_seconds", F_SECONDS, e->eval_seconds);
        dp_json_real(&j, "images_per_s", "%.3f", e->images_per_s);
        dp_json_real(&j, "data_wait_s", F_SECONDS, e->data_wait_s);
        dp_json_real(&j, "compute_s", F_SECONDS, e->compute_s);
        dp_json_int(&j, "comm_calls", calls);
        dp_json_real(&j, "comm_bytes", "%.0f", bytes);
        dp_json_real(&j, "comm_s", F_SECONDS, comm_s);
        dp_json_real(&j, "comm_hidden_frac", F_FRAC, hidden);
        dp_json_int(&j, "skipped_steps", e->skipped_steps);
        dp_json_int(&j, "first_batch", e->first_batch);
        static const char *const names[DP_COLL_KINDS] = {"allreduce", "broadcast", "reduce", "allgather", "gather",
                                                         "scatter", "barrier"};
        for (int k = 0; k < DP_COLL_KINDS; k++)
            if (e->comm.calls[k]) {
                char key[32];
                snprintf(key, sizeof key, "%s_calls", names[k]);
                dp_json_int(&j, key, e->comm.calls[k]);
                snprintf(key, sizeof key, "%s_bytes", names[k]);
                dp_json_real(&j, key, "%.0f", e->comm.bytes[k]);
                snprintf(key, sizeof key, "%s_link_bytes", names[k]);
                dp_json_real(&j, key, "%.0f", e->comm.link_bytes[k]);
                snprintf(key, sizeof key, "%s_s", names[k]);
                dp_json_real(&j, key, F_SECONDS, e->comm.seconds[k]);
            }
        DP_TRY(dp_report_json(r, &j, 1)); /* every epoch reaches the disk, so a full disk shows at once */
    }
    return DP_OK;
}

dp_status dp_report_final(dp_reporter *r, const char *dataset, double test_acc, int n_classes, const long *correct,
                          const long *count, const char *const *class_names) {
    DP_TRY(clear_bar(r));
    if (r->console) {
        printf("test accuracy %.4f on %s\n", test_acc, dataset);
        for (int k = 0; k < n_classes; k++) {
            char fallback[16];
            snprintf(fallback, sizeof fallback, "%d", k);
            printf("  %-14s %.4f  (%ld/%ld)\n", class_names ? class_names[k] : fallback,
                   count[k] ? (double)correct[k] / count[k] : 0.0, correct[k], count[k]);
        }
        DP_TRY(check_stdout());
    }
    if (r->has_log) {
        dp_json j = dp_json_begin("final");
        dp_json_real(&j, "test_acc", F_FRAC, test_acc);
        cJSON *per_class = dp_json_array(&j, "per_class");
        for (int k = 0; k < n_classes; k++) {
            char fallback[16];
            snprintf(fallback, sizeof fallback, "%d", k);
            dp_json_element(&j, per_class);
            dp_json_str(&j, "class", class_names ? class_names[k] : fallback);
            dp_json_real(&j, "acc", F_FRAC, count[k] ? (double)correct[k] / count[k] : 0.0);
            dp_json_int(&j, "correct", correct[k]);
            dp_json_int(&j, "count", count[k]);
        }
        DP_TRY(dp_report_json(r, &j, 1));
    }
    return DP_OK;
}

void dp_report_error(dp_reporter *r, const char *message) {
    if (r->progress && r->last_draw > 0) {
        printf("\r%*s\r", r->bar_width > 1 ? r->bar_width - 1 : 0, "");
        fflush(stdout);
        r->last_draw = 0;
    }
    if (!dp_report_logging(r)) return;
    dp_json j = dp_json_begin("error");
    dp_json_str(&j, "message", message);
    char keep[DP_ERROR_MAX];
    snprintf(keep, sizeof keep, "%s", dp_last_error()); /* a failing log write must not replace the run's reason */
    if (dp_report_json(r, &j, 1) != DP_OK) dp_set_error(keep);
}

dp_status dp_report_close(dp_reporter *r) {
    dp_status s = clear_bar(r);
    if (!r->has_log) return s;
    dp_status w = write_pending(r);
    int closed = close(r->fd);
    int err = errno;
    r->has_log = 0;
    free(r->pending.p);
    memset(&r->pending, 0, sizeof r->pending);
    if (w != DP_OK) return w;
    if (closed != 0) return dp_fail(DP_ERR_IO, "%s %s: closing failed: %s", r->flag, r->path, strerror(err));
    return s;
}

void dp_report_discard(dp_reporter *r) {
    if (r->has_log) close(r->fd);
    r->has_log = 0;
    free(r->pending.p);
    memset(&r->pending, 0, sizeof r->pending);
}
