/* consistency.c: ranks launched with different flags, models or data would hang at their
 * first mismatched collective; instead every rank writes the flags that must agree as one
 * canonical text ("--lr 0.05\n--seed 3\n...") and hashes its model and data, all of it is
 * all-gathered, and a difference fails at once on every rank with the same message naming the
 * rank, the first differing flag and both values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/crc.h"
#include "train/settings.h"
#include "train/trainer.h"

enum { H_MODEL, H_DATA, H_KINDS };
static const char *const what[H_KINDS] = {"the model", "the data set"};
#define FLAGS_BYTES 2048 /* the canonical flags text; each byte travels as one float (exact) */

static uint32_t crc_of(uint32_t crc, const void *p, size_t n) { return dp_crc32(crc, p, n); }

static uint32_t crc_str(uint32_t crc, const char *s) { return s ? crc_of(crc, s, strlen(s) + 1) : crc_of(crc, "", 1); }

static void hashes(const dp_trainer *t, uint32_t h[H_KINDS]) {
    h[H_MODEL] = crc_str(0, t->model.name);
    size_t sizes[3] = {t->model.params.n, t->model.buffers.n, (size_t)t->model.params.n_buckets};
    h[H_MODEL] = crc_of(h[H_MODEL], sizes, sizeof sizes);
    h[H_DATA] = crc_str(0, t->cfg.data.name);
    const dp_dataset *sets[2] = {t->have_train ? &t->train : NULL, &t->test};
    for (int i = 0; i < 2; i++) {
        if (!sets[i]) continue;
        int shape[5] = {sets[i]->n, sets[i]->c, sets[i]->h, sets[i]->w, sets[i]->n_classes};
        h[H_DATA] = crc_of(h[H_DATA], shape, sizeof shape);
        h[H_DATA] = crc_of(h[H_DATA], sets[i]->labels, (size_t)sets[i]->n);
        h[H_DATA] = crc_of(h[H_DATA], sets[i]->pixels, (size_t)sets[i]->n * sets[i]->c * sets[i]->h * sets[i]->w);
    }
}

/* The shortest decimal that reads back as the same float ("0.1", not "0.100000001"). */
static void fmt_float(char *out, size_t cap, double v) {
    for (int p = 6; p <= 9; p++) {
        snprintf(out, cap, "%.*g", p, v);
        if ((float)strtod(out, NULL) == (float)v) return;
    }
}

/* One line per flag that changes the math or the collectives' shapes (the table's rows with a
 * place in the ranks' check, settings.h; not --log, --threads, --workers): "with --lr 0.05" or
 * "without --nesterov", as the message will quote it. */
void dp_consistency_flags(const dp_config *c, char *buf, size_t cap) {
    size_t n = 0;
    char v[160];
    dp_settings_cursor cur = DP_SETTINGS_CURSOR(DP_LIST_CONS);
    for (const dp_setting *s; (s = dp_settings_next(&cur, NULL));) {
        dp_setting_value x;
        dp_setting_get(s, c, &x);
        if (s->kind == DP_K_SET || !dp_setting_given(s, c)) {
            n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s --%s\n",
                                  dp_setting_given(s, c) ? "with" : "without", s->name);
            continue;
        }
        if (x.type == DP_SV_REAL) fmt_float(v, sizeof v, x.r);
        else dp_setting_text(s, c, v, sizeof v);
        n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "with --%s %s\n", s->name, v);
    }
}

/* The first line where a and b differ (copied into la / lb without the newline); 0 if none.
 * *more: how many further lines differ. */
static int first_difference(const char *a, const char *b, char *la, char *lb, size_t cap, int *more) {
    int found = 0;
    *more = 0;
    while (*a || *b) {
        const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
        size_t na = ea ? (size_t)(ea - a) : strlen(a), nb = eb ? (size_t)(eb - b) : strlen(b);
        if (na != nb || memcmp(a, b, na) != 0) {
            if (!found) {
                snprintf(la, cap, "%.*s", (int)na, a);
                snprintf(lb, cap, "%.*s", (int)nb, b);
                found = 1;
            } else {
                ++*more;
            }
        }
        a += na + (ea != NULL), b += nb + (eb != NULL);
    }
    return found;
}

dp_status dp_check_consistency(dp_trainer *t) {
    if (dp_exec_n_local(t->ex) == t->world) return DP_OK; /* one process: nothing can differ */
    char text[FLAGS_BYTES];
    memset(text, 0, sizeof text);
    dp_consistency_flags(&t->cfg, text, sizeof text - 1);
    uint32_t h[H_KINDS];
    hashes(t, h);
    /* bytes as floats, hashes as 16-bit halves: exact through any float collective */
    enum { PER = FLAGS_BYTES + 2 * H_KINDS };
    float *send = malloc(PER * sizeof *send), *recv = malloc((size_t)PER * t->world * sizeof *recv);
    if (!send || !recv) {
        free(send), free(recv);
        return dp_fail(DP_ERR_NOMEM, "out of memory for the start-up consistency check");
    }
    for (int i = 0; i < FLAGS_BYTES; i++) send[i] = (float)(unsigned char)text[i];
    for (int k = 0; k < H_KINDS; k++)
        send[FLAGS_BYTES + 2 * k] = (float)(h[k] >> 16), send[FLAGS_BYTES + 2 * k + 1] = (float)(h[k] & 0xffff);
    dp_status s = dp_exec_host_allgather(t->ex, send, recv, PER);
    free(send);
    if (s != DP_OK) {
        free(recv);
        return s;
    }
    char r0[FLAGS_BYTES], rr[FLAGS_BYTES];
    for (int i = 0; i < FLAGS_BYTES; i++) r0[i] = (char)(unsigned char)recv[i];
    r0[FLAGS_BYTES - 1] = '\0';
    for (int r = 1; r < t->world && s == DP_OK; r++) {
        const float *R = recv + (size_t)r * PER;
        for (int i = 0; i < FLAGS_BYTES; i++) rr[i] = (char)(unsigned char)R[i];
        rr[FLAGS_BYTES - 1] = '\0';
        char la[160], lb[160];
        int more;
        if (first_difference(rr, r0, la, lb, sizeof la, &more)) {
            char tail[64] = "";
            if (more) snprintf(tail, sizeof tail, " (and %d other flag%s)", more, more == 1 ? " differs" : "s differ");
            s = dp_fail(DP_ERR_USAGE,
                        "rank %d was started %s, rank 0 %s%s (checked at start, before any training): launch every "
                        "rank with the same flags and data", r, la, lb, tail);
            break;
        }
        for (int k = 0; k < H_KINDS && s == DP_OK; k++)
            if (R[FLAGS_BYTES + 2 * k] != recv[FLAGS_BYTES + 2 * k] ||
                R[FLAGS_BYTES + 2 * k + 1] != recv[FLAGS_BYTES + 2 * k + 1])
                s = dp_fail(DP_ERR_USAGE,
                            "rank %d and rank 0 were started with different %s (checked at start, before any "
                            "training): launch every rank with the same flags and data", r, what[k]);
    }
    free(recv);
    return s;
}
