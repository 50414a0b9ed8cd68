/* test_settings_files.c: topology and compute-profile files as an attacker or a typo makes them:
 * numbers out of range (an int overflow, inf, 1e300) or not decimal, a setting given twice, an empty
 * item in a --predict / --topology list, control bytes, a FIFO or a symlink given
 * where a file is read or written, and flags naming such files checked before training starts;
 * calibrate's memory refused before it is allocated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sim/profile.h"
#include "sim/topology.h"
#include "testutil.h"

#define DATA "--dataset synthetic --samples 64 --shape 1x28x28 --batch-size 32 --epochs 1 --no-progress"

static const char *bin(void) {
    const char *b = getenv("DPTRAIN");
    return b ? b : "./dptrain";
}

static void test_topology_ranges(void **state) {
    (void)state;
    static const char *const bad[] = {
        "devices 2999999999\n", /* (int) of it was undefined behaviour */
        "devices 2.5\n",        "devices 0\n",
        "bus_bandwidth_GBps inf\n", "bus_bandwidth_GBps 1e300\n", "bus_bandwidth_GBps nan\n",
        "latency_us 1e300\n",   "latency_us -1\n",   "p2p 7\n", "host_latency_us infinity\n",
        "touch_allreduce_us_per_MB 1e20\n", "gather_latency_us 1\ngather_bandwidth_GBps inf\n",
    };
    dp_topology t;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char text[256];
        snprintf(text, sizeof text, "bus_bandwidth_GBps 10\n%s", bad[i]);
        dp_status s = dp_topology_parse(text, "t", &t);
        if (s != DP_ERR_FORMAT) fail_msg("'%s' was accepted (%d)", bad[i], s);
        assert_true(tu_contains(dp_last_error(), "t:"));
    }
    assert_int_equal(dp_topology_parse("bus_bandwidth_GBps 10\ndevices 1000000\nlatency_us 0\n", "t", &t), DP_OK);
    assert_int_equal(t.devices, 1000000);
    /* a name with an escape sequence never reaches the terminal */
    const char *p = tu_path("esc.topo");
    const char *esc = "name \x1b]0;owned\x07\nbus_bandwidth_GBps 10\n", *utf8 = "bus_bandwidth_GBps 10 # 10 \xc2\xb5s\n";
    tu_write_file(p, esc, strlen(esc));
    assert_int_equal(dp_topology_load(p, &t), DP_ERR_FORMAT);
    assert_true(tu_contains(dp_last_error(), "byte 0x1b"));
    /* UTF-8 in a comment is fine */
    tu_write_file(p, utf8, strlen(utf8));
    assert_int_equal(dp_topology_load(p, &t), DP_OK);
}

/* The smallest whole profile: every line a prediction reads, once. */
#define PROFILE_OF(model)                                                                                       \
    "model " model "\ndevice cpu\ninput 1x28x28\ninput_floats 784\nclasses 10\nparams 10\nbuffers 0\nnodes 1\n" \
    "node 0 fc 1 2\nbuckets 1\nbucket 0 10 0\nrow 8 1 5 0.001 0.002\ntime 0 0.001 0.001\n"
#define PROFILE PROFILE_OF("lenet")

static void test_profile_ranges(void **state) {
    (void)state;
    dp_profile *p = calloc(1, sizeof *p);
    assert_non_null(p);
    assert_int_equal(dp_profile_parse(PROFILE, "p", p), DP_OK);
    static const char *const bad[] = {
        "classes 99999999999\n",       /* sscanf's %d overflowed */
        "nodes 4294967297\n",          "overhead 1 1 inf\n", "overhead 1 99999999999 0.1\n",
        "row 99999999999 1 5 0.1 0.1\n", "row 8 1 5 1e300 0.1\n", "time 0 nan 0.1\n", "time 0 0.1 0.1 7\n",
        "buckets 1\nbucket 0 5 4294967296\n", "params -3\n", "node 0 conv1 1x 1\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char text[512];
        snprintf(text, sizeof text, PROFILE "%s", bad[i]);
        dp_status s = dp_profile_parse(text, "p", p);
        if (s != DP_ERR_FORMAT) fail_msg("'%s' was accepted (%d)", bad[i], s);
    }
    free(p);
}

