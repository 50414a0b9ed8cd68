/* profile.c: compute profiles: lookup with interpolation (the text format: profile_file.c). */
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

/* A mismatch: the file, the field, both values, and how to get a profile of this run. */
#define MISMATCH(flag, p, field, fmt, a, b)                                                                     \
    dp_fail(DP_ERR_USAGE, "%s %s: %s " fmt ", but this run's is " fmt "; the times are of another computation: " \
            "record a profile of this run on the device it stands for (the same command with --save-profile "     \
            "FILE in place of %s)", flag, p->path[0] ? p->path : "(profile)", field, a, b, flag)

dp_status dp_profile_match(const char *flag, dp_profile *p, const dp_profile *run) {
    if (strcmp(p->model, run->model) != 0) return MISMATCH(flag, p, "model", "%s", p->model, run->model);
    char a[64], b[64];
    snprintf(a, sizeof a, "%dx%dx%d", p->input_chw[0], p->input_chw[1], p->input_chw[2]);
    snprintf(b, sizeof b, "%dx%dx%d", run->input_chw[0], run->input_chw[1], run->input_chw[2]);
    if (strcmp(a, b) != 0) return MISMATCH(flag, p, "input", "%s", a, b);
    /* bf16 and tf32 change every convolution's and linear layer's kernels */
    if (p->bf16 != run->bf16)
        return MISMATCH(flag, p, "precision", "%s", p->bf16 ? "bf16" : "fp32", run->bf16 ? "bf16" : "fp32");
    if (p->tf32 != run->tf32) return MISMATCH(flag, p, "tf32", "%d", p->tf32, run->tf32);
    if (p->n_classes != run->n_classes) return MISMATCH(flag, p, "classes", "%d", p->n_classes, run->n_classes);
    if (p->param_floats != run->param_floats) return MISMATCH(flag, p, "params", "%zu", p->param_floats, run->param_floats);
    if (p->buffer_floats != run->buffer_floats)
        return MISMATCH(flag, p, "buffers", "%zu", p->buffer_floats, run->buffer_floats);
    if (p->n_nodes != run->n_nodes) return MISMATCH(flag, p, "nodes", "%d", p->n_nodes, run->n_nodes);
    for (int i = 0; i < p->n_nodes; i++) {
        snprintf(a, sizeof a, "%s %d %d", p->node_names[i], p->kernels_fwd[i], p->kernels_bwd[i]);
        snprintf(b, sizeof b, "%s %d %d", run->node_names[i], run->kernels_fwd[i], run->kernels_bwd[i]);
        if (strcmp(a, b) != 0) {
            char field[32];
            snprintf(field, sizeof field, "node %d", i);
            return MISMATCH(flag, p, field, "'%s'", a, b);
        }
    }
    p->n_buckets = run->n_buckets;
    memcpy(p->bucket_floats, run->bucket_floats, sizeof p->bucket_floats);
    memcpy(p->bucket_node, run->bucket_node, sizeof p->bucket_node);
    return DP_OK;
}
