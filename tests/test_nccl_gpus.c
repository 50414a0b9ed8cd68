/* test_nccl_gpus.c: one process driving several devices with the NCCL backend (`--gpus`, issue
 * 17), through the NCCL test double (tests/nccl_double/, LD_PRELOAD'ed; its ranks move host
 * memory, so `--device cpu` stands in for each GPU): one process with 2 and 4 GPUs, and 2 processes
 * with 2 GPUs each, bitwise equal to `--backend sim --replicas N` (DDP, DP, lenet-bn with
 * --sync-bn); a killed process of two ends the other; bad --gpus lists and combinations refused in
 * one line with exit 2; and the double itself with two communicators of one process in one group
 * (moving data between them without deadlock, and its checker naming both ranks). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dp_config.h"
#include "ranks.h"
#include "testutil.h"

#if DP_HAVE_NCCL
#include <nccl.h>

#include "nccl_api.h"

#define DATA "--dataset synthetic --samples 384 --batch-size 64 --seed 5 --threads 1"

/* One dptrain process in DIR with the double preloaded (env: more variables, may be ""). */
static int run_one(char **out, const char *dir, const char *env, const char *args) {
    return tu_sh(out,
                 "mkdir -p %s && cd %s && %s LD_PRELOAD=%s ASAN_OPTIONS=verify_asan_link_order=0:$ASAN_OPTIONS "
                 "timeout -s KILL 240 %s train --backend nccl --device cpu --no-progress %s 2>&1",
                 dir, dir, env, rk_double(), getenv("DPTRAIN"), args);
}

/* `procs` processes with torchrun's variables (tests/ranks.h), process p with --gpus gpus[p]; each
 * one's output in DIR/procP.log, its exit status in codes[p]. Returns the seconds the slowest took. */
static double run_procs(const char *dir, int procs, const char *const *gpus, const char *fault, int codes[],
                        const char *args) {
    char each[8][64];
    const char *each_p[8];
    for (int p = 0; p < procs; p++) snprintf(each[p], sizeof each[p], "--gpus %s", gpus[p]), each_p[p] = each[p];
    const rk_launch l = {.dir = dir, .n = procs, .log = "proc", .fault = fault, .timeout_s = 240, .each = each_p};
    return rk_run(&l, codes, "train --backend nccl --device cpu --no-progress %s", args);
}

static char *proc_log(const char *dir, int p) { return rk_log(dir, "proc", p); }

/* DIR/nccl.ckpt against the sim's `replicas` with the same flags: bitwise. */
static void expect_equal_to_sim(const char *dir, int replicas, const char *flags) {
    rk_expect_equal_to_sim(dir, dir, "--replicas %d --no-progress %s %s", replicas, DATA, flags);
}

static const char *gpu_list(int n) {
    static const char *const lists[] = {"", "0", "0,1", "0,1,2", "0,1,2,3"};
    return lists[n];
}

/* One process, n GPUs, against the sim's n replicas. */
static void gpus_equal_sim(const char *tag, int n, const char *flags) {
    char dir[512], args[1024], *out = NULL;
    snprintf(dir, sizeof dir, "%s", tu_path(tag));
    snprintf(args, sizeof args, "--gpus %s %s %s --save nccl.ckpt", gpu_list(n), DATA, flags);
    const int rc = run_one(&out, dir, "", args);
    if (rc != 0) fprintf(stderr, "%s: exit %d:\n%s\n", tag, rc, out ? out : "");
    assert_int_equal(rc, 0);
    free(out);
    expect_equal_to_sim(dir, n, flags);
}

static void test_one_process_2_gpus_equals_the_sim(void **state) {
    (void)state;
    gpus_equal_sim("g2-ddp", 2, "--epochs 1");
    gpus_equal_sim("g2-dp", 2, "--epochs 1 --mode dp");
    gpus_equal_sim("g2-syncbn", 2, "--epochs 1 --model lenet-bn --sync-bn");
}

static void test_one_process_4_gpus_equals_the_sim(void **state) {
    (void)state;
    gpus_equal_sim("g4-ddp", 4, "--epochs 1");
    gpus_equal_sim("g4-dp", 4, "--epochs 1 --mode dp");
    gpus_equal_sim("g4-syncbn", 4, "--epochs 1 --model lenet-bn --sync-bn");
    gpus_equal_sim("g4-bn-dp", 4, "--epochs 1 --model lenet-bn --mode dp");
    gpus_equal_sim("g4-accum", 4, "--epochs 1 --accumulate 2");
}

