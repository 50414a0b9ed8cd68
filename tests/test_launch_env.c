/* Launch detection and refusal (backends/launch_env.h): every launcher's variables parsed (torchrun,
 * Open MPI, MVAPICH, MPICH/Intel MPI's PMI, PMIx, Slurm srun), malformed values named, the innermost
 * launcher winning, the Slurm batch-script rule; which backend joins which launch for each MPI
 * family; the backend table those answers come from (backends/backend_kind.h); and the built dptrain, run under each launcher's variables with a backend that does not
 * join, exiting 2 with one line before anything is trained or written. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend_kind.h"
#include "backends/launch_affinity.h"
#include "backends/launch_env.h"
#include "dp_config.h"

static const char *const vars[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_RANK",
    "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE",
    "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "PMIX_RANK", "PMIX_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
    "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE", "SLURM_NODEID"};

static void clear_env(void) {
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
}

/* Sets "NAME=value" pairs (NULL-terminated) on a clean launch environment. */
static void env_of(const char *const *pairs) {
    clear_env();
    for (; *pairs; pairs++) {
        char name[64];
        const char *eq = strchr(*pairs, '=');
        assert_non_null(eq);
        snprintf(name, sizeof name, "%.*s", (int)(eq - *pairs), *pairs);
        assert_int_equal(setenv(name, eq + 1, 1), 0);
    }
}
#define ENV(...) env_of((const char *const[]){__VA_ARGS__, NULL})

static dp_launch parsed(void) {
    dp_launch l;
    if (dp_launch_from_env(&l) != DP_OK) fail_msg("refused: %s", dp_last_error());
    return l;
}

static void expect(dp_launch_kind kind, int rank, int world, int local) {
    dp_launch l = parsed();
    assert_int_equal(l.kind, kind);
    assert_int_equal(l.rank, rank), assert_int_equal(l.world, world), assert_int_equal(l.local_rank, local);
}

static void expect_refused(const char *needle) {
    dp_launch l;
    assert_int_equal(dp_launch_from_env(&l), DP_ERR_USAGE);
    if (!tu_contains(dp_last_error(), needle)) fail_msg("message '%s' does not name %s", dp_last_error(), needle);
}

static void test_each_launcher(void **state) {
    (void)state;
    clear_env();
    expect(DP_LAUNCH_SINGLE, 0, 1, 0);
    ENV("RANK=2", "WORLD_SIZE=4", "LOCAL_RANK=0", "MASTER_ADDR=node7", "MASTER_PORT=29500",
        "TORCHELASTIC_USE_AGENT_STORE=True", "TORCHELASTIC_RESTART_COUNT=3", "TORCHELASTIC_RUN_ID=abc");
    dp_launch l = parsed();
    assert_int_equal(l.kind, DP_LAUNCH_TORCHRUN);
    assert_int_equal(l.agent_store, 1), assert_int_equal(l.restart, 3), assert_int_equal(l.port, 29500);
    assert_string_equal(l.run_id, "abc");
    assert_true(tu_contains(l.what, "a torchrun launch of 4 processes"));
    ENV("RANK=2", "WORLD_SIZE=4", "LOCAL_RANK=0", "MASTER_ADDR=node7", "MASTER_PORT=29500",
        "TORCHELASTIC_USE_AGENT_STORE=False");
    assert_int_equal(parsed().agent_store, 0); /* the workers host their own store: rank 0 listens */
    ENV("OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=3", "OMPI_COMM_WORLD_LOCAL_RANK=1");
    expect(DP_LAUNCH_MPIRUN, 1, 3, 1);
    ENV("MV2_COMM_WORLD_RANK=2", "MV2_COMM_WORLD_SIZE=4", "MV2_COMM_WORLD_LOCAL_RANK=0");
    expect(DP_LAUNCH_MVAPICH, 2, 4, 0);
    ENV("PMI_RANK=3", "PMI_SIZE=4", "MPI_LOCALRANKID=1");
    expect(DP_LAUNCH_PMI, 3, 4, 1);
    assert_string_equal(parsed().seen, "PMI_SIZE=4 PMI_RANK=3");
    ENV("PMI_RANK=1", "SLURM_STEP_NUM_TASKS=2", "SLURM_PROCID=1", "SLURM_LOCALID=1"); /* srun --mpi=pmi2 */
    expect(DP_LAUNCH_PMI, 1, 2, 1);
    ENV("PMIX_RANK=1", "SLURM_STEP_NUM_TASKS=4", "SLURM_PROCID=1", "SLURM_LOCALID=1"); /* srun --mpi=pmix */
    expect(DP_LAUNCH_PMIX, 1, 4, 1);
    ENV("PMIX_RANK=0"); /* prterun without a size: more than one, how many unknown */
    expect(DP_LAUNCH_PMIX, 0, 0, 0);
    ENV("SLURM_STEP_NUM_TASKS=4", "SLURM_NTASKS=8", "SLURM_PROCID=2", "SLURM_LOCALID=0");
    expect(DP_LAUNCH_SLURM, 2, 4, 0); /* the step's size, not the allocation's */
    assert_string_equal(parsed().seen, "SLURM_STEP_NUM_TASKS=4 SLURM_PROCID=2");
    ENV("SLURM_NTASKS=2", "SLURM_PROCID=1");
    expect(DP_LAUNCH_SLURM, 1, 2, 0); /* a task > 0: only a step has one */
    assert_true(tu_contains(parsed().what, "a Slurm srun step of 2 tasks"));
    ENV("SLURM_NTASKS=4", "SLURM_PROCID=0", "SLURM_LOCALID=0");
    expect(DP_LAUNCH_SINGLE, 0, 1, 0); /* sbatch --ntasks=4 running its script once */
    clear_env();
}

