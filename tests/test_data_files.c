/* Readers against inputs a user can hand them by mistake: a directory or a FIFO where a data
 * file belongs (a message naming it, never a hang), an IDX header announcing far more than the
 * file holds (refused before allocating it, raw and gzip), and runs too large for the machine
 * (refused at start with the estimate and the memory available, instead of the OOM killer). */
#include "testutil.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/sysmem.h"
#include "data/dataset.h"

static void put_be32(unsigned char *p, unsigned v) {
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8),
    p[3] = (unsigned char)v;
}

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "a reader blocked: timed out\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(1);
}

static void expect_fail(dp_status s, const char *a, const char *b) {
    if (s == DP_OK || !tu_contains(dp_last_error(), a) || (b && !tu_contains(dp_last_error(), b)))
        fail_msg("status %s, message '%s', wanted '%s' and '%s'", dp_status_name(s), dp_last_error(), a, b ? b : "");
}

static void test_fifo_and_directory(void **state) {
    (void)state;
    signal(SIGALRM, on_alarm);
    alarm(20); /* the bug was a hang: fail instead of blocking ctest */
    char d[600], img[700], lab[700];
    snprintf(d, sizeof d, "%s", tu_path("files-kinds"));
    mkdir(d, 0755);
    snprintf(img, sizeof img, "%s/train-images-idx3-ubyte", d);
    snprintf(lab, sizeof lab, "%s/train-labels-idx1-ubyte", d);
    remove(img);
    assert_int_equal(mkfifo(img, 0644), 0);
    mkdir(lab, 0755);
    dp_dataset ds;
    expect_fail(dp_idx_load(img, lab, 10, &ds), img, "is a FIFO (named pipe), expected a regular file");
    remove(img);
    tu_write_file(img, "x", 1);
    expect_fail(dp_idx_load(img, lab, 10, &ds), lab, "is a directory, expected a regular file");
    /* CIFAR-10: a directory where a batch file belongs, and a FIFO */
    char cd[600], p[700];
    snprintf(cd, sizeof cd, "%s", tu_path("files-cifar"));
    mkdir(cd, 0755);
    snprintf(p, sizeof p, "%s/test_batch.bin", cd);
    assert_int_equal(mkfifo(p, 0644), 0);
    expect_fail(dp_cifar10_load(cd, 0, &ds), "test_batch.bin", "FIFO");
    remove(p);
    unsigned char rec[3073] = {0};
    tu_write_file(p, rec, sizeof rec);
    for (int i = 1; i <= 5; i++) {
        snprintf(p, sizeof p, "%s/data_batch_%d.bin", cd, i);
        if (i == 3) mkdir(p, 0755);
        else tu_write_file(p, rec, sizeof rec);
    }
    expect_fail(dp_cifar10_load(cd, 1, &ds), "data_batch_3.bin", "is a directory, expected a regular file");
    /* the CLI: exit 1 and the message */
    char *out;
    int rc = tu_run_dptrain(&out, "train --dataset mnist --data %s --epochs 1", d);
    if (rc != 1 || !tu_contains(out, "expected a regular file")) fail_msg("exit %d:\n%s", rc, out);
    free(out);
    alarm(0);
}

/* A 40-byte file whose header announces 10 million 28x28 images (7.8 GB). */
static void test_header_larger_than_file(void **state) {
    (void)state;
    unsigned char img[40] = {0}, lab[8 + 24] = {0};
    put_be32(img, 0x803), put_be32(img + 4, 10000000), put_be32(img + 8, 28), put_be32(img + 12, 28);
    put_be32(lab, 0x801), put_be32(lab + 4, 10000000);
    struct rusage r0, r1;
    for (int gz = 0; gz <= 1; gz++) {
        const char *ip = tu_path(gz ? "huge-hdr-img.gz" : "huge-hdr-img"), *lp = tu_path("huge-hdr-lab");
        if (gz) tu_write_gz(ip, img, sizeof img);
        else tu_write_file(ip, img, sizeof img);
        tu_write_file(lp, lab, sizeof lab);
        getrusage(RUSAGE_SELF, &r0);
        dp_dataset ds;
        expect_fail(dp_idx_load(ip, lp, 10, &ds), ip, "truncated");
        getrusage(RUSAGE_SELF, &r1);
        assert_null(ds.pixels);
        /* the peak grew by far less than the 7.8 GB announced (ru_maxrss is in KiB) */
        if (r1.ru_maxrss - r0.ru_maxrss > 200 * 1024)
            fail_msg("gz=%d: peak memory grew by %ld KiB reading a 40-byte file", gz, r1.ru_maxrss - r0.ru_maxrss);
    }
}

/* Runs the machine cannot hold are refused at once with the estimate and what is available. */
static void test_run_too_large(void **state) {
    (void)state;
    static const char *const cases[] = {
        "train --model resnet18 --dataset synthetic --shape 3x1024x1024 --samples 4 --batch-size 65536",
        "train --model lenet --dataset synthetic --shape 3x1024x1024 --samples 2 --batch-size 1048576",
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *out;
        int rc = tu_run_dptrain(&out, "%s --epochs 1 --no-progress", cases[i]);
        if (rc != 1 || !tu_contains(out, "this run needs about") || !tu_contains(out, "is available") ||
            tu_contains(out, "epoch 1"))
            fail_msg("%s: exit %d:\n%s", cases[i], rc, out);
        free(out);
    }
    dp_mem_avail a;
    dp_memory_available(&a);
    assert_true(a.bytes > 0);
    assert_true(a.source[0] != '\0');
    assert_int_equal(dp_memory_check(1ull << 62, "a test"), DP_ERR_NOMEM);
    assert_true(tu_contains(dp_last_error(), "a test needs 4194304.0 TiB"));
    assert_int_equal(dp_memory_check(1024, "a test"), DP_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifo_and_directory),
        cmocka_unit_test(test_header_larger_than_file),
        cmocka_unit_test(test_run_too_large),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
