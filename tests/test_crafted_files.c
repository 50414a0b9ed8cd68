/* test_crafted_files.c: files built to hurt the reader: safetensors headers that the reference
 * reader refuses (bytes after the JSON, fractional shapes and offsets, duplicate names, a second
 * __metadata__), a header of many entries, huge sparse files, and checkpoints with crafted
 * tensors and positions given to resume. Each must be refused (or read) with a message, in time,
 * without reading past a buffer (the sanitized build checks that). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "core/timer.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "io/state_dict.h"
#include "testutil.h"

/* A safetensors file from a header text (padded with spaces to `pad` bytes when pad > 0) and data. */
static void craft(const char *path, const char *header, size_t pad, const void *data, size_t n) {
    size_t hl = strlen(header), len = pad > hl ? pad : hl;
    unsigned char *b = malloc(8 + len + n + 1);
    assert_non_null(b);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)len >> (8 * i));
    memcpy(b + 8, header, hl);
    memset(b + 8 + hl, ' ', len - hl);
    if (n) memcpy(b + 8 + len, data, n);
    tu_write_file(path, b, 8 + len + n);
    free(b);
}

static dp_status read_crafted(const char *header, const void *data, size_t n) {
    const char *p = tu_path("crafted.safetensors");
    craft(p, header, 0, data, n);
    dp_st_file f;
    dp_status s = dp_st_read(p, &f);
    if (s == DP_OK) dp_st_free(&f);
    return s;
}

#define T4 "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}"

static void expect_refused(const char *header, const void *data, size_t n, const char *why) {
    dp_status s = read_crafted(header, data, n);
    if (s != DP_ERR_FORMAT || !tu_contains(dp_last_error(), why))
        fail_msg("header %s: status %d, message '%s' (expected one naming '%s')", header, s, dp_last_error(), why);
}

static void test_st_strict(void **state) {
    (void)state;
    const float four[2] = {1, 2};
    /* the reference's padding is accepted */
    assert_int_equal(read_crafted("{\"a\":" T4 "}    ", four, 4), DP_OK);
    expect_refused("{\"a\":" T4 "}xyz", four, 4, "after the JSON");
    expect_refused("{\"a\":" T4 "}{}", four, 4, "after the JSON");
    /* 1.5 elements of 4 bytes are 6 bytes: consistent, yet not a shape */
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,6]}}", four, 6, "whole number");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0.5,4.5]}}", four, 5, "whole number");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", four, 4, "whole number");
    expect_refused("{\"a\":" T4 ",\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", four, 8, "appears twice");
    expect_refused("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"},\"a\":" T4 "}", four, 4, "appears twice");
    expect_refused("{\"a\":" T4 ",\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}", four, 8, "tile");
    expect_refused("{\"a\":\x1b[2J" T4 "}", four, 4, "control byte");
    /* a second __metadata__ must not hide the first one's CRC (the data below does not match it) */
    expect_refused("{\"__metadata__\":{\"dptrain.data_crc32\":\"00000000\"},\"a\":" T4 ",\"__metadata__\":{}}", four, 4,
                   "__metadata__ appears twice");
    /* names from the file reach messages escaped */
    expect_refused("{\"\\u001b]0;x\\u0007\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,6]}}", four, 6, "\\x1b]0;x\\x07");
    assert_false(tu_contains(dp_last_error(), "\x1b"));
}

