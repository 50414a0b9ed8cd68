/* IDX reading (MNIST / Fashion-MNIST): exact loads of raw and gzip files, every kind of corrupt
 * file refused with the file named, the data-set dispatch (.gz first, then raw; the message when
 * neither exists), and the real Fashion-MNIST when it is installed. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/dataset.h"

static void put_be32(unsigned char *p, unsigned v) {
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8),
    p[3] = (unsigned char)v;
}

/* An image file of n images of rows x cols (pixel p of image i = (i * 31 + p * 7) & 255). */
static unsigned char *make_images(unsigned magic, unsigned n, unsigned rows, unsigned cols, size_t *size) {
    size_t body = (size_t)n * rows * cols;
    unsigned char *b = malloc(16 + body + 1);
    assert_non_null(b);
    put_be32(b, magic), put_be32(b + 4, n), put_be32(b + 8, rows), put_be32(b + 12, cols);
    for (size_t k = 0; k < body; k++) {
        size_t i = k / ((size_t)rows * cols), p = k % ((size_t)rows * cols);
        b[16 + k] = (unsigned char)((i * 31 + p * 7) & 255);
    }
    *size = 16 + body;
    return b;
}

static unsigned char *make_labels(unsigned magic, unsigned n, size_t *size) {
    unsigned char *b = malloc(8 + n + 1);
    assert_non_null(b);
    put_be32(b, magic), put_be32(b + 4, n);
    for (unsigned i = 0; i < n; i++) b[8 + i] = (unsigned char)((i * 3) % 10);
    *size = 8 + n;
    return b;
}

static void check_loaded(const dp_dataset *d, unsigned n, unsigned rows, unsigned cols) {
    assert_int_equal(d->n, n);
    assert_int_equal(d->c, 1);
    assert_int_equal(d->h, rows);
    assert_int_equal(d->w, cols);
    assert_int_equal(d->n_classes, 10);
    size_t sz;
    unsigned char *img = make_images(0x803, n, rows, cols, &sz), *lab = make_labels(0x801, n, &sz);
    assert_memory_equal(d->pixels, img + 16, (size_t)n * rows * cols);
    assert_memory_equal(d->labels, lab + 8, n);
    free(img), free(lab);
}

/* Writes the pair (raw or gz), loads it and returns the status; d is freed unless ok. */
static dp_status load_pair(const unsigned char *img, size_t isz, const unsigned char *lab, size_t lsz, int gz,
                           const char **ipath, const char **lpath, dp_dataset *d) {
    *ipath = tu_path(gz ? "idx-images.gz" : "idx-images");
    *lpath = tu_path(gz ? "idx-labels.gz" : "idx-labels");
    if (gz) {
        tu_write_gz(*ipath, img, isz);
        tu_write_gz(*lpath, lab, lsz);
    } else {
        tu_write_file(*ipath, img, isz);
        tu_write_file(*lpath, lab, lsz);
    }
    dp_status s = dp_idx_load(*ipath, *lpath, 10, d);
    if (s != DP_OK) {
        assert_null(d->pixels); /* nothing leaks out of a failed load */
        assert_null(d->labels);
        assert_int_equal(d->n, 0);
    }
    return s;
}

static void test_load_exact(void **state) {
    (void)state;
    for (int gz = 0; gz <= 1; gz++) {
        size_t isz, lsz;
        unsigned char *img = make_images(0x803, 5, 3, 4, &isz), *lab = make_labels(0x801, 5, &lsz);
        const char *ip, *lp;
        dp_dataset d;
        assert_int_equal(load_pair(img, isz, lab, lsz, gz, &ip, &lp, &d), DP_OK);
        check_loaded(&d, 5, 3, 4);
        dp_dataset_free(&d);
        assert_null(d.pixels);
        free(img), free(lab);
    }
    /* gz images with raw labels */
    size_t isz, lsz;
    unsigned char *img = make_images(0x803, 300, 28, 28, &isz), *lab = make_labels(0x801, 300, &lsz);
    const char *ip = tu_path("idx-mixed-images.gz"), *lp = tu_path("idx-mixed-labels");
    tu_write_gz(ip, img, isz);
    tu_write_file(lp, lab, lsz);
    dp_dataset d;
    assert_int_equal(dp_idx_load(ip, lp, 10, &d), DP_OK);
    check_loaded(&d, 300, 28, 28);
    dp_dataset_free(&d);
    dp_dataset_free(&d); /* twice is harmless */
    free(img), free(lab);
}

