/* profile_file.c: the compute profile's text format: writing it atomically, reading it strictly
 * (every number in its range, so a crafted file cannot overflow an int or index past a table). */
#include "sim/profile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/atomic.h"
#include "sim/topology.h"

static dp_status write_profile(FILE *f, void *ctx) {
    const dp_profile *p = ctx;
    fprintf(f, "# dptrain compute profile: seconds of one worker per node and step (docs/overhead-model.md)\n");
    fprintf(f, "model %s\ndevice %s\ninput_floats %zu\nclasses %d\nparams %zu\nbuffers %zu\nnodes %d\n", p->model,
            p->device[0] ? p->device : "unknown", p->input_floats, p->n_classes, p->param_floats, p->buffer_floats, p->n_nodes);
    fprintf(f, "# overhead LANES THREADS SECONDS: the CPU trainer's cost per step beyond the nodes\n");
    for (int i = 0; i < p->n_overheads; i++)
        fprintf(f, "overhead %d %d %.6e\n", p->overheads[i].lanes, p->overheads[i].workers, p->overheads[i].seconds);
    fprintf(f, "# node INDEX NAME KERNELS_FWD KERNELS_BWD\n");
    for (int i = 0; i < p->n_nodes; i++)
        fprintf(f, "node %d %s %d %d\n", i, p->node_names[i][0] ? p->node_names[i] : "-", p->kernels_fwd[i],
                p->kernels_bwd[i]);
    fprintf(f, "buckets %d\n# bucket INDEX FLOATS READY_AFTER_NODE\n", p->n_buckets);
    for (int k = 0; k < p->n_buckets; k++) fprintf(f, "bucket %d %zu %d\n", k, p->bucket_floats[k], p->bucket_node[k]);
    fprintf(f, "# row BATCH CONCURRENT STEPS LOSS_S OPT_S LANE_SUM_S, then time NODE FWD_S BWD_S per node\n");
    for (int r = 0; r < p->n_rows; r++) {
        const dp_profile_row *w = &p->rows[r];
        fprintf(f, "row %d %d %ld %.6e %.6e %.6e\n", w->batch, w->concurrent, w->steps, w->loss_s, w->opt_s,
                w->sum_s);
        for (int i = 0; i < p->n_nodes; i++) fprintf(f, "time %d %.6e %.6e\n", i, w->fwd_s[i], w->bwd_s[i]);
    }
    return ferror(f) ? dp_fail(DP_ERR_IO, "write failed: %s", strerror(errno)) : DP_OK;
}

dp_status dp_profile_save(const char *flag, const char *path, const dp_profile *p) {
    return dp_atomic_write(flag, path, write_profile, (void *)p);
}