/* The launcher nearest the process wins: torchrun's workers under srun, mpirun's ranks whose
 * daemons srun started. */
static void test_innermost_launcher_wins(void **state) {
    (void)state;
    ENV("RANK=1", "WORLD_SIZE=8", "LOCAL_RANK=1", "MASTER_ADDR=n0", "MASTER_PORT=29500", "SLURM_STEP_NUM_TASKS=2",
        "SLURM_PROCID=0");
    expect(DP_LAUNCH_TORCHRUN, 1, 8, 1);
    ENV("OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_SIZE=8", "OMPI_COMM_WORLD_LOCAL_RANK=1", "SLURM_STEP_NUM_TASKS=2",
        "SLURM_PROCID=1", "PMIX_RANK=5");
    expect(DP_LAUNCH_MPIRUN, 5, 8, 1);
    clear_env();
}

static void test_malformed_values_are_named(void **state) {
    (void)state;
    ENV("RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=1", "MASTER_ADDR=n0"), expect_refused("MASTER_PORT is not set");
    ENV("RANK=x", "WORLD_SIZE=4", "LOCAL_RANK=0", "MASTER_ADDR=n0", "MASTER_PORT=1"), expect_refused("RANK='x'");
    ENV("RANK=4", "WORLD_SIZE=4", "LOCAL_RANK=0", "MASTER_ADDR=n0", "MASTER_PORT=1"), expect_refused("RANK=4 is not below");
    ENV("RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=-1", "MASTER_ADDR=n0", "MASTER_PORT=1"), expect_refused("LOCAL_RANK='-1'");
    ENV("RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=4", "MASTER_ADDR=n0", "MASTER_PORT=1"), expect_refused("local rank 4");
    ENV("RANK=0", "WORLD_SIZE=1", "LOCAL_RANK=0", "MASTER_ADDR=n0", "MASTER_PORT=1", "TORCHELASTIC_RESTART_COUNT=z"),
        expect_refused("TORCHELASTIC_RESTART_COUNT='z'");
    ENV("OMPI_COMM_WORLD_RANK=1"), expect_refused("OMPI_COMM_WORLD_SIZE");
    ENV("OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_SIZE=2"), expect_refused("OMPI_COMM_WORLD_RANK=2 is not below");
    ENV("MV2_COMM_WORLD_RANK=1", "MV2_COMM_WORLD_SIZE=two"), expect_refused("MV2_COMM_WORLD_SIZE='two'");
    ENV("PMI_RANK=1", "PMI_SIZE=x"), expect_refused("PMI_SIZE='x'");
    ENV("PMI_RANK=-1", "PMI_SIZE=2"), expect_refused("PMI_RANK='-1'");
    ENV("PMI_RANK=3", "PMI_SIZE=2"), expect_refused("PMI_RANK=3 is not below PMI_SIZE=2");
    ENV("PMI_SIZE=2"), expect_refused("PMI_RANK");
    ENV("PMI_RANK=0", "PMI_SIZE=0"), expect_refused("PMI_SIZE='0'");
    ENV("PMIX_RANK=abc"), expect_refused("PMIX_RANK='abc'");
    ENV("PMIX_RANK=2", "SLURM_STEP_NUM_TASKS=2", "SLURM_PROCID=2"), expect_refused("PMIX_RANK=2 is not below");
    ENV("SLURM_PROCID=1.5", "SLURM_NTASKS=2"), expect_refused("SLURM_PROCID='1.5'");
    ENV("SLURM_PROCID=2", "SLURM_NTASKS=2"), expect_refused("SLURM_PROCID=2 is not below SLURM_NTASKS=2");
    ENV("SLURM_PROCID=1", "SLURM_STEP_NUM_TASKS=-2"), expect_refused("SLURM_STEP_NUM_TASKS='-2'");
    ENV("SLURM_PROCID=1"), expect_refused("neither SLURM_STEP_NUM_TASKS nor SLURM_NTASKS");
    ENV("SLURM_PROCID=0", "SLURM_STEP_NUM_TASKS=2", "SLURM_LOCALID=2"), expect_refused("local rank 2");
    ENV("SLURM_PROCID=1", "SLURM_NTASKS=99999999999"), expect_refused("SLURM_NTASKS='99999999999'");
    /* the flags' number parser (core/parse_num.h): a space before is refused as a space after is */
    ENV("RANK= 1", "WORLD_SIZE=4", "LOCAL_RANK=1", "MASTER_ADDR=n0", "MASTER_PORT=1"), expect_refused("RANK=' 1'");
    ENV("RANK=1 ", "WORLD_SIZE=4", "LOCAL_RANK=1", "MASTER_ADDR=n0", "MASTER_PORT=1"), expect_refused("RANK='1 '");
    ENV("RANK=1", "WORLD_SIZE=+4", "LOCAL_RANK=1", "MASTER_ADDR=n0", "MASTER_PORT=1"), expect_refused("WORLD_SIZE='+4'");
    ENV("RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=1", "MASTER_ADDR=n0", "MASTER_PORT=\t29500"),
        expect_refused("MASTER_PORT="); /* a tab: how it is shown is the sanitiser's business */
    ENV("OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE= 2"), expect_refused("OMPI_COMM_WORLD_SIZE=' 2'");
    clear_env();
}

static void expect_joins(const char *backend, dp_mpi_family fam) {
    dp_launch l = parsed();
    if (dp_launch_check(&l, dp_backend_kind_find(backend), fam) != DP_OK)
        fail_msg("--backend %s (MPI family %d) refused %s: %s", backend, (int)fam, l.seen, dp_last_error());
}

