/* test_nccl_double.c: the NCCL backend with 2, 3, 4 and 8 ranks on a machine without a GPU,
 * through the NCCL test double (tests/nccl_double/, LD_PRELOAD'ed into each dptrain rank):
 * bitwise equal to `--backend sim --replicas N` for DDP, DP, lenet-bn with --sync-bn,
 * --accumulate 2 and a resume at another world size; a killed rank and a stalled rank end every
 * survivor within --timeout plus 5 s, naming the rank; and the double's own checker, which
 * names both ranks when they issue different operations (called here through dlopen). */
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

/* Whether a message places the failure in the run: a step, an epoch's evaluation, the final one. */
static int placed(const char *log) {
    return tu_contains(log, "(epoch ") || tu_contains(log, "(evaluating epoch ") ||
           tu_contains(log, "(the final evaluation)");
}

/* world nccl ranks in DIR with the double (tests/ranks.h); returns the seconds the slowest took. */
static double run_ranks(const char *dir, int world, const char *fault, int codes[], const char *args_fmt, ...) {
    char args[2048];
    va_list ap;
    va_start(ap, args_fmt);
    vsnprintf(args, sizeof args, args_fmt, ap);
    va_end(ap);
    const rk_launch l = {.dir = dir, .n = world, .log = "rank", .fault = fault, .timeout_s = 240};
    return rk_run(&l, codes, "train --backend nccl --device cpu --no-progress %s", args);
}

static char *rank_log(const char *dir, int r) { return rk_log(dir, "rank", r); }

static void expect_all_ok(const char *dir, int world, const int codes[]) {
    const rk_launch l = {.dir = dir, .n = world, .log = "rank"};
    rk_expect_all_ok(&l, codes);
}

#define DATA "--dataset synthetic --samples 384 --batch-size 64 --seed 5 --threads 1"

/* DIR/nccl.ckpt, written by the nccl ranks, against the sim with `world` replicas and the same
 * flags: bitwise. */
static void expect_equal_to_sim(const char *dir, int world, const char *flags) {
    rk_expect_equal_to_sim(dir, dir, "--replicas %d --no-progress %s %s", world, DATA, flags);
}

/* nccl with `world` ranks against the sim with as many replicas, the same flags: bitwise. */
static void nccl_equals_sim(const char *tag, int world, const char *flags) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tu_path(tag));
    int codes[16];
    run_ranks(dir, world, NULL, codes, "%s %s --save nccl.ckpt", DATA, flags);
    expect_all_ok(dir, world, codes);
    expect_equal_to_sim(dir, world, flags);
}

static void test_ddp_2_3_4_8_ranks_equal_the_sim(void **state) {
    (void)state;
    const int worlds[] = {2, 3, 4, 8};
    for (int i = 0; i < 4; i++) nccl_equals_sim("ddp", worlds[i], "--epochs 1");
}

static void test_dp_2_4_ranks_equal_the_sim(void **state) {
    (void)state;
    nccl_equals_sim("dp2", 2, "--epochs 1 --mode dp");
    nccl_equals_sim("dp4", 4, "--epochs 1 --mode dp");
}

static void test_sync_bn_and_accumulate_equal_the_sim(void **state) {
    (void)state;
    nccl_equals_sim("syncbn", 2, "--epochs 1 --model lenet-bn --sync-bn");
    nccl_equals_sim("syncbn3", 3, "--epochs 1 --model lenet-bn --sync-bn");
    nccl_equals_sim("bn-dp", 2, "--epochs 1 --model lenet-bn --mode dp");
    nccl_equals_sim("accum", 4, "--epochs 1 --accumulate 2");
}

/* Three nccl ranks started by a launcher (`launch`: its command up to the program) in DIR=tag,
 * the double preloaded into each, against the sim's three replicas. */
/* args: how the log is asked for after the program name, as README writes it for that launcher
 * ("train ... --log-file F", or "-- train ... --log F" under torchrun); the log must be written. */