/* 60,000 entries in reverse offset order: sorted in O(n log n), looked up by binary search. */
static void test_st_many_entries(void **state) {
    (void)state;
    enum { N = 60000 };
    size_t cap = (size_t)N * 80 + 16, k = 0;
    char *h = malloc(cap);
    float *data = calloc(N, sizeof *data);
    assert_non_null(h), assert_non_null(data);
    k += (size_t)snprintf(h + k, cap - k, "{");
    for (int i = 0; i < N; i++) {
        int slot = N - 1 - i;
        data[slot] = (float)i;
        k += (size_t)snprintf(h + k, cap - k, "%s\"t%d\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[%d,%d]}",
                              i ? "," : "", i, slot * 4, slot * 4 + 4);
    }
    snprintf(h + k, cap - k, "}");
    const char *p = tu_path("many.safetensors");
    craft(p, h, 0, data, (size_t)N * 4);
    double t0 = dp_now();
    dp_st_file f;
    assert_int_equal(dp_st_read(p, &f), DP_OK);
    const dp_st_tensor *x = dp_st_find(&f, "t12345");
    assert_non_null(x);
    assert_float_equal(*(const float *)x->data, 12345.0f, 0);
    assert_null(dp_st_find(&f, "t60000"));
    double secs = dp_now() - t0;
    dp_st_free(&f);
    print_message("60000 header entries read in %.2f s\n", secs);
    assert_true(secs < 8); /* was 16 s in the O(n^2) sort */
    free(h), free(data);
}

/* A string holding \u0000 is refused: cJSON ends it there, so a name, dtype or metadata string was
 * read as its shorter prefix ("a\u0000b" as "a"); the reference's readers refuse such a file. An
 * escaped backslash followed by "u0000" is an ordinary name. */
static void test_st_nul_in_strings(void **state) {
    (void)state;
    const float four[1] = {1};
    expect_refused("{\"a\\u0000b\":" T4 "}", four, 4, "\\u0000, a NUL character, in a string at byte 11");
    expect_refused("{\"a\":{\"dtype\":\"F32\\u0000x\",\"shape\":[1],\"data_offsets\":[0,4]}}", four, 4, "NUL character");
    expect_refused("{\"__metadata__\":{\"k\\u0000\":\"v\"},\"a\":" T4 "}", four, 4, "NUL character");
    expect_refused("{\"__metadata__\":{\"k\":\"v\\u0000w\"},\"a\":" T4 "}", four, 4, "NUL character");
    assert_true(tu_contains(dp_last_error(), "crafted.safetensors"));
    assert_int_equal(read_crafted("{\"a\\\\u0000b\":" T4 "}", four, 4), DP_OK);
}

/* Writes a header of `entries` entries of the form "<name>":<value> (names numbered, about
 * `name_len` bytes), padded to `pad` bytes when pad > 0, and `data` zero bytes, streaming: nothing
 * of it stays in this process's memory (a child forked later would count it). */
static void craft_entries(const char *path, long entries, int name_len, const char *value, size_t pad, size_t data) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    size_t hl = 2 + (size_t)entries * ((size_t)name_len + 3 + strlen(value)) + (entries ? (size_t)entries - 1 : 0);
    if (pad > hl) hl = pad;
    for (int i = 0; i < 8; i++) fputc((int)((uint64_t)hl >> (8 * i)) & 0xff, f);
    size_t k = (size_t)fprintf(f, "{");
    for (long i = 0; i < entries; i++)
        k += (size_t)fprintf(f, "%s\"%0*ld\":%s", i ? "," : "", name_len, i, value);
    k += (size_t)fprintf(f, "}");
    for (; k < hl; k++) fputc(' ', f);
    for (size_t i = 0; i < data; i++) fputc(0, f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(k, hl);
}

typedef struct {
    const char *path;
    long data_limit_mib;
} read_job;

/* In the child: ulimit -d (what is in use now plus data_limit_mib, if given), then dp_st_read. */
static dp_status read_limited(void *arg) {
    const read_job *j = arg;
    if (j->data_limit_mib) {
        FILE *st = fopen("/proc/self/status", "r");
        char line[256];
        unsigned long long kb = 0;
        while (st && fgets(line, sizeof line, st))
            if (sscanf(line, "VmData: %llu kB", &kb) == 1) break;
        if (st) fclose(st);
        struct rlimit rl = {.rlim_cur = kb * 1024 + ((rlim_t)j->data_limit_mib << 20),
                            .rlim_max = kb * 1024 + ((rlim_t)j->data_limit_mib << 20)};
        if (setrlimit(RLIMIT_DATA, &rl) != 0) _exit(99);
    }
    dp_st_file f;
    dp_status s = dp_st_read(j->path, &f);
    if (s == DP_OK) dp_st_free(&f);
    return s;
}

