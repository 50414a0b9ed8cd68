/* conv_algos.c: the convolution algorithm record (conv_algos.h). */
#include "kernels/conv_algos.h"

#include "core/parse_num.h"
#include "core/printable.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static dp_conv_algo pinned[DP_CONV_ALGOS_MAX], noted[DP_CONV_ALGOS_MAX];
static int n_pinned, n_noted;

size_t dp_conv_algos_format(const dp_conv_algo *a, int n, char *buf, size_t cap) {
    size_t len = 0;
    if (cap) buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        const dp_conv2d_dims *d = &a[i].d;
        const int w = snprintf(len < cap ? buf + len : NULL, len < cap ? cap - len : 0,
                               "%s%d,%d,%d,%d,%d,%d,%d,%d,%d:%d,%d,%d", i ? ";" : "", d->in_c, d->in_h, d->in_w,
                               d->out_c, d->k, d->stride, d->pad, a[i].batch, a[i].tf32, a[i].fwd, a[i].data,
                               a[i].filter);
        if (w > 0) len += (size_t)w;
    }
    return len;
}

/* An entry's fields in record order, their ranges and the separator after each ('\0': the entry's
 * end, ';' or the record's). */
static const struct {
    const char *name;
    long long lo, hi;
    char sep;
} fields[12] = {{"in_c", 1, DP_CONV_ALGOS_MAX_SIZE, ','},  {"in_h", 1, DP_CONV_ALGOS_MAX_SIZE, ','},
                {"in_w", 1, DP_CONV_ALGOS_MAX_SIZE, ','},  {"out_c", 1, DP_CONV_ALGOS_MAX_SIZE, ','},
                {"k", 1, DP_CONV_ALGOS_MAX_SIZE, ','},     {"stride", 1, DP_CONV_ALGOS_MAX_SIZE, ','},
                {"pad", 0, DP_CONV_ALGOS_MAX_SIZE, ','},   {"batch", 1, DP_CONV_ALGOS_MAX_BATCH, ','},
                {"tf32", 0, 1, ':'},                       {"forward", -1, DP_CONV_ALGOS_MAX_ALGO, ','},
                {"data", -1, DP_CONV_ALGOS_MAX_ALGO, ','}, {"filter", -1, DP_CONV_ALGOS_MAX_ALGO, '\0'}};

#define FORM "in_c,in_h,in_w,out_c,k,stride,pad,batch,tf32:forward,data,filter"

int dp_conv_algos_parse(const char *s, dp_conv_algo *a, int max, char *why, size_t why_cap) {
    int n = 0;
    for (int more = *s != '\0'; more;) { /* "" holds no entry; "a;" ends in an empty one */
        if (n == max) {
            snprintf(why, why_cap, "entry %d: more than %d entries", n + 1, max);
            return -1;
        }
        long long v[12];
        for (int i = 0; i < 12; i++) {
            const size_t len = strcspn(s, ",:;");
            const char end = s[len] == ';' ? '\0' : s[len];
            if (end != fields[i].sep) { /* a field missing, or one too many */
                snprintf(why, why_cap, "entry %d is not " FORM, n + 1);
                return -1;
            }
            if (dp_parse_ll_n(s, len, &v[i]) != 0 || v[i] < fields[i].lo || v[i] > fields[i].hi) {
                char text[24], shown[40];
                snprintf(text, sizeof text, "%.*s", len < sizeof text ? (int)len : (int)sizeof text - 1, s);
                snprintf(why, why_cap, "entry %d: %s is '%s%s', expected an integer in %lld..%lld", n + 1,
                         fields[i].name, dp_printable(text, shown, sizeof shown), len < sizeof text ? "" : "...",
                         fields[i].lo, fields[i].hi);
                return -1;
            }
            more = s[len] == ';';
            s += len + (s[len] != '\0');
        }
        dp_conv_algo e = {.d = {.in_c = (int)v[0], .in_h = (int)v[1], .in_w = (int)v[2], .out_c = (int)v[3],
                                .k = (int)v[4], .stride = (int)v[5], .pad = (int)v[6]},
                          .batch = (int)v[7], .tf32 = (int)v[8], .fwd = (int)v[9], .data = (int)v[10],
                          .filter = (int)v[11]};
        if (dp_conv2d_dims_init(&e.d) != 0) {
            snprintf(why, why_cap, "entry %d: kernel %d is larger than the padded input %dx%d (pad %d)", n + 1, e.d.k,
                     e.d.in_h, e.d.in_w, e.d.pad);
            return -1;
        }
        a[n++] = e;
    }
    return n;
}