static void launched_equals_sim(const char *tag, const char *launch, const char *args) {
    char dir[512], *out = NULL;
    snprintf(dir, sizeof dir, "%s", tu_path(tag));
    int rc = tu_sh(&out, "mkdir -p %s && cd %s && rm -f run.jsonl && LD_PRELOAD=%s timeout -s KILL 240 %s %s %s "
                         "--backend nccl --device cpu --no-progress %s --epochs 1 --save nccl.ckpt && grep -q "
                         "'\"event\":\"final\"' run.jsonl",
                   dir, dir, rk_double(), launch, getenv("DPTRAIN"), args, DATA);
    if (rc != 0) fprintf(stderr, "%s\n", out ? out : "");
    assert_int_equal(rc, 0);
    free(out);
    expect_equal_to_sim(dir, 3, "--epochs 1");
}

/* README's `mpirun -np N dptrain train --backend nccl`: the unique id over MPI instead of TCP. */
static void test_mpirun_launch_equals_the_sim(void **state) {
    (void)state;
#ifdef DP_TEST_SANITIZED
    skip(); /* Open MPI's own allocations trip the leak checker (the mpi label is left out there too) */
#endif
    char *out = NULL;
    const int have = tu_sh(&out, "command -v mpirun") == 0;
    free(out);
    if (!have) skip();
    launched_equals_sim("mpirun", "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe "
                                  "--bind-to none -np 3 -x LD_PRELOAD", "train --log-file run.jsonl");
}

/* Under mpirun a rank whose communicator does not come up ends the job through MPI_Abort (the others
 * may be inside MPI), which kills the process before main prints: the backend prints the reason
 * first. The job ends at once, with the rank and the cause in its output. */
static void test_mpirun_init_failure_is_named(void **state) {
    (void)state;
#ifdef DP_TEST_SANITIZED
    skip();
#endif
    char *out = NULL;
    const int have = tu_sh(&out, "command -v mpirun") == 0;
    free(out);
    if (!have) skip();
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tu_path("mpi-init-fault"));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = tu_sh(&out, "mkdir -p %s && cd %s && LD_PRELOAD=%s DP_NCCL_DOUBLE_FAULT=init@1:0 timeout -s KILL 120 env "
                         "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe --bind-to none "
                         "-np 2 -x LD_PRELOAD -x DP_NCCL_DOUBLE_FAULT %s train --backend nccl --device cpu --no-progress "
                         "%s --epochs 1 --timeout 30",
                   dir, dir, rk_double(), getenv("DPTRAIN"), DATA);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double took = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (!tu_contains(out, "injected fault in ncclCommInitRankConfig")) fprintf(stderr, "%s\n", out ? out : "");
    assert_int_not_equal(rc, 0);
    assert_true(tu_contains(out, "dptrain: nccl: rank 1"));
    assert_true(tu_contains(out, "injected fault in ncclCommInitRankConfig"));
    assert_true(took < 60); /* not the 120 s of the KILL */
    free(out);
}

/* How many lines of text start with prefix. */
static int lines_starting(const char *text, const char *prefix) {
    int n = 0;
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        n += strncmp(p, prefix, strlen(prefix)) == 0;
    return n;
}

/* A failure once the backend is up (here rank 0's --save check, after the communicator came up)
 * is printed once by each rank: under torchrun no MPI_Abort cuts main short, so the trainer does
 * not print it ahead of main (backend.h: ends_job). */
static void test_failure_after_start_is_printed_once(void **state) {
    (void)state;
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tu_path("printed-once"));
    int codes[2];
    run_ranks(dir, 2, NULL, codes, "%s --epochs 1 --timeout 60 --save /nonexistent/dir/x.ckpt", DATA);
    for (int r = 0; r < 2; r++) {
        char *log = rank_log(dir, r);
        const int lines = lines_starting(log, "dptrain: ");
        if (codes[r] == 0 || lines != 1 || !tu_contains(log, "--save /nonexistent/dir/x.ckpt: directory"))
            fail_msg("rank %d exited %d, %d lines of failure:\n%s", r, codes[r], lines, log ? log : "");
        free(log);
    }
}

/* An unmodified torchrun (torch 2: $DP_TORCH_PYTHON, tests/torch2_env.sh) starts 3 nccl ranks; they
 * find each other through its agent's store (backends/tcpstore.c) and end equal to the sim. Skipped
 * where no such Python is set (CI: Debian's torch 1.13 torchrun does not start workers). */
