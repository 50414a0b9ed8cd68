/* test_run_control.c: how a run starts and ends: `--resume DIR` on a first run starts it there (one
 * command line starts or continues a run), and a SIGINT/SIGTERM during the final evaluation is
 * honoured (128 + signal, the state saved) instead of exiting 0; a checkpoint directory is held
 * by one run at a time. */
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/ckpt_dir.h"
#include "testutil.h"

#define DATA "--dataset synthetic --samples 128 --shape 1x28x28 --batch-size 32 --no-progress --threads 1"

static const char *fresh_dir(const char *name) {
    const char *d = tu_path(name);
    tu_sh(NULL, "rm -rf '%s'", d);
    return d;
}

static int count_ckpts(const char *dir) {
    char *out;
    tu_sh(&out, "ls '%s' | grep -c '^ckpt-.*safetensors$'", dir);
    int n = atoi(out);
    free(out);
    return n;
}

static void test_resume_starts_fresh(void **state) {
    (void)state;
    const char *d = fresh_dir("start-or-continue");
    char *o;
    /* the directory does not exist: the run starts there */
    int rc = tu_run_dptrain(&o, "train " DATA " --epochs 1 --resume %s", d);
    if (rc || !tu_contains(o, "no checkpoint there yet; starting a fresh run")) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    assert_true(count_ckpts(d) >= 1);
    /* the same command line with more epochs continues it */
    rc = tu_run_dptrain(&o, "train " DATA " --epochs 2 --resume %s", d);
    if (rc || !tu_contains(o, "resuming from") || !tu_contains(o, "epoch 2/2")) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    /* an empty directory (a run killed before its first checkpoint, its temporary file left) starts too */
    const char *e = fresh_dir("empty-start");
    tu_sh(NULL, "mkdir -p '%s' && touch '%s/.ckpt-0000000003.safetensors.AbC123'", e, e);
    rc = tu_run_dptrain(&o, "train " DATA " --epochs 1 --resume %s", e);
    if (rc || !tu_contains(o, "starting a fresh run")) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    /* --save may name a file in a --checkpoint directory that the run creates */
    const char *n = fresh_dir("save-inside");
    rc = tu_run_dptrain(&o, "train " DATA " --epochs 1 --checkpoint %s --save %s/final.safetensors", n, n);
    if (rc) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    /* a directory whose checkpoints are all damaged is not silently restarted */
    tu_sh(NULL, "for f in '%s'/ckpt-*; do printf garbage > \"$f\"; done", e);
    rc = tu_run_dptrain(&o, "train " DATA " --epochs 1 --resume %s", e);
    if (rc != 1 || !tu_contains(o, "none of the")) fail_msg("rc %d:\n%s", rc, o);
    free(o);
}

/* A resumed epoch's train figures cover the batches trained after the resume: the epoch line and
 * the log say which (they were unmarked). */
static void test_resumed_epoch_marked(void **state) {
    (void)state;
    const char *d = fresh_dir("mid-epoch"), *log = tu_path("mid-epoch.log");
    unlink(log);
    char *o;
    /* 4 batches an epoch: stop after 2, continue */
    int rc = tu_run_dptrain(&o, "train " DATA " --epochs 1 --max-steps 2 --save-every 1 --checkpoint %s", d);
    if (rc) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    rc = tu_run_dptrain(&o, "train " DATA " --epochs 2 --save-every 1 --resume %s --log %s", d, log);
    if (rc || !tu_contains(o, "epoch 1/2 (resumed: batches 3-4)  train loss") || tu_contains(o, "epoch 2/2 (resumed"))
        fail_msg("rc %d:\n%s", rc, o);
    free(o);
    tu_sh(&o, "cat '%s'", log);
    if (!tu_contains(o, "\"first_batch\":2") || !tu_contains(o, "\"first_batch\":0")) fail_msg("%s", o);
    free(o);
}