/* Expects status s and a message containing each non-NULL needle. */
static void expect_msg(dp_status got, dp_status want, const char *n1, const char *n2, const char *n3) {
    if (got != want || (n1 && !tu_contains(dp_last_error(), n1)) || (n2 && !tu_contains(dp_last_error(), n2)) ||
        (n3 && !tu_contains(dp_last_error(), n3)))
        fail_msg("status %s (want %s), message '%s', wanted '%s' '%s' '%s'", dp_status_name(got),
                 dp_status_name(want), dp_last_error(), n1 ? n1 : "", n2 ? n2 : "", n3 ? n3 : "");
}

/* Loads the pair, then checks status and message (the paths are known only after the load). */
#define EXPECT_PAIR(img, isz, lab, lsz, gz, want, n1, n2, n3)                    \
    do {                                                                         \
        dp_status got_ = load_pair(img, isz, lab, lsz, gz, &ip, &lp, &d);        \
        expect_msg(got_, want, n1, n2, n3);                                      \
    } while (0)

static void test_missing(void **state) {
    (void)state;
    size_t lsz;
    unsigned char *lab = make_labels(0x801, 5, &lsz);
    const char *lp = tu_path("idx-missing-labels");
    tu_write_file(lp, lab, lsz);
    dp_dataset d;
    expect_msg(dp_idx_load("/nonexistent/dptrain-images", lp, 10, &d), DP_ERR_IO, "/nonexistent/dptrain-images",
               "cannot open", "No such file");
    assert_null(d.pixels);
    expect_msg(dp_idx_load(lp, "/nonexistent/dptrain-labels", 10, &d), DP_ERR_IO, "/nonexistent/dptrain-labels",
               "cannot open", NULL);
    free(lab);
}

static void test_wrong_magic(void **state) {
    (void)state;
    for (int gz = 0; gz <= 1; gz++) {
        size_t isz, lsz;
        const char *ip, *lp;
        dp_dataset d;
        unsigned char *img = make_images(0x801, 5, 3, 4, &isz), *lab = make_labels(0x801, 5, &lsz);
        EXPECT_PAIR(img, isz, lab, lsz, gz, DP_ERR_FORMAT, ip, "0x00000801", "0x00000803");
        free(img);
        img = make_images(0x803, 5, 3, 4, &isz);
        put_be32(lab, 0x12345678);
        EXPECT_PAIR(img, isz, lab, lsz, gz, DP_ERR_FORMAT, lp, "0x12345678", "0x00000801");
        free(img), free(lab);
    }
}

static void test_truncated(void **state) {
    (void)state;
    for (int gz = 0; gz <= 1; gz++) {
        size_t isz, lsz;
        const char *ip, *lp;
        dp_dataset d;
        unsigned char *img = make_images(0x803, 5, 3, 4, &isz), *lab = make_labels(0x801, 5, &lsz);
        /* 16 + 60 bytes expected, 66 present */
        EXPECT_PAIR(img, isz - 10, lab, lsz, gz, DP_ERR_FORMAT, ip, "truncated",
                   "expected 76 bytes");
        assert_true(tu_contains(dp_last_error(), "found 66"));
        EXPECT_PAIR(img, isz, lab, lsz - 1, gz, DP_ERR_FORMAT, lp, "truncated", "13");
        EXPECT_PAIR(img, 10, lab, lsz, gz, DP_ERR_FORMAT, ip, "header", NULL);
        EXPECT_PAIR(img, 0, lab, lsz, gz, DP_ERR_FORMAT, ip, NULL, NULL);
        free(img), free(lab);
    }
    /* a gzip stream cut short */
    size_t isz, lsz;
    unsigned char *img = make_images(0x803, 200, 28, 28, &isz), *lab = make_labels(0x801, 200, &lsz);
    const char *ip = tu_path("idx-cut.gz"), *lp = tu_path("idx-cut-labels");
    tu_write_gz(ip, img, isz);
    tu_write_file(lp, lab, lsz);
    struct stat st;
    assert_int_equal(stat(ip, &st), 0);
    assert_int_equal(truncate(ip, st.st_size / 2), 0);
    dp_dataset d;
    dp_status s = dp_idx_load(ip, lp, 10, &d);
    expect_msg(s, DP_ERR_FORMAT, ip, NULL, NULL);
    assert_null(d.pixels);
    free(img), free(lab);
}

