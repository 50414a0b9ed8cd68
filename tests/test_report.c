/* The console and the --log file as a user meets them: JSON escaping of any byte (a data
 * directory named with byte 0xff), a log on a full device or a full 4 KiB tmpfs (a clear
 * message, exit 1, only complete lines kept), the start-time check of the log's directory, a
 * closed stdout (EPIPE: a message, no silent kill), and the progress bar's layout at any
 * terminal width. */
#include "testutil.h"

#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "report/json.h"
#include "report/progress.h"

#define SYNTH "--dataset synthetic --shape 1x28x28 --classes 10 --threads 1 --workers 0 --no-progress"

static void put_be32(unsigned char *p, unsigned v) {
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8),
    p[3] = (unsigned char)v;
}

static void write_idx(const char *d, const char *split, int n) {
    size_t isz = 16 + (size_t)n * 784, lsz = 8 + (size_t)n;
    unsigned char *img = calloc(isz, 1), *lab = calloc(lsz, 1);
    assert_non_null(img);
    assert_non_null(lab);
    put_be32(img, 0x803), put_be32(img + 4, (unsigned)n), put_be32(img + 8, 28), put_be32(img + 12, 28);
    put_be32(lab, 0x801), put_be32(lab + 4, (unsigned)n);
    for (int i = 0; i < n; i++) lab[8 + i] = (unsigned char)(i % 10);
    for (size_t i = 16; i < isz; i++) img[i] = (unsigned char)(i * 7);
    char ip[700], lp[700];
    snprintf(ip, sizeof ip, "%s/%s-images-idx3-ubyte", d, split);
    snprintf(lp, sizeof lp, "%s/%s-labels-idx1-ubyte", d, split);
    tu_write_file(ip, img, isz);
    tu_write_file(lp, lab, lsz);
    free(img), free(lab);
}

/* 1 if every line of path is a JSON object (python3's json module), the file ending in '\n'. */
static int log_parses(const char *path) {
    char *out;
    int rc = tu_sh(&out, "python3 -c 'import json,sys; d=open(sys.argv[1],\"rb\").read(); "
                         "assert not d or d.endswith(b\"\\n\"), \"half line\"; "
                         "[json.loads(l) for l in d.decode(\"utf-8\").splitlines()]' '%s'", path);
    if (rc != 0) print_message("%s does not parse:\n%s\n", path, out);
    free(out);
    return rc == 0;
}

/* A line as cJSON prints it (json.h): strings repaired to UTF-8 then escaped, reals at their format, NaN and
 * Inf as null, integers exact; python3's json module reads every value back. */
static void test_json_line(void **state) {
    (void)state;
    dp_json j = dp_json_begin("t");
    /* quote, backslash, newline, tab, a control byte, DEL, valid UTF-8 (e-acute, euro sign), a lone
     * 0xff, a truncated sequence, an overlong '/' and a UTF-16 surrogate */
    dp_json_str(&j, "s", "a\"b\\c\n\t\x01\x7f \xc3\xa9\xe2\x82\xac \xff \xe2\x82 \xc0\xaf \xed\xa0\x80");
    dp_json_str(&j, "null", NULL);
    dp_json_real(&j, "loss", "%.9g", (float)2.302585);
    dp_json_real(&j, "acc", "%.6f", 0.5);
    dp_json_real(&j, "nan", "%.9g", NAN);
    dp_json_real(&j, "inf", "%.6f", -INFINITY);
    dp_json_int(&j, "big", 9007199254740993LL); /* 2^53 + 1: a double would round it */
    dp_json_uint(&j, "seed", 18446744073709551615ULL);
    cJSON *a = dp_json_array(&j, "per_class");
    dp_json_element(&j, a);
    dp_json_int(&j, "k", 0);
    dp_json_element(&j, a);
    dp_json_int(&j, "k", 1);
    dp_json_at_root(&j);
    dp_json_int(&j, "last", 7);
    char *text = dp_json_print(&j);
    dp_json_free(&j);
    assert_non_null(text);
    const char *want = "{\"event\":\"t\",\"s\":\"a\\\"b\\\\c\\n\\t\\u0001\x7f \xc3\xa9\xe2\x82\xac \xef\xbf\xbd "
                       "\xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\",\"null\":\"\","
                       "\"loss\":2.30258489,\"acc\":0.500000,\"nan\":null,\"inf\":null,\"big\":9007199254740993,"
                       "\"seed\":18446744073709551615,\"per_class\":[{\"k\":0},{\"k\":1}],\"last\":7}";
    if (strcmp(text, want) != 0) fail_msg("got  %s\nwant %s", text, want);
    /* and python3 reads it as the values put in */
    const char *f = tu_path("line.json");
    tu_write_file(f, text, strlen(text));
    cJSON_free(text);
    char *out;
    int rc = tu_sh(&out, "python3 -c 'import json,sys; d=json.loads(open(sys.argv[1],\"rb\").read().decode(\"utf-8\")); "
                         "assert d[\"s\"] == \"a\\\"b\\\\c\\n\\t\\x01\\x7f \\xe9\\u20ac \\ufffd \\ufffd\\ufffd \\ufffd\\ufffd "
                         "\\ufffd\\ufffd\\ufffd\", d[\"s\"]; assert d[\"loss\"] == 2.30258489 and d[\"nan\"] is None; "
                         "assert d[\"big\"] == 2**53 + 1 and d[\"per_class\"][1][\"k\"] == 1' '%s'", f);
    if (rc != 0) fail_msg("python3 does not read the line back:\n%s", out);
    free(out);
}

