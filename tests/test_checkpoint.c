/* test_checkpoint.c: checkpoints, --resume and stopping, through the dptrain binary on tiny
 * synthetic data: a run killed with SIGKILL at random steps and resumed ends bitwise where the
 * uninterrupted run ends (sim, 1, 2 and 4 replicas); SIGINT/SIGTERM stop with a checkpoint and the
 * resume command; damaged checkpoints are skipped; other runs' checkpoints are refused; outputs that
 * cannot be written are refused at start; a NaN stops (or is skipped) without a bad checkpoint. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "io/safetensors.h"
#include "kernels/conv_algos.h"
#include "testutil.h"

/* long enough that a signal sent after the first step lands before the end */
#ifdef DP_TEST_SANITIZED
#define STOP_EPOCHS "5"
#else
#define STOP_EPOCHS "30"
#endif

#define DATA_LOUD "--dataset synthetic --samples 512 --shape 1x28x28 --batch-size 32 --no-progress"
#define DATA DATA_LOUD " --quiet"

static const char *bin(void) {
    const char *b = getenv("DPTRAIN");
    return b ? b : "./dptrain";
}

/* A fresh, empty directory under the scratch dir. */
static const char *fresh_dir(const char *name) {
    const char *d = tu_path(name);
    tu_sh(NULL, "rm -rf '%s'", d);
    return d;
}

/* The newest checkpoint in dir (static buffer), or NULL. */
static const char *newest(const char *dir, int *count) {
    static char best[1024];
    DIR *d = opendir(dir);
    int n = 0;
    best[0] = '\0';
    char top[256] = "";
    if (d) {
        for (struct dirent *e; (e = readdir(d));)
            if (strncmp(e->d_name, "ckpt-", 5) == 0 && strstr(e->d_name, ".safetensors")) {
                n++;
                if (strcmp(e->d_name, top) > 0) snprintf(top, sizeof top, "%s", e->d_name);
            }
        closedir(d);
    }
    if (count) *count = n;
    if (!top[0]) return NULL;
    snprintf(best, sizeof best, "%s/%s", dir, top);
    return best;
}

