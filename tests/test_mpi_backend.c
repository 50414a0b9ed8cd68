/* The MPI backend for real: its collectives at 1, 2, 3 and 5 ranks through the conformance checker
 * every backend runs (tests/collcheck.h: this program again under mpirun, each rank checking its own
 * result bitwise against the canonical order); mpirun -np N dptrain --backend mpi against the sim
 * backend (same seed: bitwise the same parameters, for N = 2 and 4 against one replica, for N = 3
 * against three), ranks started with different flags (refused at once, naming the ranks), and a rank
 * killed mid-run (the others exit with a message, no hang). */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "backends/backend.h"
#include "collcheck.h"
#include "io/checkpoint.h"

#define MPIRUN "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 " \
               "mpirun --oversubscribe --bind-to none -np"
#define COMMON "--model lenet --dataset synthetic --shape 1x28x28 --samples 768 --batch-size 60 --max-steps 12 " \
               "--epochs 1 --lr 0.05 --weight-decay 0.0001 --seed 3 --threads 1 --workers 0 --no-progress"

#define sh tu_sh

static const char *bin(void) {
    const char *b = getenv("DPTRAIN");
    return b ? b : "./dptrain";
}

/* The parameters section of a checkpoint. */
static float *read_params(const char *path, size_t *n) { return tu_ckpt_params(path, n); }

/* mpirun -np n (with extra flags) against the sim with sim_n replicas, to the bit. */
static void compare_backends(int n, const char *extra, int sim_n) {
    char *out;
    const char *a = tu_path("mpi.ckpt"), *b = tu_path("sim.ckpt");
    int rc = sh(&out, MPIRUN " %d %s --backend mpi %s " COMMON " --save %s", n, bin(), extra, a);
    if (rc) fail_msg("mpirun -np %d failed (%d):\n%s", n, rc, out);
    /* only rank 0 prints */
    const char *first = strstr(out, "epoch 1/1"), *again = first ? strstr(first + 1, "epoch 1/1") : NULL;
    assert_non_null(first);
    assert_null(again);
    free(out);
    rc = sh(&out, "%s --backend sim --replicas %d %s " COMMON " --save %s", bin(), sim_n, extra, b);
    if (rc) fail_msg("sim failed:\n%s", out);
    free(out);
    size_t na, nb;
    float *pa = read_params(a, &na), *pb = read_params(b, &nb);
    assert_int_equal(na, nb);
    if (memcmp(pa, pb, na * sizeof(float)) != 0)
        fail_msg("mpi -np %d %s vs sim --replicas %d %s: relative difference %.3g, expected bitwise equality", n, extra,
                 sim_n, extra, tu_rel_diff(pa, pb, na));
    free(pa), free(pb);
}

static void mpi_run(void *ctx, cc_op op, float *const *bufs, size_t n, int root) {
    dp_backend_t b = ctx;
    const dp_status s = op == CC_SUM ? dp_allreduce(b, bufs, n, DP_SUM)
                      : op == CC_AVG ? dp_allreduce(b, bufs, n, DP_AVG)
                      : op == CC_REDUCE ? dp_reduce(b, bufs, n, DP_SUM, root)
                      : dp_broadcast(b, bufs, n, root);
    if (s != DP_OK) fail_msg("mpi: %s", dp_last_error());
}

/* One rank of the conformance run (this program under mpirun, argv[1] "conformance"): exit 0 if every
 * collective's result on this rank is the canonical order's (collcheck.h exits non-zero otherwise). */
static int conformance_rank(int argc, char **argv) {
    dp_backend_config cfg = {.name = "mpi", .nthreads = 1, .timeout_s = 60, .argc = &argc, .argv = &argv};
    dp_backend_t b;
    if (dp_backend_create(&cfg, &b) != DP_OK) {
        fprintf(stderr, "%s\n", dp_last_error());
        return 1;
    }
    cc_conformance("mpi", dp_backend_world(b), dp_backend_rank(b, 0), 1, 0, mpi_run, b);
    dp_backend_destroy(b);
    return 0;
}

static void test_mpi_conformance(void **state) {
    (void)state;
    static const int worlds[] = {1, 2, 3, 5};
    char self[4096];
    const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(len > 0);
    self[len] = '\0';
    for (int i = 0; i < 4; i++) {
        char *out;
        const int rc = sh(&out, "timeout 300 env " MPIRUN " %d %s conformance", worlds[i], self);
        if (rc) fail_msg("mpirun -np %d, the conformance run: exit %d:\n%s", worlds[i], rc, out);
        free(out);
    }
}