/* In a child: reads path with dp_st_read and reports the status, its message and its peak memory. */
static dp_status read_in_child(const char *path, char *msg, size_t cap, long *maxrss_kib, long data_limit_mib) {
    read_job j = {path, data_limit_mib};
    return tu_status_in_child(read_limited, &j, msg, cap, maxrss_kib);
}

/* The reported file: 105 MB, a 100 MiB header of 1.36 M empty entries. It passed the size limits
 * and parsing it took 1.8 GB (eval --load and --resume were OOM-killed in a 1 GiB job). A reader
 * that knows the model refuses it from its length; the plain reader after counting its entries,
 * before parsing, holding little more than the header. */
static void test_st_header_bounded(void **state) {
    (void)state;
    const char *p = tu_path("entries.safetensors");
    craft_entries(p, 1360000, 71, "{}", 100u << 20, 5u << 20);
    dp_model m;
    assert_int_equal(dp_model_build("lenet", (dp_shape){1, 28, 28}, 10, &m), DP_OK);
    float *params = calloc(m.params.n, sizeof *params), *mom = calloc(m.params.n, sizeof *mom), buffers[1];
    double t0 = dp_now();
    assert_int_equal(dp_checkpoint_load_weights("--load", p, &m, params, buffers, NULL), DP_ERR_FORMAT);
    const char *e = dp_last_error();
    if (!tu_contains(e, "--load ") || !tu_contains(e, p) || !tu_contains(e, "a header of 100.0 MiB") ||
        !tu_contains(e, "model lenet"))
        fail_msg("%s", e);
    print_message("%s\n", e);
    dp_train_pos pos;
    assert_int_equal(dp_checkpoint_load_resume(p, &m, params, buffers, mom, &pos, NULL, 0, NULL, 0), DP_ERR_FORMAT);
    assert_true(tu_contains(dp_last_error(), "a header of 100.0 MiB"));
    assert_true(dp_now() - t0 < 1);
    /* the plain reader: refused by its entry count before cJSON sees it */
    char msg[DP_ERROR_MAX];
    long rss;
    t0 = dp_now();
    dp_status s = read_in_child(p, msg, sizeof msg, &rss, 0);
    print_message("%s (peak %ld MiB, %.2f s)\n", msg, rss >> 10, dp_now() - t0);
    if (s != DP_ERR_FORMAT || !tu_contains(msg, "more than 131072 tensors") || !tu_contains(msg, p))
        fail_msg("status %d: %s", s, msg);
    if (rss > 600 << 10) fail_msg("reading it took %ld MiB", rss >> 10);
    /* deeper than a header nests, and an entry of too many values or bytes, likewise */
    const float four[1] = {1};
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[[1]],\"data_offsets\":[0,4]}}", four, 4, "nested 4 deep");
    char big[6000];
    int k = snprintf(big, sizeof big, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":[");
    for (int i = 0; i < 40; i++) k += snprintf(big + k, sizeof big - (size_t)k, "%s0", i ? "," : "");
    snprintf(big + k, sizeof big - (size_t)k, "]}}");
    expect_refused(big, four, 4, "a tensor's entry has at most 4096 bytes and 32 values");
    /* __metadata__ spelled with an escape is the metadata to cJSON too: its 40 keys are not a tensor's values */
    k = snprintf(big, sizeof big, "{\"\\u005f_metadata__\":{");
    for (int i = 0; i < 40; i++) k += snprintf(big + k, sizeof big - (size_t)k, "%s\"k%d\":\"v\"", i ? "," : "", i);
    snprintf(big + k, sizeof big - (size_t)k, "},\"a\":" T4 "}");
    if (read_crafted(big, four, 4) != DP_OK) fail_msg("%s: %s", big, dp_last_error());
    unlink(p);
    free(params), free(mom);
    dp_model_free(&m);
}

