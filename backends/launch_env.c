/* launch_env.c: the launchers' variables, and which backend joins which launch (launch_env.h). */
#include "backends/launch_env.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend_kind.h"
#include "core/printable.h"
#include "core/parse_num.h"
#include "dp_config.h"

#if DP_HAVE_MPI
#include <mpi.h>
#endif

#define MAX_WORLD (1 << 20)

/* An integer variable in [lo, hi]; *present says whether it was set. */
static dp_status env_int(const char *name, int lo, int hi, int *out, int *present) {
    const char *v = getenv(name);
    *present = v != NULL;
    if (!v) return DP_OK;
    long long x = 0;
    char shown[64];
    if (dp_parse_ll(v, &x) != 0 || x < lo || x > hi) /* the flags' parser: ' 5' refused as '5 ' is */
        return dp_fail(DP_ERR_USAGE, "launch: %s='%s' is not an integer from %d to %d", name,
                       dp_printable(v, shown, sizeof shown), lo, hi);
    *out = (int)x;
    return DP_OK;
}

/* Appends "NAME=value" (as set) to l->seen. */
static void saw(dp_launch *l, const char *name) {
    const char *v = getenv(name);
    if (!v) return;
    size_t used = strlen(l->seen);
    char shown[64]; /* the messages quote these */
    snprintf(l->seen + used, sizeof l->seen - used, "%s%s=%s", used ? " " : "", name, dp_printable(v, shown, sizeof shown));
}

static void describe(dp_launch *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void describe(dp_launch *l, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->what, sizeof l->what, fmt, ap);
    va_end(ap);
}

/* The node's process count, when the launcher gives it in var. */
static dp_status local_world_from(dp_launch *l, const char *var) {
    int have = 0;
    if (!var) return DP_OK;
    DP_TRY(env_int(var, 1, MAX_WORLD, &l->local_world, &have));
    if (!have) {
        l->local_world = 0;
        return DP_OK;
    }
    snprintf(l->local_world_var, sizeof l->local_world_var, "%s", var);
    if (l->local_rank >= l->local_world)
        return dp_fail(DP_ERR_USAGE, "launch: the local rank %d is not below %s=%d", l->local_rank, var, l->local_world);
    return DP_OK;
}

static dp_status rank_below(const dp_launch *l, const char *rank_var, const char *size_var) {
    if (l->world > 0 && l->rank >= l->world)
        return dp_fail(DP_ERR_USAGE, "launch: %s=%d is not below %s=%d", rank_var, l->rank, size_var, l->world);
    if (l->world > 0 && l->local_rank >= l->world)
        return dp_fail(DP_ERR_USAGE, "launch: the local rank %d is not below the launch's size %s=%d", l->local_rank,
                       size_var, l->world);
    return DP_OK;
}

static dp_status from_torchrun(dp_launch *l) {
    int have_rank, have_world, have_local, have_port, have_restart;
    DP_TRY(env_int("WORLD_SIZE", 1, MAX_WORLD, &l->world, &have_world));
    DP_TRY(env_int("RANK", 0, INT_MAX, &l->rank, &have_rank));
    DP_TRY(env_int("LOCAL_RANK", 0, INT_MAX, &l->local_rank, &have_local));
    DP_TRY(env_int("MASTER_PORT", 1, 65535, &l->port, &have_port));
    DP_TRY(env_int("TORCHELASTIC_RESTART_COUNT", 0, INT_MAX, &l->restart, &have_restart));
    const char *addr = getenv("MASTER_ADDR");
    const char *missing = !have_world ? "WORLD_SIZE" : !have_rank ? "RANK" : !have_local ? "LOCAL_RANK"
                          : !addr || !*addr ? "MASTER_ADDR" : !have_port ? "MASTER_PORT" : NULL;
    if (missing)
        return dp_fail(DP_ERR_USAGE, "launch: %s is not set, but %s is: a torchrun-style launch needs RANK, WORLD_SIZE, "
                       "LOCAL_RANK, MASTER_ADDR and MASTER_PORT", missing, have_rank ? "RANK" : "WORLD_SIZE");
    DP_TRY(rank_below(l, "RANK", "WORLD_SIZE"));
    DP_TRY(local_world_from(l, "LOCAL_WORLD_SIZE"));
    /* an IPv6 address may come in brackets, as in a URL ("[::1]"): getaddrinfo takes it without */
    const size_t len = strlen(addr), bracketed = addr[0] == '[' && len > 2 && addr[len - 1] == ']';
    if (len - 2 * bracketed >= sizeof l->addr)
        return dp_fail(DP_ERR_USAGE, "launch: MASTER_ADDR is longer than %zu characters", sizeof l->addr - 1);
    snprintf(l->addr, sizeof l->addr, "%.*s", (int)(len - 2 * bracketed), addr + bracketed);
    /* torch writes str(True): anything else means its workers host their own store */
    const char *agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
    l->agent_store = agent && strcmp(agent, "True") == 0;
    const char *run_id = getenv("TORCHELASTIC_RUN_ID");
    if (run_id && strlen(run_id) >= sizeof l->run_id)
        return dp_fail(DP_ERR_USAGE, "launch: TORCHELASTIC_RUN_ID is longer than %zu characters", sizeof l->run_id - 1);
    snprintf(l->run_id, sizeof l->run_id, "%s", run_id ? run_id : "");
    l->kind = DP_LAUNCH_TORCHRUN;
    saw(l, "WORLD_SIZE"), saw(l, "RANK");
    describe(l, "%s %d processes", getenv("TORCHELASTIC_RUN_ID") ? "a torchrun launch of" : "torchrun-style variables for",
             l->world);
    return DP_OK;
}

