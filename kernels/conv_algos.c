/* conv_algos.c: the convolution algorithm record (conv_algos.h). */
#include "kernels/conv_algos.h"

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

int dp_conv_algos_parse(const char *s, dp_conv_algo *a, int max, char *why, size_t why_cap) {
    int n = 0;
    while (*s) {
        dp_conv_algo e = {0};
        dp_conv2d_dims *d = &e.d;
        int used = 0;
        const int got = sscanf(s, "%d,%d,%d,%d,%d,%d,%d,%d,%d:%d,%d,%d%n", &d->in_c, &d->in_h, &d->in_w, &d->out_c,
                               &d->k, &d->stride, &d->pad, &e.batch, &e.tf32, &e.fwd, &e.data, &e.filter, &used);
        const char next = got == 12 ? s[used] : '?';
        if (got != 12 || (next != ';' && next != '\0') || dp_conv2d_dims_init(d) != 0 || e.batch < 1 ||
            (e.tf32 != 0 && e.tf32 != 1) || e.fwd < -1 || e.data < -1 || e.filter < -1) {
            snprintf(why, why_cap, "entry %d is not in_c,in_h,in_w,out_c,k,stride,pad,batch,tf32:forward,data,filter "
                     "with a valid shape", n + 1);
            return -1;
        }
        if (n == max) {
            snprintf(why, why_cap, "more than %d entries", max);
            return -1;
        }
        a[n++] = e;
        s += used + (next == ';');
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
    for (int i = 0; i < n_noted && !seen; i++) seen = same_shape(&noted[i], &a->d, a->batch, a->tf32);
    if (!seen && n_noted < DP_CONV_ALGOS_MAX) noted[n_noted++] = *a;
    pthread_mutex_unlock(&mu);
}

size_t dp_conv_algos_current(char *buf, size_t cap) {
    static dp_conv_algo all[2 * DP_CONV_ALGOS_MAX];
    pthread_mutex_lock(&mu);
    int n = n_pinned;
    memcpy(all, pinned, (size_t)n_pinned * sizeof *all);
    for (int i = 0; i < n_noted; i++) {
        int seen = 0;
        for (int j = 0; j < n_pinned && !seen; j++) seen = same_shape(&pinned[j], &noted[i].d, noted[i].batch, noted[i].tf32);
        if (!seen) all[n++] = noted[i];
    }
    const size_t len = dp_conv_algos_format(all, n, buf, cap);
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
