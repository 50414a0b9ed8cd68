/* test_safetensors.c: the checkpoint file layer without the CLI: safetensors round trip and damage
 * detection, the old DPCKPT01 format still read, SGD refusing a NaN/Inf gradient (and what that check
 * costs per step, printed, not asserted), the same-file test of output paths. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/timer.h"
#include "io/atomic.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "optim/sgd.h"
#include "testutil.h"

static dp_status write_two(FILE *f, void *ctx) {
    (void)ctx;
    static const float a[6] = {1, 2, 3, 4, 5, 6};
    static const int64_t n = 42;
    dp_st_tensor t[2] = {{.name = "w", .dtype = DP_ST_F32, .ndim = 2, .shape = {2, 3}, .data = a, .nbytes = sizeof a},
                         {.name = "n", .dtype = DP_ST_I64, .ndim = 0, .data = &n, .nbytes = sizeof n}};
    dp_st_meta m[1] = {{.key = "k", .value = "v"}};
    return dp_st_write(f, "test", t, 2, m, 1);
}

static void test_roundtrip_and_damage(void **state) {
    (void)state;
    const char *p = tu_path("rt.safetensors");
    assert_int_equal(dp_atomic_write("test", p, write_two, NULL), DP_OK);
    dp_st_file f;
    assert_int_equal(dp_st_read(p, &f), DP_OK);
    const dp_st_tensor *w = dp_st_find(&f, "w");
    assert_non_null(w);
    assert_int_equal(w->shape[1], 3);
    assert_float_equal(((const float *)w->data)[5], 6.0f, 0);
    assert_string_equal(dp_st_meta_get(&f, "k"), "v");
    size_t size = f.size;
    unsigned char *copy = malloc(size);
    memcpy(copy, f.buf, size);
    dp_st_free(&f);
    /* a flipped data byte: the CRC */
    copy[size - 9] ^= 0x40;
    tu_write_file(p, copy, size);
    assert_int_equal(dp_st_read(p, &f), DP_ERR_FORMAT);
    assert_true(tu_contains(dp_last_error(), "CRC-32"));
    copy[size - 9] ^= 0x40;
    /* truncated */
    tu_write_file(p, copy, size - 4);
    assert_int_equal(dp_st_read(p, &f), DP_ERR_FORMAT);
    assert_true(tu_contains(dp_last_error(), "truncated"));
    /* a broken header */
    copy[10] = '#';
    tu_write_file(p, copy, size);
    assert_int_equal(dp_st_read(p, &f), DP_ERR_FORMAT);
    assert_true(tu_contains(dp_last_error(), p));
    /* a header length beyond the file */
    memset(copy, 0xff, 8);
    tu_write_file(p, copy, size);
    assert_int_equal(dp_st_read(p, &f), DP_ERR_FORMAT);
    free(copy);
}

/* A DPCKPT01 file of model lenet whose header says n_params, its data 0.25 and a good CRC. */
static void write_v1(const char *p, int64_t n_params) {
    dp_ckpt_v1_header h;
    memset(&h, 0, sizeof h);
    snprintf(h.model, sizeof h.model, "lenet");
    h.c = 1, h.h = 28, h.w = 28, h.n_classes = 10, h.n_params = n_params, h.n_buffers = 0;
    size_t n = 8 + sizeof h + (size_t)n_params * 4 + 4;
    unsigned char *b = calloc(1, n);
    assert_non_null(b);
    memcpy(b, "DPCKPT01", 8);
    memcpy(b + 8, &h, sizeof h);
    float *pv = (float *)(b + 8 + sizeof h);
    for (int64_t i = 0; i < n_params; i++) pv[i] = 0.25f;
    uint32_t crc = (uint32_t)crc32(0L, b, (uInt)(n - 4));
    memcpy(b + n - 4, &crc, 4);
    tu_write_file(p, b, n);
    free(b);
}

/* A DPCKPT01 file (dptrain 0.1's --save) still initialises a model. */
static void test_old_format_read(void **state) {
    (void)state;
    dp_model m;
    assert_int_equal(dp_model_build("lenet", (dp_shape){1, 28, 28}, 10, &m), DP_OK);
    const char *p = tu_path("old.ckpt");
    write_v1(p, (int64_t)m.params.n);
    float *params = calloc(m.params.n, sizeof *params), buffers[1];
    assert_int_equal(dp_checkpoint_load_weights("--load", p, &m, params, buffers, NULL), DP_OK);
    assert_float_equal(params[m.params.n - 1], 0.25f, 0);
    dp_train_pos pos;
    assert_int_equal(dp_checkpoint_load_resume(p, &m, params, buffers, NULL, &pos, NULL, 0, NULL, 0), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "--init-from"));
    free(params);
    dp_model_free(&m);
}

/* Same model, shape and classes but another parameter count: the message's two halves differ,
 * naming the file's count and the model's (they were the same text). */