static void expect_check_refuses(const char *backend, dp_mpi_family fam, const char *needle) {
    dp_launch l = parsed();
    assert_int_equal(dp_launch_check(&l, dp_backend_kind_find(backend), fam), DP_ERR_USAGE);
    if (!tu_contains(dp_last_error(), needle) || !tu_contains(dp_last_error(), l.seen))
        fail_msg("--backend %s: '%s' names neither '%s' nor what was seen (%s)", backend, dp_last_error(), needle, l.seen);
}

/* Which backend joins which launch, for each MPI a build may link. */
static void test_which_backend_joins(void **state) {
    (void)state;
    const dp_mpi_family O = DP_MPI_OPENMPI, M = DP_MPI_MPICH, N = DP_MPI_NONE;
    clear_env();
    expect_joins("sim", O), expect_joins("mpi", O), expect_joins("nccl", O); /* one process: anything */
    ENV("SLURM_NTASKS=4", "SLURM_PROCID=0"), expect_joins("sim", O);        /* the batch script */
    ENV("RANK=0", "WORLD_SIZE=1", "LOCAL_RANK=0", "MASTER_ADDR=n0", "MASTER_PORT=1"), expect_joins("sim", O);

    ENV("RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "MASTER_ADDR=n0", "MASTER_PORT=1");
    expect_check_refuses("sim", O, "--backend sim runs in one process; use --backend nccl under torchrun");
    expect_check_refuses("mpi", O, "start it with mpirun -np 2");
    expect_joins("nccl", O), expect_joins("nccl", N);

    ENV("OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2");
    expect_check_refuses("sim", O, "--backend sim --replicas 2");
    expect_joins("mpi", O), expect_joins("nccl", O);
    expect_check_refuses("mpi", M, "cannot join Open MPI's mpirun");

    ENV("PMI_RANK=1", "PMI_SIZE=2");
    expect_check_refuses("sim", M, "use --backend mpi or --backend nccl");
    expect_joins("mpi", M);
    expect_check_refuses("mpi", O, "Open MPI, which cannot join an MPICH-family launcher");
    if (DP_HAVE_NCCL) expect_check_refuses("nccl", O, "over MPI");

    ENV("PMIX_RANK=1", "SLURM_STEP_NUM_TASKS=2", "SLURM_PROCID=1");
    expect_check_refuses("sim", O, "(a PMIx launch of 2 processes)");
    expect_joins("mpi", O), expect_joins("mpi", M);
    ENV("PMIX_RANK=0");
    expect_check_refuses("sim", O, "size is not in the environment");

    ENV("SLURM_NTASKS=2", "SLURM_PROCID=1");
    expect_check_refuses("sim", O, "SLURM_NTASKS=2 SLURM_PROCID=1 (a Slurm srun step of 2 tasks) but --backend sim runs "
                                   "in one process; use --backend mpi or --backend nccl under srun --mpi=pmix");
    expect_check_refuses("mpi", O, "srun --mpi=pmix");
    expect_joins("mpi", M);
    if (DP_HAVE_NCCL) {
        expect_check_refuses("nccl", O, "srun --mpi=pmix");
        expect_check_refuses("nccl", N, "launch with torchrun");
    }
    expect_check_refuses("sim", N, "use --backend nccl under torchrun");
    expect_joins("mpi", N); /* not built: the registry says so */
    clear_env();
}

/* --backend nccl's GPU: the local rank's; a node's only GPU for several ranks refused at once. */
static void test_gpu_of_each_rank(void **state) {
    (void)state;
    int gpu = -1;
    clear_env();
    dp_launch l = parsed();
    assert_int_equal(dp_launch_pick_gpu(&l, 4, NULL, &gpu), DP_OK), assert_int_equal(gpu, 0);
    gpu = 3; /* alone, --gpu is kept; past the machine's GPUs it is refused */
    assert_int_equal(dp_launch_pick_gpu(&l, 4, NULL, &gpu), DP_OK), assert_int_equal(gpu, 3);
    gpu = 4;
    assert_int_equal(dp_launch_pick_gpu(&l, 4, "0,1,2,3", &gpu), DP_ERR_USAGE);
    if (!tu_contains(dp_last_error(), "--gpu 4: there is no GPU 4, this machine has 4 visible (CUDA_VISIBLE_DEVICES=0,1,2,3)"))
        fail_msg("%s", dp_last_error());
    ENV("RANK=3", "WORLD_SIZE=4", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=n0", "MASTER_PORT=1");
    l = parsed();
    assert_int_equal(l.local_world, 2);
    gpu = 2; /* under a launch the local rank decides: --gpu is refused, not ignored */
    assert_int_equal(dp_launch_pick_gpu(&l, 4, NULL, &gpu), DP_ERR_USAGE);
    if (!tu_contains(dp_last_error(), "--gpu 2: under a launch of 4 processes")) fail_msg("%s", dp_last_error());
    gpu = -1;
    assert_int_equal(dp_launch_pick_gpu(&l, 4, NULL, &gpu), DP_OK), assert_int_equal(gpu, 1);
    gpu = -1;
    assert_int_equal(dp_launch_pick_gpu(&l, 1, "5", &gpu), DP_OK), assert_int_equal(gpu, 0); /* each its own */
    gpu = -1;
    assert_int_equal(dp_launch_pick_gpu(&l, 1, NULL, &gpu), DP_ERR_USAGE);
    if (!tu_contains(dp_last_error(), "2 ranks on this node (LOCAL_WORLD_SIZE=2) but one GPU")) fail_msg("%s", dp_last_error());
    ENV("OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_SIZE=3", "OMPI_COMM_WORLD_LOCAL_RANK=2",
        "OMPI_COMM_WORLD_LOCAL_SIZE=3");
    l = parsed();
    gpu = -1;
    assert_int_equal(dp_launch_pick_gpu(&l, 2, NULL, &gpu), DP_ERR_BACKEND);
    assert_true(tu_contains(dp_last_error(), "the local rank 2 names GPU 2, but this node has 2"));
    ENV("PMI_RANK=1", "PMI_SIZE=2", "MPI_LOCALRANKID=1", "MPI_LOCALNRANKS=2");
    l = parsed();
    gpu = -1;
    assert_int_equal(dp_launch_pick_gpu(&l, 1, NULL, &gpu), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "MPI_LOCALNRANKS=2"));
    ENV("SLURM_PROCID=1", "SLURM_STEP_NUM_TASKS=2", "SLURM_LOCALID=1", "SLURM_NTASKS_PER_NODE=2");
    assert_int_equal(parsed().local_world, 2);
    ENV("RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=1", "MASTER_ADDR=n0", "MASTER_PORT=1");
    expect_refused("the local rank 1 is not below LOCAL_WORLD_SIZE=1");
    ENV("OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_SIZE=0");
    expect_refused("OMPI_COMM_WORLD_LOCAL_SIZE='0'");
    clear_env();
}

static void expect_local_world(int local_world, const char *var) {
    dp_launch l = parsed();
    if (l.local_world != local_world || (var && strcmp(l.local_world_var, var) != 0))
        fail_msg("%s: local size %d from '%s', expected %d from %s", l.seen, l.local_world, l.local_world_var,
                 local_world, var ? var : "-");
}

static void expect_gpu_refused(int n, const char *visible, dp_status code, const char *needle) {
    dp_launch l = parsed();
    int gpu = -1;
    assert_int_equal(dp_launch_pick_gpu(&l, n, visible, &gpu), code);
    if (!tu_contains(dp_last_error(), needle)) fail_msg("'%s' does not say '%s'", dp_last_error(), needle);
}

/* srun without --ntasks-per-node (and under --mpi=pmix or pmi2): the node's task count from the
 * step's layout in Slurm's compressed form at SLURM_NODEID, so that two tasks on a one-GPU node
 * are refused at once, not by NCCL's "Duplicate GPU" after the rendezvous. */
static void test_slurm_local_size_from_the_layout(void **state) {
    (void)state;
    ENV("SLURM_PROCID=1", "SLURM_STEP_NUM_TASKS=7", "SLURM_LOCALID=1", "SLURM_STEP_TASKS_PER_NODE=2(x3),1",
        "SLURM_NODEID=0");
    expect_local_world(2, "SLURM_STEP_TASKS_PER_NODE");
    expect_gpu_refused(1, NULL, DP_ERR_USAGE, "2 ranks on this node (SLURM_STEP_TASKS_PER_NODE=2) but one GPU");
    ENV("SLURM_PROCID=5", "SLURM_STEP_NUM_TASKS=7", "SLURM_LOCALID=1", "SLURM_STEP_TASKS_PER_NODE=2(x3),1",
        "SLURM_NODEID=2");
    expect_local_world(2, "SLURM_STEP_TASKS_PER_NODE");
    ENV("SLURM_PROCID=6", "SLURM_STEP_NUM_TASKS=7", "SLURM_LOCALID=0", "SLURM_STEP_TASKS_PER_NODE=2(x3),1",
        "SLURM_NODEID=3");
    expect_local_world(1, "SLURM_STEP_TASKS_PER_NODE");
    ENV("SLURM_PROCID=4", "SLURM_STEP_NUM_TASKS=5", "SLURM_LOCALID=1", "SLURM_STEP_TASKS_PER_NODE=3,2",
        "SLURM_NODEID=1", "SLURM_TASKS_PER_NODE=8");
    expect_local_world(2, "SLURM_STEP_TASKS_PER_NODE"); /* the step's layout, not the job's */
    ENV("SLURM_PROCID=1", "SLURM_STEP_NUM_TASKS=2", "SLURM_LOCALID=1", "SLURM_TASKS_PER_NODE=2");
    expect_local_world(2, "SLURM_TASKS_PER_NODE"); /* SLURM_NODEID unset: node 0 */
    ENV("SLURM_PROCID=1", "SLURM_STEP_NUM_TASKS=2", "SLURM_LOCALID=1", "SLURM_NTASKS_PER_NODE=2",
        "SLURM_STEP_TASKS_PER_NODE=1(x2)");
    expect_local_world(2, "SLURM_NTASKS_PER_NODE"); /* --ntasks-per-node, given: as before */
    /* srun --mpi=pmix and --mpi=pmi2: the local rank is Slurm's, so is the node's size */
    ENV("PMIX_RANK=1", "SLURM_STEP_NUM_TASKS=2", "SLURM_PROCID=1", "SLURM_LOCALID=1", "SLURM_STEP_TASKS_PER_NODE=2",
        "SLURM_NODEID=0");
    expect_local_world(2, "SLURM_STEP_TASKS_PER_NODE");
    expect_gpu_refused(1, NULL, DP_ERR_USAGE, "(SLURM_STEP_TASKS_PER_NODE=2) but one GPU");
    ENV("PMI_RANK=1", "SLURM_STEP_NUM_TASKS=2", "SLURM_PROCID=1", "SLURM_LOCALID=1", "SLURM_STEP_TASKS_PER_NODE=2");
    expect_local_world(2, "SLURM_STEP_TASKS_PER_NODE");
    /* a launcher that says its own node size wins; mpirun's daemons' step says nothing of its ranks */
    ENV("PMI_RANK=1", "PMI_SIZE=4", "MPI_LOCALRANKID=1", "MPI_LOCALNRANKS=4", "SLURM_PROCID=0",
        "SLURM_STEP_TASKS_PER_NODE=1");
    expect_local_world(4, "MPI_LOCALNRANKS");
    ENV("OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=4", "OMPI_COMM_WORLD_LOCAL_RANK=1", "SLURM_PROCID=0",
        "SLURM_STEP_TASKS_PER_NODE=1");
    expect_local_world(0, NULL);
    /* malformed layouts, a node the layout lacks, a local rank past the node's tasks */
    ENV("SLURM_PROCID=1", "SLURM_STEP_NUM_TASKS=2", "SLURM_STEP_TASKS_PER_NODE=2(x3");
    expect_refused("SLURM_STEP_TASKS_PER_NODE='2(x3' is not a Slurm task layout");
    ENV("SLURM_PROCID=1", "SLURM_STEP_NUM_TASKS=2", "SLURM_STEP_TASKS_PER_NODE=2(y3)");
    expect_refused("SLURM_STEP_TASKS_PER_NODE='2(y3)'");
    ENV("SLURM_PROCID=1", "SLURM_STEP_NUM_TASKS=2", "SLURM_STEP_TASKS_PER_NODE=0");
    expect_refused("SLURM_STEP_TASKS_PER_NODE='0'");
    ENV("SLURM_PROCID=1", "SLURM_STEP_NUM_TASKS=2", "SLURM_STEP_TASKS_PER_NODE=1,");
    expect_refused("SLURM_STEP_TASKS_PER_NODE='1,'");
    ENV("SLURM_PROCID=1", "SLURM_STEP_NUM_TASKS=7", "SLURM_STEP_TASKS_PER_NODE=2(x3),1", "SLURM_NODEID=4");
    expect_refused("has no node 4 (SLURM_NODEID=4)");
    ENV("SLURM_PROCID=1", "SLURM_STEP_NUM_TASKS=7", "SLURM_STEP_TASKS_PER_NODE=2(x3),1", "SLURM_NODEID=x");
    expect_refused("SLURM_NODEID='x'");
    ENV("SLURM_PROCID=1", "SLURM_STEP_NUM_TASKS=4", "SLURM_LOCALID=2", "SLURM_STEP_TASKS_PER_NODE=2(x2)");
    expect_refused("the local rank 2 is not below the 2 tasks SLURM_STEP_TASKS_PER_NODE='2(x2)' gives node 0");
    clear_env();
}

/* CUDA_VISIBLE_DEVICES of several GPUs per rank, fewer than the node's ranks (srun
 * --gpus-per-task=2): each rank would index its own list with its local rank. Refused naming the
 * variable; a list of the node's GPUs for every rank, or one GPU per rank, still maps. */
static void test_several_gpus_per_rank_refused(void **state) {
    (void)state;
    ENV("RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=4", "MASTER_ADDR=n0", "MASTER_PORT=1");
    expect_gpu_refused(2, "2,3", DP_ERR_USAGE, "CUDA_VISIBLE_DEVICES=2,3 shows this rank 2 GPUs, but 4 ranks share the "
                                               "node (LOCAL_WORLD_SIZE=4)");
    dp_launch l = parsed();
    int gpu = -1;
    assert_int_equal(dp_launch_pick_gpu(&l, 4, "0,1,2,3", &gpu), DP_OK), assert_int_equal(gpu, 1);
    gpu = -1;
    assert_int_equal(dp_launch_pick_gpu(&l, 1, "3", &gpu), DP_OK), assert_int_equal(gpu, 0);
    gpu = -1; /* unset: the node's GPUs; local rank 1 of 4 on 2 GPUs still maps (ranks 2 and 3 do not) */
    assert_int_equal(dp_launch_pick_gpu(&l, 2, NULL, &gpu), DP_OK), assert_int_equal(gpu, 1);
    /* srun --gpus-per-task=2 without --ntasks-per-node: the layout says 2 tasks here */
    ENV("SLURM_PROCID=1", "SLURM_STEP_NUM_TASKS=2", "SLURM_LOCALID=1", "SLURM_STEP_TASKS_PER_NODE=2", "SLURM_NODEID=0");
    expect_gpu_refused(1, NULL, DP_ERR_USAGE, "but one GPU");
    l = parsed();
    gpu = -1;
    assert_int_equal(dp_launch_pick_gpu(&l, 2, "0,1", &gpu), DP_OK), assert_int_equal(gpu, 1); /* 2 GPUs, 2 ranks */
    ENV("SLURM_PROCID=2", "SLURM_STEP_NUM_TASKS=4", "SLURM_LOCALID=2", "SLURM_STEP_TASKS_PER_NODE=4", "SLURM_NODEID=0");
    expect_gpu_refused(2, "4,5", DP_ERR_USAGE, "CUDA_VISIBLE_DEVICES=4,5 shows this rank 2 GPUs, but 4 ranks share the "
                                               "node (SLURM_STEP_TASKS_PER_NODE=4)");
    clear_env();
}

/* --gpus with several processes on a node: refused when they would drive the same GPUs, allowed
 * when CUDA_VISIBLE_DEVICES gives each its own. */
static void test_gpus_per_process_with_own_devices(void **state) {
    (void)state;
    ENV("RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=n0", "MASTER_PORT=1");
    dp_launch l = parsed();
    assert_int_equal(dp_launch_check_gpus(&l, "0,1", NULL), DP_ERR_USAGE);
    if (!tu_contains(dp_last_error(), "--gpus 0,1 with 2 processes on this node (LOCAL_WORLD_SIZE=2) and "
                                      "CUDA_VISIBLE_DEVICES unset"))
        fail_msg("%s", dp_last_error());
    assert_int_equal(dp_launch_check_gpus(&l, "0,1", "2,3"), DP_OK);
    ENV("SLURM_PROCID=1", "SLURM_STEP_NUM_TASKS=2", "SLURM_LOCALID=1", "SLURM_STEP_TASKS_PER_NODE=2");
    l = parsed();
    assert_int_equal(dp_launch_check_gpus(&l, "0,1", NULL), DP_ERR_USAGE);
    assert_int_equal(dp_launch_check_gpus(&l, "0,1", "4,5"), DP_OK);
    ENV("RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1", "MASTER_ADDR=n0", "MASTER_PORT=1");
    l = parsed();
    assert_int_equal(dp_launch_check_gpus(&l, "0,1", NULL), DP_OK); /* one process a node */
    clear_env();
}

/* After MPI_Init: a world of one under a launch of two did not join it. */
static void test_mpi_world_must_match(void **state) {
    (void)state;
    ENV("SLURM_STEP_NUM_TASKS=2", "SLURM_PROCID=1");
    dp_launch l = parsed();
    assert_int_equal(dp_launch_check_mpi_world(&l, "mpi", 1, 2), DP_OK);
    assert_int_equal(dp_launch_check_mpi_world(&l, "mpi", 0, 1), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "MPI_Init made this process rank 0 of 1, but SLURM_STEP_NUM_TASKS=2"));
    ENV("PMIX_RANK=1");
    l = parsed();
    assert_int_equal(dp_launch_check_mpi_world(&l, "nccl", 1, 3), DP_OK); /* the size comes from MPI */
    assert_int_equal(dp_launch_check_mpi_world(&l, "nccl", 0, 1), DP_ERR_USAGE);
    clear_env();
    l = parsed();
    assert_int_equal(dp_launch_check_mpi_world(&l, "mpi", 0, 1), DP_OK);
}

