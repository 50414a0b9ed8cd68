/* --help against the parser: every flag --help lists with a numeric range is parsed at both
 * ends of that range (accepted) and just outside them (refused, exit code 2), so the stated
 * ranges cannot drift from the accepted ones; value flags state their default. The settings
 * table each of them comes from reaches the log, checkpoints and the ranks' check as its rows say. */
#include "testutil.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/options.h"
#include "core/parse_num.h"
#include "dp_config.h"
#include "exec/devices.h"
#include "train/settings.h"
#include "trainrun.h"

/* Parses "dptrain --dataset synthetic --device cuda <flag> <value>" (--gpu needs a GPU run); returns
 * the exit code main would use. */
static int parse_code(const char *flag, const char *value) {
    char *argv[] = {"dptrain", "--dataset", "synthetic", "--device", "cuda", (char *)flag, (char *)value, NULL};
    /* predict's --measured-* flags, with what they need besides (the files are not opened here) */
    char *measured[] = {"dptrain", "predict", "--dataset", "synthetic", "--topology", "host", "--compute", "c",
                        "--framework", "f", "--measured-epoch", "1", (char *)flag, (char *)value, NULL};
    const int m = strncmp(flag, "--measured-", 11) == 0, batch = m && strcmp(flag, "--measured-batch") == 0;
    dp_config c;
    dp_config_defaults(&c);
    dp_action a;
    if (m && !batch) measured[10] = (char *)flag, measured[11] = (char *)value; /* in place of --measured-epoch 1 */
    dp_status s = m ? dp_parse_args(batch ? 14 : 12, measured, &c, &a) : dp_parse_args(7, argv, &c, &a);
    if (s != DP_OK && !tu_contains(dp_last_error(), flag))
        fail_msg("%s %s: the message does not name the flag: %s", flag, value, dp_last_error());
    return dp_exit_code(s);
}

static void expect_code(const char *flag, const char *value, int code) {
    int got = parse_code(flag, value);
    if (got != code) fail_msg("%s %s: exit %d, expected %d (%s)", flag, value, got, code, dp_last_error());
}

static void check_integer_range(const char *flag, const char *lo, const char *hi) {
    expect_code(flag, lo, 0);
    expect_code(flag, hi, 0);
    char below[40], above[40];
    snprintf(below, sizeof below, "%lld", strtoll(lo, NULL, 10) - 1);
    /* hi + 1 as text: hi may be 2^63-1 */
    unsigned long long h = strtoull(hi, NULL, 10);
    snprintf(above, sizeof above, "%llu", h + 1);
    expect_code(flag, below, 2);
    expect_code(flag, above, 2);
}

/* "(0, 100]": an open end is refused and a value just inside accepted; a closed end accepted
 * and a value just outside refused. */
static void check_real_range(const char *flag, char open_c, double lo, double hi, char close_c) {
    char v[64];
    double eps_lo = 1e-6 * (fabs(lo) > 1 ? fabs(lo) : 1), eps_hi = 1e-6 * (fabs(hi) > 1 ? fabs(hi) : 1);
    snprintf(v, sizeof v, "%.17g", lo);
    expect_code(flag, v, open_c == '(' ? 2 : 0);
    snprintf(v, sizeof v, "%.17g", open_c == '(' ? lo + eps_lo : lo - eps_lo);
    expect_code(flag, v, open_c == '(' ? 0 : 2);
    snprintf(v, sizeof v, "%.17g", hi);
    expect_code(flag, v, close_c == ')' ? 2 : 0);
    snprintf(v, sizeof v, "%.17g", close_c == ')' ? hi - eps_hi : hi + eps_hi);
    expect_code(flag, v, close_c == ')' ? 0 : 2);
}

/* --help's text (malloc'd): the flags, their ranges and their subcommands, one flag a line. */
static char *usage_text(void) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    dp_print_usage(f);
    fclose(f);
    return text;
}