static void test_real_torchrun_equals_the_sim(void **state) {
    (void)state;
    const char *py = getenv("DP_TORCH_PYTHON");
    char *out = NULL;
    const int have = py && *py && tu_sh(&out, "%s -c 'import torch.distributed.run'", py) == 0;
    free(out);
    if (!have) skip();
    char launch[600];
    snprintf(launch, sizeof launch, "%s -m torch.distributed.run --nproc-per-node 3 --no-python", py);
    /* torch 2's parser refuses `--log` after the program (ambiguous with its --log-dir, --logs-specs):
       the flag no launcher takes, and the "--" that ends torchrun's reading */
    launched_equals_sim("torchrun", launch, "train --log-file run.jsonl");
    launched_equals_sim("torchrun-dashdash", launch, "-- train --log run.jsonl");
}

/* Two ranks for the first epoch, four for the second, from the first's checkpoint: the same
 * bits as the sim's four replicas for both (replica counts do not change the bits). */
static void test_resume_at_another_world_size(void **state) {
    (void)state;
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tu_path("resume"));
    int codes[4];
    run_ranks(dir, 2, NULL, codes, "%s --epochs 1 --checkpoint ck", DATA);
    expect_all_ok(dir, 2, codes);
    run_ranks(dir, 4, NULL, codes, "%s --epochs 2 --checkpoint ck --resume ck --save nccl.ckpt", DATA);
    expect_all_ok(dir, 4, codes);
    expect_equal_to_sim(dir, 4, "--epochs 2");
}

/* A rank killed (exit 9 at its 40th collective call) or stalled (its 40th never completes):
 * every survivor ends within --timeout + 5 s with exit 1, naming a rank and the collective. */
static void faulted_run(const char *tag, const char *fault, int victim, double timeout, const char *expect,
                        const char *alt) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tu_path(tag));
    int codes[3];
    double took = run_ranks(dir, 3, fault, codes, "%s --epochs 3 --timeout %.0f", DATA, timeout);
    /* the wall time includes the ranks' start (launch, rendezvous, the NCCL warm-up, the data): under
       the sanitizers, three Debug processes on a busy machine take seconds more to get there */
#ifdef DP_TEST_SANITIZED
    const double start = 5;
#else
    const double start = 0;
#endif
    if (took > timeout + 5 + start) fprintf(stderr, "%s: the ranks took %.1f s (--timeout %.0f)\n", tag, took, timeout);
    assert_true(took <= timeout + 5 + start);
    for (int r = 0; r < 3; r++) {
        char *log = rank_log(dir, r);
        if (r == victim && strcmp(tag, "killed") == 0) {
            assert_int_equal(codes[r], 9);
        } else {
            /* the rank and the collective (nccl.c), the step (the trainer), and the cause: the dead
               rank named, or the deadline (a stalled rank's own deadline may end it first, and its
               exit then reaches the others as a closed connection) */
            const int named = tu_contains(log, expect) || (alt && tu_contains(log, alt));
            const int where = tu_contains(log, "nccl: rank") && placed(log);
            if (codes[r] != 1 || !named || !where)
                fprintf(stderr, "%s: rank %d exited %d:\n%s\n", tag, r, codes[r], log ? log : "");
            assert_int_equal(codes[r], 1);
            assert_true(named);
            assert_true(where);
        }
        free(log);
    }
}

static void test_killed_rank_ends_every_survivor(void **state) {
    (void)state;
    faulted_run("killed", "exit@1:40", 1, 20, "rank 1", NULL);
}

/* An NCCL call that fails inside a group (rank 1's 41st): the group is closed before the
 * communicator is aborted, and every rank ends within seconds with rank 1's reason (the side
 * channel carries it to the ranks that only saw a connection close). */
static void test_error_inside_a_group_ends_every_rank(void **state) {
    (void)state;
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tu_path("error"));
    int codes[3];
    double took = run_ranks(dir, 3, "error@1:41", codes, "%s --epochs 3 --timeout 60", DATA);
    assert_true(took < 30);
    for (int r = 0; r < 3; r++) {
        char *log = rank_log(dir, r);
        const int ok = codes[r] == 1 && placed(log) &&
                       tu_contains(log, "injected fault at operation 41");
        if (!ok) fprintf(stderr, "error: rank %d exited %d:\n%s\n", r, codes[r], log ? log : "");
        assert_true(ok);
        free(log);
    }
}

