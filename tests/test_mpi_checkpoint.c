/* test_mpi_checkpoint.c: checkpoints under the MPI backend (mpirun -np 2): a rank killed with SIGKILL
 * and the job resumed ends bitwise where the uninterrupted job ends; a SIGINT that reaches rank 1 only
 * stops every rank at the same step, rank 0 writes the checkpoint and prints the resume command; a NaN
 * loss on one rank stops both at the same step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define MPIRUN "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe --bind-to none -np 2"
#define ARGS "train --backend mpi --dataset synthetic --samples 512 --shape 1x28x28 --batch-size 32 --threads 1 " \
             "--no-progress --quiet --epochs 8 --save-every 1 --keep 2"

static const char *bin(void) {
    const char *b = getenv("DPTRAIN");
    return b ? b : "./dptrain";
}

static char *newest(const char *dir) {
    char *o;
    tu_sh(&o, "ls %s/ckpt-*.safetensors | tail -1", dir);
    o[strcspn(o, "\n")] = '\0';
    return o;
}

/* rank 1 sends itself `sig` once the job has written its first checkpoint (so its handlers are in
 * place and it is mid-training, however fast the machine), then the job is resumed to the end */
static void interrupt_and_resume(const char *sig, int expect_rc) {
    static int have_ref; /* one uninterrupted job serves both tests */
    const char *ref = tu_path("mref"), *run = tu_path("mrun");
    char *o;
    int rc;
    tu_sh(NULL, "rm -rf %s", run);
    if (!have_ref) {
        tu_sh(NULL, "rm -rf %s", ref);
        rc = tu_sh(&o, MPIRUN " %s " ARGS " --checkpoint %s", bin(), ref);
        if (rc) fail_msg("reference job failed (%d):\n%s", rc, o);
        free(o);
        have_ref = 1;
    }
    rc = tu_sh(&o, MPIRUN " sh -c 'if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then (i=0; until ls %s/ckpt-*.safetensors "
               ">/dev/null 2>&1 || [ $i -ge 1200 ]; do sleep 0.05; i=$((i+1)); done; kill -%s $$) & fi; exec %s "
               ARGS " --checkpoint %s'", run, sig, bin(), run);
    if (rc == 0) {
        print_message("the job finished before the signal: nothing to check\n");
        free(o);
        return;
    }
    if (expect_rc && (rc != expect_rc || !tu_contains(o, "resume with: mpirun -np 2")))
        fail_msg("rc %d (expected %d):\n%s", rc, expect_rc, o);
    free(o);
    rc = tu_sh(&o, MPIRUN " %s " ARGS " --checkpoint %s --resume %s", bin(), run, run);
    if (rc) fail_msg("resumed job failed (%d):\n%s", rc, o);
    free(o);
    char *a = newest(ref), *b = newest(run);
    const char *diff = tu_ckpt_diff(a, b);
    if (diff) fail_msg("%s", diff);
    free(a), free(b);
}

static void test_mpi_kill9_resume(void **state) { (void)state; interrupt_and_resume("KILL", 0); }
static void test_mpi_sigint_one_rank(void **state) { (void)state; interrupt_and_resume("INT", 130); }

/* A NaN loss on rank 1 only: decided on the all-reduced loss, so both ranks stop at the same step,
 * at once, with a message, instead of rank 1 leaving and rank 0 waiting in the next collective
 * until --timeout. DP too (the master computes the loss and only it sees the NaN). */
static void test_mpi_nan_on_one_rank(void **state) {
    (void)state;
    for (int dp = 0; dp < 2; dp++) {
        char *o;
        int rc = tu_sh(&o, "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 mpirun --oversubscribe "
                       "--bind-to none -np 2 sh -c 'if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then "
                       "export DPTRAIN_INJECT_NAN_STEP=3; fi; exec %s train --backend mpi --dataset synthetic --samples 512 "
                       "--shape 1x28x28 --batch-size 32 --threads 1 --no-progress --quiet --epochs 2 --timeout 60%s'", bin(),
                       dp ? " --mode dp" : "");
        if (rc == 0 || rc == 124 || !tu_contains(o, "became NaN") || !tu_contains(o, "step 3"))
            fail_msg("%s: rc %d:\n%s", dp ? "DP" : "DDP", rc, o);
        if (tu_contains(o, "did not complete") || tu_contains(o, "timed out"))
            fail_msg("%s: a rank waited for the other:\n%s", dp ? "DP" : "DDP", o);
        free(o);
    }
    /* --on-nan skip: every rank skips that step and the job finishes */
    const char *log = tu_path("mnan.jsonl");
    char *o;
    int rc = tu_sh(&o, "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 mpirun --oversubscribe "
                   "--bind-to none -np 2 sh -c 'if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then export DPTRAIN_INJECT_NAN_STEP=3; "
                   "fi; exec %s train --backend mpi --model lenet-bn --dataset synthetic --samples 512 --shape 1x28x28 "
                   "--batch-size 32 --threads 1 --no-progress --quiet --epochs 2 --on-nan skip --log %s'", bin(), log);
    if (rc) fail_msg("--on-nan skip: rc %d:\n%s", rc, o);
    free(o);
    tu_sh(&o, "cat %s", log);
    if (!tu_contains(o, "\"skipped_steps\":1")) fail_msg("--on-nan skip: no skipped step in the log:\n%s", o);
    free(o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mpi_kill9_resume),
        cmocka_unit_test(test_mpi_sigint_one_rank),
        cmocka_unit_test(test_mpi_nan_on_one_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