/* A FIFO given where a file is read or written: refused by name at once (it hung for ever). */
static void test_fifo_refused(void **state) {
    (void)state;
    const char *fifo = tu_path("settings.fifo");
    unlink(fifo);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    static const char *const runs[] = {
        "predict --model lenet --batch-size 8 --shape 1x28x28 --dataset synthetic --topology %s",
        "train " DATA " --predict %s",
        "train " DATA " --predict host --compute %s",
        "calibrate --backend sim --replicas 2 --out %s",
        "train " DATA " --save-profile %s",
    };
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        char args[512], *out;
        snprintf(args, sizeof args, runs[i], fifo);
        int rc = tu_sh(&out, "timeout 60 %s %s", bin(), args);
        if (rc == 0 || rc == 124 || (!tu_contains(out, "FIFO") && !tu_contains(out, "not a regular file")) ||
            tu_contains(out, "epoch 1/1"))
            fail_msg("%s: rc %d:\n%s", args, rc, out);
        free(out);
    }
    unlink(fifo);
}

/* --save-profile and calibrate --out never write through a symlink (into a device node or anyone's
 * file), and are checked before the run; --predict / --compute typos fail before training. */
static void test_outputs_checked_at_start(void **state) {
    (void)state;
    const char *target = tu_path("victim"), *link = tu_path("link.profile");
    tu_write_file(target, "keep", 4);
    unlink(link);
    assert_int_equal(symlink(target, link), 0);
    static const char *const runs[] = {
        "train " DATA " --save-profile %s",
        "calibrate --backend sim --replicas 2 --out %s",
    };
    for (size_t i = 0; i < 2; i++) {
        char *out;
        int rc = tu_run_dptrain(&out, runs[i], link);
        if (rc != 2 || !tu_contains(out, "symbolic link") || tu_contains(out, "epoch 1/1") || tu_contains(out, "busbw"))
            fail_msg("rc %d:\n%s", rc, out);
        free(out);
    }
    char *got;
    tu_sh(&got, "cat '%s'", target);
    assert_string_equal(got, "keep");
    free(got);
    static const char *const typos[] = {
        "train " DATA " --predict nvlinkk",
        "train " DATA " --save-profile /nonexistent-dir/x.profile",
        "train " DATA " --predict host --compute h1000",
    };
    for (size_t i = 0; i < 3; i++) {
        char *out;
        int rc = tu_run_dptrain(&out, "%s", typos[i]);
        if (rc == 0 || tu_contains(out, "epoch 1/1")) fail_msg("%s: rc %d:\n%s", typos[i], rc, out);
        free(out);
    }
    /* a profile of another model is refused at start too */
    const char *prof = tu_path("resnet.profile");
    const char *text = PROFILE_OF("resnet18");
    tu_write_file(prof, text, strlen(text));
    char *out;
    int rc = tu_run_dptrain(&out, "train " DATA " --predict host --compute %s", prof);
    if (rc != 2 || !tu_contains(out, "a profile of model resnet18") || tu_contains(out, "epoch 1/1"))
        fail_msg("rc %d:\n%s", rc, out);
    free(out);
    /* and a good --save-profile is written, as a regular file */
    const char *good = tu_path("good.profile");
    unlink(good);
    rc = tu_run_dptrain(&out, "train " DATA " --save-profile %s", good);
    if (rc) fail_msg("rc %d:\n%s", rc, out);
    free(out);
    struct stat st;
    assert_int_equal(lstat(good, &st), 0);
    assert_true(S_ISREG(st.st_mode));
}

