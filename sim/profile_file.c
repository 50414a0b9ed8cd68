/* profile_file.c: the compute profile's text format: writing it atomically, reading it strictly
 * (every number in its range, so a crafted file cannot overflow an int or index past a table; every
 * setting and index once; the lines agreeing with each other) with the one settings-file reader. */
#include "sim/profile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/atomic.h"
#include "sim/settings_file.h"
#include "sim/topology.h"

static dp_status write_profile(FILE *f, void *ctx) {
    const dp_profile *p = ctx;
    fprintf(f, "# dptrain compute profile: seconds of one worker per node and step (docs/overhead-model.md)\n");
    fprintf(f, "model %s\ndevice %s\ninput %dx%dx%d\ninput_floats %zu\nclasses %d\nparams %zu\nbuffers %zu\nnodes %d\n", p->model,
            p->device[0] ? p->device : "unknown", p->input_chw[0], p->input_chw[1], p->input_chw[2], p->input_floats, p->n_classes, p->param_floats, p->buffer_floats, p->n_nodes);
    fprintf(f, "precision %s\ntf32 %d\n", p->bf16 ? "bf16" : "fp32", p->tf32);
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


#define BIG 1000000            /* batches, concurrency, lanes, threads, kernels, classes, C, H, W */
#define MAX_FLOATS 1000000000000LL /* 4 TB of floats */
#define MAX_SECS 3600.0        /* a node, the loss or the step of at most an hour */

/* "CxHxW", each in 1..BIG. */
static int parse_chw(const char *s, int chw[3]) {
    for (int k = 0; k < 3; k++) {
        long v = 0;
        int digits = 0;
        for (; *s >= '0' && *s <= '9' && digits < 8; s++, digits++) v = 10 * v + (*s - '0');
        if (!digits || v < 1 || v > BIG || *s != (k < 2 ? 'x' : '\0')) return 0;
        chw[k] = (int)v;
        s++;
    }
    return 1;
}

/* What each line of the body has been given (every index exactly once: checked at the end). */
typedef struct {
    int have_input, have_floats, have_classes, have_params, have_buffers, have_nodes, have_buckets;
    int node_lines, bucket_lines, time_lines[DP_PROFILE_MAX_ROWS];
} seen_t;

/* One line (its identity not given before); row is the current row. */
static dp_status profile_line(dp_sf_reader *r, dp_profile *p, dp_profile_row **row, seen_t *h) {
    const char *key = r->w[0];
    char id[64];
    long long z;
    int i, a, b;
    double x, y, sum = 0;
    if (!strcmp(key, "model")) {
        DP_TRY(dp_sf_words(r, 2, 2, "model NAME"));
        DP_TRY(dp_sf_once(r, key));
        return dp_sf_name(r, 1, p->model, sizeof p->model);
    }
    if (!strcmp(key, "device")) {
        DP_TRY(dp_sf_words(r, 2, 2, "device NAME"));
        DP_TRY(dp_sf_once(r, key));
        return dp_sf_name(r, 1, p->device, sizeof p->device);
    }
    /* optional: a profile without them (an older dptrain's, the presets) is of fp32, tf32 off */
    if (!strcmp(key, "precision")) {
        DP_TRY(dp_sf_words(r, 2, 2, "precision fp32|bf16"));
        DP_TRY(dp_sf_once(r, key));
        if (strcmp(r->w[1], "fp32") != 0 && strcmp(r->w[1], "bf16") != 0)
            return dp_fail(DP_ERR_FORMAT, "%s:%d: precision: expected fp32 or bf16, got '%s'", r->origin, r->line,
                           r->w[1]);
        return p->bf16 = strcmp(r->w[1], "bf16") == 0, DP_OK;
    }
    if (!strcmp(key, "tf32")) {
        DP_TRY(dp_sf_words(r, 2, 2, "tf32 0|1"));
        DP_TRY(dp_sf_once(r, key));
        return dp_sf_int(r, 1, 0, 1, &p->tf32);
    }
    if (!strcmp(key, "input")) {
        DP_TRY(dp_sf_words(r, 2, 2, "input CxHxW"));
        DP_TRY(dp_sf_once(r, key));
        if (!parse_chw(r->w[1], p->input_chw))
            return dp_fail(DP_ERR_FORMAT, "%s:%d: input: expected CxHxW (each 1..%d), got '%s'", r->origin, r->line, BIG,
                           r->w[1]);
        return h->have_input = 1, DP_OK;
    }
    size_t *floats = !strcmp(key, "input_floats") ? &p->input_floats
                     : !strcmp(key, "params")     ? &p->param_floats
                     : !strcmp(key, "buffers")    ? &p->buffer_floats
                                                  : NULL;
    if (floats) {
        DP_TRY(dp_sf_words(r, 2, 2, "KEY FLOATS"));
        DP_TRY(dp_sf_once(r, key));
        DP_TRY(dp_sf_whole(r, 1, floats == &p->buffer_floats ? 0 : 1, MAX_FLOATS, &z));
        *floats = (size_t)z;
        int *have = floats == &p->input_floats ? &h->have_floats : floats == &p->param_floats ? &h->have_params
                                                                                              : &h->have_buffers;
        return *have = 1, DP_OK;
    }
    if (!strcmp(key, "classes")) {
        DP_TRY(dp_sf_words(r, 2, 2, "classes K"));
        DP_TRY(dp_sf_once(r, key));
        return h->have_classes = 1, dp_sf_int(r, 1, 1, BIG, &p->n_classes);
    }
    if (!strcmp(key, "nodes") || !strcmp(key, "buckets")) {
        const int is_nodes = key[0] == 'n';
        DP_TRY(dp_sf_words(r, 2, 2, is_nodes ? "nodes N" : "buckets N"));
        DP_TRY(dp_sf_once(r, key));
        if (is_nodes) return h->have_nodes = 1, dp_sf_int(r, 1, 1, DP_PROFILE_MAX_NODES, &p->n_nodes);
        return h->have_buckets = 1, dp_sf_int(r, 1, 1, DP_PROFILE_MAX_BUCKETS, &p->n_buckets);
    }
    if (!strcmp(key, "overhead")) {
        DP_TRY(dp_sf_words(r, 4, 4, "overhead LANES THREADS SECONDS"));
        DP_TRY(dp_sf_int(r, 1, 1, BIG, &a));
        DP_TRY(dp_sf_int(r, 2, 1, BIG, &b));
        DP_TRY(dp_sf_real(r, 3, 0, MAX_SECS, &x));
        snprintf(id, sizeof id, "overhead %d %d", a, b);
        DP_TRY(dp_sf_once(r, id));
        return dp_profile_set_overhead(p, a, b, x);
    }
    /* the lines of an index need its count first: the index is checked against it */
    if (!strcmp(key, "node")) {
        DP_TRY(dp_sf_words(r, 5, 5, "node INDEX NAME KERNELS_FWD KERNELS_BWD"));
        if (!h->have_nodes) return dp_fail(DP_ERR_FORMAT, "%s:%d: a node line before 'nodes N'", r->origin, r->line);
        DP_TRY(dp_sf_int(r, 1, 0, p->n_nodes - 1, &i));
        snprintf(id, sizeof id, "node %d", i);
        DP_TRY(dp_sf_once(r, id));
        DP_TRY(dp_sf_int(r, 3, 0, BIG, &p->kernels_fwd[i]));
        DP_TRY(dp_sf_int(r, 4, 0, BIG, &p->kernels_bwd[i]));
        return h->node_lines++, dp_sf_name(r, 2, p->node_names[i], sizeof p->node_names[i]);
    }
    if (!strcmp(key, "bucket")) {
        DP_TRY(dp_sf_words(r, 4, 4, "bucket INDEX FLOATS READY_AFTER_NODE"));
        if (!h->have_buckets || !h->have_nodes)
            return dp_fail(DP_ERR_FORMAT, "%s:%d: a bucket line before 'nodes N' and 'buckets N'", r->origin, r->line);
        DP_TRY(dp_sf_int(r, 1, 0, p->n_buckets - 1, &i));
        snprintf(id, sizeof id, "bucket %d", i);
        DP_TRY(dp_sf_once(r, id));
        DP_TRY(dp_sf_whole(r, 2, 1, MAX_FLOATS, &z));
        p->bucket_floats[i] = (size_t)z;
        return h->bucket_lines++, dp_sf_int(r, 3, 0, p->n_nodes - 1, &p->bucket_node[i]);
    }
    if (!strcmp(key, "row")) { /* the lane sum is optional: profiles without lanes */
        DP_TRY(dp_sf_words(r, 6, 7, "row BATCH CONCURRENT STEPS LOSS_S OPT_S [LANE_SUM_S]"));
        DP_TRY(dp_sf_int(r, 1, 1, BIG, &a));
        DP_TRY(dp_sf_int(r, 2, 1, BIG, &b));
        snprintf(id, sizeof id, "row %d %d", a, b);
        DP_TRY(dp_sf_once(r, id));
        DP_TRY(dp_sf_whole(r, 3, 0, MAX_FLOATS, &z));
        DP_TRY(dp_sf_real(r, 4, 0, MAX_SECS, &x));
        DP_TRY(dp_sf_real(r, 5, 0, MAX_SECS, &y));
        if (r->n == 7) DP_TRY(dp_sf_real(r, 6, 0, MAX_SECS, &sum));
        if (!(*row = dp_profile_row_for(p, a, b)))
            return dp_fail(DP_ERR_FORMAT, "%s:%d: more than %d rows", r->origin, r->line, DP_PROFILE_MAX_ROWS);
        (*row)->steps = (long)z, (*row)->loss_s = x, (*row)->opt_s = y, (*row)->sum_s = sum;
        return DP_OK;
    }
    if (!strcmp(key, "time")) {
        DP_TRY(dp_sf_words(r, 4, 4, "time NODE FWD_S BWD_S"));
        if (!*row || !h->have_nodes)
            return dp_fail(DP_ERR_FORMAT, "%s:%d: a time line before 'nodes N' and its 'row'", r->origin, r->line);
        DP_TRY(dp_sf_int(r, 1, 0, p->n_nodes - 1, &i));
        snprintf(id, sizeof id, "time %d of row %d %d", i, (*row)->batch, (*row)->concurrent);
        DP_TRY(dp_sf_once(r, id));
        DP_TRY(dp_sf_real(r, 2, 0, MAX_SECS, &(*row)->fwd_s[i]));
        DP_TRY(dp_sf_real(r, 3, 0, MAX_SECS, &(*row)->bwd_s[i]));
        return h->time_lines[*row - p->rows]++, DP_OK;
    }
    return dp_fail(DP_ERR_FORMAT, "%s:%d: unknown key '%s' in a compute profile", r->origin, r->line, key);
}

/* What the lines say together: everything a prediction reads is there, once, and agrees. */
static dp_status profile_whole(const char *origin, const dp_profile *p, const seen_t *h) {
    static const char *const need[] = {"model", "input_floats", "classes", "params", "buffers", "nodes", "buckets"};
    const int have[] = {p->model[0] != 0, h->have_floats, h->have_classes, h->have_params, h->have_buffers,
                        h->have_nodes, h->have_buckets};
    for (int k = 0; k < 7; k++)
        if (!have[k])
            return dp_fail(DP_ERR_FORMAT, "%s: not a compute profile: no '%s' line (record one with --save-profile)",
                           origin, need[k]);
    if (!h->have_input)
        return dp_fail(DP_ERR_FORMAT, "%s: no 'input CxHxW' line (the sample shape it was measured at): a profile from "
                       "an older dptrain; add the line with the shape it was recorded on, or record it again with "
                       "--save-profile", origin);
    const long long chw = (long long)p->input_chw[0] * p->input_chw[1] * p->input_chw[2];
    if ((size_t)chw != p->input_floats)
        return dp_fail(DP_ERR_FORMAT, "%s: input %dx%dx%d is %lld floats, but input_floats says %zu", origin,
                       p->input_chw[0], p->input_chw[1], p->input_chw[2], chw, p->input_floats);
    if (h->node_lines != p->n_nodes || h->bucket_lines != p->n_buckets)
        return dp_fail(DP_ERR_FORMAT, "%s: %d of %d node lines and %d of %d bucket lines (one for each index)", origin,
                       h->node_lines, p->n_nodes, h->bucket_lines, p->n_buckets);
    if (!p->n_rows) return dp_fail(DP_ERR_FORMAT, "%s: no 'row' line (a profile holds at least one)", origin);
    for (int k = 0; k < p->n_rows; k++)
        if (h->time_lines[k] != p->n_nodes)
            return dp_fail(DP_ERR_FORMAT, "%s: row %d %d has %d time lines, for %d nodes (one for each)", origin,
                           p->rows[k].batch, p->rows[k].concurrent, h->time_lines[k], p->n_nodes);
    size_t in_buckets = 0;
    for (int k = 0; k < p->n_buckets; k++) in_buckets += p->bucket_floats[k];
    if (in_buckets != p->param_floats)
        return dp_fail(DP_ERR_FORMAT, "%s: params %zu, but the buckets hold %zu floats (every parameter is in one "
                       "bucket)", origin, p->param_floats, in_buckets);
    return DP_OK;
}

dp_status dp_profile_parse(const char *text, const char *origin, dp_profile *p) {
    memset(p, 0, sizeof *p);
    dp_profile_row *row = NULL;
    seen_t h = {0};
    dp_sf_reader r;
    dp_sf_init(&r, text, origin);
    dp_status s;
    while ((s = dp_sf_next(&r)) == DP_OK && (s = profile_line(&r, p, &row, &h)) == DP_OK) {}
    dp_sf_free(&r);
    if (s != DP_DONE) return s;
    return profile_whole(origin, p, &h);
}

dp_status dp_profile_load(const char *name_or_path, const char *model, dp_profile *p) {
    /* the argument itself, never a copy cut to a buffer: a cut one names another file */
    const char *path = name_or_path;
    char preset[512];
    struct stat st;
    /* anything there is read as the file (a FIFO or directory is then refused by name, not opened) */
    if (stat(name_or_path, &st) != 0 && !strchr(name_or_path, '/')) {
        char file[300], per_model[300];
        snprintf(file, sizeof file, "%s.profile", name_or_path);
        snprintf(per_model, sizeof per_model, "%s-%s.profile", name_or_path, model ? model : "");
        /* a device's profiles, one per model (h100-lenet.profile), or one for all */
        path = preset;
        int found = model && dp_preset_find(per_model, preset, sizeof preset);
        if (!found) found = dp_preset_find(file, preset, sizeof preset);
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
    if (s == DP_OK) snprintf(p->path, sizeof p->path, "%s", path);
    return s;
}
