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
