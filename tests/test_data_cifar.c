/* CIFAR-10 binary reading: both splits loaded exactly and in file order, from DIR or
 * DIR/cifar-10-batches-bin; bad sizes, bad labels and missing files refused with the file named. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/dataset.h"

#define REC 3073

/* Record r of file f: label (f * 7 + r) % 10, pixel p = (f * 53 + r * 11 + p * 3) & 255. */
static unsigned char *make_batch(int f, int records) {
    unsigned char *b = malloc((size_t)records * REC);
    assert_non_null(b);
    for (int r = 0; r < records; r++) {
        unsigned char *rec = b + (size_t)r * REC;
        rec[0] = (unsigned char)((f * 7 + r) % 10);
        for (int p = 0; p < 3072; p++) rec[1 + p] = (unsigned char)((f * 53 + r * 11 + p * 3) & 255);
    }
    return b;
}

static void write_batch(const char *dir, const char *name, int f, int records) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unsigned char *b = make_batch(f, records);
    tu_write_file(path, b, (size_t)records * REC);
    free(b);
}

/* Train files 1..5 hold 1..5 records (15 in all); the test file 4 records (f = 0). */
static void write_all(const char *dir) {
    mkdir(dir, 0755);
    for (int f = 1; f <= 5; f++) {
        char name[32];
        snprintf(name, sizeof name, "data_batch_%d.bin", f);
        write_batch(dir, name, f, f);
    }
    write_batch(dir, "test_batch.bin", 0, 4);
}

static void check_split(const dp_dataset *d, int train) {
    assert_int_equal(d->n, train ? 15 : 4);
    assert_int_equal(d->c, 3);
    assert_int_equal(d->h, 32);
    assert_int_equal(d->w, 32);
    assert_int_equal(d->n_classes, 10);
    int i = 0;
    for (int f = train ? 1 : 0; f <= (train ? 5 : 0); f++) {
        int records = train ? f : 4;
        unsigned char *b = make_batch(f, records);
        for (int r = 0; r < records; r++, i++) {
            assert_int_equal(d->labels[i], b[(size_t)r * REC]);
            assert_memory_equal(d->pixels + (size_t)i * 3072, b + (size_t)r * REC + 1, 3072);
        }
        free(b);
    }
    assert_int_equal(i, d->n);
}

static void expect_msg(dp_status got, dp_status want, const char *n1, const char *n2, const char *n3) {
    if (got != want || (n1 && !tu_contains(dp_last_error(), n1)) || (n2 && !tu_contains(dp_last_error(), n2)) ||
        (n3 && !tu_contains(dp_last_error(), n3)))
        fail_msg("status %s (want %s), message '%s', wanted '%s' '%s' '%s'", dp_status_name(got),
                 dp_status_name(want), dp_last_error(), n1 ? n1 : "", n2 ? n2 : "", n3 ? n3 : "");
}

static void test_load(void **state) {
    (void)state;
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tu_path("cifar"));
    write_all(dir);
    dp_dataset d;
    for (int train = 0; train <= 1; train++) {
        assert_int_equal(dp_cifar10_load(dir, train, &d), DP_OK);
        check_split(&d, train);
        dp_dataset_free(&d);
    }
    /* through the data-set dispatch: names and normalisation */
    dp_data_spec spec = {.name = "cifar10", .dir = dir};
    assert_int_equal(dp_dataset_load(&spec, 1, &d), DP_OK);
    check_split(&d, 1);
    assert_string_equal(d.name, "cifar10");
    const float mean[3] = {0.4914f, 0.4822f, 0.4465f}, std[3] = {0.2470f, 0.2435f, 0.2616f};
    for (int ch = 0; ch < 3; ch++) {
        assert_float_equal(d.mean[ch], mean[ch], 1e-7);
        assert_float_equal(d.std[ch], std[ch], 1e-7);
    }
    assert_string_equal(d.class_names[0], "airplane");
    assert_string_equal(d.class_names[1], "automobile");
    assert_string_equal(d.class_names[9], "truck");
    dp_dataset_free(&d);
}

static void test_subdir(void **state) {
    (void)state;
    char dir[512], sub[600];
    snprintf(dir, sizeof dir, "%s", tu_path("cifar-parent"));
    mkdir(dir, 0755);
    snprintf(sub, sizeof sub, "%s/cifar-10-batches-bin", dir);
    write_all(sub);
    dp_dataset d;
    assert_int_equal(dp_cifar10_load(dir, 1, &d), DP_OK);
    check_split(&d, 1);
    dp_dataset_free(&d);
    assert_int_equal(dp_cifar10_load(dir, 0, &d), DP_OK);
    check_split(&d, 0);
    dp_dataset_free(&d);
}

static void test_bad_files(void **state) {
    (void)state;
    char dir[512], path[700];
    snprintf(dir, sizeof dir, "%s", tu_path("cifar-bad"));
    dp_dataset d;

    /* size not a multiple of 3073 */
    write_all(dir);
    snprintf(path, sizeof path, "%s/data_batch_3.bin", dir);
    unsigned char *b = make_batch(3, 3);
    tu_write_file(path, b, 2 * REC + 5);
    expect_msg(dp_cifar10_load(dir, 1, &d), DP_ERR_FORMAT, path, "6151", "3073");
    assert_null(d.pixels);
    /* empty file */
    tu_write_file(path, b, 0);
    expect_msg(dp_cifar10_load(dir, 1, &d), DP_ERR_FORMAT, path, "size 0", NULL);
    free(b);

    /* a label above 9 in the second record of the test file */
    write_all(dir);
    snprintf(path, sizeof path, "%s/test_batch.bin", dir);
    b = make_batch(0, 4);
    b[REC] = 10;
    tu_write_file(path, b, 4 * REC);
    expect_msg(dp_cifar10_load(dir, 0, &d), DP_ERR_FORMAT, path, "byte offset 3073", "label 10");
    assert_null(d.pixels);
    free(b);

    /* a missing training file */
    write_all(dir);
    snprintf(path, sizeof path, "%s/data_batch_4.bin", dir);
    assert_int_equal(remove(path), 0);
    expect_msg(dp_cifar10_load(dir, 1, &d), DP_ERR_IO, path, "cannot open", NULL);
    assert_int_equal(dp_cifar10_load(dir, 0, &d), DP_OK); /* the test split is still fine */
    dp_dataset_free(&d);

    /* nothing there at all */
    expect_msg(dp_cifar10_load("/nonexistent/dptrain-cifar", 1, &d), DP_ERR_IO, "/nonexistent/dptrain-cifar",
               "cifar-10-batches-bin", "--data");
    dp_data_spec spec = {.name = "cifar10", .dir = "/nonexistent/dptrain-cifar"};
    expect_msg(dp_dataset_load(&spec, 0, &d), DP_ERR_IO, "test_batch.bin", "cifar-10-binary.tar.gz", NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load),
        cmocka_unit_test(test_subdir),
        cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
