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

dp_status dp_framework_parse(const char *text, const char *origin, dp_framework *f) {
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", origin);
    int have[N_KEYS] = {0}, have_name = 0;
    dp_sf_reader r;
    dp_sf_init(&r, text, origin);
    dp_status s;
    while ((s = dp_sf_next(&r)) == DP_OK) {
        if (r.n != 2) {
            s = dp_fail(DP_ERR_FORMAT, "%s:%d: expected 'key value  # source'", origin, r.line);
            break;
        }
        size_t i = 0;
        while (i < N_KEYS && strcmp(r.w[0], keys[i].key) != 0) i++;
        double us = 0;
        if (i < N_KEYS) {
            s = dp_sf_real(&r, 1, 0, MAX_US, &us);
            if (s == DP_OK) *(double *)((char *)f + keys[i].off) = us * 1e-6, have[i] = 1;
        } else if (strcmp(r.w[0], "name") == 0) {
            s = dp_sf_name(&r, 1, f->name, sizeof f->name), have_name = 1;
        } else {
            s = dp_fail(DP_ERR_FORMAT, "%s:%d: unknown key '%s' (expected name, ddp_step_us, ddp_bucket_us, "
                        "dp_step_us, dp_device_us, dp_tensor_us)", origin, r.line, r.w[0]);
        }
        if (s == DP_OK) s = dp_sf_once(&r, r.w[0]);
        if (s != DP_OK) break;
    }
    dp_sf_free(&r);
    if (s != DP_DONE) return s;
    if (!have_name) return dp_fail(DP_ERR_FORMAT, "%s: no 'name' line; add 'name NAME'", origin);
    for (size_t i = 0; i < N_KEYS; i++)
        if (!have[i])
            return dp_fail(DP_ERR_FORMAT, "%s: no '%s' line; every per-step cost is needed (measure them with "
                           "examples/bench/framework_costs.sh)", origin, keys[i].key);
    return DP_OK;
}

dp_status dp_framework_load(const char *path_or_name, dp_framework *f) {
    char path[512];
    snprintf(path, sizeof path, "%s", path_or_name);
    if (!strchr(path_or_name, '/') && !strchr(path_or_name, '.')) { /* a name: NAME.framework next to the presets */
        char file[256];
        snprintf(file, sizeof file, "%s.framework", path_or_name);
        if (!dp_preset_find(file, path, sizeof path)) {
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
    if (!(measured_step_s > one_rest) || !(one->compute_s > 0))
        return dp_fail(DP_ERR_USAGE, "the measured step, %.6g s, is not above what the model puts outside compute on "
                       "one device (%.6g s): a time of another model or batch? (--measured-batch is the measured run's "
                       "batch)", measured_step_s, one_rest);
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
