/* The command line as a user meets it: help and version, every flag's bad values, bad data
 * files, no partial output files, NaN detection, save / eval round trip. Runs the dptrain
 * binary ($DPTRAIN) on small IDX files the test writes. */
#include "testutil.h"
#include "dp_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[512];   /* a valid tiny mnist-format data set */

static void put_be32(unsigned char *p, unsigned v) {
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8),
    p[3] = (unsigned char)v;
}

/* n images of 28x28 whose brightness pattern depends on the label, so training learns. */
static void write_idx(const char *d, const char *split, int n, unsigned img_magic, int label_max, int truncate) {
    size_t isz = 16 + (size_t)n * 784, lsz = 8 + (size_t)n;
    unsigned char *img = calloc(isz, 1), *lab = calloc(lsz, 1);
    assert_non_null(img);
    assert_non_null(lab);
    put_be32(img, img_magic), put_be32(img + 4, (unsigned)n), put_be32(img + 8, 28), put_be32(img + 12, 28);
    put_be32(lab, 0x801), put_be32(lab + 4, (unsigned)n);
    for (int i = 0; i < n; i++) {
        int y = i % 10;
        lab[8 + i] = (unsigned char)(i == n - 1 && label_max > 9 ? label_max : y);
        for (int p = 0; p < 784; p++) img[16 + (size_t)i * 784 + p] = (unsigned char)(((p / 28) % 10 == y) ? 200 : (p * 7 + i) % 50);
    }
    char ip[600], lp[600];
    snprintf(ip, sizeof ip, "%s/%s-images-idx3-ubyte", d, split);
    snprintf(lp, sizeof lp, "%s/%s-labels-idx1-ubyte", d, split);
    tu_write_file(ip, img, truncate ? isz - 100 : isz);
    tu_write_file(lp, lab, lsz);
    free(img), free(lab);
}

static void make_dataset(const char *d, unsigned magic, int bad_label, int truncate) {
    mkdir(d, 0755);
    write_idx(d, "train", 512, magic, bad_label, truncate);
    write_idx(d, "t10k", 100, 0x803, 0, 0);
}

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "%s", tu_path("cli-data"));
    make_dataset(dir, 0x803, 0, 0);
    return 0;
}

static int exists(const char *p) { return access(p, F_OK) == 0; }

/* Runs with args; expects exit code `code` and every needle in the output. */
static void expect(int code, const char *args, const char *needle) {
    char *out;
    int rc = tu_run_dptrain(&out, "%s", args);
    if (rc != code || (needle && !tu_contains(out, needle)))
        fail_msg("dptrain %s\n  exit %d (expected %d), output:\n%s\n  (expected to contain '%s')", args, rc, code, out,
                 needle ? needle : "");
    /* a usage or runtime error is one line, not a crash */
    if (code != 0) {
        assert_false(tu_contains(out, "Segmentation"));
        assert_false(tu_contains(out, "AddressSanitizer"));
    }
    free(out);
}

static void test_help_version(void **state) {
    (void)state;
    expect(0, "--help", "usage: dptrain");
    expect(0, "--version", "backends: sim");
    /* the devices line is the registry's: what this build has, and what it left out */
#if DP_HAVE_CUDA
    expect(0, "--version", "devices: cpu (OpenMP), cuda (cuBLAS");
#else
    expect(0, "--version", "devices: cpu (OpenMP), cuda (not built)");
    expect(0, "--help", "--device D           sim and nccl: where the replicas compute (cuda: every replica on one "
                        "GPU with sim): cpu, cuda (default cpu)");
    expect(1, "--dataset synthetic --device cuda", "dptrain: --device cuda: this dptrain was built without CUDA");
#endif
    expect(0, "train --help", "--batch-size");
}