/* The built dptrain under a launch it does not join: exit 2, exactly one line naming what was seen
 * and the backend, before anything is trained or written. */
static void refused_by_cli(const char *env, const char *backend, const char *needle) {
    const char *bin = getenv("DPTRAIN") ? getenv("DPTRAIN") : "./dptrain";
    const char *save = tu_path("refused.safetensors");
    unlink(save);
    clear_env();
    char *out = NULL;
    int rc = tu_sh(&out, "env %s '%s' train --backend %s --model lenet --dataset synthetic --samples 64 --epochs 1 "
                   "--batch-size 16 --save '%s'", env, bin, backend, save);
    const char *nl = strchr(out, '\n');
    if (rc != 2 || strncmp(out, "dptrain: ", 9) != 0 || !nl || nl[1] || !tu_contains(out, needle))
        fail_msg("%s dptrain --backend %s: rc %d (expected 2 and one line naming '%s'):\n%s", env, backend, rc, needle, out);
    if (access(save, F_OK) == 0) fail_msg("%s --backend %s: refused, but wrote %s", env, backend, save);
    printf("%s --backend %s -> %s", env, backend, out);
    free(out);
}

static void test_cli_refuses(void **state) {
    (void)state;
    refused_by_cli("SLURM_NTASKS=2 SLURM_PROCID=1", "sim",
                   "SLURM_NTASKS=2 SLURM_PROCID=1 (a Slurm srun step of 2 tasks) but --backend sim runs in one process");
    refused_by_cli("SLURM_STEP_NUM_TASKS=2 SLURM_NTASKS=2 SLURM_PROCID=0", "sim", "SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=0");
    refused_by_cli("PMI_SIZE=2 PMI_RANK=1", "sim", "PMI_SIZE=2 PMI_RANK=1");
    refused_by_cli("PMIX_RANK=1", "sim", "PMIX_RANK=1");
    refused_by_cli("OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0", "sim", "OMPI_COMM_WORLD_SIZE=2");
    refused_by_cli("MV2_COMM_WORLD_SIZE=2 MV2_COMM_WORLD_RANK=1", "sim", "MV2_COMM_WORLD_SIZE=2");
    refused_by_cli("RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 "
                   "TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_RUN_ID=t", "sim", "a torchrun launch of 2 processes");
    refused_by_cli("PMI_SIZE=x PMI_RANK=1", "sim", "PMI_SIZE='x'");
    if (dp_mpi_family_built() == DP_MPI_OPENMPI) {
        refused_by_cli("SLURM_NTASKS=2 SLURM_PROCID=1", "mpi", "but --backend mpi cannot join it");
        refused_by_cli("PMI_SIZE=2 PMI_RANK=1", "mpi", "MPICH-family launcher");
    }
    if (dp_mpi_family_built() != DP_MPI_NONE)
        refused_by_cli("RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500", "mpi",
                       "mpirun -np 2");
    if (DP_HAVE_NCCL && dp_mpi_family_built() == DP_MPI_OPENMPI)
        refused_by_cli("SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=0", "nccl", "srun --mpi=pmix");
    /* one process (an sbatch script of 4 tasks) still trains */
    char *out = NULL;
    int rc = tu_sh(&out, "env SLURM_NTASKS=4 SLURM_PROCID=0 '%s' train --model lenet --dataset synthetic --samples 64 "
                   "--epochs 1 --batch-size 16 --quiet", getenv("DPTRAIN") ? getenv("DPTRAIN") : "./dptrain");
    if (rc != 0) fail_msg("SLURM_NTASKS=4 SLURM_PROCID=0 (an sbatch script): rc %d\n%s", rc, out);
    free(out);
}