static void test_log_non_utf8_data_path(void **state) {
    (void)state;
    char d[600], log[700], *out;
    snprintf(d, sizeof d, "%s", tu_path("data-\xff\x01-dir"));
    mkdir(d, 0755);
    write_idx(d, "train", 64);
    write_idx(d, "t10k", 20);
    snprintf(log, sizeof log, "%s/run.jsonl", d);
    int rc = tu_run_dptrain(&out, "train --dataset mnist --data '%s' --epochs 1 --batch-size 16 --threads 1 "
                            "--workers 0 --no-progress --log '%s'", d, log);
    if (rc != 0) fail_msg("train failed (%d):\n%s", rc, out);
    free(out);
    assert_true(log_parses(log));
    /* the directory is in the config line, the bad byte replaced (U+FFFD) and the control byte escaped */
    assert_int_equal(tu_sh(&out, "grep -c 'data-\xef\xbf\xbd\\\\u0001-dir' '%s'", log), 0);
    free(out);
}

static void test_log_dev_full(void **state) {
    (void)state;
    char *out;
    int rc = tu_run_dptrain(&out, "train " SYNTH " --samples 200 --epochs 1 --log /dev/full");
    if (rc != 1 || !tu_contains(out, "--log /dev/full: writing failed") || !tu_contains(out, "No space left"))
        fail_msg("expected exit 1 and a message naming /dev/full, got %d:\n%s", rc, out);
    free(out);
}

static void test_log_directory_checked_at_start(void **state) {
    (void)state;
    char *out;
    int rc = tu_run_dptrain(&out, "train " SYNTH " --samples 200 --epochs 1 --log /nonexistent-dir/run.jsonl");
    if (rc != 1 || !tu_contains(out, "--log /nonexistent-dir/run.jsonl") || tu_contains(out, "epoch 1"))
        fail_msg("expected exit 1 before training, naming the path, got %d:\n%s", rc, out);
    free(out);
    rc = tu_run_dptrain(&out, "train " SYNTH " --samples 200 --epochs 1 --log /");
    if (rc != 1 || !tu_contains(out, "dptrain: --log /: is a directory")) fail_msg("--log /: got %d:\n%s", rc, out);
    free(out);
    /* messages name the flag as it was given */
    rc = tu_run_dptrain(&out, "train " SYNTH " --samples 200 --epochs 1 --log-file /");
    if (rc != 1 || !tu_contains(out, "dptrain: --log-file /: is a directory"))
        fail_msg("--log-file /: got %d:\n%s", rc, out);
    free(out);
    /* a FIFO nobody reads: said so, not "No such device or address" */
    const char *fifo = tu_path("log.fifo");
    unlink(fifo);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    rc = tu_run_dptrain(&out, "train " SYNTH " --samples 200 --epochs 1 --log-file %s", fifo);
    if (rc != 1 || !tu_contains(out, ": is a FIFO (named pipe) that no process reads"))
        fail_msg("--log-file FIFO: got %d:\n%s", rc, out);
    free(out);
    unlink(fifo);
}

/* A one-page (4 KiB) tmpfs fills during the first epoch: the run stops there with a message and the file
 * holds complete lines only. Needs root (mount); skipped otherwise. */
static void test_log_full_filesystem(void **state) {
    (void)state;
    char mnt[600], log[700], *out;
    snprintf(mnt, sizeof mnt, "%s", tu_path("tmpfs4k"));
    mkdir(mnt, 0755);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=4k") != 0) {
        rmdir(mnt);
        skip(); /* not root, or no mount rights in this container */
    }
    snprintf(log, sizeof log, "%s/run.jsonl", mnt);
    int rc = tu_run_dptrain(&out, "train " SYNTH " --samples 400 --batch-size 4 --epochs 3 --log %s", log);
    int ok = rc == 1 && tu_contains(out, "writing failed after") && tu_contains(out, log) &&
             !tu_contains(out, "epoch 2/3");
    if (!ok) print_message("exit %d:\n%s\n", rc, out);
    free(out);
    int parses = log_parses(log);
    umount(mnt);
    rmdir(mnt);
    assert_true(ok);
    assert_true(parses);
}

