/* synthetic.c: seeded uniform random images and labels of any small shape, for benchmarks and
 * tests that must not depend on files. The same (shape, classes, samples, seed) gives the same bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/sysmem.h"
#include "data/dataset.h"

#define SYNTH_STREAM 0x5E7A1C00ull
#define SYNTH_MAX_BYTES (8ull << 30)

dp_status dp_synthetic_make(int c, int h, int w, int n_classes, int samples, uint64_t seed, dp_dataset *out) {
    memset(out, 0, sizeof *out);
    if (c < 1 || c > 3 || h < 1 || h > 4096 || w < 1 || w > 4096)
        return dp_fail(DP_ERR_USAGE, "--shape %dx%dx%d: synthetic data needs C in 1..3 and H, W in 1..4096", c, h, w);
    if (n_classes < 2 || n_classes > 256)
        return dp_fail(DP_ERR_USAGE, "--classes %d: synthetic data needs 2..256 classes (labels are bytes)", n_classes);
    if (samples < 1) return dp_fail(DP_ERR_USAGE, "--samples %d: synthetic data needs at least 1 sample", samples);
    const unsigned long long chw = (unsigned long long)c * h * w, bytes = chw * (unsigned long long)samples;
    if (bytes > SYNTH_MAX_BYTES)
        return dp_fail(DP_ERR_USAGE, "--samples %d of %dx%dx%d: %llu bytes of synthetic images, more than the 8 GiB limit",
                       samples, c, h, w, bytes);
    char what[96];
    snprintf(what, sizeof what, "--samples %d of %dx%dx%d (synthetic images)", samples, c, h, w);
    DP_TRY(dp_memory_check(bytes + (unsigned long long)samples, what));
    DP_ALLOC(out->pixels, bytes, "synthetic images");
    out->labels = calloc((size_t)samples, 1);
    if (!out->labels) {
        free(out->pixels);
        out->pixels = NULL;
        return dp_fail(DP_ERR_NOMEM, "out of memory allocating %d bytes for synthetic labels", samples);
    }
    dp_rng r;
    dp_rng_seed(&r, seed, SYNTH_STREAM);
    /* Eight pixels per draw, little-endian byte order fixed so the bytes do not depend on the host. */
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t v = dp_rng_u64(&r);
        for (int k = 0; k < 8; k++) out->pixels[i + k] = (uint8_t)(v >> (8 * k));
    }
    if (i < bytes) {
        uint64_t v = dp_rng_u64(&r);
        for (int k = 0; i < bytes; i++, k++) out->pixels[i] = (uint8_t)(v >> (8 * k));
    }
    for (int s = 0; s < samples; s++) out->labels[s] = (uint8_t)dp_rng_below(&r, (uint32_t)n_classes);
    snprintf(out->name, sizeof out->name, "synthetic");
    out->n = samples, out->c = c, out->h = h, out->w = w, out->n_classes = n_classes;
    /* Uniform bytes: pixel/255 has mean 1/2 and std 1/sqrt(12). */
    for (int ch = 0; ch < 3; ch++) out->mean[ch] = 0.5f, out->std[ch] = 0.2887f;
    return DP_OK;
}