/* What parsing a header allocates is counted before the parse: under a data limit (ulimit -d) that
 * the header fits in but its parse does not, the read is refused naming the cost, instead of cJSON
 * failing mid-parse as "invalid JSON" (or, under a cgroup limit, the OOM killer ending the process). */
static void test_st_parse_cost_counted(void **state) {
    (void)state;
#ifdef DP_TEST_SANITIZED
    print_message("the sanitizers' mappings make ulimit -d meaningless: skipped\n");
    skip();
#endif
    const char *p = tu_path("costly.safetensors");
    /* 120,000 empty tensors, each a valid entry: a 7 MiB header whose parse takes over 100 MiB */
    craft_entries(p, 120000, 8, "{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}", 0, 0);
    char msg[DP_ERROR_MAX];
    long rss;
    dp_status s = read_in_child(p, msg, sizeof msg, &rss, 0);
    if (s != DP_OK) fail_msg("without a limit: %s", msg);
    print_message("without a limit: read, peak %ld MiB in all\n", rss >> 10);
    s = read_in_child(p, msg, sizeof msg, &rss, 48);
    print_message("%s\n", msg);
    if (s != DP_ERR_NOMEM || !tu_contains(msg, "parsing its header (120000 tensors") ||
        !tu_contains(msg, "ulimit -d") || !tu_contains(msg, p))
        fail_msg("status %d: %s", s, msg);
    unlink(p);
}

/* A 4 TiB sparse file (256 GiB where the file system allows no more): the header is read and judged
 * first; the data only if the memory is there. */
static void test_st_huge_sparse(void **state) {
    (void)state;
    const char *p = tu_path("huge.safetensors");
    unsigned long long size = 4ull << 40;
    if (truncate(p, (off_t)size) != 0 && (tu_write_file(p, "", 0), truncate(p, (off_t)size)) != 0) size = 256ull << 30;
    char h[200];
    /* a header that covers only its own 4 bytes: refused before any data is read */
    snprintf(h, sizeof h, "{\"a\":" T4 "}");
    craft(p, h, 128, "abcd", 4);
    assert_int_equal(truncate(p, (off_t)size), 0);
    double t0 = dp_now();
    dp_st_file f;
    assert_int_equal(dp_st_read(p, &f), DP_ERR_FORMAT);
    assert_true(tu_contains(dp_last_error(), "cover 4 of the"));
    /* a header that describes all of it: the memory check refuses, naming the sizes */
    unsigned long long data = size - 8 - 128;
    snprintf(h, sizeof h, "{\"a\":{\"dtype\":\"F32\",\"shape\":[%llu],\"data_offsets\":[0,%llu]}}", data / 4, data);
    craft(p, h, 128, NULL, 0);
    assert_int_equal(truncate(p, (off_t)size), 0);
    assert_int_equal(dp_st_read(p, &f), DP_ERR_NOMEM);
    assert_true(tu_contains(dp_last_error(), size == 4ull << 40 ? "4.0 TiB" : "256.0 GiB"));
    assert_true(dp_now() - t0 < 5);
    unlink(p);
}