static void procs_equal_sim(const char *tag, const char *flags) {
    char dir[512], args[1024];
    snprintf(dir, sizeof dir, "%s", tu_path(tag));
    snprintf(args, sizeof args, "%s %s --save nccl.ckpt", DATA, flags);
    const char *gpus[2] = {"0,1", "0,1"};
    int codes[2];
    run_procs(dir, 2, gpus, NULL, codes, args);
    for (int p = 0; p < 2; p++) {
        char *log = proc_log(dir, p);
        if (codes[p] != 0) fprintf(stderr, "%s: process %d exited %d:\n%s\n", tag, p, codes[p], log ? log : "");
        free(log);
        assert_int_equal(codes[p], 0);
    }
    expect_equal_to_sim(dir, 4, flags);
}

/* torchrun-style 2 processes x --gpus 0,1: ranks 0-1 and 2-3, the sim's 4 replicas. */
static void test_two_processes_of_two_gpus_equal_the_sim(void **state) {
    (void)state;
    procs_equal_sim("p2g2-ddp", "--epochs 1");
    procs_equal_sim("p2g2-dp", "--epochs 1 --mode dp");
    procs_equal_sim("p2g2-syncbn", "--epochs 1 --model lenet-bn --sync-bn");
}

/* Process 1 (ranks 2-3) killed at rank 2's 40th call: process 0 ends within --timeout + 5 s with
 * exit 1, naming its ranks, the dead process's ranks and the collective's place in the run. */
static void test_killed_process_ends_the_other(void **state) {
    (void)state;
    char dir[512], args[512];
    snprintf(dir, sizeof dir, "%s", tu_path("p2g2-killed"));
    snprintf(args, sizeof args, "%s --epochs 3 --timeout 20", DATA);
    const char *gpus[2] = {"0,1", "0,1"};
    int codes[2];
    const double took = run_procs(dir, 2, gpus, "exit@2:40", codes, args);
    char *log = proc_log(dir, 0);
    const int ok = codes[1] == 9 && codes[0] == 1 && took <= 25 && tu_contains(log, "nccl: ranks 0-1") &&
                   tu_contains(log, "ranks 2-3") && tu_contains(log, "(epoch ");
    if (!ok) fprintf(stderr, "process 0 exited %d, process 1 %d, after %.1f s:\n%s\n", codes[0], codes[1], took, log);
    free(log);
    assert_true(ok);
}

/* Processes that list different counts: refused before any training, naming the counts. */
static void test_processes_with_different_gpu_counts_are_refused(void **state) {
    (void)state;
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tu_path("p2-mismatch"));
    const char *gpus[2] = {"0,1", "0"};
    int codes[2];
    const double took = run_procs(dir, 2, gpus, NULL, codes, DATA " --epochs 1 --timeout 30");
    char *l0 = proc_log(dir, 0), *l1 = proc_log(dir, 1);
    const int ok = codes[1] == 2 && codes[0] != 0 && took < 20 &&
                   tu_contains(l1, "process 1 drives 1 GPU, process 0 drives 2") && tu_contains(l0, "process 1 drives");
    if (!ok) fprintf(stderr, "exits %d %d after %.1f s:\n%s\n---\n%s\n", codes[0], codes[1], took, l0, l1);
    free(l0), free(l1);
    assert_true(ok);
}

/* A usage error: exit 2, one line on the output, naming what is wrong. */
static void refused(const char *env, const char *backend_args, const char *expect) {
    char *out = NULL, dir[512];
    snprintf(dir, sizeof dir, "%s", tu_path("usage"));
    const int rc = tu_sh(&out, "mkdir -p %s && cd %s && %s LD_PRELOAD=%s ASAN_OPTIONS=verify_asan_link_order=0:"
                         "$ASAN_OPTIONS timeout -s KILL 60 %s train %s " DATA " --epochs 1 --no-progress 2>&1",
                         dir, dir, env, rk_double(), getenv("DPTRAIN"), backend_args);
    int lines = 0;
    for (const char *p = out; p && *p; p++) lines += *p == '\n';
    const int ok = rc == 2 && lines == 1 && tu_contains(out, expect);
    if (!ok) fprintf(stderr, "%s %s: exit %d, %d lines:\n%s\n(wanted \"%s\")\n", env, backend_args, rc, lines, out, expect);
    free(out);
    assert_true(ok);
}