static void test_trailing(void **state) {
    (void)state;
    for (int gz = 0; gz <= 1; gz++) {
        size_t isz, lsz;
        const char *ip, *lp;
        dp_dataset d;
        unsigned char *img = make_images(0x803, 5, 3, 4, &isz), *lab = make_labels(0x801, 5, &lsz);
        unsigned char *img2 = calloc(isz + 3, 1), *lab2 = calloc(lsz + 1, 1);
        assert_non_null(img2);
        assert_non_null(lab2);
        memcpy(img2, img, isz), memcpy(lab2, lab, lsz);
        EXPECT_PAIR(img2, isz + 3, lab, lsz, gz, DP_ERR_FORMAT, ip, "3 unexpected bytes",
                   "76");
        EXPECT_PAIR(img, isz, lab2, lsz + 1, gz, DP_ERR_FORMAT, lp, "1 unexpected bytes",
                   NULL);
        free(img), free(lab), free(img2), free(lab2);
    }
}

static void test_count_mismatch(void **state) {
    (void)state;
    size_t isz, lsz;
    const char *ip, *lp;
    dp_dataset d;
    unsigned char *img = make_images(0x803, 5, 3, 4, &isz), *lab = make_labels(0x801, 4, &lsz);
    EXPECT_PAIR(img, isz, lab, lsz, 0, DP_ERR_FORMAT, ip, lp, "5 images");
    assert_true(tu_contains(dp_last_error(), "4 labels"));
    free(img), free(lab);
}

static void test_label_range(void **state) {
    (void)state;
    size_t isz, lsz;
    const char *ip, *lp;
    dp_dataset d;
    unsigned char *img = make_images(0x803, 5, 3, 4, &isz), *lab = make_labels(0x801, 5, &lsz);
    lab[8 + 2] = 10;
    EXPECT_PAIR(img, isz, lab, lsz, 0, DP_ERR_FORMAT, lp, "byte offset 10", "label 10");
    assert_true(tu_contains(dp_last_error(), "0..9"));
    lab[8 + 2] = 255;
    EXPECT_PAIR(img, isz, lab, lsz, 1, DP_ERR_FORMAT, lp, "label 255", NULL);
    free(img), free(lab);
}

static void test_bad_dims(void **state) {
    (void)state;
    const unsigned dims[][3] = {{0, 3, 4}, {5, 0, 4}, {5, 3, 0}, {5, 100000, 4}, {0x7fffffff, 4000, 4000}};
    for (size_t k = 0; k < sizeof dims / sizeof *dims; k++) {
        size_t isz, lsz;
        const char *ip, *lp;
        dp_dataset d;
        unsigned char *img = make_images(0x803, 1, 1, 1, &isz), *lab = make_labels(0x801, 1, &lsz);
        put_be32(img + 4, dims[k][0]), put_be32(img + 8, dims[k][1]), put_be32(img + 12, dims[k][2]);
        put_be32(lab + 4, dims[k][0]);
        EXPECT_PAIR(img, isz, lab, lsz, 0, DP_ERR_FORMAT, ip,
                   k < 3 ? "is 0" : "absurd", NULL);
        free(img), free(lab);
    }
}

