/* Launches around --backend mpi with a real MPI: a real mpirun of a backend that does not join it
 * (sim) refused on every rank; an MPI_Init that comes up alone (a world of one) under variables that
 * say two, as when this build's MPI cannot join the launcher, refused after MPI_Init instead of
 * training alone; a real mpirun -np 2 of --backend mpi still trains. Nothing refused writes a file. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MPIRUN "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe --bind-to none -np 2"
#define COMMON "train --model lenet --dataset synthetic --samples 128 --batch-size 16 --epochs 1 --threads 1 --workers 0 " \
               "--no-progress"

static const char *bin(void) {
    const char *b = getenv("DPTRAIN");
    return b ? b : "./dptrain";
}

static void test_mpirun_of_sim_is_refused(void **state) {
    (void)state;
    const char *save = tu_path("sim-under-mpirun.safetensors");
    unlink(save);
    char *out = NULL;
    int rc = tu_sh(&out, MPIRUN " %s " COMMON " --backend sim --save %s", bin(), save);
    if (rc == 0 || !tu_contains(out, "(an Open MPI mpirun launch of 2 processes) but --backend sim runs in one process"))
        fail_msg("mpirun -np 2 dptrain --backend sim: rc %d\n%s", rc, out);
    if (access(save, F_OK) == 0) fail_msg("refused, but %s was written", save);
    free(out);
}

/* MPI_Init alone (singleton) under variables of a 2-process launch: exit 2, one line. */
static void test_mpi_that_did_not_join_is_refused(void **state) {
    (void)state;
    static const char *const envs[] = {"OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1",
                                       "PMIX_RANK=1 SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=1"};
    for (size_t i = 0; i < sizeof envs / sizeof *envs; i++) {
        const char *save = tu_path("mpi-alone.safetensors");
        unlink(save);
        char *out = NULL;
        int rc = tu_sh(&out, "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 env %s %s " COMMON
                       " --backend mpi --save %s", envs[i], bin(), save);
        const char *nl = strchr(out, '\n');
        if (rc != 2 || !nl || nl[1] || !tu_contains(out, "dptrain: --backend mpi: MPI_Init made this process rank 0 of 1, "
                                                         "but ") || !tu_contains(out, "each process would train alone"))
            fail_msg("%s dptrain --backend mpi: rc %d (expected 2 and one line)\n%s", envs[i], rc, out);
        if (access(save, F_OK) == 0) fail_msg("refused, but %s was written", save);
        printf("%s -> %s", envs[i], out);
        free(out);
    }
}

static void test_mpirun_of_mpi_trains(void **state) {
    (void)state;
    const char *save = tu_path("mpirun-mpi.safetensors");
    char *out = NULL;
    int rc = tu_sh(&out, MPIRUN " %s " COMMON " --backend mpi --quiet --save %s", bin(), save);
    if (rc != 0 || access(save, F_OK) != 0) fail_msg("mpirun -np 2 dptrain --backend mpi: rc %d\n%s", rc, out);
    free(out);
}

int main(void) {
    char *out;
    if (tu_sh(&out, "command -v mpirun") != 0) {
        free(out);
        printf("mpirun not found: skipping the MPI launch tests\n");
        return 77;
    }
    free(out);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mpirun_of_sim_is_refused),
        cmocka_unit_test(test_mpi_that_did_not_join_is_refused),
        cmocka_unit_test(test_mpirun_of_mpi_trains),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
