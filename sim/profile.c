/* profile.c: compute profiles: lookup with interpolation, and the text format. */
#include "sim/profile.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/topology.h"

dp_profile_row *dp_profile_row_for(dp_profile *p, int batch, int concurrent) {
    for (int i = 0; i < p->n_rows; i++)
        if (p->rows[i].batch == batch && p->rows[i].concurrent == concurrent) return &p->rows[i];
    if (p->n_rows == DP_PROFILE_MAX_ROWS) {
        dp_fail(DP_ERR_INTERNAL, "compute profile: more than %d (batch, concurrency) rows", DP_PROFILE_MAX_ROWS);
        return NULL;
    }
    dp_profile_row *r = &p->rows[p->n_rows++];
    memset(r, 0, sizeof *r);
    r->batch = batch, r->concurrent = concurrent;
    return r;
}

/* The two rows around `batch` among those of the concurrency nearest `concurrent` (a == b when
 * batch is outside them or only one row fits). */
static void bracket(const dp_profile *p, int batch, int concurrent, const dp_profile_row **a,
                    const dp_profile_row **b) {
    int best = -1;
    for (int i = 0; i < p->n_rows; i++) {
        int d = abs(p->rows[i].concurrent - concurrent);
        if (best < 0 || d < best) best = d;
    }
    *a = *b = NULL;
    for (int i = 0; i < p->n_rows; i++) {
        const dp_profile_row *r = &p->rows[i];
        if (abs(r->concurrent - concurrent) != best) continue;
        if (r->batch <= batch && (!*a || r->batch > (*a)->batch)) *a = r;
        if (r->batch >= batch && (!*b || r->batch < (*b)->batch)) *b = r;
    }
    if (!*a) *a = *b;
    if (!*b) *b = *a;
}

/* Linear between the rows; proportional to batch outside them (a == b). */
static double interp(const dp_profile_row *a, const dp_profile_row *b, double ta, double tb, int batch) {
    if (!a) return 0;
    if (a == b || a->batch == b->batch) return a->batch ? ta * (double)batch / a->batch : ta;
    double w = (double)(batch - a->batch) / (double)(b->batch - a->batch);
    return ta + w * (tb - ta);
}

void dp_profile_node(const dp_profile *p, int node, int batch, int concurrent, double *fwd, double *bwd) {
    const dp_profile_row *a, *b;
    bracket(p, batch, concurrent, &a, &b);
    *fwd = a ? interp(a, b, a->fwd_s[node], b->fwd_s[node], batch) : 0;
    *bwd = a ? interp(a, b, a->bwd_s[node], b->bwd_s[node], batch) : 0;
}

double dp_profile_loss(const dp_profile *p, int batch, int concurrent) {
    const dp_profile_row *a, *b;
    bracket(p, batch, concurrent, &a, &b);
    return a ? interp(a, b, a->loss_s, b->loss_s, batch) : 0;
}

double dp_profile_opt(const dp_profile *p, int concurrent) {
    const dp_profile_row *a, *b;
    bracket(p, 1 << 30, concurrent, &a, &b);
    return a ? a->opt_s : 0;
}

double dp_profile_lane_sum(const dp_profile *p, int concurrent) {
    const dp_profile_row *a, *b;
    bracket(p, 1 << 30, concurrent, &a, &b);
    return a ? a->sum_s : 0;
}

double dp_profile_overhead(const dp_profile *p, int lanes, int workers) {
    int best = -1;
    double s = 0;
    for (int i = 0; i < p->n_overheads; i++) {
        int d = abs(p->overheads[i].lanes - lanes) + abs(p->overheads[i].workers - workers);
        if (best < 0 || d < best) best = d, s = p->overheads[i].seconds;
    }
    return s;
}

int dp_profile_has_overhead(const dp_profile *p, int lanes, int workers) {
    for (int i = 0; i < p->n_overheads; i++)
        if (p->overheads[i].lanes == lanes && p->overheads[i].workers == workers) return 1;
    return 0;
}

dp_status dp_profile_set_overhead(dp_profile *p, int lanes, int workers, double seconds) {
    int i = 0;
    while (i < p->n_overheads && !(p->overheads[i].lanes == lanes && p->overheads[i].workers == workers)) i++;
    if (i == DP_PROFILE_MAX_ROWS)
        return dp_fail(DP_ERR_INTERNAL, "compute profile: more than %d step overheads", DP_PROFILE_MAX_ROWS);
    if (i == p->n_overheads) p->n_overheads++;
    p->overheads[i].lanes = lanes, p->overheads[i].workers = workers, p->overheads[i].seconds = seconds;
    return DP_OK;
}

double dp_profile_compute(const dp_profile *p, int batch, int concurrent) {
    double s = dp_profile_loss(p, batch, concurrent);
    for (int i = 0; i < p->n_nodes; i++) {
        double f, b;
        dp_profile_node(p, i, batch, concurrent, &f, &b);
        s += f + b;
    }
    return s;
}

dp_status dp_profile_save(const char *path, const dp_profile *p) {
    FILE *f = fopen(path, "w");
    if (!f) return dp_fail(DP_ERR_IO, "%s: cannot open for writing: %s", path, strerror(errno));
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
    if (fclose(f) != 0) return dp_fail(DP_ERR_IO, "%s: writing failed", path);
    return DP_OK;
}