static int same_shape(const dp_conv_algo *a, const dp_conv2d_dims *d, int batch, int tf32) {
    return a->batch == batch && a->tf32 == tf32 && a->d.in_c == d->in_c && a->d.in_h == d->in_h &&
           a->d.in_w == d->in_w && a->d.out_c == d->out_c && a->d.k == d->k && a->d.stride == d->stride &&
           a->d.pad == d->pad;
}

int dp_conv_algos_pin(const char *record, char *why, size_t why_cap) {
    dp_conv_algo tmp[DP_CONV_ALGOS_MAX];
    const int n = dp_conv_algos_parse(record, tmp, DP_CONV_ALGOS_MAX, why, why_cap);
    if (n < 0) return -1;
    pthread_mutex_lock(&mu);
    memcpy(pinned, tmp, (size_t)n * sizeof *tmp);
    n_pinned = n;
    int kept = 0; /* the noted shapes the record does not hold, as many as fit beside it */
    for (int i = 0; i < n_noted; i++) {
        int seen = 0;
        for (int j = 0; j < n && !seen; j++) seen = same_shape(&pinned[j], &noted[i].d, noted[i].batch, noted[i].tf32);
        if (!seen && n + kept < DP_CONV_ALGOS_MAX) noted[kept++] = noted[i];
    }
    n_noted = kept;
    pthread_mutex_unlock(&mu);
    return 0;
}

int dp_conv_algos_pinned(const dp_conv2d_dims *d, int batch, int tf32, dp_conv_algo *out) {
    int found = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n_pinned && !found; i++)
        if (same_shape(&pinned[i], d, batch, tf32)) *out = pinned[i], found = 1;
    pthread_mutex_unlock(&mu);
    return found;
}

void dp_conv_algos_note(const dp_conv_algo *a) {
    pthread_mutex_lock(&mu);
    int seen = 0;
    for (int i = 0; i < n_pinned && !seen; i++) seen = same_shape(&pinned[i], &a->d, a->batch, a->tf32);
    for (int i = 0; i < n_noted && !seen; i++) seen = same_shape(&noted[i], &a->d, a->batch, a->tf32);
    /* the record holds what a resume can replay: DP_CONV_ALGOS_MAX entries (a shape beyond is chosen afresh) */
    if (!seen && n_pinned + n_noted < DP_CONV_ALGOS_MAX) noted[n_noted++] = *a;
    pthread_mutex_unlock(&mu);
}

size_t dp_conv_algos_current(char *buf, size_t cap) {
    static dp_conv_algo all[DP_CONV_ALGOS_MAX];
    pthread_mutex_lock(&mu);
    memcpy(all, pinned, (size_t)n_pinned * sizeof *all);
    memcpy(all + n_pinned, noted, (size_t)n_noted * sizeof *all);
    const size_t len = dp_conv_algos_format(all, n_pinned + n_noted, buf, cap);
    pthread_mutex_unlock(&mu);
    return len;
}

int dp_conv_algos_pin_env(char *why, size_t why_cap) {
    static pthread_mutex_t env_mu = PTHREAD_MUTEX_INITIALIZER; /* not mu: pin takes that */
    static int done = 0, result = 0;
    static char reason[160];
    pthread_mutex_lock(&env_mu);
    if (!done) {
        const char *e = getenv("DPTRAIN_CONV_ALGOS");
        result = !e || !*e ? 0 : strcmp(e, "time") == 0 ? 1 : dp_conv_algos_pin(e, reason, sizeof reason) < 0 ? -1 : 0;
        done = 1;
    }
    const int r = result;
    if (r < 0) snprintf(why, why_cap, "%s", reason);
    pthread_mutex_unlock(&env_mu);
    return r;
}

void dp_conv_algos_reset(void) {
    pthread_mutex_lock(&mu);
    n_pinned = n_noted = 0;
    pthread_mutex_unlock(&mu);
}