/* The console lines fit an 80-column terminal (the epoch line was 130-170 columns and wrapped). */
static void test_console_fits_80_columns(void **state) {
    (void)state;
    char *o;
    int rc = tu_run_dptrain(&o, "train " DATA " --epochs 2 --replicas 4 --on-nan skip");
    if (rc) fail_msg("rc %d:\n%s", rc, o);
    for (char *line = o, *end; *line; line = end + (*end != '\0')) {
        end = line + strcspn(line, "\n");
        if (end - line > 80) fail_msg("a line of %d columns:\n%.*s", (int)(end - line), (int)(end - line), line);
    }
    assert_true(tu_contains(o, "epoch 2/2"));
    free(o);
}

static void signal_in_final_eval(int sig) {
    const char *d = fresh_dir("sig-final"), *save = tu_path("sig-final.safetensors");
    unlink(save);
    char *o;
    int rc = tu_sh(&o, "DPTRAIN_INJECT_SIGNAL_FINAL_EVAL=%d %s train " DATA " --epochs 1 --checkpoint %s --save %s "
                   "--predict host", sig, getenv("DPTRAIN"), d, save);
    if (rc != 128 + sig || !tu_contains(o, "during the final evaluation, after training finished") ||
        !tu_contains(o, "test accuracy") || tu_contains(o, "predicted"))
        fail_msg("signal %d: rc %d:\n%s", sig, rc, o);
    free(o);
    struct stat st;
    assert_int_equal(stat(save, &st), 0); /* the finished training is saved */
    assert_true(count_ckpts(d) >= 1);
}

static void test_sigint_in_final_eval(void **state) { (void)state; signal_in_final_eval(SIGINT); }
static void test_sigterm_in_final_eval(void **state) { (void)state; signal_in_final_eval(SIGTERM); }

/* Two runs on one checkpoint directory (a requeued job while the old one runs): the second is
 * refused naming the holder; once the holder is gone, the directory is free again. */
static void test_checkpoint_dir_locked(void **state) {
    (void)state;
    const char *d = fresh_dir("locked");
    assert_int_equal(mkdir(d, 0755), 0);
    int fd;
    assert_int_equal(dp_ckpt_dir_lock("--checkpoint", d, &fd), DP_OK);
    char *o, pid[32];
    snprintf(pid, sizeof pid, "pid %d on host ", (int)getpid());
    int rc = tu_run_dptrain(&o, "train " DATA " --epochs 1 --resume %s", d);
    if (rc != 2 || !tu_contains(o, "another run is using this directory") || !tu_contains(o, pid) ||
        tu_contains(o, "epoch 1/1"))
        fail_msg("rc %d:\n%s", rc, o);
    free(o);
    rc = tu_run_dptrain(&o, "train " DATA " --epochs 1 --checkpoint %s", d);
    if (rc != 2 || !tu_contains(o, pid)) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    dp_ckpt_dir_unlock(fd);
    rc = tu_run_dptrain(&o, "train " DATA " --epochs 1 --checkpoint %s", d);
    if (rc) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    /* a symlink at the lock's name is not followed (its target is not truncated) */
    const char *e = fresh_dir("locklink"), *victim = tu_path("lock-victim");
    tu_write_file(victim, "keep", 4);
    tu_sh(NULL, "mkdir -p '%s' && ln -s '%s' '%s/.dptrain.lock'", e, victim, e);
    rc = tu_run_dptrain(&o, "train " DATA " --epochs 1 --checkpoint %s", e);
    if (rc == 0 || !tu_contains(o, "lock file")) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    tu_sh(&o, "cat '%s'", victim);
    assert_string_equal(o, "keep");
    free(o);
    /* nor a hard link */
    tu_sh(NULL, "rm -f '%s/.dptrain.lock' && ln '%s' '%s/.dptrain.lock'", e, victim, e);
    rc = tu_run_dptrain(&o, "train " DATA " --epochs 1 --checkpoint %s", e);
    if (rc == 0 || !tu_contains(o, "not a plain file of its own")) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    tu_sh(&o, "cat '%s'", victim);
    assert_string_equal(o, "keep");
    free(o);
}