static void test_help_ranges_match_parser(void **state) {
    (void)state;
    char *text = usage_text();
    int checked = 0, lines = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "  --", 4) != 0) continue;
        lines++;
        char flag[64], meta[64] = "";
        if (sscanf(line + 2, "%63s %63s", flag, meta) < 1) fail_msg("cannot read '%s'", line);
        const char *r = strstr(line, "range ");
        if (strcmp(flag, "--lr-steps") == 0 || strcmp(flag, "--shape") == 0) continue; /* lists, checked below */
        if (!r) continue;
        r += 6;
        long long ilo;
        unsigned long long ihi;
        double lo, hi;
        char oc, cc;
        char los[40], his[40];
        if (r[0] == '(' || r[0] == '[') {
            if (sscanf(r, "%c%lf, %lf%c", &oc, &lo, &hi, &cc) != 4) fail_msg("cannot read the range in '%s'", line);
            check_real_range(flag, oc, lo, hi, cc);
        } else {
            if (sscanf(r, "%lld..%llu", &ilo, &ihi) != 2) fail_msg("cannot read the range in '%s'", line);
            snprintf(los, sizeof los, "%lld", ilo), snprintf(his, sizeof his, "%llu", ihi);
            check_integer_range(flag, los, his);
        }
        /* a numeric flag states its default */
        if (!strstr(line, "(default ")) fail_msg("no default in '%s'", line);
        checked++;
    }
    free(text);
    assert_true(lines >= 40);
    assert_true(checked >= 18);
    /* the two list-valued flags, at their stated limits */
    expect_code("--shape", "3x1024x1024", 0);
    expect_code("--shape", "1x1x1", 0);
    expect_code("--shape", "4x8x8", 2);
    expect_code("--shape", "3x1025x8", 2);
    expect_code("--shape", "3x0x8", 2);
    expect_code("--chunks", "3", 2); /* inside 1..256 but not a power of two, as --help says */
    expect_code("--chunks", "64", 0);
    expect_code("--lr-steps", "1,1000000", 0);
    expect_code("--lr-steps", "0", 2);
    expect_code("--lr-steps", "1000001", 2);
    expect_code("--lr-steps", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", 0);
    expect_code("--lr-steps", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", 2);
}

/* Parses argv (NULL-terminated, argv[0] included); returns the status, the message in dp_last_error. */
static dp_status parse_v(const char *const *args) {
    char *argv[16];
    int argc = 0;
    while (args[argc]) argv[argc] = (char *)args[argc], argc++;
    argv[argc] = NULL;
    dp_config c;
    dp_config_defaults(&c);
    dp_action a;
    return dp_parse_args(argc, argv, &c, &a);
}

/* One number parser for every flag: a value that is refused with a space after it is refused with
 * one before it too ('5 ' and ' 5' alike), and so are '+', hex, empty strings, NaN, Inf and
 * overflow; for every numeric flag --help lists, and the list-valued ones. */
static void test_numbers_strict(void **state) {
    (void)state;
    long long v;
    double d;
    static const char *const bad_int[] = {"", " 5", "5 ", "\t5", "5\n", "+5", "0x10", "010x", "5.0", "1e3", "-",
                                          "9223372036854775808", "-9223372036854775809", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad_int / sizeof *bad_int; i++)
        if (dp_parse_ll(bad_int[i], &v) == 0) fail_msg("dp_parse_ll accepted '%s'", bad_int[i]);
    static const char *const bad_real[] = {"", " 0.5", "0.5 ", "+0.5", "0x1p-3", "nan", "NaN", "inf", "-inf",
                                           "infinity", "1e999", "-1e999", "1e-999", ".", "-.", "1e", "1e+", "0.5.5",
                                           "1,5"};
    for (size_t i = 0; i < sizeof bad_real / sizeof *bad_real; i++)
        if (dp_parse_double(bad_real[i], &d) == 0) fail_msg("dp_parse_double accepted '%s'", bad_real[i]);
    assert_int_equal(dp_parse_ll("-9223372036854775808", &v), 0);
    assert_true(v == INT64_MIN);
    assert_int_equal(dp_parse_ll("007", &v), 0);
    assert_int_equal(v, 7);
    static const struct { const char *s; double v; } good_real[] = {
        {"0.5", 0.5}, {".5", 0.5}, {"2.", 2}, {"-1", -1}, {"1e-3", 1e-3}, {"1E+03", 1e3}, {"100", 100}};
    for (size_t i = 0; i < sizeof good_real / sizeof *good_real; i++) {
        if (dp_parse_double(good_real[i].s, &d) != 0) fail_msg("dp_parse_double refused '%s'", good_real[i].s);
        assert_true(d == good_real[i].v);
    }

    /* every numeric flag of --help, at its lower end, with the bad decorations */
    char *text = usage_text();
    int flags = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        const char *r = strstr(line, "range ");
        char flag[64];
        if (strncmp(line, "  --", 4) != 0 || !r || sscanf(line + 2, "%63s", flag) != 1) continue;
        char lo[64];
        double rlo, rhi;
        long long ilo;
        if (r[6] == '(' || r[6] == '[') { /* a real range: its middle */
            if (sscanf(r + 7, "%lf, %lf", &rlo, &rhi) != 2) fail_msg("cannot read the range in '%s'", line);
            snprintf(lo, sizeof lo, "%g", (rlo + rhi) / 2);
        } else {
            if (sscanf(r + 6, "%lld", &ilo) != 1) fail_msg("cannot read the range in '%s'", line);
            snprintf(lo, sizeof lo, "%lld", ilo);
        }
        expect_code(flag, lo, 0);
        static const char *const deco[] = {" %s", "%s ", "+%s", "%s\t", "\n%s", "%sx", "0x%s"};
        for (size_t k = 0; k < sizeof deco / sizeof *deco; k++) {
            char val[80];
            snprintf(val, sizeof val, deco[k], lo);
            expect_code(flag, val, 2);
        }
        expect_code(flag, "", 2);
        expect_code(flag, "nan", 2);
        expect_code(flag, "inf", 2);
        expect_code(flag, "99999999999999999999999999", 2);
        flags++;
    }
    free(text);
    assert_true(flags >= 18);
    /* the list-valued flags: each item the same number syntax */
    static const struct { const char *flag, *good, *bad[8]; } lists[] = {
        {"--shape", "1x8x8", {" 1x8x8", "1x8x8 ", "1x 8x8", "1 x8x8", "+1x8x8", "1x8x+8", "1x8x0x8", "1x8x"}},
        {"--lr-steps", "5,10", {" 5", "5 ", "5, 10", "5 ,10", "+5", "5,,10", ",5", "0x5"}},
        {"--save-every", "5e", {" 5", "5 ", "+5", " 5e", "5 e", "e", "5ee", "0x5"}},
    };
    for (size_t i = 0; i < sizeof lists / sizeof *lists; i++) {
        expect_code(lists[i].flag, lists[i].good, 0);
        for (int k = 0; k < 8 && lists[i].bad[k]; k++) expect_code(lists[i].flag, lists[i].bad[k], 2);
    }
    static const char *const gpus_bad[] = {" 0", "0 ", "0, 1", "+1", "0,", ",0", "0x1", ""};
    for (size_t k = 0; k < sizeof gpus_bad / sizeof *gpus_bad; k++) {
        const char *args[] = {"dptrain", "--backend", "nccl", "--gpus", gpus_bad[k], NULL};
        if (parse_v(args) != DP_ERR_USAGE || !tu_contains(dp_last_error(), "--gpus: expected GPU ordinals"))
            fail_msg("--gpus '%s': %s", gpus_bad[k], dp_last_error());
    }
    const char *gpus_ok[] = {"dptrain", "--backend", "nccl", "--gpus", "0,3,1", NULL};
    assert_int_equal(parse_v(gpus_ok), DP_OK);
}