/* The size of the Slurm step around a PMI or PMIx launch that does not give its own: 0 if unknown. */
static dp_status slurm_step_size(int *world, int *local_rank) {
    int have_step = 0, have_local = 0, step = 0;
    DP_TRY(env_int("SLURM_STEP_NUM_TASKS", 1, MAX_WORLD, &step, &have_step));
    DP_TRY(env_int("SLURM_LOCALID", 0, INT_MAX, local_rank, &have_local));
    *world = have_step ? step : 0;
    if (!have_local) *local_rank = 0;
    return DP_OK;
}

static dp_status slurm_local_world(dp_launch *l);

/* An MPI-style launch: rank_var names it; size_var (else the Slurm step's size) its size. */
static dp_status from_mpi_vars(dp_launch *l, dp_launch_kind kind, const char *rank_var, const char *size_var,
                               const char *local_var, const char *local_size_var, int size_required) {
    int have_rank, have_size, have_local;
    DP_TRY(env_int(rank_var, 0, INT_MAX, &l->rank, &have_rank));
    DP_TRY(env_int(size_var, 1, MAX_WORLD, &l->world, &have_size));
    if (!have_rank && !have_size) return DP_OK; /* not this launcher */
    DP_TRY(env_int(local_var, 0, INT_MAX, &l->local_rank, &have_local));
    if (!have_rank || (size_required && !have_size))
        return dp_fail(DP_ERR_USAGE, "launch: %s is set but %s is not (set by hand? %s launch sets both)",
                       have_rank ? rank_var : size_var, have_rank ? size_var : rank_var, dp_launch_name(kind));
    if (!have_size || !have_local) {
        int w = 0, loc = 0;
        DP_TRY(slurm_step_size(&w, &loc));
        if (!have_size) l->world = w;
        if (!have_local) l->local_rank = loc;
        if (!have_size && w > 0) size_var = "SLURM_STEP_NUM_TASKS";
    }
    l->kind = kind;
    if (have_size || l->world > 0) saw(l, size_var);
    saw(l, rank_var);
    if (l->world == 0 && l->rank == 0)
        describe(l, "%s launch whose size is not in the environment", dp_launch_name(kind));
    else if (l->world == 0)
        describe(l, "%s launch of at least %d processes", dp_launch_name(kind), l->rank + 1);
    else
        describe(l, "%s launch of %d processes", dp_launch_name(kind), l->world);
    DP_TRY(rank_below(l, rank_var, size_var));
    DP_TRY(local_world_from(l, local_size_var));
    /* srun --mpi=pmix or --mpi=pmi2: the local rank is Slurm's, and so is the node's task count */
    const int slurm_local = !have_local || strcmp(local_var, "SLURM_LOCALID") == 0;
    if (l->local_world == 0 && slurm_local && (kind == DP_LAUNCH_PMIX || kind == DP_LAUNCH_PMI)) return slurm_local_world(l);
    return DP_OK;
}

/* The tasks on node `node` of a Slurm task layout in its compressed form, "2(x3),1": 2 on nodes 0-2,
 * 1 on node 3. 0 when the layout has no such node; -1 when it is malformed. */