static void test_bad_gpu_lists_are_refused(void **state) {
    (void)state;
    refused("", "--backend sim --gpus 0,1", "--gpus is for --backend nccl");
    refused("", "--backend mpi --gpus 0", "--gpus is for --backend nccl");
    refused("", "--backend nccl --device cpu --gpus ''", "--gpus: expected GPU ordinals");
    refused("", "--backend nccl --device cpu --gpus 0,1,0", "GPU 0 is listed twice");
    refused("", "--backend nccl --device cpu --gpus -1", "--gpus: expected GPU ordinals");
    refused("", "--backend nccl --device cpu --gpus 0,", "--gpus: expected GPU ordinals");
    refused("", "--backend nccl --device cpu --gpus 0,x", "--gpus: expected GPU ordinals");
    refused("", "--backend nccl --device cpu --gpu 1 --gpus 0,1", "give --gpu or --gpus, not both");
    /* more GPUs than the machine has: the double says 8 unless told otherwise */
    refused("", "--backend nccl --device cpu --gpus 0,8", "there is no GPU 8: the NCCL test double says this machine "
            "has 8 GPUs");
    refused("DP_NCCL_DOUBLE_GPUS=2", "--backend nccl --device cpu --gpus 0,1,2", "there is no GPU 2");
}

/* --predict's step-overhead companions are one-replica sim trainers on this process's first
 * device: they used to keep --gpus (which the sim refuses) and --gpu's ordinal. */
/* The libnccl found at run time must be 2.19 or newer (the non-blocking API every wait relies on):
 * an older one is refused at start, naming both versions, before any rendezvous. */
static void test_old_nccl_is_refused(void **state) {
    (void)state;
    char *out = NULL, dir[512];
    snprintf(dir, sizeof dir, "%s", tu_path("old-nccl"));
    const int rc = tu_sh(&out, "mkdir -p %s && cd %s && DP_NCCL_DOUBLE_VERSION=21804 LD_PRELOAD=%s ASAN_OPTIONS="
                         "verify_asan_link_order=0:$ASAN_OPTIONS timeout -s KILL 60 %s train --backend nccl --device cpu "
                         DATA " --epochs 1 --no-progress 2>&1",
                         dir, dir, rk_double(), getenv("DPTRAIN"));
    const int ok = rc != 0 && tu_contains(out, "the libnccl loaded is 2.18.4; dptrain needs NCCL 2.19 or newer");
    if (!ok) fprintf(stderr, "exit %d:\n%s\n", rc, out ? out : "");
    free(out);
    assert_true(ok);
}

static void test_predict_beside_gpus(void **state) {
    (void)state;
    char *out = NULL;
    const int rc = run_one(&out, tu_path("g2-predict"), "", "--gpus 0,1 " DATA " --epochs 1 --max-steps 3 --predict host");
    if (rc != 0 || !strstr(out ? out : "", "predicted on host"))
        fail_msg("--gpus 0,1 --predict host: exit %d:\n%s", rc, out ? out : "");
    free(out);
}

/* ---- the double itself: two communicators of one process, one group (through dlopen) ---- */

/* Polls both communicators until neither is in progress (10 s at most): the first error, else success. */
static ncclResult_t settle2(const rk_nccl_api *a, ncclComm_t c[2], ncclResult_t r) {
    const time_t t0 = time(NULL);
    while (r == ncclInProgress && time(NULL) - t0 < 10) {
        ncclResult_t r0 = ncclSuccess, r1 = ncclSuccess;
        a->async_error(c[0], &r0);
        a->async_error(c[1], &r1);
        r = r0 != ncclSuccess && r0 != ncclInProgress ? r0 : r1 != ncclSuccess && r1 != ncclInProgress ? r1
            : r0 == ncclInProgress || r1 == ncclInProgress ? ncclInProgress : ncclSuccess;
    }
    return r;
}