/* What each subcommand's code reads, written from that code (not from the parser's table): a
 * flag is accepted by exactly these and refused by the others, naming the subcommand, the flag and
 * where it belongs. Every flag --help lists must have a row, so a new flag gets a decision. */
static const struct { const char *flag, *value, *cmds; } used_by[] = {
    {"--model", "lenet", "TEP"}, {"--dataset", "synthetic", "TEP"}, {"--data", "d", "TEP"},
    {"--shape", "1x8x8", "TEP"}, {"--classes", "5", "TEP"}, {"--samples", "64", "TEP"},
    {"--augment", NULL, "TP"},     /* the training loader: predict's step-overhead runs load real batches */
    {"--no-shuffle", NULL, "T"},  {"--drop-last", NULL, "TP"}, /* predict: steps per epoch */
    {"--workers", "1", "TP"},     /* the training loader; eval reads the test set without it */
    {"--epochs", "2", "T"}, {"--max-steps", "5", "T"}, {"--batch-size", "8", "TEP"}, {"--lr", "0.1", "T"},
    {"--momentum", "0.5", "TP"}, {"--weight-decay", "0.1", "TP"}, {"--nesterov", NULL, "TP"}, /* the timed step */
    {"--lr-steps", "5", "T"}, {"--lr-gamma", "0.5", "T"}, {"--lr-scale", "linear", "T"}, {"--lr-ref-batch", "8", "T"},
    {"--warmup-epochs", "1", "T"}, {"--seed", "3", "T"},
    {"--backend", "sim", "TEPC"}, {"--replicas", "2", "TEPC"}, {"--device", "cpu", "TEP"}, {"--gpu", "0", "TEP"},
    {"--gpus", "0", "TE"}, {"--tf32", NULL, "TEP"}, {"--precision", "bf16", "TEP"},
    {"--no-graph", NULL, "TEP"}, {"--steps-per-graph", "2", "T"},
    {"--mode", "dp", "TP"},
    {"--bucket-mb", "1", "TP"}, /* predict: DDP's buckets */
    {"--no-overlap", NULL, "T"}, {"--accumulate", "2", "T"}, {"--sync-bn", NULL, "T"}, {"--allreduce", "ring", "TEC"},
    {"--chunks", "4", "TP"}, {"--threads", "1", "TEPC"}, {"--timeout", "5", "TEC"},
    {"--log-file", "l", "TEP"}, {"--log", "l", "TEP"}, {"--save", "s", "T"}, {"--load", "x", "TE"},
    {"--progress", NULL, "TE"}, {"--no-progress", NULL, "TE"}, {"--quiet", NULL, "TEP"},
    {"--checkpoint", "c", "T"}, {"--save-every", "2", "T"}, {"--keep", "2", "T"}, {"--resume", "r", "T"},
    {"--init-from", "i", "T"}, {"--on-nan", "skip", "T"}, {"--predict", "host", "TP"}, {"--topology", "host", "TP"},
    {"--save-profile", "p", "TP"}, {"--compute", "c", "TP"}, {"--plot", "p.svg", "TP"}, {"--out", "o", "C"},
    {"--measured-epoch", "1", "P"}, {"--measured-step", "1", "P"}, {"--measured-batch", "8", "P"},
    {"--framework", "f", "P"},
    {"--help", NULL, "TEPC"}, {"--version", NULL, "TEPC"},
};

