#include "report/report.h"

#include <errno.h>
#include <string.h>

#include "core/timer.h"

dp_status dp_report_open(dp_reporter *r, const char *log_path, int append, int console, int progress) {
    memset(r, 0, sizeof *r);
    r->console = console;
    r->progress = progress;
    if (log_path) {
        r->log = fopen(log_path, append ? "a" : "w");
        if (!r->log) return dp_fail(DP_ERR_IO, "--log %s: cannot open for writing: %s", log_path, strerror(errno));
    }
    return DP_OK;
}

void dp_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

void dp_report_config(dp_reporter *r, const char *json_fields) {
    if (r->log) fprintf(r->log, "{\"event\":\"config\",%s}\n", json_fields);
}

void dp_report_step(dp_reporter *r, int epoch, long step, double loss, double lr) {
    if (r->log)
        fprintf(r->log, "{\"event\":\"step\",\"epoch\":%d,\"step\":%ld,\"loss\":%.9g,\"lr\":%.9g}\n", epoch, step,
                (float)loss, (float)lr);
}

static void clear_bar(dp_reporter *r) {
    if (r->progress && r->last_draw > 0) {
        printf("\r%*s\r", 79, "");
        fflush(stdout);
        r->last_draw = 0;
    }
}

void dp_report_progress(dp_reporter *r, int epoch, int batch, int n_batches, double running_loss,
                        double images_per_s) {
    if (!r->progress) return;
    double now = dp_now();
    if (r->last_draw > 0 && now - r->last_draw < 0.1 && batch < n_batches) return;
    r->last_draw = now;
    const int width = 30;
    int filled = n_batches ? (int)((long)width * batch / n_batches) : width;
    char bar[width + 1];
    for (int i = 0; i < width; i++) bar[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
    bar[width] = '\0';
    printf("\repoch %d [%s] %d/%d loss %.4f %.0f img/s ", epoch, bar, batch, n_batches, running_loss, images_per_s);
    fflush(stdout);
}

void dp_report_epoch(dp_reporter *r, const dp_epoch_report *e) {
    clear_bar(r);
    long calls = 0;
    double bytes = 0, comm_s = 0;
    for (int k = 0; k < DP_COLL_KINDS; k++) {
        calls += e->comm.calls[k];
        bytes += e->comm.bytes[k];
        comm_s += e->comm.seconds[k];
    }
    double hidden = comm_s > 0 ? e->comm_hidden_s / comm_s : 0;
    if (r->console) {
        printf("epoch %d/%d  train loss %.4f  train acc %.4f  test acc %.4f  %.2f s  %.0f img/s  "
               "(data wait %.2f s, compute %.2f s",
               e->epoch, e->epochs, e->train_loss, e->train_acc, e->test_acc, e->seconds, e->images_per_s,
               e->data_wait_s, e->compute_s);
        if (calls) printf(", comm %ld calls %.1f MB %.2f s, %.0f%% during backward", calls, bytes / 1e6, comm_s, 100 * hidden);
        printf(")");
        if (e->skipped_steps) printf("  NaN/Inf steps skipped: %ld", e->skipped_steps);
        printf("\n");
        fflush(stdout);
    }
    if (r->log) {
        fprintf(r->log,
                "{\"event\":\"epoch\",\"epoch\":%d,\"steps\":%ld,\"lr\":%.9g,\"train_loss\":%.9g,\"train_acc\":%.6f,"
                "\"test_loss\":%.9g,\"test_acc\":%.6f,\"seconds\":%.6f,\"eval_seconds\":%.6f,\"images_per_s\":%.3f,"
                "\"data_wait_s\":%.6f,\"compute_s\":%.6f,\"comm_calls\":%ld,\"comm_bytes\":%.0f,\"comm_s\":%.6f,"
                "\"comm_hidden_frac\":%.6f,\"skipped_steps\":%ld",
                e->epoch, e->steps, e->lr, e->train_loss, e->train_acc, e->test_loss, e->test_acc, e->seconds,
                e->eval_seconds, e->images_per_s, e->data_wait_s, e->compute_s, calls, bytes, comm_s, hidden, e->skipped_steps);
        static const char *const names[DP_COLL_KINDS] = {"allreduce", "broadcast", "reduce", "allgather", "barrier"};
        for (int k = 0; k < DP_COLL_KINDS; k++)
            if (e->comm.calls[k])
                fprintf(r->log, ",\"%s_calls\":%ld,\"%s_bytes\":%.0f,\"%s_link_bytes\":%.0f,\"%s_s\":%.6f", names[k],
                        e->comm.calls[k], names[k], e->comm.bytes[k], names[k], e->comm.link_bytes[k], names[k],
                        e->comm.seconds[k]);
        fprintf(r->log, "}\n");
        fflush(r->log);
    }
}

void dp_report_final(dp_reporter *r, const char *dataset, double test_acc, int n_classes, const long *correct,
                     const long *count, const char *const *class_names) {
    clear_bar(r);
    if (r->console) {
        printf("test accuracy %.4f on %s\n", test_acc, dataset);
        for (int k = 0; k < n_classes; k++) {
            char fallback[16];
            snprintf(fallback, sizeof fallback, "%d", k);
            printf("  %-14s %.4f  (%ld/%ld)\n", class_names ? class_names[k] : fallback,
                   count[k] ? (double)correct[k] / count[k] : 0.0, correct[k], count[k]);
        }
        fflush(stdout);
    }
    if (r->log) {
        fprintf(r->log, "{\"event\":\"final\",\"test_acc\":%.6f,\"per_class\":[", test_acc);
        for (int k = 0; k < n_classes; k++) {
            char fallback[16];
            snprintf(fallback, sizeof fallback, "%d", k);
            fprintf(r->log, "%s{\"class\":", k ? "," : "");
            dp_json_string(r->log, class_names ? class_names[k] : fallback);
            fprintf(r->log, ",\"acc\":%.6f,\"correct\":%ld,\"count\":%ld}",
                    count[k] ? (double)correct[k] / count[k] : 0.0, correct[k], count[k]);
        }
        fprintf(r->log, "]}\n");
    }
}

void dp_report_error(dp_reporter *r, const char *message) {
    clear_bar(r);
    if (r->log) {
        fprintf(r->log, "{\"event\":\"error\",\"message\":");
        dp_json_string(r->log, message);
        fprintf(r->log, "}\n");
    }
}

dp_status dp_report_close(dp_reporter *r, const char *log_path) {
    clear_bar(r);
    if (!r->log) return DP_OK;
    int bad = ferror(r->log);
    bad |= fclose(r->log) != 0;
    r->log = NULL;
    if (bad) return dp_fail(DP_ERR_IO, "--log %s: writing failed (disk full?)", log_path ? log_path : "");
    return DP_OK;
}

void dp_report_event(dp_reporter *r, const char *event, const char *json_fields) {
    if (!r->log) return;
    fprintf(r->log, "{\"event\":\"%s\",%s}\n", event, json_fields);
    fflush(r->log);
}