/* stdout is a pipe whose reader is gone: the first console line fails with EPIPE, and the run
 * stops with a message on stderr instead of dying of SIGPIPE. */
static void test_closed_stdout(void **state) {
    (void)state;
    const char *bin = getenv("DPTRAIN");
    if (!bin) bin = "./dptrain";
    const char *errf = tu_path("epipe.err");
    int p[2];
    assert_int_equal(pipe(p), 0);
    close(p[0]);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(p[1], STDOUT_FILENO);
        int e = open(errf, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(e, STDERR_FILENO);
        signal(SIGPIPE, SIG_DFL); /* as a shell would leave it */
        execl(bin, bin, "train", "--dataset", "synthetic", "--shape", "1x28x28", "--samples", "200", "--epochs", "2",
              "--threads", "1", "--workers", "0", "--no-progress", (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    char *err;
    tu_sh(&err, "cat '%s'", errf);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 1 || !tu_contains(err, "broken pipe"))
        fail_msg("expected exit 1 with a broken-pipe message, got status 0x%x:\n%s", st, err);
    free(err);
}

static void check_width(const dp_progress *p, int width) {
    char buf[512];
    int n = dp_progress_render(buf, sizeof buf, width, p);
    assert_int_equal(n, (int)strlen(buf));
    if (n > width - 1 && !(width <= 1 && n == 0)) fail_msg("width %d: %d characters: '%s'", width, n, buf);
    assert_null(strchr(buf, '\n'));
}

static void test_progress_layout(void **state) {
    (void)state;
    dp_progress p = {.epoch = 3, .epochs = 10, .batch = 120, .n_batches = 938, .loss = 0.43214, .images_per_s = 5234,
                     .elapsed_s = 6.0};
    char buf[512];
    dp_progress_render(buf, sizeof buf, 120, &p);
    /* 818 batches left at 20 batches/s: 40.9 s */
    assert_non_null(strstr(buf, "epoch 3/10 ["));
    assert_non_null(strstr(buf, "] 120/938 loss 0.4321 ETA 0:41 5234 img/s"));
    dp_progress_render(buf, sizeof buf, 80, &p);
    assert_non_null(strstr(buf, "epoch 3/10 ["));
    assert_non_null(strstr(buf, "ETA 0:41"));
    assert_true(strlen(buf) <= 79);
    /* narrow: the bar and the less useful figures go first, the epoch stays */
    dp_progress_render(buf, sizeof buf, 24, &p);
    assert_non_null(strstr(buf, "epoch 3/10"));
    for (int w = 0; w <= 200; w++) check_width(&p, w);
    /* no batch yet: no ETA figure; a long run: hours */
    p.batch = 0;
    dp_progress_render(buf, sizeof buf, 120, &p);
    assert_non_null(strstr(buf, "ETA --:--"));
    p.batch = 1, p.elapsed_s = 10;
    dp_progress_render(buf, sizeof buf, 120, &p);
    assert_non_null(strstr(buf, "ETA 2:36:10"));
    for (int w = 0; w <= 200; w++) check_width(&p, w);
}

static void test_progress_not_under_mpi(void **state) {
    (void)state;
    unsetenv("OMPI_COMM_WORLD_SIZE"), unsetenv("PMI_SIZE"), unsetenv("PMIX_RANK"), unsetenv("PMI_RANK");
    assert_int_equal(dp_under_mpi_launcher(), 0);
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    assert_int_equal(dp_under_mpi_launcher(), 1);
    assert_int_equal(dp_progress_wanted(-1, STDOUT_FILENO), 0); /* even on a terminal */
    assert_int_equal(dp_progress_wanted(1, STDOUT_FILENO), 1);  /* --progress forces it */
    unsetenv("OMPI_COMM_WORLD_SIZE");
    setenv("PMIX_RANK", "0", 1);
    assert_int_equal(dp_under_mpi_launcher(), 1);
    unsetenv("PMIX_RANK");
    /* the width: $COLUMNS when stdout is not a terminal (ctest captures it) */
    if (!isatty(STDOUT_FILENO)) {
        setenv("COLUMNS", "57", 1);
        assert_int_equal(dp_terminal_width(STDOUT_FILENO), 57);
        setenv("COLUMNS", "junk", 1);
        assert_int_equal(dp_terminal_width(STDOUT_FILENO), 80);
        unsetenv("COLUMNS");
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_line),
        cmocka_unit_test(test_log_non_utf8_data_path),
        cmocka_unit_test(test_log_dev_full),
        cmocka_unit_test(test_log_directory_checked_at_start),
        cmocka_unit_test(test_log_full_filesystem),
        cmocka_unit_test(test_closed_stdout),
        cmocka_unit_test(test_progress_layout),
        cmocka_unit_test(test_progress_not_under_mpi),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
