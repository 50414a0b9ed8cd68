/* settings_file.c: the line reader of topology files and compute profiles (settings_file.h). */
#include "sim/settings_file.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/parse_num.h"

struct dp_sf_seen {
    uint64_t hash; /* 0: an empty slot */
    int line;
    char id[64];
};

void dp_sf_init(dp_sf_reader *r, const char *text, const char *origin) {
    memset(r, 0, sizeof *r);
    r->origin = origin;
    r->rest = text;
}

void dp_sf_free(dp_sf_reader *r) {
    free(r->seen);
    r->seen = NULL, r->n_seen = r->cap_seen = 0;
}

dp_status dp_sf_next(dp_sf_reader *r) {
    while (*r->rest) {
        const char *eol = strchr(r->rest, '\n');
        size_t len = eol ? (size_t)(eol - r->rest) : strlen(r->rest);
        r->line++;
        if (len >= sizeof r->buf)
            return dp_fail(DP_ERR_FORMAT, "%s:%d: line longer than %d characters", r->origin, r->line,
                           DP_SF_MAX_LINE - 1);
        memcpy(r->buf, r->rest, len);
        r->buf[len] = '\0';
        r->rest += len + (eol ? 1 : 0);
        char *hash = strchr(r->buf, '#');
        if (hash) *hash = '\0';
        r->n = 0;
        char *save = NULL;
        for (char *w = strtok_r(r->buf, " \t\r", &save); w; w = strtok_r(NULL, " \t\r", &save)) {
            if (r->n == DP_SF_MAX_WORDS)
                return dp_fail(DP_ERR_FORMAT, "%s:%d: more than %d words on a line", r->origin, r->line,
                               DP_SF_MAX_WORDS);
            r->w[r->n++] = w;
        }
        if (r->n) return DP_OK;
    }
    return DP_DONE;
}

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h ? h : 1;
}

dp_status dp_sf_once(dp_sf_reader *r, const char *id) {
    if (2 * (r->n_seen + 1) > r->cap_seen) { /* at most half full: probes stay short */
        size_t cap = r->cap_seen ? 2 * r->cap_seen : 64;
        dp_sf_seen *t = calloc(cap, sizeof *t);
        if (!t) return dp_fail(DP_ERR_NOMEM, "%s: out of memory reading it", r->origin);
        for (size_t i = 0; i < r->cap_seen; i++)
            if (r->seen[i].hash) {
                size_t j = r->seen[i].hash & (cap - 1);
                while (t[j].hash) j = (j + 1) & (cap - 1);
                t[j] = r->seen[i];
            }
        free(r->seen);
        r->seen = t, r->cap_seen = cap;
    }
    const uint64_t h = fnv1a(id);
    size_t j = h & (r->cap_seen - 1);
    for (; r->seen[j].hash; j = (j + 1) & (r->cap_seen - 1))
        if (r->seen[j].hash == h && strncmp(r->seen[j].id, id, sizeof r->seen[j].id - 1) == 0)
            return dp_fail(DP_ERR_FORMAT, "%s:%d: '%s' is given twice (first at line %d); keep one", r->origin,
                           r->line, id, r->seen[j].line);
    r->seen[j].hash = h, r->seen[j].line = r->line;
    strncpy(r->seen[j].id, id, sizeof r->seen[j].id - 1);
    r->n_seen++;
    return DP_OK;
}

dp_status dp_sf_words(const dp_sf_reader *r, int min, int max, const char *form) {
    if (r->n >= min && r->n <= max) return DP_OK;
    return dp_fail(DP_ERR_FORMAT, "%s:%d: expected '%s', got %d word%s", r->origin, r->line, form, r->n,
                   r->n == 1 ? "" : "s");
}

/* The number syntax: the whole string, no space, no '+', decimal digits only. These two are the
 * place to call a shared strict parser (core/parse_num.h) once there is one. */
/* numbers as every flag reads them (core/parse_num.h): decimal, the whole word, finite */
static int strict_ll(const char *s, long long *out) { return dp_parse_ll(s, out) == 0; }

static int strict_double(const char *s, double *out) { return dp_parse_double(s, out) == 0; }

dp_status dp_sf_real(const dp_sf_reader *r, int i, double lo, double hi, double *out) {
    double v = 0;
    if (i >= r->n || !strict_double(r->w[i], &v) || !(v >= lo && v <= hi))
        return dp_fail(DP_ERR_FORMAT, "%s:%d: %s: expected a number in [%g, %g], got '%s'", r->origin, r->line,
                       r->w[0], lo, hi, i < r->n ? r->w[i] : "");
    *out = v;
    return DP_OK;
}

dp_status dp_sf_whole(const dp_sf_reader *r, int i, long long lo, long long hi, long long *out) {
    long long v = 0;
    if (i >= r->n || !strict_ll(r->w[i], &v) || v < lo || v > hi)
        return dp_fail(DP_ERR_FORMAT, "%s:%d: %s: expected a whole number in [%lld, %lld], got '%s'", r->origin,
                       r->line, r->w[0], lo, hi, i < r->n ? r->w[i] : "");
    *out = v;
    return DP_OK;
}

dp_status dp_sf_int(const dp_sf_reader *r, int i, int lo, int hi, int *out) {
    long long v = 0;
    DP_TRY(dp_sf_whole(r, i, lo, hi, &v));
    *out = (int)v;
    return DP_OK;
}

dp_status dp_sf_name(const dp_sf_reader *r, int i, char *dst, size_t n) {
    if (i >= r->n || strlen(r->w[i]) >= n)
        return dp_fail(DP_ERR_FORMAT, "%s:%d: %s: expected a name of at most %zu characters", r->origin, r->line,
                       r->w[0], n - 1);
    memcpy(dst, r->w[i], strlen(r->w[i]) + 1);
    return DP_OK;
}

dp_status dp_sf_read_pairs(const char *text, const char *origin, dp_status (*line)(dp_sf_reader *r, void *ctx),
                           void *ctx) {
    dp_sf_reader r;
    dp_sf_init(&r, text, origin);
    dp_status s;
    while ((s = dp_sf_next(&r)) == DP_OK) {
        if (r.n != 2) {
            s = dp_fail(DP_ERR_FORMAT, "%s:%d: expected 'key value  # source'", origin, r.line);
            break;
        }
        if ((s = line(&r, ctx)) != DP_OK || (s = dp_sf_once(&r, r.w[0])) != DP_OK) break;
    }
    dp_sf_free(&r);
    return s == DP_DONE ? DP_OK : s;
}
