/* report.c: the console lines, the progress bar's drawing, and the --log file: lines are
 * built whole (json.c) and written a batch of complete lines at a time, every write checked. */
#include "report/report.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/timer.h"
#include "report/progress.h"

#define LOG_BATCH_BYTES (64 * 1024) /* step lines are written when this much is pending */

dp_status dp_report_check_path(const char *log_path) {
    if (!log_path) return DP_OK;
    if (!*log_path) return dp_fail(DP_ERR_USAGE, "--log: empty file name");
    struct stat st;
    if (stat(log_path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return dp_fail(DP_ERR_IO, "--log %s: is a directory, expected a file name", log_path);
        if (access(log_path, W_OK) != 0)
            return dp_fail(DP_ERR_IO, "--log %s: cannot write: %s", log_path, strerror(errno));
        return DP_OK;
    }
    char copy[4096];
    if (strlen(log_path) >= sizeof copy) return dp_fail(DP_ERR_USAGE, "--log: file name longer than 4095 bytes");
    snprintf(copy, sizeof copy, "%s", log_path);
    const char *dir = dirname(copy);
    if (stat(dir, &st) != 0)
        return dp_fail(DP_ERR_IO, "--log %s: directory %s: %s", log_path, dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return dp_fail(DP_ERR_IO, "--log %s: %s is not a directory", log_path, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return dp_fail(DP_ERR_IO, "--log %s: cannot create a file in directory %s: %s", log_path, dir, strerror(errno));
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

dp_status dp_report_open(dp_reporter *r, const char *log_path, int append, int console, int progress) {
    memset(r, 0, sizeof *r);
    r->console = console;
    r->progress = progress;
    if (log_path) {
        DP_TRY(dp_report_check_path(log_path));
        /* O_NONBLOCK: a FIFO without a reader fails here instead of blocking the run */
        /* appending to a regular file reads it too (drop_partial_line); a FIFO keeps O_WRONLY's semantics */
        struct stat pre;
        int rw = append && stat(log_path, &pre) == 0 && S_ISREG(pre.st_mode) ? O_RDWR : O_WRONLY;
        int fd = open(log_path, rw | (append ? O_APPEND : O_TRUNC) | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644);
        if (fd < 0) return dp_fail(DP_ERR_IO, "--log %s: cannot open for writing: %s", log_path, strerror(errno));
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
        r->fd = fd;
        r->has_log = 1;
        struct stat st;
        if (append && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) r->written = drop_partial_line(fd, st.st_size);
        snprintf(r->path, sizeof r->path, "%s", log_path);
    }
    return DP_OK;
}

/* Writes the pending lines. A short write leaves part of a line: cut the file back to the last
 * complete line (a regular file; a device or pipe keeps what it took) and fail naming the path. */
static dp_status write_pending(dp_reporter *r) {
    if (!r->has_log || r->failed) return r->failed;
    size_t done = 0;
    const dp_jbuf *b = &r->pending;
    while (done < b->len) {
        ssize_t k = write(r->fd, b->p + done, b->len - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int err = k < 0 ? errno : ENOSPC;
            if (done > 0 || k == 0) {
                /* count the complete lines that did land, then drop the partial one */
                long long keep = r->written;
                long lines = r->lines;
                for (size_t i = 0; i < done; i++)
                    if (b->p[i] == '\n') keep = r->written + (long long)i + 1, lines++;
                struct stat st;
                if (fstat(r->fd, &st) == 0 && S_ISREG(st.st_mode)) {
                    if (ftruncate(r->fd, keep) == 0) r->written = keep, r->lines = lines;
                } else {
                    r->written += (long long)done, r->lines = lines;
                }
            }
            r->failed = dp_fail(DP_ERR_IO, "--log %s: writing failed after %lld bytes (%ld complete lines kept): %s",
                                r->path, r->written, r->lines, strerror(err));
            return r->failed;
        }
        done += (size_t)k;
    }
    r->written += (long long)b->len;
    for (size_t i = 0; i < b->len; i++) r->lines += b->p[i] == '\n';
    dp_jbuf_reset(&r->pending);
    return DP_OK;
}

/* Moves the finished line r->line into the pending batch; writes the batch when asked or large. */
static dp_status commit_line(dp_reporter *r, int write_now) {
    if (!r->has_log || r->failed) return r->failed;
    if (r->line.oom) {
        dp_jbuf_reset(&r->line);
        return r->failed = dp_fail(DP_ERR_NOMEM, "--log %s: out of memory building a log line", r->path);
    }
    dp_jbuf_printf(&r->pending, "%s\n", r->line.p ? r->line.p : "");
    dp_jbuf_reset(&r->line);
    if (r->pending.oom) return r->failed = dp_fail(DP_ERR_NOMEM, "--log %s: out of memory buffering lines", r->path);
    if (write_now || r->pending.len >= LOG_BATCH_BYTES) return write_pending(r);
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

dp_status dp_report_config(dp_reporter *r, const dp_jbuf *fields) {
    if (!r->has_log) return DP_OK;
    dp_jbuf_printf(&r->line, "{\"event\":\"config\",%s}", fields->p ? fields->p : "");
    if (fields->oom) r->line.oom = 1;
    return commit_line(r, 1);
}

dp_status dp_report_step(dp_reporter *r, int epoch, long step, double loss, double lr, double seconds) {
    if (!r->has_log) return DP_OK;
    dp_jbuf_printf(&r->line, "{\"event\":\"step\",\"epoch\":%d,\"step\":%ld,\"loss\":%.9g,\"lr\":%.9g,\"seconds\":%.6g}",
                   epoch, step, (float)loss, (float)lr, seconds);
    return commit_line(r, 0);
}

dp_jbuf *dp_report_line(dp_reporter *r) { return r->has_log && !r->failed ? &r->line : NULL; }

dp_status dp_report_commit(dp_reporter *r) { return commit_line(r, 0); }

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
        dp_jbuf *b = &r->line;
        dp_jbuf_printf(b,
                       "{\"event\":\"epoch\",\"epoch\":%d,\"steps\":%ld,\"lr\":%.9g,\"train_loss\":%.9g,"
                       "\"train_acc\":%.6f,\"test_loss\":%.9g,\"test_acc\":%.6f,\"seconds\":%.6f,"
                       "\"eval_seconds\":%.6f,\"images_per_s\":%.3f,\"data_wait_s\":%.6f,\"compute_s\":%.6f,"
                       "\"comm_calls\":%ld,\"comm_bytes\":%.0f,\"comm_s\":%.6f,\"comm_hidden_frac\":%.6f,"
                       "\"skipped_steps\":%ld,\"first_batch\":%d",
                       e->epoch, e->steps, e->lr, e->train_loss, e->train_acc, e->test_loss, e->test_acc, e->seconds,
                       e->eval_seconds, e->images_per_s, e->data_wait_s, e->compute_s, calls, bytes, comm_s, hidden,
                       e->skipped_steps, e->first_batch);
        static const char *const names[DP_COLL_KINDS] = {"allreduce", "broadcast", "reduce", "allgather", "gather",
                                                             "scatter", "barrier"};
        for (int k = 0; k < DP_COLL_KINDS; k++)
            if (e->comm.calls[k])
                dp_jbuf_printf(b, ",\"%s_calls\":%ld,\"%s_bytes\":%.0f,\"%s_link_bytes\":%.0f,\"%s_s\":%.6f", names[k],
                               e->comm.calls[k], names[k], e->comm.bytes[k], names[k], e->comm.link_bytes[k], names[k],
                               e->comm.seconds[k]);
        dp_jbuf_printf(b, "}");
        DP_TRY(commit_line(r, 1)); /* every epoch reaches the disk, so a full disk shows at once */
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
        dp_jbuf *b = &r->line;
        dp_jbuf_printf(b, "{\"event\":\"final\",\"test_acc\":%.6f,\"per_class\":[", test_acc);
        for (int k = 0; k < n_classes; k++) {
            char fallback[16];
            snprintf(fallback, sizeof fallback, "%d", k);
            dp_jbuf_printf(b, "%s{\"class\":", k ? "," : "");
            dp_jbuf_string(b, class_names ? class_names[k] : fallback);
            dp_jbuf_printf(b, ",\"acc\":%.6f,\"correct\":%ld,\"count\":%ld}",
                           count[k] ? (double)correct[k] / count[k] : 0.0, correct[k], count[k]);
        }
        dp_jbuf_printf(b, "]}");
        DP_TRY(commit_line(r, 1));
    }
    return DP_OK;
}

dp_status dp_report_event(dp_reporter *r, const char *event, const dp_jbuf *fields) {
    if (!r->has_log) return DP_OK;
    dp_jbuf_printf(&r->line, "{\"event\":");
    dp_jbuf_string(&r->line, event);
    dp_jbuf_printf(&r->line, ",%s}", fields->p ? fields->p : "");
    if (fields->oom) r->line.oom = 1;
    return commit_line(r, 1);
}

void dp_report_error(dp_reporter *r, const char *message) {
    if (r->progress && r->last_draw > 0) {
        printf("\r%*s\r", r->bar_width > 1 ? r->bar_width - 1 : 0, "");
        fflush(stdout);
        r->last_draw = 0;
    }
    if (!r->has_log || r->failed) return;
    dp_jbuf_printf(&r->line, "{\"event\":\"error\",\"message\":");
    dp_jbuf_string(&r->line, message);
    dp_jbuf_printf(&r->line, "}");
    char keep[DP_ERROR_MAX];
    snprintf(keep, sizeof keep, "%s", dp_last_error()); /* a failing log write must not replace the run's reason */
    if (commit_line(r, 1) != DP_OK) dp_set_error(keep);
}

dp_status dp_report_close(dp_reporter *r) {
    dp_status s = clear_bar(r);
    if (!r->has_log) return s;
    dp_status w = write_pending(r);
    int closed = close(r->fd);
    int err = errno;
    r->has_log = 0;
    dp_jbuf_free(&r->line);
    dp_jbuf_free(&r->pending);
    if (w != DP_OK) return w;
    if (closed != 0) return dp_fail(DP_ERR_IO, "--log %s: closing failed: %s", r->path, strerror(err));
    return s;
}

void dp_report_discard(dp_reporter *r) {
    if (r->has_log) close(r->fd);
    r->has_log = 0;
    dp_jbuf_free(&r->line);
    dp_jbuf_free(&r->pending);
}