/* The ordered all-reduce adds in the canonical order: -np 2 and 4 equal one replica. */
static void test_mpi_matches_sim_2(void **state) { (void)state; compare_backends(2, "", 1); }
static void test_mpi_matches_sim_4(void **state) { (void)state; compare_backends(4, "", 1); }
/* Three ranks do not divide the chunks, but MPI adds in the sim's order: equal to sim N=3. */
static void test_mpi_matches_sim_3(void **state) { (void)state; compare_backends(3, "", 3); }
/* DataParallel over MPI: the gradient reduce to rank 0 uses the same order (DP's own sums: its
 * contiguous shares hold other samples than DDP's chunks, tests/test_equivalence.c). */
static void test_mpi_dp_mode(void **state) { (void)state; compare_backends(2, "--mode dp", 1); }

static void test_mismatched_flags_fail_fast(void **state) {
    (void)state;
    char *out;
    /* rank 1 gets another learning rate */
    int rc = sh(&out, MPIRUN " 1 %s --backend mpi " COMMON " --timeout 60 : -np 1 %s --backend mpi " COMMON
                " --lr 0.1 --timeout 60", bin(), bin());
    assert_int_not_equal(rc, 0);
    if (!tu_contains(out, "rank 1 was started with --lr 0.1, rank 0 with --lr 0.05"))
        fail_msg("the message does not name the flag and both values:\n%s", out);
    free(out);
    /* a boolean flag, and two differing flags */
    rc = sh(&out, MPIRUN " 1 %s --backend mpi " COMMON " --timeout 60 : -np 1 %s --backend mpi " COMMON
            " --augment --seed 4 --timeout 60", bin(), bin());
    assert_int_not_equal(rc, 0);
    if (!tu_contains(out, "rank 1 was started with --seed 4, rank 0 with --seed 3 (and 1 other flag differs)"))
        fail_msg("the message does not name the first flag and count the other:\n%s", out);
    free(out);
}

/* Two ranks of a long run; 2 s in, rank 1 gets `sig` (its shell exec'd dptrain, so $$ is
 * dptrain). Returns mpirun's exit code; *secs how long the job took to end. */
static int run_with_rank1_signalled(char **out, const char *sig, int timeout_s, double *secs) {
    struct timeval t0, t1;
    gettimeofday(&t0, NULL);
    int rc = sh(out, "timeout 120 env " MPIRUN " 2 sh -c 'if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then (sleep 2; kill -%s $$) & "
                "fi; exec %s --backend mpi --model lenet --dataset synthetic --shape 1x28x28 --samples 200000 --epochs 5 "
                "--threads 1 --timeout %d --no-progress'", sig, bin(), timeout_s);
    gettimeofday(&t1, NULL);
    *secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-6 * (double)(t1.tv_usec - t0.tv_usec);
    return rc;
}

static void test_dead_rank_does_not_hang(void **state) {
    (void)state;
    char *out;
    double secs;
    int rc = run_with_rank1_signalled(&out, "9", 20, &secs);
    assert_int_not_equal(rc, 0);
    if (secs > 60) fail_msg("took %.0f s to notice the dead rank", secs);
    if (!tu_contains(out, "rank 1") && !tu_contains(out, "another rank"))
        fail_msg("no message naming the dead rank:\n%s", out);
    free(out);
}

/* A rank that hangs without dying (stopped): mpirun sees nothing wrong, so the others must
 * notice through --timeout, say so, and end the job. */
static void test_hung_rank_times_out(void **state) {
    (void)state;
    char *out;
    double secs;
    int rc = run_with_rank1_signalled(&out, "STOP", 5, &secs);
    assert_int_not_equal(rc, 0);
    if (secs > 60) fail_msg("took %.0f s with --timeout 5", secs);
    if (!tu_contains(out, "--timeout 5")) fail_msg("no timeout message:\n%s", out);
    free(out);
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "conformance") == 0) return conformance_rank(argc, argv);
    char *out;
    if (sh(&out, "command -v mpirun") != 0) {
        free(out);
        printf("mpirun not found: skipping the MPI tests\n");
        return 77;
    }
    free(out);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mpi_conformance),
        cmocka_unit_test(test_mpi_matches_sim_2),
        cmocka_unit_test(test_mpi_matches_sim_3),
        cmocka_unit_test(test_mpi_matches_sim_4),
        cmocka_unit_test(test_mpi_dp_mode),
        cmocka_unit_test(test_mismatched_flags_fail_fast),
        cmocka_unit_test(test_dead_rank_does_not_hang),
        cmocka_unit_test(test_hung_rank_times_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
