/* fuzz_framework.c: any bytes as a .framework file (--framework FILE), parsed, then used for a
 * prediction from a measured step. Must never crash or hit undefined behaviour; refusing is fine.
 * An accepted file has a name and every per-step cost, each finite and in [0, 3600 s], and a
 * key given twice is refused; its step from a valid measured time is finite and non-negative.
 * Seeds: the shipped frameworks in sim/presets, a key twice, a missing key. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dp_config.h"
#include "fuzz.h"
#include "seed_files.h"
#include "sim/framework.h"

static void check_accepted(const dp_framework *f) {
    const double c[] = {f->ddp_step_s, f->ddp_bucket_s, f->dp_step_s, f->dp_device_s, f->dp_tensor_s};
    for (size_t i = 0; i < sizeof c / sizeof *c; i++)
        if (!(c[i] >= 0 && c[i] <= 3600)) abort();
    if (!f->name[0] || !memchr(f->name, '\0', sizeof f->name)) abort();
    const dp_framework_shape sh = {.tensors = 10, .buckets = 3};
    const dp_prediction one = {.step_s = 2e-3, .compute_s = 1.5e-3, .host_s = 5e-4};
    const dp_prediction model = {.step_s = 3e-3, .compute_s = 1e-3, .host_s = 1e-3};
    for (int mode = 0; mode < 2; mode++) {
        dp_prediction out;
        if (dp_framework_step(f, &sh, mode ? DP_PREDICT_DP : DP_PREDICT_DDP, 8, 0.5, 0.01, &one, &model, 100, &out) !=
                DP_OK ||
            !(isfinite(out.step_s) && out.step_s >= 0 && isfinite(out.epoch_s)))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) abort();
    memcpy(text, data, size);
    text[size] = '\0';
    size = strlen(text); /* what the parser sees: the text up to a NUL */
    dp_framework f;
    if (dp_framework_parse(text, "fuzz", &f) == DP_OK) {
        check_accepted(&f);
        /* the file with its first key line again is refused: each key once */
        const char *line = text;
        while (*line == '\n' || *line == '#') line = strchr(line, '\n') ? strchr(line, '\n') + 1 : line + strlen(line);
        const char *nl = strchr(line, '\n');
        const size_t first = nl ? (size_t)(nl - line) + 1 : strlen(line);
        char *twice = malloc(size + first + 2);
        if (!twice) abort();
        memcpy(twice, text, size);
        size_t n = size;
        if (n && twice[n - 1] != '\n') twice[n++] = '\n';
        memcpy(twice + n, line, first);
        twice[n + first] = '\0';
        dp_framework g;
        int has_key = 0; /* that line sets something (not blank) */
        for (const char *c = line; c < line + first && *c != '#'; c++) has_key |= *c != ' ' && *c != '\t' && *c != '\r' && *c != '\n';
        if (has_key && dp_framework_parse(twice, "fuzz", &g) == DP_OK) abort();
        free(twice);
    }
    free(text);
    return 0;
}

void dp_fuzz_seeds(void (*add)(const uint8_t *data, size_t size)) {
    dp_fuzz_seed_file(add, DP_SOURCE_PRESETS, "pytorch-cpu.framework");
    static const char *const seeds[] = {
        ("name pytorch-2.3-h100\nddp_step_us 120\nddp_bucket_us 35.5\ndp_step_us 900\ndp_device_us 250\n"
         "dp_tensor_us 4.2  # replicate\n"),
        "name a\nddp_step_us 1\nddp_step_us 2\nddp_bucket_us 1\ndp_step_us 1\ndp_device_us 1\ndp_tensor_us 1\n",
        "name a\nddp_step_us 1\nddp_bucket_us 1\ndp_step_us 1\ndp_device_us 1\n", /* no dp_tensor_us */
    };
    for (size_t i = 0; i < sizeof seeds / sizeof *seeds; i++) add((const uint8_t *)seeds[i], strlen(seeds[i]));
}