/* A transport that fails at the first transfer (rank 1's first NCCL call errs): the warm-up at
 * start, before any data is read, meets it, and every rank ends within seconds, not --timeout,
 * with the hints that narrow a transport problem down. Without the warm-up the first bucket met
 * it, and no rank named a hint. */
static void test_warmup_failure_ends_every_rank_with_hints(void **state) {
    (void)state;
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tu_path("warmup"));
    int codes[3];
    const double took = run_ranks(dir, 3, "error@1:1", codes, "%s --epochs 3 --timeout 120", DATA);
    for (int r = 0; r < 3; r++) {
        char *log = rank_log(dir, r);
        const int ok = codes[r] == 1 && tu_contains(log, "in the warm-up at start") &&
                       tu_contains(log, "NCCL_DEBUG=INFO") && tu_contains(log, "NCCL_P2P_DISABLE=1") &&
                       tu_contains(log, "NCCL_SHM_DISABLE=1") && tu_contains(log, "NCCL_SOCKET_IFNAME") &&
                       !placed(log) && took < 30;
        if (!ok) fprintf(stderr, "warm-up: rank %d exited %d, the ranks took %.1f s:\n%s\n", r, codes[r], took,
                         log ? log : "");
        assert_true(ok);
        free(log);
    }
}

static void test_stalled_rank_ends_every_survivor(void **state) {
    (void)state;
    faulted_run("stalled", "stall@1:40", 1, 6, "--timeout", "connection to rank 1 closed");
}

/* Rank 1 stalls; rank 0's abort after its --timeout never returns: its watchdog ends it within
 * the grace period, naming the call, and no rank is left running. */
static void test_watchdog_ends_a_rank_whose_abort_hangs(void **state) {
    (void)state;
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tu_path("watchdog"));
    int codes[3];
    const double timeout = 4, grace = 5 + 0.1 * timeout;
    double took = run_ranks(dir, 3, "stall@1:40,abort-blocks@0:0", codes, "%s --epochs 3 --timeout %.0f", DATA, timeout);
    char *log = rank_log(dir, 0);
    const int ok = codes[0] == 1 && tu_contains(log, "aborting the communicator (ncclCommAbort) after") && tu_contains(log, "did not complete within --timeout") &&
                   tu_contains(log, "the watchdog ends this rank") && took < timeout + grace + 5;
    if (!ok) fprintf(stderr, "rank 0 exited %d after %.1f s:\n%s\n", codes[0], took, log ? log : "");
    assert_true(ok);
    free(log);
    for (int r = 1; r < 3; r++) assert_int_equal(codes[r], 1);
}

/* Without --threads, ranks that share an unbound machine share its cores. */
static void test_ranks_share_the_cores(void **state) {
    (void)state;
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tu_path("threads"));
    int codes[2];
    run_ranks(dir, 2, NULL, codes, "--dataset synthetic --samples 128 --batch-size 64 --epochs 1 --log run.jsonl");
    expect_all_ok(dir, 2, codes);
    char *out = NULL;
    tu_sh(&out, "grep -o '\"threads\":[0-9]*' %s/run.jsonl", dir);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char want[64];
    snprintf(want, sizeof want, "\"threads\":%ld", cores / 2 > 0 ? cores / 2 : 1);
    if (!tu_contains(out, want)) fprintf(stderr, "want %s, log has %s\n", want, out ? out : "");
    assert_true(tu_contains(out, want));
    free(out);
}

/* ---- the double itself, through dlopen ---- */

/* Polls a non-blocking call to its end (10 s at most); the final result. */
static ncclResult_t settle(const rk_nccl_api *a, ncclComm_t c, ncclResult_t r) {
    time_t t0 = time(NULL);
    while (r == ncclInProgress && time(NULL) - t0 < 10) a->async_error(c, &r);
    return r;
}

/* Rank `rank` of 2 in a child: what `body` returns is its exit status. */
static pid_t child(const rk_nccl_api *a, ncclUniqueId id, int rank, int (*body)(const rk_nccl_api *, ncclComm_t, int)) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid) return pid;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t c = NULL;
    ncclResult_t r = a->init(&c, 2, id, rank, &cfg);
    if (r != ncclInProgress && r != ncclSuccess) _exit(20);
    if (settle(a, c, r) != ncclSuccess) _exit(21);
    _exit(body(a, c, rank));
}