static long slurm_tasks_on_node(const char *layout, long node) {
    const char *p = layout;
    long found = 0; /* the whole layout is read: a malformed tail is refused too */
    for (;;) {
        char *end;
        errno = 0;
        const long tasks = strtol(p, &end, 10);
        if (end == p || errno || tasks < 1 || tasks > MAX_WORLD) return -1;
        long repeat = 1;
        p = end;
        if (*p == '(') {
            if (p[1] != 'x') return -1;
            errno = 0;
            repeat = strtol(p + 2, &end, 10);
            if (end == p + 2 || errno || repeat < 1 || repeat > MAX_WORLD || *end != ')') return -1;
            p = end + 1;
        }
        if (node >= 0 && node < repeat) found = tasks;
        node -= repeat;
        if (!*p) return found;
        if (*p++ != ',') return -1;
    }
}

/* Slurm's tasks on this node: srun sets SLURM_NTASKS_PER_NODE only when given --ntasks-per-node,
 * but every task gets the step's layout (SLURM_STEP_TASKS_PER_NODE, else SLURM_TASKS_PER_NODE, in
 * the compressed form "2(x3),1") and its node's index in the step (SLURM_NODEID). */
static dp_status slurm_local_world(dp_launch *l) {
    DP_TRY(local_world_from(l, "SLURM_NTASKS_PER_NODE"));
    if (l->local_world > 0) return DP_OK;
    const char *var = getenv("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
    const char *layout = getenv(var);
    int node = 0, have_node = 0;
    DP_TRY(env_int("SLURM_NODEID", 0, MAX_WORLD, &node, &have_node));
    if (!layout) return DP_OK;
    const long here = slurm_tasks_on_node(layout, node);
    if (here < 0)
        return dp_fail(DP_ERR_USAGE, "launch: %s='%s' is not a Slurm task layout such as 2(x3),1", var, layout);
    if (here == 0)
        return dp_fail(DP_ERR_USAGE, "launch: %s='%s' has no node %d (SLURM_NODEID=%d)", var, layout, node, node);
    l->local_world = (int)here;
    snprintf(l->local_world_var, sizeof l->local_world_var, "%s", var);
    if (l->local_rank >= l->local_world)
        return dp_fail(DP_ERR_USAGE, "launch: the local rank %d is not below the %d tasks %s='%s' gives node %d",
                       l->local_rank, l->local_world, var, layout, node);
    return DP_OK;
}

/* srun: SLURM_STEP_NUM_TASKS is the step's size; SLURM_NTASKS counts only for a task > 0 (see .h). */
static dp_status from_slurm(dp_launch *l) {
    int have_procid, have_step, have_ntasks, have_local, step = 0, ntasks = 0;
    DP_TRY(env_int("SLURM_PROCID", 0, INT_MAX, &l->rank, &have_procid));
    if (!have_procid) return DP_OK;
    DP_TRY(env_int("SLURM_STEP_NUM_TASKS", 1, MAX_WORLD, &step, &have_step));
    DP_TRY(env_int("SLURM_NTASKS", 1, MAX_WORLD, &ntasks, &have_ntasks));
    DP_TRY(env_int("SLURM_LOCALID", 0, INT_MAX, &l->local_rank, &have_local));
    if (!have_local) l->local_rank = 0;
    const char *size_var = have_step ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
    if (have_step)
        l->world = step;
    else if (l->rank > 0 && have_ntasks)
        l->world = ntasks;
    else if (l->rank > 0)
        return dp_fail(DP_ERR_USAGE, "launch: SLURM_PROCID=%d, but neither SLURM_STEP_NUM_TASKS nor SLURM_NTASKS is set",
                       l->rank);
    else {
        l->rank = 0, l->world = 1, l->local_rank = 0; /* the batch script itself: one process */
        return DP_OK;
    }
    l->kind = DP_LAUNCH_SLURM;
    saw(l, size_var), saw(l, "SLURM_PROCID");
    describe(l, "a Slurm srun step of %d tasks", l->world);
    DP_TRY(rank_below(l, "SLURM_PROCID", size_var));
    return slurm_local_world(l);
}

dp_status dp_launch_from_env(dp_launch *l) {
    memset(l, 0, sizeof *l);
    l->world = 1;
    if (getenv("RANK") || getenv("WORLD_SIZE")) return from_torchrun(l);
    DP_TRY(from_mpi_vars(l, DP_LAUNCH_MPIRUN, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                         "OMPI_COMM_WORLD_LOCAL_SIZE", 1));
    if (l->kind) return DP_OK;
    DP_TRY(from_mpi_vars(l, DP_LAUNCH_MVAPICH, "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK",
                         "MV2_COMM_WORLD_LOCAL_SIZE", 1));
    if (l->kind) return DP_OK;
    DP_TRY(from_mpi_vars(l, DP_LAUNCH_PMI, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", 0));
    if (l->kind) return DP_OK;
    DP_TRY(from_mpi_vars(l, DP_LAUNCH_PMIX, "PMIX_RANK", "PMIX_SIZE", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", 0));
    if (l->kind) return DP_OK;
    DP_TRY(from_slurm(l));
    if (l->kind) return DP_OK;
    memset(l, 0, sizeof *l);
    l->world = 1;
    l->kind = DP_LAUNCH_SINGLE;
    return DP_OK;
}

const char *dp_launch_name(dp_launch_kind k) {
    switch (k) {
    case DP_LAUNCH_SINGLE: return "a single process";
    case DP_LAUNCH_TORCHRUN: return "a torchrun";
    case DP_LAUNCH_MPIRUN: return "an Open MPI mpirun";
    case DP_LAUNCH_MVAPICH: return "an MVAPICH";
    case DP_LAUNCH_PMI: return "an MPICH or Intel MPI (PMI)";
    case DP_LAUNCH_PMIX: return "a PMIx";
    case DP_LAUNCH_SLURM: return "a Slurm srun";
    }
    return "an unknown";
}

dp_mpi_family dp_mpi_family_built(void) {
#if !DP_HAVE_MPI
    return DP_MPI_NONE;
#elif defined(OPEN_MPI)
    return DP_MPI_OPENMPI;
#else
    return DP_MPI_MPICH; /* MPICH and its derivatives (Intel MPI, MVAPICH): Hydra's PMI */
#endif
}

/* Why MPI_Init of a build of family fam cannot join a launch of kind k, and what to do instead,
 * into buf (np: the launch's size or "N"); NULL when it can (or may: the size check after MPI_Init
 * has the last word). */
static const char *mpi_cannot_join(dp_launch_kind k, dp_mpi_family fam, const char *np, char *buf, size_t cap) {
    if (k == DP_LAUNCH_TORCHRUN)
        snprintf(buf, cap, "it joins MPI launchers only; start it with mpirun -np %s, or use --backend nccl under "
                 "torchrun", np);
    else if (fam == DP_MPI_OPENMPI && (k == DP_LAUNCH_PMI || k == DP_LAUNCH_MVAPICH))
        snprintf(buf, cap, "this dptrain's MPI is Open MPI, which cannot join an MPICH-family launcher; start it with "
                 "Open MPI's mpirun -np %s (or rebuild dptrain against that MPI)", np);
    else if (fam == DP_MPI_OPENMPI && k == DP_LAUNCH_SLURM)
        snprintf(buf, cap, "this dptrain's MPI is Open MPI, which joins an srun step only through PMIx; use srun "
                 "--mpi=pmix (or mpirun -np %s inside the allocation)", np);
    else if (fam == DP_MPI_MPICH && k == DP_LAUNCH_MPIRUN)
        snprintf(buf, cap, "this dptrain's MPI is MPICH-family, which cannot join Open MPI's mpirun; start it with that "
                 "MPI's mpiexec -n %s (or rebuild dptrain against Open MPI)", np);
    else
        return NULL;
    return buf;
}

dp_status dp_launch_check(const dp_launch *l, const dp_backend_kind *k, dp_mpi_family fam) {
    if (l->kind == DP_LAUNCH_SINGLE || l->world == 1) return DP_OK;
    if (!k || !k->joins_launch) return DP_OK; /* an unknown name: creating it says so */
    const int n = l->world; /* 0: unknown, more than one */
    char replicas[32] = "N";
    if (n > 0) snprintf(replicas, sizeof replicas, "%d", n);
    char why[320];
    return k->joins_launch(l, fam, replicas, mpi_cannot_join(l->kind, fam, replicas, why, sizeof why));
}

/* A rank indexes the GPUs it sees with its local rank. With CUDA_VISIBLE_DEVICES set per rank to
 * several GPUs (srun --gpus-per-task=2) each rank indexes its own list, so local rank 1 takes its
 * second GPU and local rank 2 finds none; with fewer GPUs listed than ranks on the node, two ranks
 * would share one. Either way: one GPU per rank, said at once rather than by NCCL after the
 * rendezvous. */
static dp_status several_gpus_per_rank(const dp_launch *l, int n, const char *cuda_visible) {
    if (!cuda_visible || n <= 1 || l->local_world <= n) return DP_OK;
    return dp_fail(DP_ERR_USAGE, "--backend nccl: rank %d: CUDA_VISIBLE_DEVICES=%s shows this rank %d GPUs, but %d ranks "
                   "share the node (%s=%d), and each rank drives the one GPU its local rank (%d) names in its own list; "
                   "give each rank one GPU (srun --gpus-per-task=1, or CUDA_VISIBLE_DEVICES set to one GPU per rank), or "
                   "list every GPU of the node to every rank with at most one rank per GPU", l->rank, cuda_visible, n,
                   l->local_world, l->local_world_var, l->local_world, l->local_rank);
}

dp_status dp_launch_check_gpus(const dp_launch *l, const char *list, const char *cuda_visible) {
    /* processes on one node would each drive the listed GPUs: NCCL refuses a GPU twice, late; with
       CUDA_VISIBLE_DEVICES set (per process, as Slurm and Kubernetes do) each lists its own */
    if (l->local_world <= 1 || cuda_visible) return DP_OK;
    return dp_fail(DP_ERR_USAGE, "--gpus %s with %d processes on this node (%s=%d) and CUDA_VISIBLE_DEVICES unset: each "
                   "would drive the same GPUs; start one process per node with --gpus, give each process its own GPUs "
                   "with CUDA_VISIBLE_DEVICES, or start one process per GPU without --gpus", list, l->local_world,
                   l->local_world_var, l->local_world);
}

dp_status dp_launch_pick_gpu(const dp_launch *l, int n, const char *cuda_visible, int *gpu) {
    if (l->kind == DP_LAUNCH_SINGLE || l->world == 1) {
        char shown[96];
        if (*gpu >= n)
            return dp_fail(DP_ERR_USAGE, "--gpu %d: there is no GPU %d, this machine has %d%s%s%s", *gpu, *gpu, n,
                           cuda_visible ? " visible (CUDA_VISIBLE_DEVICES=" : "",
                           cuda_visible ? dp_printable(cuda_visible, shown, sizeof shown) : "", cuda_visible ? ")" : "");
        if (*gpu < 0) *gpu = 0;
        return DP_OK;
    }
    if (*gpu >= 0)
        return dp_fail(DP_ERR_USAGE, "--gpu %d: under a launch of %d processes (%s) each process drives the GPU of its "
                       "local rank (%d here); drop --gpu, or give each process its own GPU with CUDA_VISIBLE_DEVICES",
                       *gpu, l->world, l->seen, l->local_rank);
    *gpu = 0;
    DP_TRY(several_gpus_per_rank(l, n, cuda_visible));
    if (n == 1) {
        if (l->local_world > 1 && !cuda_visible)
            return dp_fail(DP_ERR_USAGE, "--backend nccl: rank %d: %d ranks on this node (%s=%d) but one GPU, and NCCL "
                           "needs a GPU per rank: start at most one rank per GPU on each node (with CUDA_VISIBLE_DEVICES "
                           "set per rank, each sees its own)", l->rank, l->local_world, l->local_world_var, l->local_world);
        return DP_OK;
    }
    if (l->local_rank >= n)
        return dp_fail(DP_ERR_BACKEND, "--backend nccl: rank %d: the local rank %d names GPU %d, but this node has %d (more "
                       "ranks than GPUs on a node?)", l->rank, l->local_rank, l->local_rank, n);
    *gpu = l->local_rank;
    return DP_OK;
}

dp_status dp_launch_check_mpi_world(const dp_launch *l, const char *backend, int mpi_rank, int mpi_size) {
    if (l->kind == DP_LAUNCH_SINGLE || l->kind == DP_LAUNCH_TORCHRUN) return DP_OK;
    const int world_ok = l->world == 0 ? mpi_size > l->rank : mpi_size == l->world;
    if (world_ok && mpi_rank == l->rank) return DP_OK;
    return dp_fail(DP_ERR_USAGE, "--backend %s: MPI_Init made this process rank %d of %d, but %s (%s): this dptrain's MPI "
                   "did not join that launch, and each process would train alone; start it with the launcher of the MPI "
                   "it was built with (%s)", backend, mpi_rank, mpi_size, l->seen, l->what,
                   dp_mpi_family_built() == DP_MPI_MPICH ? "mpiexec -n N" : "mpirun -np N, or srun --mpi=pmix");
}