/* The old DPCKPT01 format too: its header is judged before the file is read. */
static void test_v1_huge_sparse(void **state) {
    (void)state;
    dp_model m;
    assert_int_equal(dp_model_build("lenet", (dp_shape){1, 28, 28}, 10, &m), DP_OK);
    const char *p = tu_path("huge.ckpt");
    unsigned char pre[8 + sizeof(dp_ckpt_v1_header)];
    dp_ckpt_v1_header h;
    memset(&h, 0, sizeof h);
    snprintf(h.model, sizeof h.model, "lenet");
    h.c = 1, h.h = 28, h.w = 28, h.n_classes = 10, h.n_params = (int64_t)m.params.n;
    memcpy(pre, "DPCKPT01", 8);
    memcpy(pre + 8, &h, sizeof h);
    float *params = calloc(m.params.n, sizeof *params), buffers[1];
    double t0 = dp_now();
    /* the header describes a small file: the 1 TiB one is refused unread */
    tu_write_file(p, pre, sizeof pre);
    if (truncate(p, (off_t)(1ull << 40)) == 0) {
        assert_int_equal(dp_checkpoint_load_weights("--load", p, &m, params, buffers, NULL), DP_ERR_FORMAT);
        assert_true(tu_contains(dp_last_error(), "header says"));
    }
    /* a header that describes the whole huge file is for another model */
    h.n_params = ((1ll << 40) - (int64_t)sizeof pre - 4) / 4;
    memcpy(pre + 8, &h, sizeof h);
    tu_write_file(p, pre, sizeof pre);
    if (truncate(p, (off_t)(1ull << 40)) == 0) {
        assert_int_equal(dp_checkpoint_load_weights("--load", p, &m, params, buffers, NULL), DP_ERR_USAGE);
        assert_true(tu_contains(dp_last_error(), "checkpoint is for model lenet"));
    }
    assert_true(dp_now() - t0 < 5);
    unlink(p);
    free(params);
    dp_model_free(&m);
}

/* --- checkpoints given to resume ------------------------------------------------------------- */

typedef struct {
    dp_model m;
    float *params, *buffers, *momentum;
    dp_st_tensor t[64];
    int n;
} ckpt;

/* The model's tensors (its state_dict, values 0.5, counters `nbt`) as a tensor list to write. */
static void ckpt_init(ckpt *c, const char *model, int64_t *nbt) {
    memset(c, 0, sizeof *c);
    assert_int_equal(dp_model_build(model, (dp_shape){1, 28, 28}, 10, &c->m), DP_OK);
    c->params = calloc(c->m.params.n, sizeof(float));
    c->buffers = calloc(c->m.buffers.n + 1, sizeof(float));
    c->momentum = calloc(c->m.params.n, sizeof(float));
    for (size_t i = 0; i < c->m.params.n; i++) c->params[i] = 0.05f * (float)((i * 7919) % 13) - 0.3f;
    for (size_t i = 0; i < c->m.buffers.n; i++) c->buffers[i] = 1.0f; /* running_var of 1 */
    dp_sd_entry *e;
    int n;
    assert_int_equal(dp_state_dict(&c->m, &e, &n), DP_OK);
    assert_true(n < 60);
    for (int i = 0; i < n; i++) {
        dp_st_tensor *x = &c->t[c->n++];
        snprintf(x->name, sizeof x->name, "%s", e[i].name);
        x->ndim = e[i].ndim;
        memcpy(x->shape, e[i].shape, sizeof e[i].shape);
        if (e[i].kind == DP_SD_COUNTER) x->dtype = DP_ST_I64, x->data = nbt, x->nbytes = 8;
        else {
            x->dtype = DP_ST_F32;
            x->data = (e[i].kind == DP_SD_PARAM ? c->params : c->buffers) + e[i].offset;
            x->nbytes = e[i].count * 4;
        }
    }
    free(e);
}

static void ckpt_free(ckpt *c) {
    free(c->params), free(c->buffers), free(c->momentum);
    dp_model_free(&c->m);
}

/* Writes c's tensors plus `extra` (first or last) with the position given as strings. */
static void ckpt_write(const char *path, const ckpt *c, const dp_st_tensor *extra, int extra_first, const char *epoch,
                       const char *next_batch, const char *step) {
    dp_st_tensor t[66];
    int n = 0;
    if (extra && extra_first) t[n++] = *extra;
    for (int i = 0; i < c->n; i++) t[n++] = c->t[i];
    if (extra && !extra_first) t[n++] = *extra;
    dp_st_meta meta[5] = {{.key = "dptrain.model", .value = c->m.name}, {.key = "dptrain.epoch", .value = epoch},
                          {.key = "dptrain.next_batch", .value = next_batch}, {.key = "dptrain.step", .value = step},
                          {.key = "dptrain.skipped_steps", .value = "0"}};
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(dp_st_write(f, "test", t, n, meta, 5), DP_OK);
    assert_int_equal(fclose(f), 0);
}