static int exit_of(pid_t pid) {
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
}

static int sums_in_rank_order(const rk_nccl_api *a, ncclComm_t c, int rank) {
    float v[3] = {1.0f + (float)rank, 2.0f, 1e8f * (float)(rank == 0 ? 1 : -1)};
    if (settle(a, c, a->allreduce(v, v, 3, ncclFloat, ncclSum, c, NULL)) != ncclSuccess) return 2;
    float g[4] = {0};
    if (settle(a, c, a->allgather(v, g, 2, ncclFloat, c, NULL)) != ncclSuccess) return 3;
    return v[0] == 3.0f && v[1] == 4.0f && v[2] == 0.0f && g[0] == 3.0f && g[2] == 3.0f ? 0 : 4;
}

static void test_double_moves_and_sums(void **state) {
    (void)state;
    rk_nccl_api a = rk_nccl_load();
    ncclUniqueId id;
    assert_int_equal(a.get_id(&id), ncclSuccess);
    pid_t p0 = child(&a, id, 0, sums_in_rank_order), p1 = child(&a, id, 1, sums_in_rank_order);
    assert_int_equal(exit_of(p0), 0);
    assert_int_equal(exit_of(p1), 0);
    dlclose(a.h);
}

/* Rank 0 broadcasts while rank 1 gathers: the checker fails rank 0 at once, naming both. */
static int mismatched(const rk_nccl_api *a, ncclComm_t c, int rank) {
    float v[4] = {0}, g[8];
    ncclResult_t r = rank == 0 ? a->bcast(v, v, 4, ncclFloat, 0, c, NULL) : a->allgather(v, g, 4, ncclFloat, c, NULL);
    r = settle(a, c, r);
    if (rank == 0) {
        const char *m = a->last_error(c);
        fprintf(stderr, "rank 0: %s\n", m);
        return r == ncclInvalidUsage && strstr(m, "rank 0") && strstr(m, "rank 1") && strstr(m, "broadcast") &&
                       strstr(m, "all-gather")
                   ? 0
                   : 5;
    }
    /* rank 1 waits for rank 0, which exits: its connection closes */
    return r == ncclRemoteError && strstr(a->last_error(c), "rank 0") ? 0 : 6;
}

static void test_checker_names_both_ranks(void **state) {
    (void)state;
    rk_nccl_api a = rk_nccl_load();
    ncclUniqueId id;
    assert_int_equal(a.get_id(&id), ncclSuccess);
    time_t t0 = time(NULL);
    pid_t p0 = child(&a, id, 0, mismatched), p1 = child(&a, id, 1, mismatched);
    assert_int_equal(exit_of(p0), 0);
    assert_int_equal(exit_of(p1), 0);
    assert_true(time(NULL) - t0 < 5); /* at once, not after a timeout */
    dlclose(a.h);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_double_moves_and_sums),
        cmocka_unit_test(test_checker_names_both_ranks),
        cmocka_unit_test(test_ddp_2_3_4_8_ranks_equal_the_sim),
        cmocka_unit_test(test_dp_2_4_ranks_equal_the_sim),
        cmocka_unit_test(test_sync_bn_and_accumulate_equal_the_sim),
        cmocka_unit_test(test_resume_at_another_world_size),
        cmocka_unit_test(test_mpirun_launch_equals_the_sim),
        cmocka_unit_test(test_mpirun_init_failure_is_named),
        cmocka_unit_test(test_real_torchrun_equals_the_sim),
        cmocka_unit_test(test_killed_rank_ends_every_survivor),
        cmocka_unit_test(test_warmup_failure_ends_every_rank_with_hints),
        cmocka_unit_test(test_stalled_rank_ends_every_survivor),
        cmocka_unit_test(test_error_inside_a_group_ends_every_rank),
        cmocka_unit_test(test_ranks_share_the_cores),
        cmocka_unit_test(test_watchdog_ends_a_rank_whose_abort_hangs),
        cmocka_unit_test(test_failure_after_start_is_printed_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
int main(void) {
    fprintf(stderr, "test_nccl_double: this build has no NCCL headers (the double implements nccl.h)\n");
    return 77;
}
#endif
