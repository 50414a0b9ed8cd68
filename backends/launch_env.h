/* launch_env.h: which launcher started this process, read from the variables each one sets, and
 * whether the chosen backend can join that launch. A process started by a launcher of N > 1
 * processes that the backend does not join would train alone, and N such trainings would write the
 * same files: the CLI refuses that before any training (dp_launch_check).
 *
 * Recognised, innermost launcher first (torchrun is usually started by srun or mpirun, one agent per
 * node, and mpirun under Slurm starts its daemons with srun, so the outer launcher's variables are
 * there too and describe the agents or daemons, not the trainers):
 *   torchrun     RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (all five, consistent),
 *                LOCAL_WORLD_SIZE;
 *                TORCHELASTIC_USE_AGENT_STORE=True: the agent hosts a TCPStore on MASTER_PORT
 *   Open MPI     OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK, _LOCAL_SIZE
 *   MVAPICH      MV2_COMM_WORLD_RANK, MV2_COMM_WORLD_SIZE, MV2_COMM_WORLD_LOCAL_RANK
 *   Hydra        PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS (MPICH's and Intel MPI's mpiexec;
 *                srun --mpi=pmi2)
 *   PMIx         PMIX_RANK (srun --mpi=pmix, prterun); the size from PMIX_SIZE if a launcher sets it,
 *                else SLURM_STEP_NUM_TASKS, else unknown (world 0)
 *   Slurm srun   SLURM_PROCID, SLURM_LOCALID, the node's task count (SLURM_NTASKS_PER_NODE when
 *                given, else the step's layout SLURM_STEP_TASKS_PER_NODE, else SLURM_TASKS_PER_NODE,
 *                "2(x3),1", at SLURM_NODEID; also under srun --mpi=pmix and --mpi=pmi2), and the step's
 *                size: SLURM_STEP_NUM_TASKS (srun sets
 *                it in every task). Without it, SLURM_NTASKS is the allocation's (sbatch --ntasks=N
 *                runs its script once, as task 0 of 1): it counts only with SLURM_PROCID > 0, which
 *                no batch script has. So `sbatch --ntasks=4` running dptrain directly trains once.
 * A variable that is set but malformed (not an integer, negative, a rank not below the size) is a
 * usage error naming it. */
#ifndef DP_LAUNCH_ENV_H
#define DP_LAUNCH_ENV_H

#include "core/status.h"

typedef enum {
    DP_LAUNCH_SINGLE = 0, /* no launcher: rank 0 of 1 */
    DP_LAUNCH_TORCHRUN,
    DP_LAUNCH_MPIRUN,     /* Open MPI's mpirun */
    DP_LAUNCH_MVAPICH,
    DP_LAUNCH_PMI,        /* Hydra: MPICH, Intel MPI; srun --mpi=pmi2 */
    DP_LAUNCH_PMIX,
    DP_LAUNCH_SLURM       /* srun without an MPI plugin's variables */
} dp_launch_kind;

/* The MPI library this build links: which launches its MPI_Init can join. */
typedef enum { DP_MPI_NONE = 0, DP_MPI_OPENMPI, DP_MPI_MPICH } dp_mpi_family;

typedef struct {
    dp_launch_kind kind;
    int rank, world, local_rank; /* world 0: a PMIx launch whose size is not in the environment */
    int local_world;             /* processes on this node, 0 when the launcher does not say */
    char local_world_var[32];    /* the variable that said it: LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE... */
    char addr[256];              /* torchrun: MASTER_ADDR */
    int port;                    /* torchrun: MASTER_PORT */
    int agent_store;             /* torchrun: TORCHELASTIC_USE_AGENT_STORE=True */
    int restart;                 /* torchrun: TORCHELASTIC_RESTART_COUNT (0 when unset) */
    char run_id[64];             /* torchrun: TORCHELASTIC_RUN_ID ("" when unset) */
    char seen[256];              /* the variables that decided, "NAME=value NAME=value" */
    char what[96];               /* "a Slurm srun step of 2 tasks" */
} dp_launch;

/* Reads the launch from the environment (the rules above). DP_ERR_USAGE naming the variable when one
 * is malformed or a torchrun launch lacks one of its five. */
dp_status dp_launch_from_env(dp_launch *l);

/* "torchrun", "Open MPI mpirun", ... */
const char *dp_launch_name(dp_launch_kind k);

/* Whether a multi-process launch can be served by the backend of row k (backend_kind.h; NULL: an
 * unknown name, which creating it refuses) of a build whose MPI is fam, as the row says
 * (joins_launch): DP_OK when it joins (or when the launch is of one process), else DP_ERR_USAGE with
 * one line saying what was seen and what to use. The caller looks the row up: launch detection sits
 * below the backend table, which reads it. */
struct dp_backend_kind;
dp_status dp_launch_check(const dp_launch *l, const struct dp_backend_kind *k, dp_mpi_family fam);

/* The MPI family this build links (DP_MPI_NONE without MPI). */
dp_mpi_family dp_mpi_family_built(void);

/* --backend nccl: which of the n visible GPUs this process drives. *gpu comes in as --gpu (-1: not
 * given). Alone (no launcher, or a world of one): --gpu's, 0 by default. Under a launch: its local rank's, or the only one
 * when each rank sees just its own (CUDA_VISIBLE_DEVICES set per rank, as Slurm and Kubernetes do). One
 * GPU, several ranks on the node and CUDA_VISIBLE_DEVICES unset is a node that has one GPU: NCCL would
 * refuse two ranks on it ("Duplicate GPU detected") only after the rendezvous, so this says it at once
 * (DP_ERR_USAGE); so is CUDA_VISIBLE_DEVICES showing a rank several GPUs but fewer than the ranks on
 * its node (a list per rank, srun --gpus-per-task=2: each rank would index its own list with its
 * local rank); a local rank past the node's GPUs is DP_ERR_BACKEND; --gpu under a launch, or past
 * the GPUs, is DP_ERR_USAGE. */
dp_status dp_launch_pick_gpu(const dp_launch *l, int n, const char *cuda_visible, int *gpu);

/* --gpus LIST under a launch: several processes on a node would each drive the listed GPUs, so it
 * is refused (DP_ERR_USAGE) unless CUDA_VISIBLE_DEVICES is set, which gives each process its own
 * (NCCL's duplicate-GPU check stays the backstop). */
dp_status dp_launch_check_gpus(const dp_launch *l, const char *list, const char *cuda_visible);

/* After MPI_Init: the size MPI reports against the launcher's (l->world, when known). DP_OK when
 * they agree, else DP_ERR_USAGE: MPI did not join the launch (each process would train alone). */
dp_status dp_launch_check_mpi_world(const dp_launch *l, const char *backend, int mpi_rank, int mpi_size);

#endif