static void test_subcommand_flags(void **state) {
    (void)state;
    static const char *const cmds[] = {"train", "eval", "predict", "calibrate"};
    char *text = usage_text();
    int listed = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char flag[64];
        if (strncmp(line, "  --", 4) != 0 || sscanf(line + 2, "%63s", flag) != 1) continue;
        listed++;
        size_t row = 0;
        while (row < sizeof used_by / sizeof *used_by && strcmp(used_by[row].flag, flag) != 0) row++;
        if (row == sizeof used_by / sizeof *used_by) fail_msg("%s: no row in used_by: which subcommands read it?", flag);
    }
    free(text);
    assert_int_equal(listed, (int)(sizeof used_by / sizeof *used_by));
    for (size_t i = 0; i < sizeof used_by / sizeof *used_by; i++)
        for (int k = 0; k < 4; k++) {
            const char *args[] = {"dptrain", cmds[k], used_by[i].flag, used_by[i].value, NULL};
            char needle[96];
            snprintf(needle, sizeof needle, "%s: %s is for ", cmds[k], used_by[i].flag);
            dp_status s = parse_v(args);
            const int used = strchr(used_by[i].cmds, "TEPC"[k]) != NULL;
            const int refused = s == DP_ERR_USAGE && tu_contains(dp_last_error(), needle);
            if (used && refused) fail_msg("%s %s: refused, but %s reads it: %s", cmds[k], used_by[i].flag, cmds[k],
                                          dp_last_error());
            if (!used && !refused) fail_msg("%s %s: not refused (%s)", cmds[k], used_by[i].flag,
                                            s == DP_OK ? "accepted" : dp_last_error());
            if (!used && !tu_contains(dp_last_error(), "leave it out")) fail_msg("%s", dp_last_error());
        }
    /* the cases, and the message whole */
    const char *cal[] = {"dptrain", "calibrate", "--device", "cuda", NULL};
    assert_int_equal(parse_v(cal), DP_ERR_USAGE);
    assert_string_equal(dp_last_error(), "calibrate: --device is for train, eval and predict, not calibrate (it would "
                                         "do nothing here); leave it out");
    const char *pred[] = {"dptrain", "predict", "--topology", "host", "--save", "m.safetensors", NULL};
    assert_int_equal(parse_v(pred), DP_ERR_USAGE);
    assert_string_equal(dp_last_error(), "predict: --save is for train, not predict (it would do nothing here); "
                                         "leave it out");
    /* the subcommand with no name is train: its flags are train's */
    const char *dflt[] = {"dptrain", "--out", "o", NULL};
    assert_int_equal(parse_v(dflt), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "train: --out is for calibrate, not train"));
}