/* The kernel's cpulist form: ranges, singles, a trailing newline; garbage and empty are -1. */
static void test_cpulist_parsing(void **state) {
    (void)state;
    dp_cpuset s;
    char back[128];
    static const struct { const char *in; int n; const char *out; } ok[] = {
        {"0-15,32-47\n", 32, "0-15,32-47"}, {"3", 1, "3"}, {"0,2,4-5", 4, "0,2,4-5"},
        {"7-7,1", 2, "1,7"}, {"8191", 1, "8191"}};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        const int n = dp_cpuset_parse(ok[i].in, &s);
        dp_cpuset_format(&s, back, sizeof back);
        if (n != ok[i].n || strcmp(back, ok[i].out) != 0)
            fail_msg("cpulist '%s': %d CPUs '%s', expected %d '%s'", ok[i].in, n, back, ok[i].n, ok[i].out);
    }
    static const char *const bad[] = {"", "\n", "x", "1-", "-3", "4-2", "1,,2", "1,", "0-3 junk", "8192", "1 2",
                                      "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (dp_cpuset_parse(bad[i], &s) != -1) fail_msg("cpulist '%s' accepted, expected -1", bad[i]);
    /* a long set is cut with "...", never past the buffer */
    assert_int_equal(dp_cpuset_parse("0,2,4,6,8,10,12,14,16,18,20,22", &s), 12);
    dp_cpuset_format(&s, back, 16);
    assert_string_equal(back, "0,2,4,6,8,...");
}