/* Starts "$DPTRAIN args" in the background, output to outfile. */
static pid_t spawn(const char *outfile, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static pid_t spawn(const char *outfile, const char *fmt, ...) {
    char args[4096], cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "exec %s %s > '%s' 2>&1", bin(), args, outfile);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static int wait_rc(pid_t pid) {
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Polls until dir holds a checkpoint of step >= k (or the process ended); 1 if it did. */
static int wait_for_step(pid_t pid, const char *dir, long k) {
    for (int i = 0; i < 20000; i++) {
        const char *p = newest(dir, NULL);
        if (p && atol(strrchr(p, '-') + 1) >= k) return 1;
        if (waitpid(pid, NULL, WNOHANG) == pid) return -1;
        usleep(200);
    }
    return 0;
}

static char *slurp(const char *path) {
    char *out;
    tu_sh(&out, "cat '%s'", path);
    return out;
}

static void kill_and_resume(int replicas, unsigned seed, const char *extra) {
    char args[512];
    snprintf(args, sizeof args, "train " DATA " --epochs 2 --replicas %d --threads 2 --save-every 1 --keep 2%s",
             replicas, extra);
    const char *ref = fresh_dir("ref"), *run = fresh_dir("run"), *out = tu_path("kill.out");
    char *o;
    int rc = tu_run_dptrain(&o, "%s --checkpoint %s", args, ref);
    if (rc) fail_msg("reference run failed (%d):\n%s", rc, o);
    free(o);
    srand(seed);
    int kills = 0;
    for (int attempt = 0; attempt < 6; attempt++) {
        long k = 1 + rand() % 30;
        pid_t pid = spawn(out, "%s --checkpoint %s%s%s", args, run, attempt ? " --resume " : "", attempt ? run : "");
        int got = wait_for_step(pid, run, k);
        if (got == 1) {
            usleep((useconds_t)(rand() % 3000)); /* anywhere: mid-step, mid-write */
            kill(pid, SIGKILL);
            int st = wait_rc(pid);
            kills += st == 128 + SIGKILL;
        } else {
            int st = wait_rc(pid);
            if (st != 0) fail_msg("run ended with %d:\n%s", st, o = slurp(out));
            break; /* it finished before the kill */
        }
        if (kills >= 2) break;
    }
    /* finish from wherever the kills left it */
    rc = tu_run_dptrain(&o, "%s --checkpoint %s --resume %s", args, run, run);
    if (rc) fail_msg("resume failed (%d):\n%s", rc, o);
    free(o);
    char a[1024];
    snprintf(a, sizeof a, "%s", newest(ref, NULL));
    const char *b = newest(run, NULL);
    assert_non_null(b);
    const char *diff = tu_ckpt_diff(a, b);
    if (diff) fail_msg("replicas %d, seed %u, %d kills: %s", replicas, seed, kills, diff);
    print_message("replicas %d%s: %d SIGKILLs (seed %u), resumed run bitwise equal\n", replicas, extra, kills, seed);
}

static unsigned test_seed(void) {
    const char *s = getenv("DP_TEST_SEED");
    return s ? (unsigned)atoi(s) : (unsigned)time(NULL);
}

static void test_kill9_resume_1(void **state) { (void)state; kill_and_resume(1, test_seed(), ""); }
static void test_kill9_resume_2(void **state) { (void)state; kill_and_resume(2, test_seed() + 1, ""); }
static void test_kill9_resume_4(void **state) { (void)state; kill_and_resume(4, test_seed() + 2, ""); }
static void test_kill9_resume_bf16(void **state) {
    (void)state;
    kill_and_resume(2, test_seed() + 3, " --precision bf16");
}

/* SIGINT / SIGTERM: the step finishes, a checkpoint is written, 130 / 143 and the resume command;
 * running that command finishes bitwise like the uninterrupted run. */
static void stop_by(int sig) {
    const char *ref = fresh_dir("sref"), *run = fresh_dir("srun"), *out = tu_path("sig.out"), *log = tu_path("sig.log");
    const char *args = "train " DATA " --epochs " STOP_EPOCHS " --threads 1 --save-every 1000";
    char *o;
    int rc = tu_run_dptrain(&o, "%s --checkpoint %s", args, ref);
    if (rc) fail_msg("reference run failed (%d):\n%s", rc, o);
    free(o);
    unlink(log);
    pid_t pid = spawn(out, "%s --checkpoint %s --log %s", args, run, log);
    for (int i = 0; i < 10000; i++) { /* until it is training */
        char *l = slurp(log);
        int going = tu_contains(l, "\"event\":\"step\"");
        free(l);
        if (going) break;
        usleep(1000);
    }
    kill(pid, sig);
    rc = wait_rc(pid);
    o = slurp(out);
    if (rc == 0) { /* it finished first: nothing to check */
        print_message("the run finished before the signal: nothing checked\n");
        free(o);
        return;
    }
    assert_int_equal(rc, 128 + sig);
    if (!tu_contains(o, sig == SIGINT ? "stopped by SIGINT" : "stopped by SIGTERM") || !tu_contains(o, "resume with: "))
        fail_msg("no stop message:\n%s", o);
    char *l = slurp(log);
    assert_true(tu_contains(l, "\"event\":\"stopped\""));
    free(l);
    /* run the printed command (its log is appended to) */
    char *cmd = strstr(o, "resume with: ") + strlen("resume with: ");
    cmd[strcspn(cmd, "\n")] = '\0';
    assert_true(tu_contains(cmd, "--resume"));
    char *o2;
    rc = tu_sh(&o2, "%s", cmd);
    if (rc) fail_msg("the printed resume command failed (%d):\n%s\n%s", rc, cmd, o2);
    free(o2);
    char a[1024];
    snprintf(a, sizeof a, "%s", newest(ref, NULL));
    const char *diff = tu_ckpt_diff(a, newest(run, NULL));
    if (diff) fail_msg("%s", diff);
    l = slurp(log);
    assert_true(tu_contains(l, "\"event\":\"resume\""));
    free(l);
    free(o);
}

/* A log cut mid-line (a SIGKILL during a write) loses that partial line when a resumed run appends. */
static void test_resume_log_partial_line(void **state) {
    (void)state;
    const char *d = fresh_dir("pl"), *log = tu_path("pl.log");
    char *o;
    assert_int_equal(tu_run_dptrain(&o, "train " DATA " --epochs 1 --max-steps 2 --checkpoint %s", d), 0);
    free(o);
    tu_write_file(log, "{\"event\":\"config\"}\n{\"event\":\"st", 31);
    int rc = tu_run_dptrain(&o, "train " DATA " --epochs 1 --resume %s --log %s", d, log);
    if (rc) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    char *l = slurp(log);
    if (strncmp(l, "{\"event\":\"config\"}\n{\"event\":\"config\",", 37) != 0 || tu_contains(l, "\"st{"))
        fail_msg("%s", l);
    free(l);
}

static void test_sigint(void **state) { (void)state; stop_by(SIGINT); }
static void test_sigterm(void **state) { (void)state; stop_by(SIGTERM); }

/* Damaged newest checkpoints are skipped with a warning; the result is still bitwise right. */
static void test_damaged_skipped(void **state) {
    (void)state;
    const char *ref = fresh_dir("dref"), *run = fresh_dir("drun");
    const char *args = "train " DATA " --epochs 2 --threads 1 --save-every 1 --keep 3";
    char *o;
    assert_int_equal(tu_run_dptrain(&o, "%s --checkpoint %s", args, ref), 0);
    free(o);
    assert_int_equal(tu_run_dptrain(&o, "%s --checkpoint %s --max-steps 20", args, run), 0);
    free(o);
    char p19[1024], p20[1024];
    snprintf(p20, sizeof p20, "%s/ckpt-0000000020.safetensors", run);
    snprintf(p19, sizeof p19, "%s/ckpt-0000000019.safetensors", run);
    /* flip a byte in the tensor data of the newest, truncate the one before */
    assert_int_equal(tu_sh(NULL, "printf '\\377' | dd of='%s' bs=1 seek=5000 conv=notrunc 2>/dev/null", p20), 0);
    assert_int_equal(truncate(p19, 3000), 0);
    int rc = tu_run_dptrain(&o, "%s --checkpoint %s --resume %s", args, run, run);
    if (rc || !tu_contains(o, "skipping a damaged checkpoint") || !tu_contains(o, "CRC-32") ||
        !tu_contains(o, "truncated"))
        fail_msg("rc %d:\n%s", rc, o);
    free(o);
    char a[1024];
    snprintf(a, sizeof a, "%s", newest(ref, NULL));
    const char *diff = tu_ckpt_diff(a, newest(run, NULL));
    if (diff) fail_msg("%s", diff);
    /* every checkpoint damaged: a clear failure */
    const char *one = fresh_dir("d1");
    assert_int_equal(tu_run_dptrain(&o, "%s --checkpoint %s --max-steps 2 --keep 1", args, one), 0);
    free(o);
    const char *p = newest(one, NULL);
    assert_int_equal(truncate(p, 100), 0);
    rc = tu_run_dptrain(&o, "%s --resume %s", args, one);
    if (rc != 1 || !tu_contains(o, "none of the 1 checkpoints is readable")) fail_msg("rc %d:\n%s", rc, o);
    free(o);
}

/* A checkpoint of another model, batch size or data set is refused naming the setting; settings
 * that only spread the same math differently are accepted. */
static void test_refusals(void **state) {
    (void)state;
    const char *d = fresh_dir("rdir");
    const char *base = "train --dataset synthetic --samples 512 --shape 1x28x28 --no-progress --quiet --epochs 1";
    char *o;
    assert_int_equal(tu_run_dptrain(&o, "%s --batch-size 32 --checkpoint %s --max-steps 3", base, d), 0);
    free(o);
    struct { const char *flags, *expect; } cases[] = {
        {"--batch-size 16", "--batch-size is '32' in the checkpoint but 16 in this run"},
        {"--batch-size 32 --model lenet-bn", "--model is 'lenet' in the checkpoint but lenet-bn"},
        {"--batch-size 32 --samples 256", "--samples is '512'"},
        {"--batch-size 32 --shape 1x32x32", "--shape is '1x28x28'"},
        {"--batch-size 32 --lr 0.1", "--lr is"},
        {"--batch-size 32 --precision bf16", "--precision is 'fp32' in the checkpoint but bf16 in this run"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rc = tu_run_dptrain(&o, "train --dataset synthetic --no-progress --quiet --epochs 1 %s %s --resume %s",
                                strstr(cases[i].flags, "--samples") ? "--shape 1x28x28" : strstr(cases[i].flags, "--shape")
                                ? "--samples 512" : "--samples 512 --shape 1x28x28", cases[i].flags, d);
        if (rc != 2 || !tu_contains(o, cases[i].expect) || !tu_contains(o, "refusing to resume") || !tu_contains(o, d))
            fail_msg("%s: rc %d:\n%s", cases[i].flags, rc, o);
        free(o);
    }
    int rc = tu_run_dptrain(&o, "%s --batch-size 32 --replicas 2 --threads 1 --workers 0 --bucket-mb 1 --resume %s",
                            base, d);
    if (rc) fail_msg("replicas/threads/workers/bucket may differ: rc %d:\n%s", rc, o);
    free(o);
    /* a missing file is refused (a missing directory starts the run: test_resume_starts_fresh) */
    rc = tu_run_dptrain(&o, "%s --resume %s", base, tu_path("nothing-here.safetensors"));
    if (rc != 2 || !tu_contains(o, "no such file")) fail_msg("rc %d:\n%s", rc, o);
    free(o);
}

/* Output paths are checked before training, and a write never goes through a device or a link. */
static void test_outputs_checked(void **state) {
    (void)state;
    const char *base = "train " DATA " --epochs 1";
    char *o;
    struct { const char *flags, *expect; } cases[] = {
        {"--save /dev/full", "--save /dev/full: exists and is not a regular file"},
        {"--save /nonexistent-dir/x.safetensors", "directory /nonexistent-dir does not exist"},
        {"--checkpoint /proc/dptrain-ckpt", "--checkpoint /proc/dptrain-ckpt: cannot create"},
        {"--checkpoint /dev/null", "exists and is not a directory"},
        {"--save-every 5", "--save-every needs --checkpoint DIR"},
        {"--save-every 0", "--save-every: expected N (steps) or Ne (epochs)"},
        {"--keep 0", "--keep: expected an integer in 1..1000000"},
        {"--on-nan maybe", "--on-nan: unknown value 'maybe'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rc = tu_run_dptrain(&o, "%s %s", base, cases[i].flags);
        if (rc != 2 || !tu_contains(o, cases[i].expect)) fail_msg("%s: rc %d:\n%s", cases[i].flags, rc, o);
        free(o);
    }
    /* the same file through two spellings */
    char dir[512], args[2048];
    snprintf(dir, sizeof dir, "%s", fresh_dir("same"));
    mkdir(dir, 0777);
    snprintf(args, sizeof args, "%s --log %s/x --save %s/./x", base, dir, dir);
    int rc = tu_run_dptrain(&o, "%s", args);
    if (rc != 2 || !tu_contains(o, "--log and --save name the same file")) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    /* a symlink as the target is refused; one planted at the old temporary name is not followed */
    char target[600], link[600], victim[600];
    snprintf(target, sizeof target, "%s/m.safetensors", dir);
    snprintf(link, sizeof link, "%s/m.safetensors.tmp", dir);
    snprintf(victim, sizeof victim, "%s/victim", dir);
    tu_write_file(victim, "keep", 4);
    assert_int_equal(symlink(victim, link), 0);
    rc = tu_run_dptrain(&o, "%s --save %s", base, target);
    if (rc) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    char *v = slurp(victim);
    assert_string_equal(v, "keep");
    free(v);
    rc = tu_run_dptrain(&o, "%s --save %s", base, link);
    if (rc != 2 || !tu_contains(o, "a symbolic link")) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    /* a checkpoint directory given where a file is expected: the newest file is named */
    rc = tu_run_dptrain(&o, "eval " DATA " --load %s", dir);
    if (rc != 2 || !tu_contains(o, "is a directory")) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    /* eval writes nothing: --save there is refused, not ignored */
    rc = tu_run_dptrain(&o, "eval " DATA " --load %s --save %s/y", target, dir);
    if (rc != 2 || !tu_contains(o, "eval: --save is for train")) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    /* train --load says what it does */
    rc = tu_run_dptrain(&o, "%s --load %s", base, target);
    if (rc || !tu_contains(o, "train --load FILE is --init-from FILE")) fail_msg("rc %d:\n%s", rc, o);
    free(o);
}

/* Disk full while writing a checkpoint (a 600 KiB tmpfs holds one LeNet checkpoint, not two): the
 * run stops, the previous checkpoint is intact, the message says so. Skipped without mount rights. */
static void test_disk_full(void **state) {
    (void)state;
    const char *d = fresh_dir("full");
    mkdir(d, 0777);
    if (tu_sh(NULL, "mount -t tmpfs -o size=600k tmpfs '%s'", d) != 0) {
        print_message("cannot mount a tmpfs here: disk-full case skipped\n");
        return;
    }
    char *o;
    int rc = tu_run_dptrain(&o, "train " DATA " --epochs 1 --checkpoint %s --save-every 2 --keep 2 --log %s/run.log",
                            d, d);
    int count;
    const char *p = newest(d, &count);
    char saved[1024] = "";
    if (p) snprintf(saved, sizeof saved, "%s", p);
    char *l = NULL;
    tu_sh(&l, "cat '%s/run.log'", d);
    tu_sh(NULL, "umount '%s'", d);
    if (rc != 1 || !tu_contains(o, "No space left on device") || !tu_contains(o, "the last good checkpoint is") ||
        count != 1 || !tu_contains(l, "\"event\":\"step\""))
        fail_msg("rc %d, %d checkpoints:\n%s", rc, count, o);
    free(o), free(l);
}

/* A NaN loss (injected) stops the run naming epoch, step and replica, keeping the last checkpoint;
 * --on-nan skip skips that step and counts it. */
static void test_nan(void **state) {
    (void)state;
    const char *d = fresh_dir("nan"), *log = tu_path("nan.log");
    char *o;
    int rc = tu_sh(&o, "DPTRAIN_INJECT_NAN_STEP=7 %s train " DATA " --epochs 1 --replicas 2 --threads 2 "
                   "--checkpoint %s --save-every 5", bin(), d);
    if (rc != 1 || !tu_contains(o, "replica 0") || !tu_contains(o, "epoch 1, step 7") ||
        !tu_contains(o, "the last good checkpoint is") || !tu_contains(o, "ckpt-0000000005"))
        fail_msg("rc %d:\n%s", rc, o);
    free(o);
    int count;
    newest(d, &count);
    assert_int_equal(count, 1);
    rc = tu_sh(&o, "DPTRAIN_INJECT_NAN_STEP=7 %s train --model lenet-bn " DATA " --epochs 1 --on-nan skip --log %s",
               bin(), log);
    if (rc) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    char *l = slurp(log);
    if (!tu_contains(l, "\"skipped_steps\":1")) fail_msg("%s", l);
    free(l);
}

/* With the canonical summation order (--chunks), a run stopped with 4 replicas and resumed with 2 ends
 * bitwise where a 1-replica run ends. */
static void test_resume_other_replica_count(void **state) {
    (void)state;
    const char *a = fresh_dir("rc1"), *b = fresh_dir("rc4");
    const char *args = "train " DATA " --epochs 2 --save-every 1";
    char *o;
    assert_int_equal(tu_run_dptrain(&o, "%s --replicas 1 --threads 1 --checkpoint %s", args, a), 0);
    free(o);
    assert_int_equal(tu_run_dptrain(&o, "%s --replicas 4 --threads 2 --max-steps 9 --checkpoint %s", args, b), 0);
    free(o);
    /* without --quiet: an exact resume says nothing about its bits */
    int rc = tu_run_dptrain(&o, "train " DATA_LOUD " --epochs 2 --save-every 1 --replicas 2 --threads 1 --resume %s", b);
    if (rc || tu_contains(o, "dptrain: note: --resume")) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    char x[1024];
    snprintf(x, sizeof x, "%s", newest(a, NULL));
    const char *diff = tu_ckpt_diff(x, newest(b, NULL));
    if (diff) fail_msg("%s", diff);
}

/* Changes the first byte of metadata key's value in the checkpoint at path to c, and the header's
 * CRC to match: a checkpoint as another machine would have written it. */
static void patch_meta(const char *path, const char *key, char c) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_true(n > 8 && n < sizeof buf);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)(unsigned char)buf[i] << (8 * i);
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    char *at = NULL;
    for (size_t i = 8; i + strlen(pat) < 8 + hl && !at; i++)
        if (memcmp(buf + i, pat, strlen(pat)) == 0) at = buf + i;
    assert_non_null(at);
    at[strlen(pat)] = c;
    char *slot = dp_st_header_crc_slot(buf + 8, (size_t)hl);
    assert_non_null(slot);
    char hex[9];
    snprintf(hex, sizeof hex, "%08x", dp_st_header_crc((const unsigned char *)buf, 8 + (size_t)hl));
    memcpy(slot, hex, 8);
    tu_write_file(path, buf, n);
}

/* --help promised "bitwise as the run never stopped" whatever the resumed run's --chunks, replica
 * count or CPU kernels: a resume that cannot be bitwise now says so on one line, and why. */
static void test_resume_note_inexact(void **state) {
    (void)state;
    const char *d = fresh_dir("inexact");
    const char *args = "train " DATA_LOUD " --epochs 2 --threads 1";
    char *o;
    assert_int_equal(tu_run_dptrain(&o, "%s --replicas 4 --max-steps 5 --save-every 1 --checkpoint %s", args, d), 0);
    free(o);
    char keep[1024];
    snprintf(keep, sizeof keep, "%s", tu_path("inexact.safetensors"));
    tu_sh(NULL, "cp '%s' '%s'", newest(d, NULL), keep);
    /* another --chunks */
    int rc = tu_run_dptrain(&o, "%s --replicas 4 --chunks 4 --max-steps 6 --resume %s", args, keep);
    if (rc || !tu_contains(o, "dptrain: note: --resume ") ||
        !tu_contains(o, "the result will not be bitwise the uninterrupted run's") ||
        !tu_contains(o, "--chunks is 8 in the checkpoint but 4 here"))
        fail_msg("rc %d:\n%s", rc, o);
    free(o);
    /* a replica count that does not divide --chunks */
    rc = tu_run_dptrain(&o, "%s --replicas 3 --max-steps 6 --resume %s", args, keep);
    if (rc || !tu_contains(o, "the checkpoint's run had 4 replicas, this one 3, which does not divide --chunks 8"))
        fail_msg("rc %d:\n%s", rc, o);
    print_message("%s", strstr(o, "dptrain: note"));
    free(o);
    /* another CPU kernel variant (the checkpoint as another machine wrote it) */
    patch_meta(keep, "dptrain.cpu_kernels", 'Z');
    rc = tu_run_dptrain(&o, "%s --replicas 4 --max-steps 6 --resume %s", args, keep);
    if (rc || !tu_contains(o, "the CPU kernels were Z") || !tu_contains(o, " in the checkpoint, "))
        fail_msg("rc %d:\n%s", rc, o);
    free(o);
    /* the same settings, or another replica count that divides --chunks: no note */
    tu_sh(NULL, "cp '%s' '%s'", newest(d, NULL), keep);
    rc = tu_run_dptrain(&o, "%s --replicas 2 --max-steps 6 --resume %s", args, keep);
    if (rc || tu_contains(o, "dptrain: note")) fail_msg("rc %d:\n%s", rc, o);
    free(o);
}

/* The checkpoint's dptrain.conv_algos (the newest in dir), into buf. */
static void conv_algos_of(const char *dir, char *buf, size_t cap) {
    dp_st_file f;
    assert_int_equal(dp_st_read(newest(dir, NULL), &f), DP_OK);
    const char *v = dp_st_meta_get(&f, "dptrain.conv_algos");
    snprintf(buf, cap, "%s", v ? v : "(none)");
    dp_st_free(&f);
}

/* The convolution algorithm record (kernels/conv_algos.h) travels in the checkpoint: the record a run
 * replayed (DPTRAIN_CONV_ALGOS; on a GPU also the algorithms it chose) is in its checkpoints, and a
 * resume replays the checkpoint's, so its own checkpoints carry it on without being told again. A
 * record that is not one is refused at start. (A CPU run chooses none: the record is what it was
 * given.) */
static void test_conv_algos_recorded(void **state) {
    (void)state;
    const char *d = fresh_dir("algos");
    const char *rec = "64,56,56,64,3,1,1,32,0:1,0,-1;3,28,28,6,5,1,0,32,1:6,1,5";
    const char *args = "train " DATA " --epochs 2 --threads 1 --save-every 1";
    char *o, got[1024];
    setenv("DPTRAIN_CONV_ALGOS", rec, 1);
    int rc = tu_run_dptrain(&o, "%s --max-steps 3 --checkpoint %s", args, d);
    unsetenv("DPTRAIN_CONV_ALGOS");
    if (rc) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    conv_algos_of(d, got, sizeof got);
    assert_string_equal(got, rec);
    rc = tu_run_dptrain(&o, "%s --max-steps 6 --resume %s", args, d);
    if (rc) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    int n = 0;
    newest(d, &n);
    assert_true(n >= 2);
    conv_algos_of(d, got, sizeof got);
    assert_string_equal(got, rec);
    setenv("DPTRAIN_CONV_ALGOS", "64,56,56,64,3,1,1,32,0:1,0", 1);
    rc = tu_run_dptrain(&o, "%s --max-steps 3 --checkpoint %s", args, fresh_dir("algos_bad"));
    if (rc != 2 || !tu_contains(o, "dptrain: DPTRAIN_CONV_ALGOS: entry 1 is not ")) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    /* eval too (it ran, ignoring it) */
    rc = tu_run_dptrain(&o, "eval " DATA " --threads 1 --load %s", newest(d, NULL));
    unsetenv("DPTRAIN_CONV_ALGOS");
    if (rc != 2 || !tu_contains(o, "dptrain: DPTRAIN_CONV_ALGOS: entry 1 is not ")) fail_msg("rc %d:\n%s", rc, o);
    free(o);
}

/* Rewrites the checkpoint at path with metadata key's value replaced (the header's and the data's
 * CRCs made anew by the writer): a crafted file that passes every check but the value's own. */
static void set_meta(const char *path, const char *key, const char *value) {
    dp_st_file f;
    assert_int_equal(dp_st_read(path, &f), DP_OK);
    static dp_st_meta m[DP_ST_MAX_META_KEYS];
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, (const cJSON *)f.meta_json) {
        if (strcmp(it->string, "dptrain.data_crc32") == 0 || strcmp(it->string, DP_ST_HEADER_CRC_KEY) == 0) continue;
        m[n++] = (dp_st_meta){.key = it->string, .value = strcmp(it->string, key) == 0 ? value : it->valuestring};
    }
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *o = fopen(tmp, "wb");
    assert_non_null(o);
    assert_int_equal(dp_st_write(o, tmp, f.tensors, f.n, m, n), DP_OK);
    assert_int_equal(fclose(o), 0);
    dp_st_free(&f);
    assert_int_equal(rename(tmp, path), 0);
}

/* The record a checkpoint holds is bounded (kernels/conv_algos.h: DP_CONV_ALGOS_RECORD_MAX): the
 * longest record the parser takes, 256 entries of the longest fields, is written at every checkpoint
 * and replayed on resume (a longer one, accepted at start, stopped the run at its first checkpoint
 * with nothing saved; it is now refused at start, a field out of its range); a longer recorded value
 * (crafted) is refused as too long, not cut into a damaged record. A damaged
 * record in the newest checkpoint of a --resume DIR is damage like any other: warned about, naming
 * the file, and the older checkpoint is used (it stopped the run, "none of the 0 checkpoints"). */
static void test_conv_algos_bounds(void **state) {
    (void)state;
    const char *d = fresh_dir("algos_long");
    const char *args = "train " DATA " --epochs 2 --threads 1 --save-every 1";
    static char rec[DP_CONV_ALGOS_RECORD_MAX], got[DP_CONV_ALGOS_RECORD_MAX + 64];
    size_t k = 0;
    for (int i = 0; i < DP_CONV_ALGOS_MAX; i++)
        k += (size_t)snprintf(rec + k, sizeof rec - k, "%s65536,65536,65536,65536,%d,65536,65536,%d,1:-1,-1,-1",
                              i ? ";" : "", 10000 + i, 1000000 + i);
    assert_int_equal(k, DP_CONV_ALGOS_RECORD_MAX - 2); /* the longest there is: no ';' after the last, no NUL */
    char *o;
    setenv("DPTRAIN_CONV_ALGOS", rec, 1);
    int rc = tu_run_dptrain(&o, "%s --max-steps 3 --checkpoint %s", args, d);
    unsetenv("DPTRAIN_CONV_ALGOS");
    if (rc) fail_msg("rc %d:\n%.2000s", rc, o);
    free(o);
    conv_algos_of(d, got, sizeof got);
    assert_string_equal(got, rec);
    rc = tu_run_dptrain(&o, "%s --max-steps 4 --resume %s", args, d);
    if (rc) fail_msg("rc %d:\n%.2000s", rc, o);
    free(o);
    conv_algos_of(d, got, sizeof got);
    assert_string_equal(got, rec);
    /* the review's 19,967 bytes of 256 entries: refused at start, naming the entry and field */
    k = 0;
    for (int i = 0; i < DP_CONV_ALGOS_MAX; i++)
        k += (size_t)snprintf(rec + k, sizeof rec - k, "%s1000000,2000,2000,64,3,1,1,%d,0:1,0,-1", i ? ";" : "", 64 + i);
    setenv("DPTRAIN_CONV_ALGOS", rec, 1);
    rc = tu_run_dptrain(&o, "%s --max-steps 3 --checkpoint %s", args, fresh_dir("algos_longer"));
    unsetenv("DPTRAIN_CONV_ALGOS");
    if (rc != 2 || !tu_contains(o, "DPTRAIN_CONV_ALGOS: entry 1: in_c is '1000000', expected an integer in 1..65536"))
        fail_msg("rc %d:\n%.2000s", rc, o);
    free(o);
    /* one byte longer than any record dptrain writes: refused by name, as damage */
    char one[1024];
    snprintf(one, sizeof one, "%s", newest(d, NULL));
    memset(got, '1', DP_CONV_ALGOS_RECORD_MAX);
    got[DP_CONV_ALGOS_RECORD_MAX] = '\0';
    set_meta(one, "dptrain.conv_algos", got);
    rc = tu_run_dptrain(&o, "train " DATA " --epochs 2 --threads 1 --max-steps 5 --resume %s", one);
    if (rc != 1 || !tu_contains(o, ": metadata dptrain.conv_algos is longer than the ") ||
        !tu_contains(o, " bytes dptrain writes"))
        fail_msg("rc %d:\n%.2000s", rc, o);
    free(o);

    /* the newest of two checkpoints with a damaged record, the older one good */
    const char *e = fresh_dir("algos_damaged");
    assert_int_equal(tu_run_dptrain(&o, "%s --max-steps 4 --checkpoint %s", args, e), 0);
    free(o);
    int n = 0;
    snprintf(one, sizeof one, "%s", newest(e, &n));
    assert_true(n >= 2 && tu_contains(one, "ckpt-0000000004"));
    set_meta(one, "dptrain.conv_algos", "garbage");
    const char *all = fresh_dir("algos_all_damaged"); /* a copy: both files damaged */
    tu_sh(NULL, "mkdir '%s' && cp '%s' '%s'/ckpt-0000000003.safetensors '%s'", all, one, e, all);
    rc = tu_run_dptrain(&o, "%s --max-steps 5 --resume %s --log %s", args, e, tu_path("algos_damaged.log"));
    char want[1200];
    snprintf(want, sizeof want, "dptrain: warning: --resume: skipping a damaged checkpoint: %s: the convolution "
             "algorithm record (dptrain.conv_algos) is damaged: entry 1 is not ", one);
    if (rc || !tu_contains(o, want)) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    char *l = slurp(tu_path("algos_damaged.log"));
    if (!tu_contains(l, "\"event\":\"resume\",\"epoch\":1,\"next_batch\":3,\"step\":3")) fail_msg("%s", l);
    free(l);
    /* none readable: each warned about, and counted */
    char older[1024];
    snprintf(older, sizeof older, "%s/ckpt-0000000003.safetensors", all);
    set_meta(older, "dptrain.conv_algos", "1,2");
    rc = tu_run_dptrain(&o, "%s --max-steps 5 --resume %s", args, all);
    if (rc != 1 || !tu_contains(o, "none of the 2 checkpoints is readable") || !tu_contains(o, "entry 1 is not "))
        fail_msg("rc %d:\n%s", rc, o);
    free(o);
}

/* --save-every Ne: one checkpoint per N epochs (plus the last state), --keep K of them. */
static void test_save_every_epochs(void **state) {
    (void)state;
    const char *d = fresh_dir("ne");
    char *o;
    /* 512 samples, batch 32: 16 steps an epoch; every 2nd epoch of 5 is steps 32 and 64, then the end at 80 */
    int rc = tu_run_dptrain(&o, "train " DATA " --epochs 5 --checkpoint %s --save-every 2e --keep 2", d);
    if (rc) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    char *ls;
    tu_sh(&ls, "ls %s", d);
    if (strcmp(ls, "ckpt-0000000064.safetensors\nckpt-0000000080.safetensors\n") != 0) fail_msg("%s", ls);
    free(ls);
    /* the next resume starts at epoch 6: nothing left with --epochs 5, one more epoch with --epochs 6 */
    rc = tu_run_dptrain(&o, "train " DATA " --epochs 6 --checkpoint %s --save-every 2e --keep 2 --resume %s --log %s",
                        d, d, tu_path("ne.log"));
    if (rc) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    char *l = slurp(tu_path("ne.log"));
    if (!tu_contains(l, "\"event\":\"resume\",\"epoch\":6,\"next_batch\":0,\"step\":80") ||
        !tu_contains(l, "\"epoch\":6,\"steps\":96"))
        fail_msg("%s", l);
    free(l);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill9_resume_1), cmocka_unit_test(test_kill9_resume_2),
        cmocka_unit_test(test_kill9_resume_4), cmocka_unit_test(test_kill9_resume_bf16),
        cmocka_unit_test(test_sigint),
        cmocka_unit_test(test_sigterm),        cmocka_unit_test(test_damaged_skipped),
        cmocka_unit_test(test_refusals),       cmocka_unit_test(test_outputs_checked),
        cmocka_unit_test(test_disk_full),      cmocka_unit_test(test_nan),
        cmocka_unit_test(test_save_every_epochs), cmocka_unit_test(test_conv_algos_recorded),
        cmocka_unit_test(test_conv_algos_bounds),
        cmocka_unit_test(test_resume_other_replica_count),
        cmocka_unit_test(test_resume_log_partial_line), cmocka_unit_test(test_resume_note_inexact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
