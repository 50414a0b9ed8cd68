/* fuzz_conv_algos.c: any bytes as a convolution algorithm record (DPTRAIN_CONV_ALGOS, a checkpoint's
 * dptrain.conv_algos; kernels/conv_algos.h), and the same bytes as raw shapes for the output-size
 * arithmetic (kernels/shapes.c). Must never crash or hit undefined behaviour; refusing is fine,
 * naming the entry. A record that is accepted holds at most DP_CONV_ALGOS_MAX entries, each field in
 * its range with a shape that has an output; written back it fits DP_CONV_ALGOS_RECORD_MAX (what a
 * checkpoint holds) and parses to the same entries; pinned, with other shapes noted beside it, the
 * process's record still fits and parses. Seeds: records of LeNet and ResNet-18, fields at their
 * bounds, a full record of the longest entries. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "kernels/conv_algos.h"
#include "kernels/shapes.h"

static char out[DP_CONV_ALGOS_RECORD_MAX];
static dp_conv_algo a[DP_CONV_ALGOS_MAX], back[DP_CONV_ALGOS_MAX];

static void check_entry(const dp_conv_algo *e) {
    const dp_conv2d_dims *d = &e->d;
    const int sizes[6] = {d->in_c, d->in_h, d->in_w, d->out_c, d->k, d->stride};
    for (int i = 0; i < 6; i++)
        if (sizes[i] < 1 || sizes[i] > DP_CONV_ALGOS_MAX_SIZE) abort();
    if (d->pad < 0 || d->pad > DP_CONV_ALGOS_MAX_SIZE || e->batch < 1 || e->batch > DP_CONV_ALGOS_MAX_BATCH ||
        (e->tf32 != 0 && e->tf32 != 1))
        abort();
    const int algos[3] = {e->fwd, e->data, e->filter};
    for (int i = 0; i < 3; i++)
        if (algos[i] < -1 || algos[i] > DP_CONV_ALGOS_MAX_ALGO) abort();
    dp_conv2d_dims again = *d;
    if (dp_conv2d_dims_init(&again) != 0 || memcmp(&again, d, sizeof again) != 0 || d->out_h < 1 || d->out_w < 1)
        abort();
}

/* The shape arithmetic on any ints (UBSan watches it): a valid shape has an output of at least 1x1. */
static void shapes(const uint8_t *data, size_t size) {
    int v[7] = {0};
    memcpy(v, data, size < sizeof v ? size : sizeof v);
    dp_conv2d_dims d = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], 0, 0};
    if (dp_conv2d_dims_init(&d) == 0 && (d.out_h < 1 || d.out_w < 1)) abort();
    if (dp_pool_out_size(v[1], v[4], v[5], v[6]) < 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    shapes(data, size);
    char *text = malloc(size + 1), why[160] = "";
    if (!text) abort();
    memcpy(text, data, size);
    text[size] = '\0';
    const int n = dp_conv_algos_parse(text, a, DP_CONV_ALGOS_MAX, why, sizeof why);
    if (n < 0) {
        if (strncmp(why, "entry ", 6) != 0) abort(); /* refused, naming the entry */
        if (dp_conv_algos_pin(text, why, sizeof why) != -1) abort();
        free(text);
        return 0;
    }
    if (n > DP_CONV_ALGOS_MAX || (n == 0) != (size == 0 || !*text)) abort();
    for (int i = 0; i < n; i++) check_entry(&a[i]);
    /* written back: within what a checkpoint holds, and the same entries again */
    const size_t len = dp_conv_algos_format(a, n, out, sizeof out);
    if (len >= sizeof out || strlen(out) != len) abort();
    if (dp_conv_algos_parse(out, back, DP_CONV_ALGOS_MAX, why, sizeof why) != n ||
        memcmp(a, back, (size_t)n * sizeof *a) != 0)
        abort();
    /* the process's record: pinned, then every entry noted again with another batch (other shapes) */
    dp_conv_algos_reset();
    if (dp_conv_algos_pin(text, why, sizeof why) != 0) abort();
    for (int i = 0; i < n; i++) {
        dp_conv_algo e = a[i];
        e.batch = e.batch % DP_CONV_ALGOS_MAX_BATCH + 1;
        dp_conv_algos_note(&e);
        dp_conv_algo got;
        if (!dp_conv_algos_pinned(&a[i].d, a[i].batch, a[i].tf32, &got)) abort();
    }
    const size_t cur = dp_conv_algos_current(out, sizeof out);
    if (cur >= sizeof out) abort();
    const int m = dp_conv_algos_parse(out, back, DP_CONV_ALGOS_MAX, why, sizeof why);
    if (m < n || m > DP_CONV_ALGOS_MAX) abort();
    dp_conv_algos_reset();
    free(text);
    return 0;
}

void dp_fuzz_seeds(void (*add)(const uint8_t *data, size_t size)) {
    static const char *const seeds[] = {
        "1,28,28,6,5,1,2,64,0:0,0,0;6,14,14,16,5,1,0,64,0:1,-1,2",
        ("3,224,224,64,7,2,3,256,1:6,1,5;64,56,56,64,3,1,1,256,1:1,0,-1;64,56,56,128,1,2,0,256,1:0,1,0;"
         "128,28,28,128,3,1,1,256,0:7,5,6"),
        "65536,65536,65536,65536,1,1,65536,1048576,1:99,-1,0",
        "1,1,1,1,1,1,0,1,0:-1,-1,-1",
        "1,5,5,1,1,1,2147483647,1,0:0,0,0",
        "4294967297,28,28,6,5,1,2,64,0:0,0,0",
        "1,4,4,2,9,1,0,8,0:1,1,1",
    };
    for (size_t i = 0; i < sizeof seeds / sizeof *seeds; i++) add((const uint8_t *)seeds[i], strlen(seeds[i]));
    /* a full record of the longest entries: DP_CONV_ALGOS_RECORD_MAX's case */
    static char full[DP_CONV_ALGOS_RECORD_MAX];
    size_t k = 0;
    for (int i = 0; i < DP_CONV_ALGOS_MAX; i++)
        k += (size_t)snprintf(full + k, sizeof full - k, "%s65536,65536,65536,65536,%d,65536,65536,%d,1:-1,-1,-1",
                              i ? ";" : "", 10000 + i, 1000000 + i);
    add((const uint8_t *)full, k);
}