/* A sysfs tree under a temp dir holding one GPU's local_cpulist (NULL: the file is absent). */
static const char *sysfs_with(const char *name, const char *bus_id, const char *cpulist) {
    const char *root = tu_path(name);
    char *out = NULL;
    assert_int_equal(tu_sh(&out, "rm -rf '%s' && mkdir -p '%s/sys/bus/pci/devices/%s'", root, root, bus_id), 0);
    free(out);
    if (cpulist) {
        char path[512];
        snprintf(path, sizeof path, "%s/sys/bus/pci/devices/%s/local_cpulist", root, bus_id);
        tu_write_file(path, cpulist, strlen(cpulist));
    }
    return root;
}

static void test_numa_mismatch_warned(void **state) {
    (void)state;
    dp_cpuset mine;
    char msg[1024], expect[1024];
    const char *root = sysfs_with("numa", "0000:1b:00.0", "0-15,32-47\n");
    /* Open MPI's --map-by socket put this rank on the other socket */
    assert_int_equal(dp_cpuset_parse("16-31", &mine), 16);
    if (dp_numa_check(root, 1, "0000:1B:00.0", &mine, msg, sizeof msg) != 1)
        fail_msg("CPUs 16-31 against a GPU on 0-15,32-47: no warning ('%s')", msg);
    snprintf(expect, sizeof expect,
             "warning: --backend nccl: rank 1 runs on CPUs 16-31, but its GPU (PCI 0000:1b:00.0) is attached to CPUs "
             "0-15,32-47 (%s/sys/bus/pci/devices/0000:1b:00.0/local_cpulist): every copy between them crosses "
             "sockets; bind each rank near its GPU or not at all (mpirun --map-by ppr:N:node --bind-to none, or "
             "torchrun --numa-binding=node)", root);
    assert_string_equal(msg, expect);
    printf("%s\n", msg);
    /* NVML's 8-digit domain names the same device */
    assert_int_equal(dp_numa_check(root, 1, "00000000:1B:00.0", &mine, msg, sizeof msg), 1);
    /* one shared CPU is enough; so is an unbound rank */
    assert_int_equal(dp_cpuset_parse("15-31", &mine), 17);
    assert_int_equal(dp_numa_check(root, 1, "0000:1b:00.0", &mine, msg, sizeof msg), 0);
    assert_string_equal(msg, "");
    assert_int_equal(dp_cpuset_parse("0-63", &mine), 64);
    assert_int_equal(dp_numa_check(root, 1, "0000:1b:00.0", &mine, msg, sizeof msg), 0);
    /* nothing to compare: no warning, no failure */
    assert_int_equal(dp_cpuset_parse("16-31", &mine), 16);
    assert_int_equal(dp_numa_check(root, 1, "0000:3b:00.0", &mine, msg, sizeof msg), 0); /* no such device */
    assert_int_equal(dp_numa_check(root, 1, "not a bus id", &mine, msg, sizeof msg), 0);
    assert_int_equal(dp_numa_check(root, 1, "0000:1b:00.0/../..", &mine, msg, sizeof msg), 0);
    root = sysfs_with("numa-empty", "0000:1b:00.0", "\n");
    assert_int_equal(dp_numa_check(root, 1, "0000:1b:00.0", &mine, msg, sizeof msg), 0);
    root = sysfs_with("numa-garbage", "0000:1b:00.0", "ff,ffffffff\n");
    assert_int_equal(dp_numa_check(root, 1, "0000:1b:00.0", &mine, msg, sizeof msg), 0);
    root = sysfs_with("numa-absent", "0000:1b:00.0", NULL);
    assert_int_equal(dp_numa_check(root, 1, "0000:1b:00.0", &mine, msg, sizeof msg), 0);
    /* this process's own mask reads, and the real sysfs is no failure either way */
    assert_true(dp_cpuset_of_self(&mine) >= 1);
    (void)dp_numa_check("", 0, "0000:00:00.0", &mine, msg, sizeof msg);
}