/* --- a shared directory: another user's lock file --------------------------------------------- */

enum { OTHER_UID = 65534, ME_UID = 65533 };

typedef struct {
    uid_t uid;
    const char *dir;
} lock_job;

static dp_status lock_as_child(void *arg) {
    const lock_job *j = arg;
    if (setgroups(0, NULL) != 0 || setgid(j->uid) != 0 || setuid(j->uid) != 0) _exit(99);
    umask(022); /* a user's usual umask: the lock's mode must not depend on it */
    int fd;
    return dp_ckpt_dir_lock("--checkpoint", j->dir, &fd);
}

/* In a child running as uid: dp_ckpt_dir_lock(dir), released at once; its status, message into msg. */
static dp_status lock_as(uid_t uid, const char *dir, char *msg, size_t cap) {
    lock_job j = {uid, dir};
    return tu_status_in_child(lock_as_child, &j, msg, cap, NULL);
}

/* A lock file as an older dptrain or a finished run under umask 022 left it: 0644, another user's. */
static void foreign_lock(const char *path, const char *line) {
    unlink(path);
    tu_write_file(path, line, strlen(line));
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(chown(path, OTHER_UID, OTHER_UID), 0);
}

/* A finished run's lock file (0644, another user's) blocked --resume in a shared directory with
 * "Permission denied", though a stale lock must never block a run: it is replaced, the new one
 * writable by whoever may write the directory; a held one still refuses the run. Needs root (to
 * act as two users); as another user it is skipped. */