/* Ranks 0 and 1 of 2, both in this (child) process, created in one group. */
static int two_comms(const rk_nccl_api *a, ncclComm_t c[2]) {
    ncclUniqueId id;
    if (a->get_id(&id) != ncclSuccess) return 0;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    a->group_start();
    for (int i = 0; i < 2; i++) {
        ncclResult_t r = a->init(&c[i], 2, id, i, &cfg);
        if (r != ncclSuccess && r != ncclInProgress) return 0;
    }
    return settle2(a, c, a->group_end()) == ncclSuccess;
}

/* 4 MiB each way between two communicators of one process, in one group: more than a socket
 * holds, so it completes only if both are progressed together. */
static int gather_between_comms(const rk_nccl_api *a) {
    ncclComm_t c[2];
    if (!two_comms(a, c)) return 20;
    const size_t n = (size_t)1 << 20;
    float *send[2], *recv[2];
    for (int i = 0; i < 2; i++) {
        send[i] = malloc(n * sizeof(float)), recv[i] = malloc(2 * n * sizeof(float));
        if (!send[i] || !recv[i]) return 21;
        for (size_t k = 0; k < n; k++) send[i][k] = (float)(i + 1) * (float)(k % 1000);
    }
    a->group_start();
    for (int i = 0; i < 2; i++)
        if (a->allgather(send[i], recv[i], n, ncclFloat, c[i], NULL) != ncclSuccess) return 22;
    if (settle2(a, c, a->group_end()) != ncclSuccess) return 23;
    for (int i = 0; i < 2; i++)
        for (size_t k = 0; k < n; k += 4099)
            if (recv[i][k] != (float)(k % 1000) || recv[i][n + k] != 2.0f * (float)(k % 1000)) return 24;
    for (int i = 0; i < 2; i++) a->destroy(c[i]), free(send[i]), free(recv[i]);
    return 0;
}

/* Rank 0 broadcasts while rank 1 all-gathers, in one group of one process: the checker fails at
 * once, naming both ranks and both operations. */
static int mismatch_between_comms(const rk_nccl_api *a) {
    ncclComm_t c[2];
    if (!two_comms(a, c)) return 30;
    float v[4] = {0}, g[8];
    a->group_start();
    a->bcast(v, v, 4, ncclFloat, 0, c[0], NULL);
    a->allgather(v, g, 4, ncclFloat, c[1], NULL);
    const ncclResult_t r = settle2(a, c, a->group_end());
    const char *m = a->last_error(c[0]);
    fprintf(stderr, "rank 0: %s\n", m);
    return r == ncclInvalidUsage && strstr(m, "rank 0") && strstr(m, "rank 1") && strstr(m, "broadcast") &&
                   strstr(m, "all-gather")
               ? 0
               : 31;
}

static void in_child(int (*body)(const rk_nccl_api *)) {
    rk_nccl_api a = rk_nccl_load();
    const time_t t0 = time(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(30); /* a deadlock fails the test, never the job */
        _exit(body(&a));
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_true(time(NULL) - t0 < 10);
    dlclose(a.h);
}

static void test_double_moves_between_comms_of_one_process(void **state) {
    (void)state;
    in_child(gather_between_comms);
}

static void test_double_checker_within_one_process(void **state) {
    (void)state;
    in_child(mismatch_between_comms);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_double_moves_between_comms_of_one_process),
        cmocka_unit_test(test_double_checker_within_one_process),
        cmocka_unit_test(test_bad_gpu_lists_are_refused),
        cmocka_unit_test(test_predict_beside_gpus),
        cmocka_unit_test(test_old_nccl_is_refused),
        cmocka_unit_test(test_one_process_2_gpus_equals_the_sim),
        cmocka_unit_test(test_one_process_4_gpus_equals_the_sim),
        cmocka_unit_test(test_two_processes_of_two_gpus_equal_the_sim),
        cmocka_unit_test(test_processes_with_different_gpu_counts_are_refused),
        cmocka_unit_test(test_killed_process_ends_the_other),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
int main(void) {
    fprintf(stderr, "test_nccl_gpus: this build has no NCCL headers (the double implements nccl.h)\n");
    return 77;
}
#endif