/* --gpu names a GPU to compute on: refused where the run computes on the CPU, with the fix. */
static void test_gpu_needs_a_gpu_run(void **state) {
    (void)state;
    const char *cpu[] = {"dptrain", "--gpu", "3", NULL};
    assert_int_equal(parse_v(cpu), DP_ERR_USAGE);
    assert_string_equal(dp_last_error(), "--gpu 3: this run computes on the CPU (--device cpu), so no GPU is used; "
                                         "add --device cuda to compute on GPU 3, or leave --gpu out");
    const char *cpu2[] = {"dptrain", "eval", "--device", "cpu", "--gpu", "1", "--load", "x", NULL};
    assert_int_equal(parse_v(cpu2), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "--gpu 1: this run computes on the CPU (--device cpu)"));
    const char *mpi[] = {"dptrain", "--backend", "mpi", "--gpu", "1", NULL};
    assert_int_equal(parse_v(mpi), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "--gpu 1: --backend mpi computes on the CPU"));
    const char *cuda[] = {"dptrain", "--device", "cuda", "--gpu", "1", NULL};
    assert_int_equal(parse_v(cuda), DP_OK);
    const char *nccl[] = {"dptrain", "--backend", "nccl", "--gpu", "1", NULL};
    assert_int_equal(parse_v(nccl), DP_OK);
    const char *gpus[] = {"dptrain", "--gpus", "0,1", NULL};
    assert_int_equal(parse_v(gpus), DP_ERR_USAGE);
    assert_string_equal(dp_last_error(), "--gpus is for --backend nccl (one process driving several GPUs); with "
                                         "--backend sim use --device cuda --replicas N (N replicas on one GPU)");
    const char *gpus_mpi[] = {"dptrain", "--backend", "mpi", "--gpus", "0,1", NULL};
    assert_int_equal(parse_v(gpus_mpi), DP_ERR_USAGE);
    assert_string_equal(dp_last_error(), "--gpus is for --backend nccl (one process driving several GPUs); with "
                                         "--backend mpi use --backend nccl --gpus, or one GPU per process with "
                                         "--backend nccl");
}

/* --device's choices are the device registry's names (exec/devices.h), each of which the registry
 * opens or, where this build left it out, says how to get; never "unknown". */