static void test_old_format_wrong_count(void **state) {
    (void)state;
    dp_model m;
    assert_int_equal(dp_model_build("lenet", (dp_shape){1, 28, 28}, 10, &m), DP_OK);
    const char *p = tu_path("old-count.ckpt");
    write_v1(p, (int64_t)m.params.n + 4);
    float *params = calloc(m.params.n, sizeof *params), buffers[1];
    assert_int_equal(dp_checkpoint_load_weights("--load", p, &m, params, buffers, NULL), DP_ERR_USAGE);
    const char *e = dp_last_error();
    char file_has[128], model_has[128];
    snprintf(file_has, sizeof file_has, "with 10 classes, %zu parameter floats", m.params.n + 4);
    snprintf(model_has, sizeof model_has, "this run has model lenet on 1x28x28 with 10 classes, %zu parameter floats",
             m.params.n);
    if (!tu_contains(e, file_has) || !tu_contains(e, model_has)) fail_msg("%s", e);
    print_message("%s\n", e);
    free(params);
    dp_model_free(&m);
}

static void test_sgd_refuses_nonfinite(void **state) {
    (void)state;
    dp_layout L = {0};
    assert_int_equal(dp_layout_add(&L, "w", 40, 0, NULL), DP_OK);
    float p[48], g[48], b[48];
    for (int i = 0; i < 48; i++) p[i] = 1, g[i] = 0.5f, b[i] = 0.25f;
    atomic_int bad;
    atomic_init(&bad, 0);
    dp_sgd o = {.lr = 0.1f, .momentum = 0.9f, .nonfinite = &bad};
    const float poison[3] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++) {
        g[17] = poison[k];
        dp_sgd_step(&o, &L, p, g, b, o.lr);
        assert_int_equal(atomic_exchange(&bad, 0), 1);
        for (int i = 0; i < 40; i++) assert_true(p[i] == 1 && b[i] == 0.25f);
    }
    g[17] = 3e38f; /* large but finite: applied */
    dp_sgd_step(&o, &L, p, g, b, o.lr);
    assert_int_equal(atomic_load(&bad), 0);
    assert_true(p[0] != 1);
    assert_true(dp_all_finite(g, 40));
    dp_layout_free(&L);
}

/* What the check costs: one pass over the gradients, against the SGD update itself. Printed only. */
static void test_check_cost(void **state) {
    (void)state;
    const size_t sizes[2] = {61706, 11689512}; /* LeNet, ResNet-18 */
    for (int s = 0; s < 2; s++) {
        size_t n = sizes[s];
        float *g, *p, *b;
        assert_int_equal(dp_alloc_floats(&g, n, "g"), DP_OK);
        assert_int_equal(dp_alloc_floats(&p, n, "p"), DP_OK);
        assert_int_equal(dp_alloc_floats(&b, n, "b"), DP_OK);
        dp_layout L = {0};
        assert_int_equal(dp_layout_add(&L, "w", n, 0, NULL), DP_OK);
        dp_sgd o = {.lr = 0.01f, .momentum = 0.9f};
        int reps = s ? 20 : 2000, ok = 0;
        double t0 = dp_now();
        for (int r = 0; r < reps; r++) ok += dp_all_finite(g, n);
        double check = (dp_now() - t0) / reps;
        t0 = dp_now();
        for (int r = 0; r < reps; r++) dp_sgd_step(&o, &L, p, g, b, o.lr);
        double step = (dp_now() - t0) / reps;
        assert_int_equal(ok, reps);
        print_message("%zu parameters: finiteness check %.1f us, SGD step with it %.1f us\n", n, check * 1e6,
                      step * 1e6);
        dp_layout_free(&L);
        dp_free(g), dp_free(p), dp_free(b);
    }
}

static void test_same_file(void **state) {
    (void)state;
    assert_true(dp_same_file("x-not-there", "./x-not-there"));
    assert_false(dp_same_file("x-not-there", "y-not-there"));
    const char *p = tu_path("same");
    tu_write_file(p, "a", 1);
    char other[600];
    snprintf(other, sizeof other, "%s", p);
    char *slash = strrchr(other, '/');
    memmove(slash + 2, slash, strlen(slash) + 1);
    slash[0] = '/', slash[1] = '.';
    assert_true(dp_same_file(p, other));
}

/* A FIFO or a directory given as a checkpoint is named at once, never read (a FIFO would block). */
static void test_not_a_regular_file(void **state) {
    (void)state;
    const char *fifo = tu_path("ckpt.fifo");
    unlink(fifo);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    alarm(20); /* a regression would block in open() */
    dp_st_file f;
    assert_int_not_equal(dp_st_read(fifo, &f), DP_OK);
    assert_true(tu_contains(dp_last_error(), "FIFO"));
    char *out;
    /* named before anything else is read: on a machine without the data set too */
    tu_run_dptrain(&out, "eval --load %s --data /nonexistent-dir", fifo);
    if (!tu_contains(out, "is a FIFO (named pipe), expected a regular file")) fprintf(stderr, "dptrain said: %s\n", out);
    assert_true(tu_contains(out, "is a FIFO (named pipe), expected a regular file"));
    free(out);
    tu_run_dptrain(&out, "train --init-from %s --dataset synthetic --samples 64 --epochs 1", fifo);
    assert_true(tu_contains(out, "is a FIFO"));
    free(out);
    alarm(0);
    unlink(fifo);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_and_damage), cmocka_unit_test(test_old_format_read),
        cmocka_unit_test(test_old_format_wrong_count),
        cmocka_unit_test(test_sgd_refuses_nonfinite), cmocka_unit_test(test_check_cost),
        cmocka_unit_test(test_same_file), cmocka_unit_test(test_not_a_regular_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
