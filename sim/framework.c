/* framework.c: the .framework file and the measured-time prediction (framework.h). */
#include "sim/framework.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/settings_file.h"
#include "sim/topology.h"

#define MAX_US 3.6e9

typedef struct {
    const char *key;
    size_t off;
} fw_key;

#define F(m) offsetof(dp_framework, m)
static const fw_key keys[] = {
    {"ddp_step_us", F(ddp_step_s)}, {"ddp_bucket_us", F(ddp_bucket_s)}, {"dp_step_us", F(dp_step_s)},
    {"dp_device_us", F(dp_device_s)}, {"dp_tensor_us", F(dp_tensor_s)},
};
#undef F
#define N_KEYS (sizeof keys / sizeof *keys)

typedef struct {
    dp_framework *f;
    int have[N_KEYS], have_name;
} fw_read;

static dp_status framework_line(dp_sf_reader *r, void *ctx) {
    fw_read *fr = ctx;
    size_t i = 0;
    while (i < N_KEYS && strcmp(r->w[0], keys[i].key) != 0) i++;
    if (i < N_KEYS) {
        double us = 0;
        DP_TRY(dp_sf_real(r, 1, 0, MAX_US, &us));
        *(double *)((char *)fr->f + keys[i].off) = us * 1e-6, fr->have[i] = 1;
        return DP_OK;
    }
    if (strcmp(r->w[0], "name") == 0) {
        fr->have_name = 1;
        return dp_sf_name(r, 1, fr->f->name, sizeof fr->f->name);
    }
    return dp_fail(DP_ERR_FORMAT, "%s:%d: unknown key '%s' (expected name, ddp_step_us, ddp_bucket_us, "
                   "dp_step_us, dp_device_us, dp_tensor_us)", r->origin, r->line, r->w[0]);
}

dp_status dp_framework_parse(const char *text, const char *origin, dp_framework *f) {
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", origin);
    fw_read fr = {.f = f};
    DP_TRY(dp_sf_read_pairs(text, origin, framework_line, &fr));
    if (!fr.have_name) return dp_fail(DP_ERR_FORMAT, "%s: no 'name' line; add 'name NAME'", origin);
    for (size_t i = 0; i < N_KEYS; i++)
        if (!fr.have[i])
            return dp_fail(DP_ERR_FORMAT, "%s: no '%s' line; every per-step cost is needed (measure them with "
                           "examples/bench/framework_costs.sh)", origin, keys[i].key);
    return DP_OK;
}

dp_status dp_framework_load(const char *path_or_name, dp_framework *f) {
    /* the argument itself, never a copy cut to a buffer: a cut one names another file */
    const char *path = path_or_name;
    char preset[512];
    if (!strchr(path_or_name, '/') && !strchr(path_or_name, '.')) { /* a name: NAME.framework next to the presets */
        char file[256];
        snprintf(file, sizeof file, "%s.framework", path_or_name);
        path = preset;
        if (!dp_preset_find(file, preset, sizeof preset)) {
            char dirs[2048];
            dp_topology_dirs(dirs, sizeof dirs);
            return dp_fail(DP_ERR_USAGE, "--framework %s: no %s in %s; give a path or a shipped name (pytorch-cpu)",
                           path_or_name, file, dirs);
        }
    }
    char *text = NULL;
    dp_status s = dp_read_text_file(path, &text);
    if (s == DP_OK) s = dp_framework_parse(text, path, f);
    free(text);
    return s;
}

dp_status dp_framework_step(const dp_framework *f, const dp_framework_shape *sh, dp_predict_mode mode, int devices,
                            double share, double measured_step_s, const dp_prediction *one,
                            const dp_prediction *model, long steps_per_epoch, dp_prediction *out) {
    const double one_rest = one->step_s - one->compute_s;
    /* The floor is not one_rest alone: on one GPU that is 0 (no collective calls, no CPU trainer's
     * overhead), while the host's launches sit inside compute (a node takes at least its launches) and
     * so do the loss and the optimizer. A step shorter than that host time plus the loss and the
     * optimizer is not of this model and batch. host_s holds one_rest's calls and overhead too. */
    const double host = one->host_s > one_rest ? one->host_s : one_rest, floor_s = host + one->loss_opt_s;
    if (!(measured_step_s > one_rest && measured_step_s >= floor_s) || !(one->compute_s > 0))
        return dp_fail(DP_ERR_USAGE, "the measured step, %.6g s, is shorter than the model's own time per step on one "
                       "device outside the forward and backward, %.6g s (host %.6g s, loss and optimizer %.6g s): a "
                       "time of another model or batch? (--measured-batch is the measured run's batch)",
                       measured_step_s, floor_s, host, one->loss_opt_s);
    double added = 0;
    if (devices > 1)
        added = mode == DP_PREDICT_DDP ? f->ddp_step_s + sh->buckets * f->ddp_bucket_s
                                       : f->dp_step_s + devices * (f->dp_device_s + sh->tensors * f->dp_tensor_s);
    *out = *model;
    out->compute_s = (measured_step_s - one_rest) * share;
    out->host_s = model->host_s + added;
    out->step_s = out->compute_s + (model->step_s - model->compute_s) + added;
    out->epoch_s = out->step_s * (double)steps_per_epoch;
    return DP_OK;
}