static dp_status resume(const ckpt *c, const char *path, dp_train_pos *pos) {
    memset(pos, 0, sizeof *pos);
    return dp_checkpoint_load_resume(path, &c->m, c->params, c->buffers, NULL, pos, NULL, 0, NULL, 0);
}

/* An extra zero-size *.num_batches_tracked under an ignored prefix: the count comes from the model's
 * own tensor, never from a lookalike (which was read 8 bytes past its end). */
static void test_resume_extra_counter(void **state) {
    (void)state;
    const char *p = tu_path("extra.safetensors");
    int64_t nbt = 7;
    dp_st_tensor empty = {.name = "dptrain.x.num_batches_tracked", .dtype = DP_ST_I64, .ndim = 1, .shape = {0}};
    dp_train_pos pos;
    ckpt c;
    /* no BatchNorm: the lookalike, last in the data, was the only match */
    ckpt_init(&c, "lenet", &nbt);
    ckpt_write(p, &c, &empty, 0, "1", "0", "0");
    assert_int_equal(resume(&c, p, &pos), DP_OK);
    assert_int_equal(pos.bn_batches, 0);
    ckpt_free(&c);
    /* with BatchNorm: the lookalike first in the data hid the real count */
    ckpt_init(&c, "lenet-bn", &nbt);
    ckpt_write(p, &c, &empty, 1, "1", "0", "0");
    assert_int_equal(resume(&c, p, &pos), DP_OK);
    assert_int_equal(pos.bn_batches, 7);
    /* the model's own counter must be an I64 scalar */
    for (int i = 0; i < c.n; i++)
        if (strstr(c.t[i].name, "num_batches_tracked")) c.t[i].dtype = DP_ST_F32, c.t[i].shape[0] = 2, c.t[i].ndim = 1;
    ckpt_write(p, &c, NULL, 0, "1", "0", "0");
    assert_int_not_equal(resume(&c, p, &pos), DP_OK);
    assert_true(tu_contains(dp_last_error(), "I64 scalar"));
    ckpt_free(&c);
    nbt = -5;
    ckpt_init(&c, "lenet-bn", &nbt);
    ckpt_write(p, &c, NULL, 0, "1", "0", "0");
    assert_int_equal(resume(&c, p, &pos), DP_ERR_FORMAT);
    assert_true(tu_contains(dp_last_error(), "outside 0.."));
    ckpt_free(&c);
}

/* A setting added after a checkpoint was written (dp_setting.later: --precision): the file without its
 * key was run with the default, which --resume compares; a setting without that mark must be there. */
static void test_resume_setting_added_later(void **state) {
    (void)state;
    const char *p = tu_path("older.safetensors");
    int64_t nbt = 0;
    ckpt c;
    ckpt_init(&c, "lenet", &nbt);
    ckpt_write(p, &c, NULL, 0, "1", "0", "0");
    dp_train_pos pos;
    const dp_st_meta fp32 = {"dptrain.arg.precision", "fp32", "fp32"}, bf16 = {"dptrain.arg.precision", "bf16", "fp32"},
                     strict = {"dptrain.arg.precision", "fp32", NULL};
    assert_int_equal(dp_checkpoint_load_resume(p, &c.m, c.params, c.buffers, NULL, &pos, &fp32, 1, NULL, 0), DP_OK);
    assert_int_equal(dp_checkpoint_load_resume(p, &c.m, c.params, c.buffers, NULL, &pos, &bf16, 1, NULL, 0),
                     DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "--precision is 'fp32' in the checkpoint but bf16 in this run"));
    assert_int_equal(dp_checkpoint_load_resume(p, &c.m, c.params, c.buffers, NULL, &pos, &strict, 1, NULL, 0),
                     DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "--precision is missing in the checkpoint"));
    ckpt_free(&c);
}

