/* progress.c: the progress bar's layout, the terminal width and when a bar is shown. */
#include "report/progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "core/parse_num.h"

static void fmt_eta(char *out, size_t cap, double s) {
    if (!(s >= 0) || s > 359999) { /* unknown (no batch done) or absurd: no figure rather than a wrong one */
        snprintf(out, cap, "ETA --:--");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(out, cap, "ETA %ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(out, cap, "ETA %ld:%02ld", t / 60, t % 60);
}

int dp_progress_render(char *buf, size_t cap, int width, const dp_progress *p) {
    if (!cap) return 0;
    buf[0] = '\0';
    int room = width - 1; /* the last column stays empty: writing it wraps on many terminals */
    if (room < 1 || cap < 2) return 0;
    if ((size_t)room > cap - 1) room = (int)(cap - 1);
    char head[48], count[48], loss[32], speed[32], eta[32];
    snprintf(head, sizeof head, "epoch %d/%d", p->epoch, p->epochs);
    int digits = snprintf(NULL, 0, "%d", p->n_batches); /* a fixed width: the bar does not jitter */
    snprintf(count, sizeof count, "%*d/%d", digits, p->batch, p->n_batches);
    snprintf(loss, sizeof loss, "loss %.4f", p->loss);
    snprintf(speed, sizeof speed, "%.0f img/s", p->images_per_s);
    double eta_s = p->batch > 0 && p->n_batches >= p->batch
                       ? p->elapsed_s * (double)(p->n_batches - p->batch) / p->batch : -1;
    fmt_eta(eta, sizeof eta, eta_s);
    /* Optional parts, least important first; dropped until the line fits with a bar of 10. */
    const char *parts[] = {head, count, loss, eta, speed};
    int keep[5] = {1, 1, 1, 1, 1};
    const int drop_order[] = {4, 2, 1, 3}; /* speed, loss, count, ETA; the epoch stays */
    int bar = 0;
    for (int d = 0;; d++) {
        int len = 0;
        for (int i = 0; i < 5; i++)
            if (keep[i]) len += (int)strlen(parts[i]) + 1;
        bar = room - len - 2; /* "[...]" after the head, its spaces counted above */
        if (bar >= 10 || d == 4) break;
        keep[drop_order[d]] = 0;
    }
    if (bar > 40) bar = 40;
    int n = 0;
    char line[1024];
    n += snprintf(line + n, sizeof line - (size_t)n, "%s", head);
    if (bar >= 10) {
        int filled = p->n_batches > 0 ? (int)((long)bar * p->batch / p->n_batches) : bar;
        if (filled > bar) filled = bar;
        line[n++] = ' ', line[n++] = '[';
        for (int i = 0; i < bar; i++) line[n++] = i < filled ? '=' : (i == filled ? '>' : ' ');
        line[n++] = ']';
        line[n] = '\0';
    }
    for (int i = 1; i < 5; i++)
        if (keep[i]) n += snprintf(line + n, sizeof line - (size_t)n, " %s", parts[i]);
    if (n > room) n = room; /* a terminal narrower than "epoch E/E": cut, never wrap */
    memcpy(buf, line, (size_t)n);
    buf[n] = '\0';
    return n;
}

int dp_terminal_width(int fd) {
    struct winsize ws;
    if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    const char *c = getenv("COLUMNS");
    long long v = 0;
    if (c && dp_parse_ll(c, &v) == 0 && v > 0 && v < 10000) return (int)v;
    return 80;
}

int dp_under_mpi_launcher(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

int dp_progress_wanted(int forced, int fd) {
    if (forced >= 0) return forced;
    return isatty(fd) && !dp_under_mpi_launcher();
}
