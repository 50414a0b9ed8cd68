/* fuzz_profile.c: any bytes as a compute profile (--compute FILE): parsed, then matched against a
 * run of LeNet on 1x28x28 and priced. Must never crash or hit undefined behaviour; refusing is
 * fine. A profile that is accepted keeps the file rules (each setting and index once, a time for
 * every node of every row, the buckets holding the parameters, input_floats = C x H x W) and
 * prices to finite, non-negative seconds. Seeds: the profiles in sim/presets. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dp_config.h"
#include "sim/profile_run.h"
#include "fuzz.h"
#include "seed_files.h"
#include "sim/model.h"

static dp_profile *run;

static void setup(void) {
    if (run) return;
    dp_model m;
    run = calloc(1, sizeof *run);
    if (!run || dp_model_build("lenet", (dp_shape){1, 28, 28}, 10, &m) != DP_OK ||
        dp_profile_describe(&m, NULL, run) != DP_OK)
        abort();
    dp_model_free(&m);
}

static void check_accepted(const dp_profile *p) {
    if (p->n_nodes < 1 || p->n_nodes > DP_PROFILE_MAX_NODES || p->n_buckets < 1 ||
        p->n_buckets > DP_PROFILE_MAX_BUCKETS || p->n_rows < 1 || p->n_rows > DP_PROFILE_MAX_ROWS)
        abort();
    size_t sum = 0;
    for (int k = 0; k < p->n_buckets; k++) {
        if (p->bucket_node[k] < 0 || p->bucket_node[k] >= p->n_nodes) abort();
        sum += p->bucket_floats[k];
    }
    if (sum != p->param_floats) abort();
    if ((size_t)p->input_chw[0] * (size_t)p->input_chw[1] * (size_t)p->input_chw[2] != p->input_floats) abort();
    for (int i = 0; i < p->n_rows; i++)
        for (int j = 0; j < i; j++)
            if (p->rows[i].batch == p->rows[j].batch && p->rows[i].concurrent == p->rows[j].concurrent) abort();
    for (int batch = 1; batch <= 4096; batch *= 8) {
        double s = dp_profile_compute(p, batch, 1) + dp_profile_opt(p, 1) + dp_profile_overhead(p, 2, 2);
        if (!isfinite(s) || s < 0) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    static dp_profile *p;
    if (!p) p = malloc(sizeof *p);
    char *text = malloc(size + 1);
    if (!text || !p) abort();
    memcpy(text, data, size);
    text[size] = '\0';
    if (dp_profile_parse(text, "fuzz", p) == DP_OK) {
        check_accepted(p);
        if (dp_profile_match("--compute", p, run) == DP_OK) {
            dp_topology t = {.devices = 8, .bus_bw = 1e10, .host_bw = 1e10, .latency_s = 1e-6, .p2p = 1};
            for (int mode = 0; mode < 2; mode++) {
                dp_predict_query q = {.mode = mode ? DP_PREDICT_DP : DP_PREDICT_DDP, .devices = 4, .global_batch = 64,
                                      .steps_per_epoch = 10, .lanes = 1, .workers = 1};
                dp_prediction out;
                if (dp_predict(p, &t, &q, &out) == DP_OK && !(isfinite(out.step_s) && out.step_s >= 0)) abort();
            }
        }
    }
    free(text);
    return 0;
}

void dp_fuzz_seeds(void (*add)(const uint8_t *data, size_t size)) {
    static const char *const presets[] = {"h100-lenet.profile",     "h100-lenet-bn.profile",  "h100-resnet18.profile",
                                          "rtx3090-lenet.profile",  "rtx4090-lenet-bn.profile", "rtx4090-resnet18.profile",
                                          "t4-lenet.profile"};
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) dp_fuzz_seed_file(add, DP_SOURCE_PRESETS, presets[i]);
    /* small ones, so that mutations reach every line: a whole profile, and one with a line twice */
    static const char *const seeds[] = {
        "model lenet\ndevice cpu\ninput 1x28x28\ninput_floats 784\nclasses 10\nparams 61706\nbuffers 0\nnodes 2\n"
        "overhead 4 2 1.5e-04\nnode 0 conv1 1 2\nnode 1 fc1 1 2\nbuckets 1\nbucket 0 61706 0\n"
        "row 64 1 30 1.0e-05 2.0e-05 3.0e-06\ntime 0 1.0e-04 2.0e-04\ntime 1 3.0e-05 4.0e-05\n"
        "row 8 2 30 1.0e-05 2.0e-05\ntime 0 1.0e-04 2.0e-04\ntime 1 3.0e-05 4.0e-05\n",
        "model lenet\ninput 1x28x28\ninput_floats 784\nclasses 10\nparams 5\nbuffers 0\nnodes 1\nnode 0 fc 1 2\n"
        "buckets 1\nbucket 0 5 0\nrow 8 1 5 0.001 0.002\ntime 0 0.001 0.001\ntime 0 0.001 0.001\n",
    };
    for (size_t i = 0; i < sizeof seeds / sizeof *seeds; i++) add((const uint8_t *)seeds[i], strlen(seeds[i]));
}