/* Each position field in the range a run can reach. */
static void test_resume_position_ranges(void **state) {
    (void)state;
    const char *p = tu_path("pos.safetensors");
    int64_t nbt = 0;
    ckpt c;
    ckpt_init(&c, "lenet", &nbt);
    dp_train_pos pos;
    ckpt_write(p, &c, NULL, 0, "3", "5", "100");
    assert_int_equal(resume(&c, p, &pos), DP_OK);
    assert_int_equal(pos.epoch, 3), assert_int_equal(pos.next_batch, 5), assert_int_equal(pos.step, 100);
    static const char *const bad[][3] = {
        {"0", "0", "0"},           /* epoch 0 trained one epoch too many */
        {"99999999999", "0", "0"}, /* wrapped to 1215752191 */
        {"100002", "0", "0"},      /* past --epochs' maximum + 1 */
        {"1", "4294967295", "0"},  /* wrapped to -1 (UBSan: a negative shift) */
        {"1", "-1", "0"},
        {"1", "0", "140737488355328"},
        {"1", "0", "1x"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ckpt_write(p, &c, NULL, 0, bad[i][0], bad[i][1], bad[i][2]);
        dp_status s = resume(&c, p, &pos);
        if (s != DP_ERR_FORMAT || !tu_contains(dp_last_error(), "expected"))
            fail_msg("epoch %s next_batch %s step %s: status %d, '%s'", bad[i][0], bad[i][1], bad[i][2], s, dp_last_error());
    }
    ckpt_free(&c);
}

/* --init-from goes on counting num_batches_tracked from the file's value, as PyTorch does. */
static void test_init_from_keeps_count(void **state) {
    (void)state;
    const char *in = tu_path("init.safetensors"), *out = tu_path("init-out.safetensors");
    int64_t nbt = 1000;
    ckpt c;
    ckpt_init(&c, "lenet-bn", &nbt);
    ckpt_write(in, &c, NULL, 0, "1", "0", "0");
    char *o;
    int rc = tu_run_dptrain(&o, "train --model lenet-bn --dataset synthetic --shape 1x28x28 --samples 64 --batch-size 32 "
                            "--epochs 1 --quiet --init-from %s --save %s", in, out);
    if (rc) fail_msg("run failed (%d): %s", rc, o);
    free(o);
    dp_st_file f;
    assert_int_equal(dp_st_read(out, &f), DP_OK);
    const dp_st_tensor *x = dp_st_find(&f, "bn3.num_batches_tracked");
    assert_non_null(x);
    int64_t v;
    memcpy(&v, x->data, 8);
    assert_int_equal(v, 1002); /* two batches of 32 */
    dp_st_free(&f);
    ckpt_free(&c);
}

/* Every --load / --init-from message names the flag (a wrong model's did not). */
static void test_load_messages_prefixed(void **state) {
    (void)state;
    const char *p = tu_path("other-model.safetensors");
    int64_t nbt = 0;
    ckpt c;
    ckpt_init(&c, "lenet", &nbt);
    ckpt_write(p, &c, NULL, 0, "1", "0", "0");
    ckpt_free(&c);
    char *o;
    int rc = tu_run_dptrain(&o, "eval --load %s --model lenet-bn --dataset synthetic --shape 1x28x28 --samples 10", p);
    if (rc != 2 || !tu_contains(o, "dptrain: --load ") || !tu_contains(o, "the checkpoint is for model lenet"))
        fail_msg("rc %d:\n%s", rc, o);
    free(o);
    rc = tu_run_dptrain(&o, "train --init-from %s --model lenet-bn --dataset synthetic --shape 1x28x28 --samples 10", p);
    if (rc != 2 || !tu_contains(o, "dptrain: --init-from ")) fail_msg("rc %d:\n%s", rc, o);
    free(o);
}

/* A header damaged so that it still parses (a tensor renamed): the header's own CRC tells it from a
 * file of another model, so --resume DIR skips it for the older good checkpoint (it refused the run). */
static void test_damaged_header_skipped(void **state) {
    (void)state;
    const char *d = tu_path("hdr-damage");
    tu_sh(NULL, "rm -rf '%s'", d);
    const char *data = "--dataset synthetic --samples 128 --shape 1x28x28 --batch-size 32 --no-progress --threads 1";
    char *o;
    int rc = tu_run_dptrain(&o, "train %s --epochs 2 --checkpoint %s --keep 5", data, d);
    if (rc) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    /* the newest: conv1.weight -> conv1.weighu, same length, still valid JSON */
    char newest[700];
    snprintf(newest, sizeof newest, "%s/ckpt-0000000008.safetensors", d);
    FILE *f = fopen(newest, "r+b");
    assert_non_null(f);
    char head[4096];
    size_t got = fread(head, 1, sizeof head, f);
    char *at = NULL;
    for (size_t i = 8; i + 12 < got && !at; i++)
        if (memcmp(head + i, "conv1.weight", 12) == 0) at = head + i;
    assert_non_null(at);
    assert_int_equal(fseek(f, (long)(at - head) + 11, SEEK_SET), 0);
    assert_int_equal(fputc('u', f), 'u');
    assert_int_equal(fclose(f), 0);
    rc = tu_run_dptrain(&o, "train %s --epochs 3 --checkpoint %s --keep 5 --resume %s", data, d, d);
    if (rc || !tu_contains(o, "skipping a damaged checkpoint") || !tu_contains(o, "header's CRC-32") ||
        !tu_contains(o, "resuming from") || !tu_contains(o, "ckpt-0000000004"))
        fail_msg("rc %d:\n%s", rc, o);
    free(o);
}

/* A message longer than the buffer keeps its end, where the reason is: a long path no longer
 * loses it (messages were cut at 1023 bytes). */
static void test_long_message_keeps_reason(void **state) {
    (void)state;
    char path[3000];
    int k = snprintf(path, sizeof path, "%s", tu_path("long"));
    tu_sh(NULL, "rm -rf '%s'", path);
    for (int level = 0; level < 10; level++) {
        k += snprintf(path + k, sizeof path - (size_t)k, "/%0200d", level);
    }
    assert_int_equal(tu_sh(NULL, "mkdir -p '%s' && mkfifo '%s/ckpt.fifo'", path, path), 0);
    char *o;
    int rc = tu_run_dptrain(&o, "eval --load '%s/ckpt.fifo' --dataset synthetic --samples 10", path);
    if (rc == 0 || !tu_contains(o, "is a FIFO (named pipe), expected a regular file") || !tu_contains(o, "--load "))
        fail_msg("rc %d:\n%s", rc, o);
    free(o);
    /* in the library: a 9000-byte message keeps both ends */
    char *big = malloc(9001);
    assert_non_null(big);
    memset(big, 'x', 9000);
    big[9000] = '\0';
    dp_fail(DP_ERR_IO, "start %s: the reason", big);
    assert_true(strncmp(dp_last_error(), "start xxx", 9) == 0);
    assert_true(tu_contains(dp_last_error(), "x: the reason"));
    assert_true(tu_contains(dp_last_error(), " [...] "));
    assert_true(strlen(dp_last_error()) < DP_ERROR_MAX);
    free(big);
    tu_sh(NULL, "rm -rf '%s'", tu_path("long"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_st_strict),           cmocka_unit_test(test_st_many_entries),
        cmocka_unit_test(test_st_huge_sparse),      cmocka_unit_test(test_v1_huge_sparse),
        cmocka_unit_test(test_resume_extra_counter), cmocka_unit_test(test_resume_setting_added_later),
        cmocka_unit_test(test_resume_position_ranges), cmocka_unit_test(test_init_from_keeps_count),
        cmocka_unit_test(test_damaged_header_skipped), cmocka_unit_test(test_long_message_keeps_reason),
        cmocka_unit_test(test_load_messages_prefixed), cmocka_unit_test(test_st_nul_in_strings),
        cmocka_unit_test(test_st_header_bounded),     cmocka_unit_test(test_st_parse_cost_counted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