static void test_lock_of_another_user(void **state) {
    (void)state;
    if (geteuid() != 0) {
        print_message("not root: cannot act as two users: skipped\n");
        skip();
    }
    const char *d = fresh_dir("shared-lock");
    assert_int_equal(mkdir(d, 0777), 0);
    assert_int_equal(chmod(d, 0777), 0);
    pid_t probe = fork();
    assert_true(probe >= 0);
    if (probe == 0) /* the scratch directory may lie under one only its owner can enter */
        _exit(setgid(ME_UID) == 0 && setuid(ME_UID) == 0 && access(d, W_OK | X_OK) == 0 ? 0 : 1);
    int pst;
    assert_int_equal(waitpid(probe, &pst, 0), probe);
    if (!WIFEXITED(pst) || WEXITSTATUS(pst) != 0) {
        print_message("another user cannot reach %s: skipped\n", d);
        tu_sh(NULL, "rm -rf '%s'", d);
        skip();
    }
    char lock[1024], msg[DP_ERROR_MAX];
    snprintf(lock, sizeof lock, "%s/.dptrain.lock", d);
    /* stale: replaced by one of ours, writable by the others who write the directory */
    foreign_lock(lock, "pid 1 on host gone since 2026-01-01 00:00:00 UTC\n");
    dp_status s = lock_as(ME_UID, d, msg, sizeof msg);
    if (s != DP_OK) fail_msg("a stale lock of another user: %s", msg);
    struct stat st;
    assert_int_equal(stat(lock, &st), 0);
    assert_int_equal((int)st.st_uid, ME_UID);
    assert_int_equal((int)(st.st_mode & 0777), 0666);
    /* the next user opens that one as it is */
    s = lock_as(OTHER_UID, d, msg, sizeof msg);
    if (s != DP_OK) fail_msg("the lock file left by a run of another user: %s", msg);
    /* held (by a process of the other user that can write it, as an older dptrain would): refused, naming it */
    foreign_lock(lock, "pid 4242 on host there since 2026-01-01 00:00:00 UTC\n");
    int ready[2], release[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(release), 0);
    pid_t holder = fork();
    assert_true(holder >= 0);
    if (holder == 0) {
        close(ready[0]), close(release[1]);
        if (setgroups(0, NULL) != 0 || setgid(OTHER_UID) != 0 || setuid(OTHER_UID) != 0) _exit(99);
        int fd = open(lock, O_RDWR);
        struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        if (fd < 0 || fcntl(fd, F_SETLK, &lk) != 0) _exit(98);
        if (write(ready[1], "1", 1) != 1) _exit(97);
        char c;
        while (read(release[0], &c, 1) > 0) {
        }
        _exit(0);
    }
    close(ready[1]), close(release[0]);
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    s = lock_as(ME_UID, d, msg, sizeof msg);
    close(release[1]);
    int hst;
    assert_int_equal(waitpid(holder, &hst, 0), holder);
    close(ready[0]);
    if (s != DP_ERR_USAGE || !tu_contains(msg, "another run is using this directory (pid 4242 on host there"))
        fail_msg("a held lock of another user: status %d: %s", s, msg);
    assert_int_equal(stat(lock, &st), 0);
    assert_int_equal((int)st.st_uid, OTHER_UID); /* left as it was */
    /* a sticky directory (/tmp-like): another user's file cannot be removed; it is named, with what to do */
    assert_int_equal(chmod(d, 01777), 0);
    s = lock_as(ME_UID, d, msg, sizeof msg);
    if (s == DP_OK || !tu_contains(msg, "belongs to another user (uid 65534) and cannot be replaced"))
        fail_msg("sticky: status %d: %s", s, msg);
    print_message("%s\n", msg);
    /* unreadable too (an older dptrain under umask 077): nobody can tell whether it is held; named */
    foreign_lock(lock, "pid 1 on host gone since 2026-01-01 00:00:00 UTC\n");
    assert_int_equal(chmod(lock, 0600), 0);
    s = lock_as(ME_UID, d, msg, sizeof msg);
    if (s == DP_OK || !tu_contains(msg, "belongs to another user (uid 65534) and this user can neither write nor read"))
        fail_msg("0600: status %d: %s", s, msg);
    /* ...which no run of this version leaves: its files there are writable by all */
    unlink(lock);
    assert_int_equal(lock_as(OTHER_UID, d, msg, sizeof msg), DP_OK);
    s = lock_as(ME_UID, d, msg, sizeof msg);
    if (s != DP_OK) fail_msg("sticky, a lock file of this version: %s", msg);
    /* the binary: a run of one user, then another user's --resume of it (util-linux's setpriv runs it as them) */
    if (tu_sh(NULL, "command -v setpriv") != 0) {
        print_message("no setpriv: the run as two users skipped\n");
        tu_sh(NULL, "rm -rf '%s'", d);
        return;
    }
    assert_int_equal(chmod(d, 0777), 0);
    tu_sh(NULL, "rm -rf '%s'/* '%s'/.dptrain.lock", d, d);
    char *o;
    int rc = tu_sh(&o, "cd '%s' && setpriv --reuid=%d --regid=%d --clear-groups sh -c 'umask 022 && exec \"%s\" train "
                   DATA " --epochs 1 --checkpoint .' 2>&1", d, OTHER_UID, OTHER_UID, getenv("DPTRAIN"));
    if (rc) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    rc = tu_sh(&o, "cd '%s' && setpriv --reuid=%d --regid=%d --clear-groups sh -c 'umask 022 && exec \"%s\" train "
               DATA " --epochs 2 --resume .' 2>&1", d, ME_UID, ME_UID, getenv("DPTRAIN"));
    if (rc || !tu_contains(o, "resuming from")) fail_msg("rc %d:\n%s", rc, o);
    free(o);
    tu_sh(NULL, "rm -rf '%s'", d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_starts_fresh),
        cmocka_unit_test(test_sigint_in_final_eval),
        cmocka_unit_test(test_sigterm_in_final_eval),
        cmocka_unit_test(test_checkpoint_dir_locked),
        cmocka_unit_test(test_lock_of_another_user),
        cmocka_unit_test(test_resumed_epoch_marked),
        cmocka_unit_test(test_console_fits_80_columns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