static void test_binding_under_4_cpus_warned(void **state) {
    (void)state;
    dp_cpuset mine;
    char msg[1024];
    assert_int_equal(dp_cpuset_parse("3", &mine), 1);
    if (dp_binding_check(0, &mine, msg, sizeof msg) != 1) fail_msg("one CPU: no warning");
    assert_string_equal(msg, "warning: --backend nccl: rank 0 may run on 1 CPU only (its affinity mask: 3), shared by "
                             "its main thread, NCCL's proxy thread, the watchdog and the data loaders; give each rank "
                             "at least 4 (mpirun --bind-to none, or --map-by ppr:N:node:pe=K with K >= 4)");
    printf("%s\n", msg);
    assert_int_equal(dp_cpuset_parse("8,10-11", &mine), 3);
    assert_int_equal(dp_binding_check(5, &mine, msg, sizeof msg), 1);
    assert_true(tu_contains(msg, "rank 5 may run on 3 CPUs only (its affinity mask: 8,10-11)"));
    assert_int_equal(dp_cpuset_parse("4-7", &mine), 4);
    if (dp_binding_check(0, &mine, msg, sizeof msg) != 0) fail_msg("4 CPUs warned: %s", msg);
    assert_string_equal(msg, "");
    assert_int_equal(dp_cpuset_parse("0-63", &mine), 64);
    assert_int_equal(dp_binding_check(0, &mine, msg, sizeof msg), 0);
}