/* A whole number in [lo, hi], the whole token. */
static int as_long(const char *tok, long lo, long hi, long *out) {
    char *end;
    if (!tok) return 0;
    errno = 0;
    long v = strtol(tok, &end, 10);
    if (end == tok || *end || errno || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

static int as_int(const char *tok, int lo, int hi, int *out) {
    long v;
    if (!as_long(tok, lo, hi, &v)) return 0;
    *out = (int)v;
    return 1;
}

static int as_size(const char *tok, size_t *out) {
    long v;
    if (!as_long(tok, 0, 1000000000000L, &v)) return 0; /* 4 TB of floats */
    *out = (size_t)v;
    return 1;
}

/* Seconds: finite, 0 .. an hour. */
static int as_secs(const char *tok, double *out) {
    char *end;
    if (!tok) return 0;
    errno = 0;
    double v = strtod(tok, &end);
    if (end == tok || *end || errno || !(v >= 0 && v <= 3600)) return 0;
    *out = v;
    return 1;
}

static int as_name(const char *tok, char *dst, size_t n) {
    if (!tok || strlen(tok) >= n) return 0;
    snprintf(dst, n, "%s", tok);
    return 1;
}

#define BAD(...) dp_fail(DP_ERR_FORMAT, __VA_ARGS__)
#define BIG 1000000 /* batches, concurrency, lanes, threads, kernels, classes */

dp_status dp_profile_parse(const char *text, const char *origin, dp_profile *p) {
    memset(p, 0, sizeof *p);
    dp_profile_row *row = NULL;
    int line = 0;
    for (const char *s = text; *s;) {
        const char *eol = strchr(s, '\n');
        size_t len = eol ? (size_t)(eol - s) : strlen(s);
        char buf[512];
        line++;
        if (len >= sizeof buf) return BAD("%s:%d: line too long", origin, line);
        memcpy(buf, s, len);
        buf[len] = '\0';
        s += len + (eol ? 1 : 0);
        char *hash = strchr(buf, '#');
        if (hash) *hash = '\0';
        char *tok[9] = {0}, *save = NULL;
        int nt = 0;
        for (char *w = strtok_r(buf, " \t\r", &save); w; w = strtok_r(NULL, " \t\r", &save))
            if (nt < 9) tok[nt++] = w;
            else return BAD("%s:%d: too many fields", origin, line);
        if (!nt) continue;
        const char *key = tok[0];
        int i, a, b, ok;
        long steps;
        size_t z;
        double x, y, sum = 0;
        if (!strcmp(key, "model")) ok = nt == 2 && as_name(tok[1], p->model, sizeof p->model);
        else if (!strcmp(key, "device")) ok = nt == 2 && as_name(tok[1], p->device, sizeof p->device);
        else if (!strcmp(key, "input_floats")) ok = nt == 2 && as_size(tok[1], &p->input_floats) && p->input_floats > 0;
        else if (!strcmp(key, "classes")) ok = nt == 2 && as_int(tok[1], 1, BIG, &p->n_classes);
        else if (!strcmp(key, "params")) ok = nt == 2 && as_size(tok[1], &p->param_floats);
        else if (!strcmp(key, "buffers")) ok = nt == 2 && as_size(tok[1], &p->buffer_floats);
        else if (!strcmp(key, "overhead")) {
            ok = nt == 4 && as_int(tok[1], 1, BIG, &a) && as_int(tok[2], 1, BIG, &b) && as_secs(tok[3], &x);
            if (ok) DP_TRY(dp_profile_set_overhead(p, a, b, x));
        } else if (!strcmp(key, "nodes")) ok = nt == 2 && as_int(tok[1], 1, DP_PROFILE_MAX_NODES, &p->n_nodes);
        else if (!strcmp(key, "buckets")) ok = nt == 2 && as_int(tok[1], 0, DP_PROFILE_MAX_BUCKETS, &p->n_buckets);
        else if (!strcmp(key, "node")) {
            ok = nt == 5 && as_int(tok[1], 0, p->n_nodes - 1, &i) && as_int(tok[3], 0, BIG, &a) &&
                 as_int(tok[4], 0, BIG, &b) && as_name(tok[2], p->node_names[i], sizeof p->node_names[i]);
            if (ok) p->kernels_fwd[i] = a, p->kernels_bwd[i] = b;
        } else if (!strcmp(key, "bucket")) {
            ok = nt == 4 && as_int(tok[1], 0, p->n_buckets - 1, &i) && as_size(tok[2], &z) &&
                 as_int(tok[3], 0, p->n_nodes - 1, &a);
            if (ok) p->bucket_floats[i] = z, p->bucket_node[i] = a;
        } else if (!strcmp(key, "row")) { /* the lane sum is optional: profiles without lanes */
            ok = (nt == 6 || nt == 7) && as_int(tok[1], 1, BIG, &a) && as_int(tok[2], 1, BIG, &b) &&
                 as_long(tok[3], 0, 1000000000000L, &steps) && as_secs(tok[4], &x) && as_secs(tok[5], &y) &&
                 (nt == 6 || as_secs(tok[6], &sum));
            if (ok && !(row = dp_profile_row_for(p, a, b))) return DP_ERR_FORMAT;
            if (ok) row->steps = steps, row->loss_s = x, row->opt_s = y, row->sum_s = sum;
        } else if (!strcmp(key, "time")) {
            ok = row && nt == 4 && as_int(tok[1], 0, p->n_nodes - 1, &i) && as_secs(tok[2], &x) && as_secs(tok[3], &y);
            if (ok) row->fwd_s[i] = x, row->bwd_s[i] = y;
        } else
            return BAD("%s:%d: unknown key '%s' in a compute profile", origin, line, key);
        if (!ok) return BAD("%s:%d: malformed or out-of-range '%s' line", origin, line, key);
    }
    if (!p->n_nodes || !p->n_rows || !p->param_floats)
        return BAD("%s: not a compute profile (needs nodes, params and at least one row)", origin);
    return DP_OK;
}

dp_status dp_profile_load(const char *name_or_path, const char *model, dp_profile *p) {
    char path[512];
    struct stat st;
    /* anything there is read as the file (a FIFO or directory is then refused by name, not opened) */
    if (stat(name_or_path, &st) == 0 || strchr(name_or_path, '/')) snprintf(path, sizeof path, "%s", name_or_path);
    else {
        char file[300], per_model[300];
        snprintf(file, sizeof file, "%s.profile", name_or_path);
        snprintf(per_model, sizeof per_model, "%s-%s.profile", name_or_path, model ? model : "");
        /* a device's profiles, one per model (h100-lenet.profile), or one for all */
        int found = model && dp_preset_find(per_model, path, sizeof path);
        if (!found) found = dp_preset_find(file, path, sizeof path);
        if (!found) {
            char dirs[2048];
            dp_topology_dirs(dirs, sizeof dirs);
            return dp_fail(DP_ERR_USAGE, "--compute %s: no such file, and no %s%s%s in %s (no GPU profile ships yet: "
                           "record one with --save-profile on a GPU)", name_or_path, model ? per_model : "",
                           model ? " or " : "", file, dirs);
        }
    }
    char *text = NULL;
    DP_TRY(dp_read_text_file(path, &text));
    dp_status s = dp_profile_parse(text, path, p);
    free(text);
    return s;
}