static void test_device_choices_from_registry(void **state) {
    (void)state;
    const dp_setting *dev = NULL;
    for (int i = 0; i < dp_n_settings; i++)
        if (strcmp(dp_settings[i].name, "device") == 0) dev = &dp_settings[i];
    assert_non_null(dev);
    assert_ptr_equal(dev->choices, dp_device_names);
    int n = 0;
    for (; dp_device_names[n]; n++) {
        dp_dev *d = NULL;
        const dp_status s = dp_dev_open(dp_device_names[n], 0, 0, NULL, &d);
        if (s == DP_OK) {
            dp_dev_close(d);
            continue;
        }
        /* left out, or in a GPU plugin this machine cannot load or open */
        assert_int_not_equal(s, DP_ERR_USAGE);
        assert_false(tu_contains(dp_last_error(), "unknown device"));
    }
    assert_true(n >= 2); /* cpu, and cuda built or not */
#if !DP_HAVE_CUDA
    dp_dev *d = NULL;
    assert_int_equal(dp_dev_open("cuda", 0, 0, NULL, &d), DP_ERR_UNSUPPORTED);
    assert_string_equal(dp_last_error(), "--device cuda: this dptrain was built without CUDA (no nvcc was found); "
                                         "rebuild with the CUDA toolkit: cmake -B build -DDP_WITH_CUDA=ON");
#endif
    char line[256];
    dp_dev_describe(line, sizeof line);
    assert_true(tu_contains(line, DP_HAVE_CUDA ? "cpu (OpenMP), cuda (cuBLAS" : "cpu (OpenMP), cuda (not built)"));
}

/* Opening the CPU device leaves the matrix products on the calling thread (the parallelism is the
 * executor's), whatever OpenBLAS was set to before. */
static void test_cpu_open_blas_threads(void **state) {
    (void)state;
    openblas_set_num_threads(2);
    dp_dev *d = NULL;
    assert_int_equal(dp_dev_open("cpu", 0, 0, NULL, &d), DP_OK);
    assert_int_equal(openblas_get_num_threads(), 1);
    dp_dev_close(d);
}

/* --log-file is the log's name (--log its alias), and a leading "--" (what a torchrun user writes
 * between the program and its flags) is skipped before and after the subcommand. */
static void test_log_file_and_dashdash(void **state) {
    (void)state;
    static const char *const forms[][8] = {
        {"dptrain", "--log-file", "run.jsonl", NULL},
        {"dptrain", "--log", "run.jsonl", NULL},
        {"dptrain", "--log-file=run.jsonl", NULL},
        {"dptrain", "--", "train", "--log-file", "run.jsonl", NULL},
        {"dptrain", "train", "--", "--log-file", "run.jsonl", NULL},
        {"dptrain", "--", "train", "--", "--log-file", "run.jsonl", NULL},
        {"dptrain", "--", "--log-file", "run.jsonl", NULL},
    };
    for (size_t i = 0; i < sizeof forms / sizeof *forms; i++) {
        char *argv[8];
        int argc = 0;
        while (forms[i][argc]) argv[argc] = (char *)forms[i][argc], argc++;
        argv[argc] = NULL;
        dp_config c;
        dp_config_defaults(&c);
        dp_action a;
        if (dp_parse_args(argc, argv, &c, &a) != DP_OK) fail_msg("form %zu: %s", i, dp_last_error());
        assert_non_null(c.log_path);
        assert_string_equal(c.log_path, "run.jsonl");
        assert_int_equal(c.eval_only, 0);
    }
    const char *ev[] = {"dptrain", "--", "eval", "--", "--load", "m.safetensors", NULL};
    assert_int_equal(parse_v(ev), DP_OK);
    /* a third "--" is getopt's end of options: what follows is an argument, refused */
    const char *three[] = {"dptrain", "--", "train", "--", "--", "--epochs", "2", NULL};
    assert_int_equal(parse_v(three), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "unexpected argument '--epochs'"));
}