static void test_bad_flags(void **state) {
    (void)state;
    static const struct { const char *args, *needle; } cases[] = {
        {"--frobnicate", "--frobnicate"},
        {"--epochs", "--epochs"},
        {"--epochs abc", "--epochs"},
        {"--epochs 0", "--epochs"},
        {"--epochs -3", "--epochs"},
        {"--epochs 5x", "--epochs"},
        {"--max-steps -1", "--max-steps"},
        {"--batch-size 0", "--batch-size"},
        {"--batch-size 99999999999", "--batch-size"},
        {"--lr 0", "--lr"},
        {"--lr -0.1", "--lr"},
        {"--lr nan", "--lr"},
        {"--lr inf", "--lr"},
        {"--lr 1e999", "--lr"},
        {"--momentum 1", "--momentum"},
        {"--momentum -0.5", "--momentum"},
        {"--weight-decay -1", "--weight-decay"},
        {"--nesterov --momentum 0", "--nesterov"},
        {"--lr-steps 20,10", "--lr-steps"},
        {"--lr-steps 10,", "--lr-steps"},
        {"--lr-steps x", "--lr-steps"},
        {"--lr-gamma 0", "--lr-gamma"},
        {"--lr-scale cubic", "--lr-scale"},
        {"--warmup-epochs -1", "--warmup-epochs"},
        {"--seed -1", "--seed"},
        {"--workers 1000", "--workers"},
        {"--threads 0", "--threads"},
        {"--replicas 0", "--replicas"},
        {"--replicas 5000", "--replicas"},
        {"--mode ddpp", "--mode"},
        {"--bucket-mb 0", "--bucket-mb"},
        {"--accumulate 0", "--accumulate"},
        {"--allreduce butterfly", "--allreduce"},
        {"--model vgg16", "vgg16"},
        {"--dataset imagenet", "imagenet"},
        {"--backend gloo", "gloo"},
        {"--shape 3x32x32", "--shape"},
        {"--dataset synthetic --shape 4x8x8", "--shape"},
        {"--dataset synthetic --shape 3x32", "--shape"},
        {"--dataset synthetic --classes 1", "--classes"},
        {"--dataset synthetic --samples 0", "--samples"},
        {"--backend mpi --replicas 2", "--replicas"},
        {"eval", "--load"},
        {"fit", "fit"},
        {"train extra", "extra"},
        {"--mode dp --accumulate 2", "--accumulate"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) expect(2, cases[i].args, cases[i].needle);
}

static void test_batch_smaller_than_replicas(void **state) {
    (void)state;
    char args[1024];
    snprintf(args, sizeof args, "--dataset mnist --data %s --batch-size 2 --replicas 4", dir);
    expect(2, args, "--batch-size");
}

static void test_bad_data_leaves_no_log(void **state) {
    (void)state;
    char args[2048], d[600];
    const char *log = tu_path("cli-bad.jsonl");
    remove(log);
    snprintf(args, sizeof args, "--dataset mnist --data /nonexistent/dptrain --log %s", log);
    expect(1, args, "/nonexistent/dptrain");
    assert_false(exists(log));

    snprintf(d, sizeof d, "%s", tu_path("cli-badmagic"));
    make_dataset(d, 0x802, 0, 0);
    snprintf(args, sizeof args, "--dataset mnist --data %s --log %s", d, log);
    expect(1, args, "train-images-idx3-ubyte");
    assert_false(exists(log));

    snprintf(d, sizeof d, "%s", tu_path("cli-badlabel"));
    make_dataset(d, 0x803, 37, 0);
    snprintf(args, sizeof args, "--dataset mnist --data %s --log %s", d, log);
    expect(1, args, "train-labels-idx1-ubyte");
    assert_false(exists(log));

    snprintf(d, sizeof d, "%s", tu_path("cli-trunc"));
    make_dataset(d, 0x803, 0, 1);
    snprintf(args, sizeof args, "--dataset mnist --data %s --log %s", d, log);
    expect(1, args, "train-images-idx3-ubyte");
    assert_false(exists(log));

    /* a usage error leaves no log either */
    snprintf(args, sizeof args, "--dataset mnist --data %s --log %s --epochs zero", dir, log);
    expect(2, args, "--epochs");
    assert_false(exists(log));
}

/* Refused before anything is read or made: an output that names the checkpoint directory leaves
 * no directory behind (nor does any later start check), a --predict typo is named before the data
 * set is read, a flag the subcommand would ignore writes nothing. */
static void test_refused_before_anything(void **state) {
    (void)state;
    char args[2048], ck[600], ck2[600], f[600];
    snprintf(ck, sizeof ck, "%s", tu_path("cli-ck"));
    snprintf(ck2, sizeof ck2, "%s", tu_path("cli-ck2"));
    rmdir(ck), rmdir(ck2);
    snprintf(args, sizeof args, "--dataset synthetic --samples 64 --epochs 1 --quiet --checkpoint %s --log %s", ck, ck);
    expect(2, args, "--log and --checkpoint name the same path");
    if (exists(ck)) fail_msg("%s: left behind by a refused run", ck);
    snprintf(args, sizeof args, "--dataset synthetic --samples 64 --epochs 1 --quiet --checkpoint %s --log-file "
             "/nonexistent/dptrain/run.jsonl", ck2);
    expect(1, args, "/nonexistent/dptrain");
    if (exists(ck2)) fail_msg("%s: left behind by a refused run", ck2);

    /* the typo comes first, not the data set's absence */
    char *out;
    int rc = tu_run_dptrain(&out, "--dataset mnist --data /nonexistent/dptrain-data --predict nvlinkk");
    if (rc != 2 || !tu_contains(out, "--predict: topology 'nvlinkk'") || tu_contains(out, "dptrain-data"))
        fail_msg("exit %d:\n%s", rc, out);
    free(out);
    /* so do the tests' fault injections, read by the command line, not by the trainer once the data is in */
    setenv("DPTRAIN_INJECT_NAN_STEP", "7x", 1);
    rc = tu_run_dptrain(&out, "--dataset mnist --data /nonexistent/dptrain-data");
    unsetenv("DPTRAIN_INJECT_NAN_STEP");
    if (rc != 2 || !tu_contains(out, "DPTRAIN_INJECT_NAN_STEP='7x' is not a step number") ||
        tu_contains(out, "dptrain-data"))
        fail_msg("exit %d:\n%s", rc, out);
    free(out);
    /* every hook through the strict parser: junk and an out-of-range count are refused, not read as 0 or wrapped */
    static const char *const reserve[] = {"abc", "18446744073709551615", "-1", " 8"};
    for (int i = 0; i < 4; i++) {
        setenv("DPTRAIN_TEST_RESERVE_FLOATS", reserve[i], 1);
        rc = tu_run_dptrain(&out, "--dataset mnist --data /nonexistent/dptrain-data");
        unsetenv("DPTRAIN_TEST_RESERVE_FLOATS");
        if (rc != 2 || !tu_contains(out, "DPTRAIN_TEST_RESERVE_FLOATS='") || !tu_contains(out, "is not a number of floats"))
            fail_msg("DPTRAIN_TEST_RESERVE_FLOATS='%s': exit %d:\n%s", reserve[i], rc, out);
        free(out);
    }

    expect(2, "calibrate --device cuda", "calibrate: --device is for train, eval and predict, not calibrate");
    expect(2, "calibrate --epochs 3", "calibrate: --epochs is for train, not calibrate");
    snprintf(f, sizeof f, "%s", tu_path("cli-predict.safetensors"));
    remove(f);
    snprintf(args, sizeof args, "predict --dataset synthetic --topology host --save %s", f);
    expect(2, args, "predict: --save is for train, not predict");
    assert_false(exists(f));
    expect(2, "--dataset synthetic --gpu 3", "--gpu 3: this run computes on the CPU");
    /* settings that would do nothing on the CPU are refused, as --tf32 is */
    expect(2, "--dataset synthetic --samples 256 --max-steps 2 --steps-per-graph 4",
           "--steps-per-graph 4 would do nothing in this run: the device records no graphs");
    expect(2, "--dataset synthetic --samples 256 --max-steps 2 --mode dp --replicas 2 --steps-per-graph 2",
           "--steps-per-graph 2 would do nothing in this run: it is for --mode ddp");
    expect(2, "--dataset synthetic --samples 256 --max-steps 2 --no-graph", "--no-graph: --device cpu records no graphs");
    expect(2, "--dataset synthetic --samples 256 --max-steps 2 --tf32", "--tf32 is for --device cuda");
    /* a flag's value that is the next flag: refused, not a file named --quiet */
    expect(2, "--dataset synthetic --max-steps 1 --save --quiet", "--save: missing value (the next word, '--quiet', is a flag");
    expect(2, "--dataset synthetic --log-file -- --quiet", "--log-file: missing value (the next word, '--', is a flag");
    expect(2, "--dataset synthetic --log-file --epochs=3", "--log-file: missing value (the next word, '--epochs=3'");
    expect(2, "--dataset synthetic --lr-steps --help", "--lr-steps: missing value");
    expect(2, "--epochs ' 5'", "--epochs: expected an integer in 1..100000, got ' 5'");
    expect(2, "--epochs '5 '", "--epochs: expected an integer in 1..100000, got '5 '");

    /* what a torchrun user writes: the program's flags after "--" */
    snprintf(f, sizeof f, "%s", tu_path("cli-dashdash.jsonl"));
    remove(f);
    snprintf(args, sizeof args, "-- train -- --dataset synthetic --samples 64 --epochs 1 --quiet --log-file %s", f);
    expect(0, args, NULL);
    assert_true(exists(f));
}

static void test_images_too_small_for_model(void **state) {
    (void)state;
    expect(1, "--dataset synthetic --shape 1x8x8 --samples 64 --epochs 1", "too small");
}

static void test_train_save_eval(void **state) {
    (void)state;
    char args[2048], *out;
    const char *log = tu_path("cli-run.jsonl"), *ck = tu_path("cli-run.ckpt");
    snprintf(args, sizeof args, "--dataset mnist --data %s --epochs 2 --batch-size 32 --lr 0.05 --log %s --save %s "
             "--no-progress --threads 2", dir, log, ck);
    int rc = tu_run_dptrain(&out, "%s", args);
    if (rc != 0) fail_msg("train failed: %s", out);
    assert_true(tu_contains(out, "epoch 1/2"));
    assert_true(tu_contains(out, "epoch 2/2"));
    assert_true(tu_contains(out, "test accuracy"));
    free(out);
    /* the log has a config line, step lines numbered from 1, epoch lines and a final line */
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    char line[8192];
    int steps = 0, epochs = 0, finals = 0, configs = 0;
    while (fgets(line, sizeof line, f)) {
        assert_int_equal(line[0], '{');
        if (strstr(line, "\"event\":\"step\"")) {
            steps++;
            char want[64];
            snprintf(want, sizeof want, "\"step\":%d,", steps);
            assert_non_null(strstr(line, want));
            assert_non_null(strstr(line, "\"loss\":"));
            assert_non_null(strstr(line, "\"lr\":"));
        }
        if (strstr(line, "\"event\":\"epoch\"")) {
            epochs++;
            static const char *const fields[] = {"\"train_loss\":", "\"train_acc\":", "\"test_acc\":", "\"seconds\":",
                                                 "\"images_per_s\":", "\"data_wait_s\":", "\"compute_s\":"};
            for (size_t k = 0; k < sizeof fields / sizeof *fields; k++) assert_non_null(strstr(line, fields[k]));
        }
        finals += strstr(line, "\"event\":\"final\"") != NULL;
        configs += strstr(line, "\"event\":\"config\"") != NULL;
    }
    fclose(f);
    assert_int_equal(steps, 2 * 16); /* 512 samples / 32 */
    assert_int_equal(epochs, 2);
    assert_int_equal(finals, 1);
    assert_int_equal(configs, 1);
    /* evaluation of the checkpoint reproduces the final accuracy */
    char *train_out;
    rc = tu_run_dptrain(&train_out, "eval --dataset mnist --data %s --load %s", dir, ck);
    assert_int_equal(rc, 0);
    assert_true(tu_contains(train_out, "test accuracy"));
    free(train_out);
    /* a checkpoint for another input shape, and a corrupt one, are refused by name */
    expect(1, "eval --dataset synthetic --shape 3x32x32 --samples 50 --load /dev/null", "/dev/null");
    char bad[600];
    snprintf(bad, sizeof bad, "%s", tu_path("cli-corrupt.ckpt"));
    tu_write_file(bad, "DPCKPT01garbage-garbage-garbage-garbage-garbage-garbage-garbage-garbage-garbage-garbage-garbage",
                  96);
    snprintf(args, sizeof args, "eval --dataset mnist --data %s --load %s", dir, bad);
    expect(1, args, bad);
    snprintf(args, sizeof args, "eval --model lenet-bn --dataset mnist --data %s --load %s", dir, ck);
    expect(2, args, "lenet");
}

static void test_nan_stops_with_step(void **state) {
    (void)state;
    char args[1024];
    const char *log = tu_path("cli-nan.jsonl");
    snprintf(args, sizeof args, "--dataset mnist --data %s --lr 90 --momentum 0.99 --batch-size 16 --epochs 3 --log %s",
             dir, log);
    expect(1, args, "step");
    char *out;
    tu_run_dptrain(&out, "%s", args);
    assert_true(tu_contains(out, "epoch 1"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_version),
        cmocka_unit_test(test_bad_flags),
        cmocka_unit_test(test_batch_smaller_than_replicas),
        cmocka_unit_test(test_bad_data_leaves_no_log),
        cmocka_unit_test(test_refused_before_anything),
        cmocka_unit_test(test_images_too_small_for_model),
        cmocka_unit_test(test_train_save_eval),
        cmocka_unit_test(test_nan_stops_with_step),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