/* No output replaces another output or an input (the profile replaced the log or the checkpoint). */
static void test_outputs_distinct(void **state) {
    (void)state;
    const char *a = tu_path("same.out");
    char dot[600];
    snprintf(dot, sizeof dot, "%s", a);
    char *slash = strrchr(dot, '/');
    memmove(slash + 2, slash, strlen(slash) + 1);
    slash[0] = '/', slash[1] = '.'; /* the same file as dir/./name */
    static const char *const runs[][2] = {
        {"train " DATA " --log %s --save-profile %s", "--log and --save-profile name the same file"},
        {"train " DATA " --save %s --save-profile %s", "--save and --save-profile name the same file"},
        {"train " DATA " --predict host --plot %s.svg --save-profile %s.svg", "--save-profile and --plot name the same file"},
    };
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        char *out;
        int rc = tu_run_dptrain(&out, runs[i][0], a, dot);
        if (rc != 2 || !tu_contains(out, runs[i][1])) fail_msg("%s: rc %d:\n%s", runs[i][0], rc, out);
        free(out);
    }
    const char *prof = tu_path("in.profile");
    const char *text = PROFILE;
    tu_write_file(prof, text, strlen(text));
    char *out;
    int rc = tu_run_dptrain(&out, "train " DATA " --predict host --compute %s --save-profile %s", prof, prof);
    if (rc != 2 || !tu_contains(out, "--save-profile would overwrite the file given to --compute")) fail_msg("rc %d:\n%s", rc, out);
    free(out);
}

/* A GPU topology priced with this CPU's profile says so where the numbers are printed, and the plot
 * draws a topology only up to the devices it has. */
static void test_predict_says_cpu_profile(void **state) {
    (void)state;
    const char *topo = tu_path("two.topo"), *svg = tu_path("two.svg");
    const char *text = "name two\ndevice cpu-process\ndevices 2\nbus_bandwidth_GBps 5\nlatency_us 1\nshared_memory_bus 1\n";
    tu_write_file(topo, text, strlen(text));
    char *out;
    int rc = tu_run_dptrain(&out, "predict --batch-size 32 --dataset synthetic --samples 256 --shape 1x28x28 --topology "
                            "nvlink4,%s --plot %s", topo, svg);
    if (rc || !tu_contains(out, "NOTE: the compute is this CPU's, not a H100-SXM's")) fail_msg("rc %d:\n%s", rc, out);
    free(out);
    /* nvlink4: 1, 2, 4, 8 devices x DDP and DP; two: 1, 2 x DDP and DP */
    tu_sh(&out, "grep -o '<circle' '%s' | wc -l", svg);
    assert_int_equal(atoi(out), 12);
    free(out);
}

/* A setting given twice is refused with both lines, in a topology file and in a profile (it took
 * the later value); numbers are the whole word, decimal (0x10 and +8 were taken by strtod). */
static void test_settings_given_twice(void **state) {
    (void)state;
    dp_topology t;
    assert_int_equal(dp_topology_parse("bus_bandwidth_GBps 10\nlatency_us 1\n\n# x\nlatency_us 2\n", "t", &t),
                     DP_ERR_FORMAT);
    assert_true(tu_contains(dp_last_error(), "t:5: 'latency_us' is given twice (first at line 2); keep one"));
    assert_int_equal(dp_topology_parse("name a\nbus_bandwidth_GBps 10\nname b\n", "t", &t), DP_ERR_FORMAT);
    static const char *const bad_numbers[] = {"devices +8\n", "bus_bandwidth_GBps 0x10\n", "p2p 0.5\n",
                                              "latency_us 1e-400\n", "latency_us .\n", "devices 1e3\n"};
    for (size_t i = 0; i < sizeof bad_numbers / sizeof *bad_numbers; i++) {
        char text[128];
        snprintf(text, sizeof text, "bus_bandwidth_GBps 10\n%s", bad_numbers[i]);
        if (dp_topology_parse(text, "t", &t) != DP_ERR_FORMAT) fail_msg("'%s' was accepted", bad_numbers[i]);
    }
    assert_int_equal(dp_topology_parse("bus_bandwidth_GBps 10.\nlatency_us 2.5e+01\n", "t", &t), DP_OK);
    assert_float_equal(t.latency_s, 25e-6, 1e-12);
    dp_profile *p = calloc(1, sizeof *p);
    assert_non_null(p);
    static const char *const twice[][2] = {
        {"params 10\n", "'params' is given twice"},
        {"node 0 fc 1 2\n", "'node 0' is given twice (first at line 9)"},
        {"bucket 0 10 0\n", "'bucket 0' is given twice"},
        {"time 0 0.002 0.002\n", "'time 0 of row 8 1' is given twice (first at line 13)"},
        {"row 8 1 5 0.001 0.002\ntime 0 0.001 0.001\n", "'row 8 1' is given twice"},
        {"overhead 1 1 0.1\noverhead 1 1 0.2\n", "'overhead 1 1' is given twice"},
    };
    for (size_t i = 0; i < sizeof twice / sizeof *twice; i++) {
        char text[1024];
        snprintf(text, sizeof text, PROFILE "%s", twice[i][0]);
        dp_status s = dp_profile_parse(text, "p", p);
        if (s != DP_ERR_FORMAT || !tu_contains(dp_last_error(), twice[i][1]))
            fail_msg("'%s': %d: %s", twice[i][0], s, dp_last_error());
    }
    /* a time for another row's node is fine */
    assert_int_equal(dp_profile_parse(PROFILE "row 16 1 5 0.001 0.002\ntime 0 0.002 0.002\n", "p", p), DP_OK);
    assert_int_equal(p->n_rows, 2);
    free(p);
}