/* Through the binary once: a value just past a stated end exits 2 naming the flag and range. */
static void test_cli_exit_code(void **state) {
    (void)state;
    char *out;
    int rc = tu_run_dptrain(&out, "--epochs 100001");
    if (rc != 2 || !tu_contains(out, "--epochs: expected an integer in 1..100000")) fail_msg("exit %d:\n%s", rc, out);
    free(out);
    rc = tu_run_dptrain(&out, "--help");
    assert_int_equal(rc, 0);
    assert_true(tu_contains(out, "--epochs E           epochs to train, range 1..100000 (default 10)"));
    free(out);
}

/* The settings table (train/settings.c) is the only list of settings: every row shows up where
 * its columns say and nowhere else. --help has each flag's line with the default the row states;
 * a real run's config line has the keys of the rows with a log place, in their order, and its
 * checkpoint the "dptrain.arg.<key>" records of the rows with a checkpoint place, in their order
 * (those that must match to resume first); the ranks' check quotes the rows with a place there;
 * a companion run drops the rows marked as the run's files. A new setting is one row: this test
 * then checks it in each list without being edited. */
static const char *after_key(const char *text, const char *quoted) {
    const char *p = strstr(text, quoted);
    return p ? p + strlen(quoted) : NULL;
}

static void test_settings_table(void **state) {
    (void)state;
    assert_true(dp_n_settings <= DP_SETTINGS_MAX);
    /* --help */
    FILE *f = tmpfile();
    assert_non_null(f);
    dp_print_usage(f);
    static char help[1 << 16];
    rewind(f);
    help[fread(help, 1, sizeof help - 1, f)] = '\0';
    fclose(f);
    for (int i = 0; i < dp_n_settings; i++) {
        const dp_setting *s = &dp_settings[i];
        char head[64], def[160], line[1024];
        snprintf(head, sizeof head, "\n  --%s%s%s ", s->name, s->meta ? " " : "", s->meta ? s->meta : "");
        const char *at = strstr(help, head);
        if (!at) fail_msg("--help has no line for --%s", s->name);
        const char *end = strchr(at + 1, '\n');
        snprintf(line, sizeof line, "%.*s", (int)(end - at - 1), at + 1);
        dp_setting_default_text(s, def, sizeof def);
        char want[200];
        snprintf(want, sizeof want, "(default %s)", def);
        if (*def ? !tu_contains(line, want) : tu_contains(line, "(default "))
            fail_msg("--help for --%s: expected %s: %s", s->name, *def ? want : "no default", line);
    }
    /* the log and a checkpoint of one short run */
    dp_config c;
    tr_base_config(&c, "lenet");
    c.max_steps = 1;
    char ckpt[600];
    snprintf(ckpt, sizeof ckpt, "%s", tu_path("settings_table.safetensors"));
    c.save_path = ckpt;
    tr_result r = tr_run(&c);
    f = fopen(ckpt, "rb");
    assert_non_null(f);
    unsigned char len8[8];
    assert_int_equal(fread(len8, 1, 8, f), 8);
    size_t hlen = 0;
    for (int b = 7; b >= 0; b--) hlen = hlen << 8 | len8[b];
    char *hdr = calloc(hlen + 1, 1);
    assert_non_null(hdr);
    assert_int_equal(fread(hdr, 1, hlen, f), hlen);
    fclose(f);
    remove(ckpt);
    char flags[2048] = "";
    dp_consistency_flags(&c, flags, sizeof flags);
    const char *last_log = r.config, *last_ckpt = hdr;
    int unchecked_seen = 0;
    for (dp_settings_list list = DP_LIST_LOG; list <= DP_LIST_CONS; list++) {
        dp_settings_cursor cur = DP_SETTINGS_CURSOR(list);
        int n = 0;
        for (const dp_setting *s; (s = dp_settings_next(&cur, NULL));) {
            n++;
            char key[96];
            if (list == DP_LIST_LOG) { /* "batch_size": after the previous row's key */
                snprintf(key, sizeof key, "\"%s\":", dp_setting_key(s));
                for (char *p = key; *p; p++) *p = *p == '-' ? '_' : *p;
                const char *at = after_key(last_log, key);
                if (!at) fail_msg("the config line lacks %s, or has it before the row before it: %s", key, r.config);
                last_log = at;
            } else if (list == DP_LIST_CKPT) {
                snprintf(key, sizeof key, "\"dptrain.arg.%s\":", dp_setting_key(s));
                const char *at = after_key(last_ckpt, key);
                if (!at) fail_msg("the checkpoint lacks %s, or has it out of order", key);
                last_ckpt = at;
                if (!s->resume) unchecked_seen = 1;
                else if (unchecked_seen) fail_msg("%s must match to resume but follows one that need not", key);
            } else {
                snprintf(key, sizeof key, " --%s%s", s->name, s->kind == DP_K_SET ? "\n" : "");
                if (!tu_contains(flags, key)) fail_msg("the ranks' check lacks --%s:\n%s", s->name, flags);
            }
        }
        int want = 0;
        for (int i = 0; i < dp_n_settings; i++) want += dp_setting_pos(&dp_settings[i], list) != 0;
        assert_int_equal(n, want);
    }
    /* and the rows without a place are in none of them */
    for (int i = 0; i < dp_n_settings; i++) {
        const dp_setting *s = &dp_settings[i];
        char key[96];
        snprintf(key, sizeof key, "\"%s\":", dp_setting_key(s));
        for (char *p = key; *p; p++) *p = *p == '-' ? '_' : *p;
        /* keys the trainer writes itself (the program's version, the device it opened) are not the rows' */
        const int own = strcmp(s->name, "device") == 0 || strcmp(s->name, "version") == 0;
        if (!s->log && !own && tu_contains(r.config, key))
            fail_msg("--%s has no log place but the config line has %s", s->name, key);
        snprintf(key, sizeof key, "\"dptrain.arg.%s\":", dp_setting_key(s));
        if (!s->ckpt && tu_contains(hdr, key)) fail_msg("--%s has no checkpoint place but the checkpoint has it", s->name);
        snprintf(key, sizeof key, "with --%s ", s->name);
        char key2[96];
        snprintf(key2, sizeof key2, "with --%s\n", s->name);
        if (!s->cons && (tu_contains(flags, key) || tu_contains(flags, key2)))
            fail_msg("--%s has no place in the ranks' check but it is there:\n%s", s->name, flags);
    }
    /* the run's own files, dropped for a companion run */
    dp_config d;
    dp_config_defaults(&d);
    for (int i = 0; i < dp_n_settings; i++) {
        const dp_setting *s = &dp_settings[i];
        if (!s->files) continue;
        if (s->kind == DP_K_STRING) *(const char **)(void *)((char *)&d + s->off) = "x";
        else if (s->kind == DP_K_INT) *(int *)(void *)((char *)&d + s->off) = 7;
    }
    d.save_every = 5, d.save_every_epochs = 2;
    dp_settings_drop_files(&d);
    for (int i = 0; i < dp_n_settings; i++) {
        const dp_setting *s = &dp_settings[i];
        if (!s->files) continue;
        if (s->kind == DP_K_STRING && *(const char **)(void *)((char *)&d + s->off))
            fail_msg("--%s survives dp_settings_drop_files", s->name);
        if (s->kind == DP_K_INT && *(int *)(void *)((char *)&d + s->off))
            fail_msg("--%s survives dp_settings_drop_files", s->name);
    }
    assert_int_equal(d.save_every + d.save_every_epochs, 0);
    free(hdr);
    tr_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_ranges_match_parser),
        cmocka_unit_test(test_cli_exit_code),
        cmocka_unit_test(test_numbers_strict),
        cmocka_unit_test(test_subcommand_flags),
        cmocka_unit_test(test_gpu_needs_a_gpu_run),
        cmocka_unit_test(test_device_choices_from_registry),
        cmocka_unit_test(test_cpu_open_blas_threads),
        cmocka_unit_test(test_log_file_and_dashdash),
        cmocka_unit_test(test_settings_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