#define BAD(...) dp_fail(DP_ERR_FORMAT, __VA_ARGS__)

dp_status dp_profile_parse(const char *text, const char *origin, dp_profile *p) {
    memset(p, 0, sizeof *p);
    dp_profile_row *row = NULL;
    int line = 0;
    for (const char *s = text; *s;) {
        const char *eol = strchr(s, '\n');
        size_t len = eol ? (size_t)(eol - s) : strlen(s);
        char buf[512], key[32], name[32];
        line++;
        if (len >= sizeof buf) return BAD("%s:%d: line too long", origin, line);
        memcpy(buf, s, len);
        buf[len] = '\0';
        s += len + (eol ? 1 : 0);
        char *hash = strchr(buf, '#');
        if (hash) *hash = '\0';
        if (sscanf(buf, "%31s", key) != 1) continue;
        int i, a, b, ok = 1;
        long steps;
        size_t z;
        double x, y;
        if (!strcmp(key, "model")) ok = sscanf(buf, "%*s %31s", p->model) == 1;
        else if (!strcmp(key, "device")) ok = sscanf(buf, "%*s %63s", p->device) == 1;
        else if (!strcmp(key, "input_floats")) ok = sscanf(buf, "%*s %zu", &p->input_floats) == 1;
        else if (!strcmp(key, "classes")) ok = sscanf(buf, "%*s %d", &p->n_classes) == 1;
        else if (!strcmp(key, "params")) ok = sscanf(buf, "%*s %zu", &p->param_floats) == 1;
        else if (!strcmp(key, "overhead")) {
            ok = sscanf(buf, "%*s %d %d %lf", &a, &b, &x) == 3 && a > 0 && b > 0 && x >= 0;
            if (ok) DP_TRY(dp_profile_set_overhead(p, a, b, x));
        }
        else if (!strcmp(key, "buffers")) ok = sscanf(buf, "%*s %zu", &p->buffer_floats) == 1;
        else if (!strcmp(key, "nodes"))
            ok = sscanf(buf, "%*s %d", &p->n_nodes) == 1 && p->n_nodes > 0 && p->n_nodes <= DP_PROFILE_MAX_NODES;
        else if (!strcmp(key, "buckets"))
            ok = sscanf(buf, "%*s %d", &p->n_buckets) == 1 && p->n_buckets >= 0 && p->n_buckets <= DP_PROFILE_MAX_BUCKETS;
        else if (!strcmp(key, "node")) {
            ok = sscanf(buf, "%*s %d %31s %d %d", &i, name, &a, &b) == 4 && i >= 0 && i < p->n_nodes;
            if (ok) snprintf(p->node_names[i], sizeof p->node_names[i], "%s", name), p->kernels_fwd[i] = a,
                    p->kernels_bwd[i] = b;
        } else if (!strcmp(key, "bucket")) {
            ok = sscanf(buf, "%*s %d %zu %d", &i, &z, &a) == 3 && i >= 0 && i < p->n_buckets && a >= 0 && a < p->n_nodes;
            if (ok) p->bucket_floats[i] = z, p->bucket_node[i] = a;
        } else if (!strcmp(key, "row")) {
            double sum = 0; /* optional: profiles without lanes */
            ok = sscanf(buf, "%*s %d %d %ld %lf %lf %lf", &a, &b, &steps, &x, &y, &sum) >= 5 && a > 0 && b > 0;
            if (ok && !(row = dp_profile_row_for(p, a, b))) return DP_ERR_FORMAT;
            if (ok) row->steps = steps, row->loss_s = x, row->opt_s = y, row->sum_s = sum;
        } else if (!strcmp(key, "time")) {
            ok = row && sscanf(buf, "%*s %d %lf %lf", &i, &x, &y) == 3 && i >= 0 && i < p->n_nodes && x >= 0 && y >= 0;
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
    FILE *probe = fopen(name_or_path, "r");
    if (probe) fclose(probe), snprintf(path, sizeof path, "%s", name_or_path);
    else {
        char file[300], per_model[300];
        snprintf(file, sizeof file, "%s.profile", name_or_path);
        snprintf(per_model, sizeof per_model, "%s-%s.profile", name_or_path, model ? model : "");
        /* a device's profiles, one per model (h100-lenet.profile), or one for all */
        const int named = !strchr(name_or_path, '/');
        int found = named && model && dp_preset_find(per_model, path, sizeof path);
        if (!found) found = named && dp_preset_find(file, path, sizeof path);
        if (!found) {
            char dirs[2048];
            dp_topology_dirs(dirs, sizeof dirs);
            return dp_fail(DP_ERR_USAGE, "--compute %s: no such file, and no %s%s%s in %s (no GPU profile ships yet: "
                           "record one with --save-profile on a GPU)", name_or_path, model && named ? per_model : "",
                           model && named ? " or " : "", file, dirs);
        }
    }
    char *text = NULL;
    DP_TRY(dp_read_text_file(path, &text));
    dp_status s = dp_profile_parse(text, path, p);
    free(text);
    return s;
}