/* --predict and --topology lists: an empty item is refused (pcie4, was taken as pcie4). */
static void test_topology_list(void **state) {
    (void)state;
    char items[8][DP_TOPO_ITEM];
    int n = 0;
    static const char *const bad[] = {"pcie4,", ",pcie4", "pcie4,,nvlink4", "", ","};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (dp_topology_split("--topology", bad[i], items, 8, &n) != DP_ERR_USAGE) fail_msg("'%s' was accepted", bad[i]);
    assert_int_equal(dp_topology_split("--topology", "pcie4,", items, 8, &n), DP_ERR_USAGE);
    assert_string_equal(dp_last_error(), "--topology: 'pcie4,' has an empty item; name topologies separated by single "
                                         "commas (pcie4,nvlink4)");
    assert_int_equal(dp_topology_split("--predict", "a,b,c", items, 2, &n), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "--predict: at most 2 topologies"));
    assert_int_equal(dp_topology_split("--predict", "pcie4,./my.topo", items, 8, &n), DP_OK);
    assert_int_equal(n, 2);
    assert_string_equal(items[1], "./my.topo");
    char *out;
    int rc = tu_run_dptrain(&out, "predict --dataset synthetic --samples 64 --topology pcie4,");
    if (rc != 2 || !tu_contains(out, "dptrain: --topology: 'pcie4,' has an empty item")) fail_msg("rc %d:\n%s", rc, out);
    free(out);
    rc = tu_run_dptrain(&out, "train " DATA " --predict ,host");
    if (rc != 2 || !tu_contains(out, "dptrain: --predict: ',host' has an empty item") || tu_contains(out, "epoch 1/1"))
        fail_msg("rc %d:\n%s", rc, out);
    free(out);
}

/* calibrate's buffers grow with replicas squared: refused before they are allocated. */
static void test_calibrate_memory(void **state) {
    (void)state;
    char *out;
    int rc = tu_sh(&out, "timeout 60 %s calibrate --backend sim --replicas 1024", bin());
    if (rc != 1 || !tu_contains(out, "refusing before allocating") || !tu_contains(out, "--replicas"))
        fail_msg("rc %d:\n%s", rc, out);
    free(out);
}

/* No output replaces a file the run reads, whichever flag named it: the data set's files under
 * --data (the default --data is the installed package's directory), each topology file of a
 * --predict / --topology list, and the names the checkpoint directory writes, prunes or locks.
 * Refused with exit 2 before anything is read, the file untouched. */