/* dp_dataset_load: names, class names, normalisation, .gz preferred over raw, missing files. */
static void test_dataset_dispatch(void **state) {
    (void)state;
    assert_true(dp_dataset_known("mnist"));
    assert_true(dp_dataset_known("fashion-mnist"));
    assert_true(dp_dataset_known("cifar10"));
    assert_true(dp_dataset_known("synthetic"));
    assert_false(dp_dataset_known("imagenet"));
    assert_false(dp_dataset_known(NULL));
    assert_string_equal(dp_dataset_default_dir("fashion-mnist"), "/usr/share/datasets/fashion-mnist");
    assert_string_equal(dp_dataset_default_dir("mnist"), "/usr/share/datasets/mnist");
    assert_string_equal(dp_dataset_default_dir("cifar10"), "/usr/share/datasets/cifar10");
    assert_string_equal(dp_dataset_default_dir("synthetic"), "");

    char dir[512];
    snprintf(dir, sizeof dir, "%s", tu_path("idx-dir"));
    mkdir(dir, 0755);
    char ip[600], lp[600];
    size_t isz, lsz;
    unsigned char *img = make_images(0x803, 6, 28, 28, &isz), *lab = make_labels(0x801, 6, &lsz);
    snprintf(ip, sizeof ip, "%s/train-images-idx3-ubyte", dir);
    snprintf(lp, sizeof lp, "%s/train-labels-idx1-ubyte", dir);
    remove(ip), remove(lp);
    dp_data_spec spec = {.name = "mnist", .dir = dir};
    dp_dataset d;
    /* neither file: both names and where to get them */
    expect_msg(dp_dataset_load(&spec, 1, &d), DP_ERR_IO, "train-images-idx3-ubyte.gz", "--data", NULL);
    char both[700];
    snprintf(both, sizeof both, "%s/train-images-idx3-ubyte exists", dir);
    expect_msg(dp_dataset_load(&spec, 1, &d), DP_ERR_IO, both, NULL, NULL);

    tu_write_file(ip, img, isz);
    tu_write_file(lp, lab, lsz);
    assert_int_equal(dp_dataset_load(&spec, 1, &d), DP_OK);
    assert_string_equal(d.name, "mnist");
    check_loaded(&d, 6, 28, 28);
    assert_float_equal(d.mean[0], 0.1307f, 1e-7);
    assert_float_equal(d.std[0], 0.3081f, 1e-7);
    assert_non_null(d.class_names);
    assert_string_equal(d.class_names[0], "0");
    assert_string_equal(d.class_names[9], "9");
    dp_dataset_free(&d);

    /* a .gz beside the raw file wins: give it a different first pixel */
    char gp[620];
    snprintf(gp, sizeof gp, "%s.gz", ip);
    img[16] ^= 0xFF;
    tu_write_gz(gp, img, isz);
    spec.name = "fashion-mnist";
    assert_int_equal(dp_dataset_load(&spec, 1, &d), DP_OK);
    assert_int_equal(d.pixels[0], img[16]);
    assert_string_equal(d.name, "fashion-mnist");
    assert_float_equal(d.mean[0], 0.2860f, 1e-7);
    assert_float_equal(d.std[0], 0.3530f, 1e-7);
    assert_string_equal(d.class_names[0], "T-shirt/top");
    assert_string_equal(d.class_names[9], "Ankle boot");
    dp_dataset_free(&d);

    /* the test split has its own names */
    expect_msg(dp_dataset_load(&spec, 0, &d), DP_ERR_IO, "t10k-images-idx3-ubyte", "dataset-fashion-mnist", NULL);
    spec.name = "imagenet";
    expect_msg(dp_dataset_load(&spec, 0, &d), DP_ERR_USAGE, "imagenet", NULL, NULL);
    remove(gp), remove(ip), remove(lp), rmdir(dir);
    free(img), free(lab);
}

static void test_real_fashion_mnist(void **state) {
    (void)state;
    struct stat st;
    if (stat("/usr/share/datasets/fashion-mnist", &st) != 0) skip();
    dp_data_spec spec = {.name = "fashion-mnist", .dir = NULL}; /* NULL dir: the default */
    dp_dataset d;
    for (int train = 1; train >= 0; train--) {
        dp_status s = dp_dataset_load(&spec, train, &d);
        if (s != DP_OK) fail_msg("%s", dp_last_error());
        assert_int_equal(d.n, train ? 60000 : 10000);
        assert_int_equal(d.c, 1);
        assert_int_equal(d.h, 28);
        assert_int_equal(d.w, 28);
        assert_int_equal(d.n_classes, 10);
        int hist[10] = {0};
        for (int i = 0; i < d.n; i++) hist[d.labels[i]]++;
        for (int k = 0; k < 10; k++) assert_int_equal(hist[k], train ? 6000 : 1000);
        if (train) {
            /* the normalisation constants are the training set's */
            double sum = 0;
            for (size_t i = 0; i < (size_t)d.n * 784; i++) sum += d.pixels[i];
            assert_float_equal(sum / ((double)d.n * 784) / 255.0, d.mean[0], 5e-4);
        }
        dp_dataset_free(&d);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_exact),     cmocka_unit_test(test_missing),
        cmocka_unit_test(test_wrong_magic),    cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_trailing),       cmocka_unit_test(test_count_mismatch),
        cmocka_unit_test(test_label_range),    cmocka_unit_test(test_bad_dims),
        cmocka_unit_test(test_dataset_dispatch), cmocka_unit_test(test_real_fashion_mnist),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