/* The backend table: its rows in the order the messages list them, what each says of its backend,
 * and the registry's answers from them (an unknown name, a backend left out of the build, the
 * devices a backend refuses). */
static void test_backend_table(void **state) {
    (void)state;
    static const char *const order[] = {"sim", "mpi", "nccl", NULL};
    for (int i = 0; order[i] || dp_backend_names[i]; i++) {
        if (!order[i] || !dp_backend_names[i] || strcmp(order[i], dp_backend_names[i]) != 0)
            fail_msg("backend %d: '%s', expected '%s'", i, dp_backend_names[i] ? dp_backend_names[i] : "(end)",
                     order[i] ? order[i] : "(end)");
        const dp_backend_kind *k = dp_backend_kind_find(order[i]);
        assert_non_null(k);
        assert_string_equal(k->name, order[i]);
        assert_non_null(k->built ? (const void *)k->create : (const void *)k->how_to_get);
    }
    const dp_backend_kind *sim = dp_backend_kind_find("sim"), *mpi = dp_backend_kind_find("mpi"),
                          *nccl = dp_backend_kind_find("nccl");
    assert_null(dp_backend_kind_find("gloo"));
    assert_true(sim->built && sim->in_process && !sim->takes_gpus && !sim->default_device);
    assert_int_equal(mpi->built, DP_HAVE_MPI);
    assert_true(!mpi->in_process && !mpi->takes_gpus && !mpi->default_device);
    assert_int_equal(nccl->built, DP_HAVE_NCCL);
    assert_true(!nccl->in_process && nccl->takes_gpus);
    assert_string_equal(nccl->default_device, "cuda");

    dp_backend_t b = NULL;
    const dp_backend_config gloo = {.name = "gloo"};
    assert_int_equal(dp_backend_create(&gloo, &b), DP_ERR_USAGE);
    assert_null(b);
    assert_string_equal(dp_last_error(), "--backend: unknown backend 'gloo' (expected sim, mpi or nccl)");
    const char *device;
    int ordinals[DP_MAX_LOCAL_DEVICES], n;
    const int gpus[2] = {0, 1};
    assert_int_equal(dp_backend_device("sim", NULL, -1, gpus, 2, &device, ordinals, &n), DP_ERR_USAGE);
    assert_string_equal(dp_last_error(), "--gpus is for --backend nccl (one process driving several GPUs)");
    assert_int_equal(dp_backend_device("mpi", "cuda", -1, NULL, 0, &device, ordinals, &n), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "--device cuda: --backend mpi moves host memory"));
    assert_int_equal(dp_backend_device("sim", NULL, 3, NULL, 0, &device, ordinals, &n), DP_OK);
    assert_string_equal(device, "cpu");
    assert_int_equal(ordinals[0], 3);
    assert_int_equal(n, 1);
    if (!DP_HAVE_NCCL) { /* left out: said at the device choice and at creation, with how to get it */
        const dp_backend_config c = {.name = "nccl"};
        assert_int_equal(dp_backend_device("nccl", NULL, -1, NULL, 0, &device, ordinals, &n), DP_ERR_UNSUPPORTED);
        assert_string_equal(dp_last_error(), "--backend nccl: not compiled into this build (needs the CUDA toolkit "
                                             "and NCCL at build time; set NCCL_ROOT and rebuild)");
        assert_int_equal(dp_backend_create(&c, &b), DP_ERR_UNSUPPORTED);
        assert_string_equal(dp_last_error(), "--backend nccl: not compiled into this build (needs the CUDA toolkit "
                                             "and NCCL at build time; set NCCL_ROOT and rebuild)");
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_launcher),
        cmocka_unit_test(test_innermost_launcher_wins),
        cmocka_unit_test(test_malformed_values_are_named),
        cmocka_unit_test(test_which_backend_joins),
        cmocka_unit_test(test_gpu_of_each_rank),
        cmocka_unit_test(test_slurm_local_size_from_the_layout),
        cmocka_unit_test(test_several_gpus_per_rank_refused),
        cmocka_unit_test(test_gpus_per_process_with_own_devices),
        cmocka_unit_test(test_mpi_world_must_match),
        cmocka_unit_test(test_cpulist_parsing),
        cmocka_unit_test(test_numa_mismatch_warned),
        cmocka_unit_test(test_binding_under_4_cpus_warned),
        cmocka_unit_test(test_cli_refuses),
        cmocka_unit_test(test_backend_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