static void test_inputs_never_overwritten(void **state) {
    (void)state;
    const char *dir = tu_fresh_dir("inputs");
    char *out;
    if (tu_sh(&out, "cd %s && mkdir -p fm cf/cifar-10-batches-bin ck && for f in train-images-idx3-ubyte.gz "
              "t10k-labels-idx1-ubyte.gz train-labels-idx1-ubyte; do echo keep > fm/$f; done && echo keep > "
              "cf/cifar-10-batches-bin/test_batch.bin && printf 'bus_bandwidth_GBps 10\\n' > t.topo && cp t.topo t.svg && "
              "echo keep > ck/log.jsonl", dir) != 0)
        fail_msg("setup: %s", out);
    free(out);
    static const char *const runs[][2] = {
        {"train --data fm --max-steps 2 --log-file fm/t10k-labels-idx1-ubyte.gz",
         "--log-file would overwrite a file of the fashion-mnist data set in fm ('fm/t10k-labels-idx1-ubyte.gz')"},
        {"train --data fm --max-steps 2 --save ./fm/train-labels-idx1-ubyte", "--save would overwrite a file of the "
         "fashion-mnist data set"},
        {"eval --data fm --load x.safetensors --log-file fm/train-images-idx3-ubyte.gz", "--log-file would overwrite"},
        {"train --dataset cifar10 --data cf --save cf/cifar-10-batches-bin/test_batch.bin", "--save would overwrite a "
         "file of the cifar10 data set in cf"},
        {"train " DATA " --predict ./t.topo --log-file t.topo", "--log-file would overwrite the file given to --predict"},
        {"train " DATA " --predict ./t.topo --save-profile t.topo", "--save-profile would overwrite the file given to "
         "--predict ('t.topo')"},
        {"train " DATA " --predict pcie4,t.topo --save t.topo", "--save would overwrite the file given to --predict"},
        {"predict --batch-size 64 --topology pcie4,./t.svg --plot t.svg", "--plot would overwrite the file given to "
         "--topology"},
        {"train " DATA " --checkpoint ck --log-file ck/ckpt-0000000002.safetensors", "--log-file "
         "ck/ckpt-0000000002.safetensors: --checkpoint ck writes, prunes or locks files of that name there"},
        {"train " DATA " --resume ck --log-file ./ck/.dptrain.lock", "--resume ck writes, prunes or locks"},
        {"train " DATA " --checkpoint ck --save-profile ck/.ckpt-0000000002.safetensors.AbC123 --predict host",
         "--save-profile ck/.ckpt-0000000002.safetensors.AbC123: --checkpoint ck writes"},
    };
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        int rc = tu_sh(&out, "cd %s && %s %s --quiet 2>&1", dir, bin(), runs[i][0]);
        if (rc != 2 || !tu_contains(out, runs[i][1])) fail_msg("%s: rc %d:\n%s", runs[i][0], rc, out);
        free(out);
    }
    if (tu_sh(&out, "cd %s && cat fm/* cf/*/* | grep -c keep && grep -h bus_ t.topo t.svg", dir) != 0 ||
        !tu_contains(out, "4\nbus_bandwidth_GBps 10\nbus_bandwidth_GBps 10"))
        fail_msg("an input was touched: %s", out);
    free(out);
    /* another name in the checkpoint directory is the user's: accepted, and kept through --keep 1 */
    int rc = tu_sh(&out, "cd %s && %s train " DATA " --max-steps 3 --save-every 1 --keep 1 --checkpoint ck --log-file "
                   "ck/log.jsonl --quiet 2>&1 && grep -c '\"event\"' ck/log.jsonl", dir, bin());
    if (rc != 0) fail_msg("a log beside the checkpoints: rc %d:\n%s", rc, out);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topology_ranges), cmocka_unit_test(test_profile_ranges),
        cmocka_unit_test(test_fifo_refused),    cmocka_unit_test(test_outputs_checked_at_start),
        cmocka_unit_test(test_calibrate_memory), cmocka_unit_test(test_outputs_distinct),
        cmocka_unit_test(test_predict_says_cpu_profile), cmocka_unit_test(test_settings_given_twice),
        cmocka_unit_test(test_topology_list), cmocka_unit_test(test_inputs_never_overwritten),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
