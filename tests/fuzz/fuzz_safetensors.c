/* fuzz_safetensors.c: any bytes as a safetensors file, read by dp_st_read and, as a checkpoint of
 * LeNet-BN, by the resume loader (weights, counters, position). Must never crash, read out of
 * bounds or hit undefined behaviour; refusing is fine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"

static char path[512];
static dp_model model;
static float *params, *buffers, *momentum;

static void setup(void) {
    if (path[0]) return;
    const char *dir = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/dptrain-fuzz-st-%d.safetensors", dir && *dir ? dir : "/tmp", (int)getpid());
    if (dp_model_build("lenet-bn", (dp_shape){1, 28, 28}, 10, &model) != DP_OK) abort();
    params = calloc(model.params.n, sizeof *params);
    buffers = calloc(model.buffers.n + 1, sizeof *buffers);
    momentum = calloc(model.params.n, sizeof *momentum);
    if (!params || !buffers || !momentum) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    if (fclose(f) != 0) abort();
    dp_st_file st;
    if (dp_st_read(path, &st) == DP_OK) {
        for (int i = 0; i < st.n; i++) /* every tensor's bytes are inside the buffer */
            if (st.tensors[i].nbytes && ((const unsigned char *)st.tensors[i].data < st.buf ||
                                         (const unsigned char *)st.tensors[i].data + st.tensors[i].nbytes > st.buf + st.size))
                abort();
        dp_st_free(&st);
    }
    dp_train_pos pos;
    dp_checkpoint_load_resume(path, &model, params, buffers, momentum, &pos, NULL, 0, NULL, 0);
    unlink(path);
    return 0;
}

void dp_fuzz_seeds(void (*add)(const uint8_t *data, size_t size)) {
    setup();
    /* a real checkpoint of the model, and a small hand-written file */
    dp_train_pos pos = {.epoch = 2, .next_batch = 3, .step = 40, .bn_batches = 5};
    dp_st_meta meta[1] = {{.key = "dptrain.arg.seed", .value = "0"}};
    if (dp_checkpoint_save("fuzz", path, &model, params, buffers, momentum, &pos, meta, 1) == DP_OK) {
        FILE *f = fopen(path, "rb");
        if (f) {
            static unsigned char buf[1 << 20];
            size_t n = fread(buf, 1, sizeof buf, f);
            fclose(f);
            add(buf, n);
        }
        unlink(path);
    }
    static const char small[] = "\x38\0\0\0\0\0\0\0{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}  "
                                "\0\0\x80\x3f";
    add((const uint8_t *)small, sizeof small - 1);
    /* escapes in keys and values, an escaped __metadata__, nesting at the header's limit */
    static const char esc[] = "\x70\0\0\0\0\0\0\0{\"\\u005f_metadata__\":{\"k\\\"\":\"v\\u0041\"},\"a\\\\u0000\":{\"dtype\":"
                              "\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":[]}}      \0\0\x80\x3f";
    add((const uint8_t *)esc, sizeof esc - 1);
}
