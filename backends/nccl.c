/* nccl.c: the NCCL backend: set-up, the watch on the device's waits, and tear-down;
 * the collectives are in nccl_coll.c (nccl_impl.h says what the two share). A process drives one
 * GPU, launched plainly (one process, one GPU), by torchrun (RANK, WORLD_SIZE, LOCAL_RANK,
 * MASTER_ADDR, MASTER_PORT: the unique id goes over TCP or torchrun's agent store,
 * backends/rendezvous.h) or by an MPI launcher (mpirun, mpiexec, srun --mpi=pmix: the unique id goes
 * over MPI; backends/launch_env.h); or it drives the GPUs --gpus lists, one replica and one
 * communicator each, all created in one group (ranks first .. first + n_local - 1; one process, or
 * one process per node that each list as many). Collectives are queued on each device's collective
 * stream (kernels/device.h), in stream order after the kernels that wrote their buffers.
 *
 * The communicators are non-blocking (ncclConfig_t.blocking = 0): every NCCL call that returns
 * ncclInProgress is polled with ncclCommGetAsyncError until done, and after --timeout seconds the
 * communicators are aborted with a message naming the ranks and the collective, never a silent
 * hang. What was run and measured on GPUs: docs/gpu.md. */
#include "dp_config.h"

#if DP_HAVE_NCCL

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/launch_affinity.h"
#include "backends/nccl.h"
#include "backends/nccl_impl.h"
#include "backends/nccl_memory.h"

#if DP_HAVE_MPI
#include <mpi.h>
#endif

/* The devices' waits poll this: a peer's error or --timeout aborts the communicators, so that a
 * dead rank ends the run with a message instead of a kernel that waits for ever. */
static dp_status nccl_watch(void *ctx, double waited_s) {
    nccl_impl *m = ctx;
    if (!m->loc[0].comm) return DP_OK;
    int which = -1;
    ncclResult_t r = dp_nccl_poll(m, &which);
    if (r != ncclSuccess && r != ncclInProgress) {
        char last[600];
        dp_nccl_last_error(m, which, last, sizeof last);
        dp_status e = dp_fail(DP_ERR_BACKEND, "nccl: %s: a collective failed: %s%s; the communicator was aborted",
                              m->who, ncclGetErrorString(r), last);
        dp_nccl_abort(m);
        return e;
    }
    char why[512];
    if (dp_sidechan_poll(m->sc, why, sizeof why)) {
        dp_status e = dp_fail(DP_ERR_BACKEND, "nccl: %s: stopped waiting for a collective because another rank "
                              "failed: %s; the communicator was aborted", m->who, why);
        dp_nccl_abort(m);
        return e;
    }
    if (waited_s > m->timeout_s) {
        dp_status e = dp_fail(DP_ERR_BACKEND, "nccl: %s: the GPU waited %.0f s (--timeout) for a collective (a rank "
                              "died or is stuck); the communicator was aborted", m->who, waited_s);
        dp_nccl_abort(m);
        return e;
    }
    return DP_OK;
}

static const char *nccl_name(dp_backend_t b) {
    (void)b;
    return "nccl";
}
static int nccl_world(dp_backend_t b) { return dp_nccl_impl(b)->world; }
static int nccl_n_local(dp_backend_t b) { return dp_nccl_impl(b)->n_local; }
static int nccl_rank(dp_backend_t b, int local) { return dp_nccl_impl(b)->loc[local].rank; }

static int any_comm(const nccl_impl *m) {
    for (int i = 0; i < m->n_local; i++)
        if (m->loc[i].comm) return 1;
    return 0;
}

/* Finalises every local communicator (they flush together: non-blocking), then destroys them. */
static void finish_comms(nccl_impl *m) {
    ncclResult_t r = ncclSuccess;
    for (int i = 0; i < m->n_local && (r == ncclSuccess || r == ncclInProgress); i++) {
        ncclResult_t ri = ncclCommFinalize(m->loc[i].comm);
        if (ri != ncclSuccess) r = ri;
    }
    if (dp_nccl_settle(m, r, "finalising the communicator") != DP_OK) return; /* aborted there */
    dp_nccl_watchdog_enter(m->wd, "destroying the communicator (ncclCommDestroy)");
    for (int i = 0; i < m->n_local; i++) {
        ncclCommDestroy(m->loc[i].comm);
        m->loc[i].comm = NULL;
    }
    dp_nccl_watchdog_leave(m->wd);
}

/* The scratch freed, the devices no longer watched. */
static void release_devices(nccl_impl *m) {
    for (int i = 0; i < m->n_local; i++) {
        nccl_local *x = &m->loc[i];
        if (x->scratch) x->st->dev->free(x->st->dev, x->scratch);
        x->scratch = NULL, x->scratch_n = 0;
        x->home = NULL;
    }
    if (m->waits && m->waits->ctx == m) m->waits->watch = NULL, m->waits->ctx = NULL;
}

/* After a failure (backend.h: abort): the communicators aborted, then the watchdog stays on, with
 * the grace period only, over everything until destroy: this scratch's cudaFree, the trainer's
 * frees and the devices' closing synchronise with the GPU, and a kernel that the abort did not end
 * would hold them for ever, so the rank would hang without a word (under mpirun, before its
 * MPI_Abort). destroy, after the devices are closed, stops it. */
static void nccl_abort_teardown(dp_backend_t b) {
    nccl_impl *m = dp_nccl_impl(b);
    dp_sidechan_fail(m->sc, dp_last_error()); /* also a failure outside NCCL (a checkpoint write) */
    if (any_comm(m)) dp_nccl_abort(m);          /* the other ranks may be gone: do not wait for them */
    snprintf(m->abort_what, sizeof m->abort_what, "freeing the device memory and closing the GPU%s after \"%s\" "
             "(cudaFree, cudaStreamSynchronize: a collective kernel the abort did not end)", m->n_local > 1 ? "s" : "",
             dp_last_error());
    dp_nccl_watchdog_enter_brief(m->wd, m->abort_what);
    release_devices(m);
    m->torn_down = 1;
}

static void nccl_destroy(dp_backend_t b) {
    nccl_impl *m = dp_nccl_impl(b);
    if (b->failed && !m->torn_down) dp_sidechan_fail(m->sc, dp_last_error()); /* a failure outside NCCL */
    if (any_comm(m)) {
        int quiet = !b->failed;
        for (int i = 0; i < m->n_local && quiet; i++) quiet = m->loc[i].st->wait(m->loc[i].st) == DP_OK;
        if (!quiet) dp_nccl_abort(m); /* the other ranks may be gone: do not wait for them */
        else finish_comms(m);
    }
    dp_sidechan_close(m->sc, !b->failed && !any_comm(m));
    if (!m->torn_down) { /* else abort released them, and the watchdog is on until the end */
        dp_nccl_watchdog_stop(m->wd);
        m->wd = NULL;
        release_devices(m);
    }
#if DP_HAVE_MPI
    int finalized = 0;
    MPI_Finalized(&finalized);
    /* MPI_Finalize is collective: after a failure the other ranks may never come, so abort the job
       (alone, no one waits: finalise, and keep the failure's own exit code) */
    int mpi_size = 1;
    if (m->we_initialised_mpi && !finalized) MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
    if (m->we_initialised_mpi && !finalized) {
        if (b->failed && mpi_size > 1) {
            /* MPI_Abort ends this process before the caller prints why: a failure while the
               backend was being created (a communicator that did not come up, processes listing
               different --gpus) would otherwise end the job without its reason */
            if (m->creating) fprintf(stderr, "dptrain: %s\n", dp_last_error());
            fflush(stdout), fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, 1);
        } else {
            MPI_Finalize();
        }
    }
#endif
    dp_nccl_watchdog_stop(m->wd);
    free(m);
    free(b);
}

static const struct dp_backend_i nccl_iface = {
    .name = nccl_name,
    .world_size = nccl_world,
    .n_local = nccl_n_local,
    .rank = nccl_rank,
    .allreduce = dp_nccl_allreduce,
    .broadcast = dp_nccl_broadcast,
    .reduce = dp_nccl_reduce,
    .allgather = dp_nccl_allgather,
    .gather = dp_nccl_gather,
    .scatter = dp_nccl_scatter,
    .barrier = dp_nccl_barrier,
    .allreduce_start = NULL, /* queued on the stream already: the registry's blocking fallback waits for nothing */
    .wait = NULL,
    .reserve = dp_nccl_reserve,
    .abort = nccl_abort_teardown,
    .destroy = nccl_destroy,
};

/* DPTRAIN_NCCL_GRAPHS=on|off (default off): whether steps at two or more ranks, one GPU a
 * process, are recorded as graphs with their collectives inside, as NCCL documents (thread-local
 * capture, every rank recording the same steps, NCCL_GRAPH_MIXING_SUPPORT=1 because eager
 * collectives, the metrics' and the checkpoint's, run on the same communicator between replays).
 * Off until a run on several GPUs has shown it; tested through the NCCL test double over the fake
 * GPU. `--gpus` with several GPUs stays eager: one host thread launching graphs on several devices
 * may deadlock inside NCCL. */
static dp_status graphs_wanted(int *on) {
    *on = 0;
    const char *v = getenv("DPTRAIN_NCCL_GRAPHS");
    if (v && (strcmp(v, "on") == 0 || strcmp(v, "1") == 0)) *on = 1;
    else if (v && *v && strcmp(v, "off") != 0 && strcmp(v, "0") != 0)
        return dp_fail(DP_ERR_USAGE, "DPTRAIN_NCCL_GRAPHS: '%.40s' is neither on nor off; set it to on or off", v);
    const char *mix = getenv("NCCL_GRAPH_MIXING_SUPPORT");
    if (*on && mix && strcmp(mix, "0") == 0)
        return dp_fail(DP_ERR_USAGE, "NCCL_GRAPH_MIXING_SUPPORT=0: with DPTRAIN_NCCL_GRAPHS=on eager collectives (the "
                       "step metrics, checkpoints) run between a graph's replays on the same communicator, which NCCL "
                       "supports only with mixing on; unset it, or set DPTRAIN_NCCL_GRAPHS=off");
    return DP_OK;
}

/* The unique id from rank 0 to every rank: over TCP (or torchrun's agent store) under torchrun,
 * over MPI under any MPI launcher (mpirun, mpiexec, srun --mpi=pmix: main has refused the launches
 * this build's MPI cannot join, backends/launch_env.h). */
/* What rank 0 hands every rank: NCCL's unique id and where its side channel listens. */
typedef struct {
    ncclUniqueId id;
    dp_sidechan_addr hub;
    int n_local; /* the GPUs process 0 drives: every process must drive as many */
} shared_blob;

static dp_status share_id(nccl_impl *m, shared_blob *id, const dp_backend_config *cfg) {
    if (m->l.world == 1) return DP_OK;
    if (m->l.kind == DP_LAUNCH_TORCHRUN) return dp_rendezvous_share(&m->l, id, sizeof *id, m->timeout_s);
#if DP_HAVE_MPI
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided;
        if (MPI_Init_thread(cfg->argc, cfg->argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return dp_fail(DP_ERR_BACKEND, "--backend nccl: rank %d: MPI_Init_thread failed", m->l.rank);
        m->we_initialised_mpi = 1;
    }
    int mpi_rank = 0, mpi_size = 0;
    if (MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank) != MPI_SUCCESS || MPI_Comm_size(MPI_COMM_WORLD, &mpi_size) != MPI_SUCCESS)
        return dp_fail(DP_ERR_BACKEND, "--backend nccl: rank %d: MPI_Comm_rank or MPI_Comm_size failed", m->l.rank);
    /* an MPI that did not join the launch is a world of one: its broadcast would hang no one, wrongly */
    DP_TRY(dp_launch_check_mpi_world(&m->l, "nccl", mpi_rank, mpi_size));
    m->l.world = mpi_size; /* a PMIx launch may not say its size: MPI does */
    if (MPI_Bcast(id, (int)sizeof *id, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        return dp_fail(DP_ERR_BACKEND, "--backend nccl: rank %d: the unique id's MPI_Bcast failed", m->l.rank);
    return DP_OK;
#else
    (void)cfg;
    return dp_fail(DP_ERR_UNSUPPORTED, "--backend nccl under mpirun: this build has no MPI to hand out NCCL's unique "
                   "id; launch with torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT)");
#endif
}

/* The libnccl loaded at run time, not only the header built against, must be 2.19 or newer: older
 * ones lack parts of the non-blocking communicator API that every wait here relies on. */
#define DP_NCCL_MIN_VERSION 21900 /* major * 10000 + minor * 100 + patch, NCCL's code since 2.9 */
static dp_status nccl_version_check(void) {
    int v = 0;
    ncclResult_t r = ncclGetVersion(&v);
    if (r != ncclSuccess)
        return dp_fail(DP_ERR_BACKEND, "--backend nccl: ncclGetVersion failed: %s", ncclGetErrorString(r));
    if (v < DP_NCCL_MIN_VERSION)
        return dp_fail(DP_ERR_UNSUPPORTED, "--backend nccl: the libnccl loaded is %d.%d.%d; dptrain needs NCCL 2.19 or "
                       "newer (put a newer libnccl.so.2 first on LD_LIBRARY_PATH)", v / 10000, v / 100 % 100, v % 100);
    return DP_OK;
}

/* One GPU's ordinal is CUDA's visible order (fastest first, and renumbered by
 * CUDA_VISIBLE_DEVICES), not nvidia-smi's: its PCI bus id names the physical GPU. "" if unknown. */
static void pci_of(int gpu, char *buf, size_t cap) {
    char id[32];
    buf[0] = '\0';
    if (cudaDeviceGetPCIBusId(id, (int)sizeof id, gpu) == cudaSuccess) snprintf(buf, cap, ", PCI %s", id);
}

/* Warns (never fails) when the launcher left this rank too few CPUs for its threads, or CPUs of
 * the other socket than its GPU's (launch_affinity.h). Not under the test double (no proxy
 * thread, stand-in GPUs). */
static void check_placement(const nccl_impl *m) {
    dp_cpuset mine;
    char msg[1024], id[32];
    if (m->loaded.is_double || dp_cpuset_of_self(&mine) <= 0) return;
    const int rank = m->l.rank * m->n_local;
    if ((m->l.world != 1 || m->n_local > 1) && dp_binding_check(rank, &mine, msg, sizeof msg))
        fprintf(stderr, "dptrain: %s\n", msg);
    /* one GPU a process: local rank i took GPU i, wherever the launcher put the process */
    if (m->n_local == 1 && m->loc[0].gpu >= 0 &&
        cudaDeviceGetPCIBusId(id, (int)sizeof id, m->loc[0].gpu) == cudaSuccess &&
        dp_numa_check("", rank, id, &mine, msg, sizeof msg))
        fprintf(stderr, "dptrain: %s\n", msg);
}

/* "rank 1 (GPU 1, PCI 0000:1b:00.0)", "ranks 4-7 (GPUs 0,1,2,3)", "rank 0 (host memory)". */
static void name_ranks(nccl_impl *m) {
    const int n = m->n_local, first = m->l.rank * n;
    char gpus[96] = "";
    for (int i = 0; i < n && m->loc[0].gpu >= 0; i++) {
        const size_t at = strlen(gpus);
        snprintf(gpus + at, sizeof gpus - at, "%s%d", i ? "," : "", m->loc[i].gpu);
    }
    char ranks[32];
    if (n == 1) snprintf(ranks, sizeof ranks, "rank %d", first);
    else snprintf(ranks, sizeof ranks, "ranks %d-%d", first, first + n - 1);
    if (m->loc[0].gpu < 0) snprintf(m->who, sizeof m->who, "%s (host memory)", ranks);
    else {
        char pci[48] = "";
        if (n == 1) pci_of(m->loc[0].gpu, pci, sizeof pci);
        /* pci is empty when gpus is long (several GPUs): the name fits; the length is checked for the compiler */
        if (snprintf(m->who, sizeof m->who, "%s (GPU%s %s%s)", ranks, n > 1 ? "s" : "", gpus, pci) >= (int)sizeof m->who)
            m->who[sizeof m->who - 2] = ')';
    }
}

/* One communicator per local device, in one group when there are several (NCCL's rule for one
 * thread driving several devices); each device current while its communicator is created. */
static dp_status init_comms(nccl_impl *m, const ncclUniqueId *id) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0; /* every wait polls, with a deadline: no silent hang */
    const char *what = m->n_local > 1 ? "creating the communicators (ncclCommInitRankConfig in a group)"
                                      : "creating the communicator (ncclCommInitRankConfig)";
    if (m->n_local == 1) {
        if (m->loc[0].gpu >= 0 && cudaSetDevice(m->loc[0].gpu) != cudaSuccess)
            return dp_fail(DP_ERR_BACKEND, "nccl: %s: cudaSetDevice(%d) failed", m->who, m->loc[0].gpu);
        return dp_nccl_settle(m, ncclCommInitRankConfig(&m->loc[0].comm, m->world, *id, m->loc[0].rank, &config), what);
    }
    DP_TRY(dp_nccl_group_start(m, what));
    for (int i = 0; i < m->n_local; i++) {
        nccl_local *x = &m->loc[i];
        if (x->gpu >= 0 && cudaSetDevice(x->gpu) != cudaSuccess) {
            m->in_group = 0;
            (void)ncclGroupEnd();
            return dp_fail(DP_ERR_BACKEND, "nccl: %s: cudaSetDevice(%d) failed", m->who, x->gpu);
        }
        NCCL_GROUP_TRY(m, ncclCommInitRankConfig(&x->comm, m->world, *id, x->rank, &config), what);
    }
    return dp_nccl_group_end(m, what);
}

/* The devices: the trainer's (one, or one per --gpus ordinal), each of them CUDA's, or any
 * under the test double (its ranks move host memory). */
static dp_status take_devices(nccl_impl *m, const dp_backend_config *cfg) {
    const int host = m->loaded.host_memory;
    m->n_local = cfg->n_devs > 0 ? cfg->n_devs : 1;
    if (m->n_local > DP_MAX_LOCAL_DEVICES)
        return dp_fail(DP_ERR_USAGE, "--gpus: at most %d GPUs per process", DP_MAX_LOCAL_DEVICES);
    int gpu = -1;
    if (!cfg->ordinals) DP_TRY(dp_nccl_precheck(&gpu));
    for (int i = 0; i < m->n_local; i++) {
        const dp_dev *d = cfg->n_devs > 0 && cfg->devs ? cfg->devs[i] : cfg->dev;
        if (!d || (!host && (cfg->host_memory || strcmp(d->name, "cuda") != 0)))
            return dp_fail(DP_ERR_UNSUPPORTED, "--backend nccl: its collectives take CUDA memory, so it needs the "
                           "trainer's CUDA device (--device cuda)");
        nccl_local *x = &m->loc[i];
        x->st = dp_dev_coll(d); /* collectives, their copies and sums: the collective stream */
        x->home = d;
        x->gpu = host ? -1 : cfg->ordinals ? cfg->ordinals[i] : gpu;
    }
    return DP_OK;
}

dp_status dp_nccl_backend_create(const dp_backend_config *cfg, dp_backend_t *out) {
    *out = NULL;
    const int nvls = dp_nccl_env_defaults(); /* before NCCL reads its environment */
    DP_TRY(nccl_version_check());
    dp_backend_t b = calloc(1, sizeof *b);
    nccl_impl *m = calloc(1, sizeof *m);
    if (!b || !m) {
        free(b), free(m);
        return dp_fail(DP_ERR_NOMEM, "out of memory creating the nccl backend");
    }
    b->iface = &nccl_iface;
    b->impl = m;
    m->b = b;
    m->creating = 1;
    m->loaded = *dp_nccl_loaded();
    /* capturable is set once the world is known: at one rank no step calls NCCL (every collective
       returns before it), so the step is the sim's and records; at several, only with
       DPTRAIN_NCCL_GRAPHS=on and one GPU a process (graphs_wanted) */
    b->algorithm = "nccl", b->ordered = 1, b->capturable = 0, b->host_buffers = m->loaded.host_memory;
    m->timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : 300;
    m->host_buffers = cfg->host_memory, m->waits = cfg->waits;
    int graphs = 0;
    dp_status s = graphs_wanted(&graphs);
    if (s == DP_OK) s = take_devices(m, cfg);
    if (s == DP_OK) s = dp_launch_from_env(&m->l);
    unsigned long long allowance = 0; /* a malformed DPTRAIN_NCCL_RESERVE_MIB is refused before any rendezvous */
    if (s == DP_OK) s = dp_nccl_allowance(2, nvls, getenv("DPTRAIN_NCCL_RESERVE_MIB"), &allowance);
    if (s == DP_OK) {
        for (int i = 0; i < m->n_local; i++) m->loc[i].rank = m->l.rank * m->n_local + i;
        name_ranks(m);
        check_placement(m);
        /* the grace: time for an abort that was started at the deadline to return */
        s = dp_nccl_watchdog_start(m->who, m->timeout_s, 5 + 0.1 * m->timeout_s, &m->wd);
    }
    shared_blob blob;
    memset(&blob, 0, sizeof blob);
    blob.n_local = m->n_local;
    if (s == DP_OK && m->l.rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&blob.id);
        if (r != ncclSuccess)
            s = dp_fail(DP_ERR_BACKEND, "nccl: rank 0: ncclGetUniqueId failed: %s", ncclGetErrorString(r));
        if (s == DP_OK && m->l.world > 1) dp_sidechan_listen(&blob.hub, &m->sc);
    }
    if (s == DP_OK) s = share_id(m, &blob, cfg);
    m->first = m->l.rank * m->n_local, m->world = m->l.world * m->n_local; /* MPI may have said the size */
    b->ends_job = m->we_initialised_mpi && m->l.world > 1; /* nccl_destroy's MPI_Abort */
    if (s == DP_OK && m->l.world > 1)
        dp_sidechan_connect(&m->sc, &blob.hub, m->l.rank, m->l.world, m->n_local, m->timeout_s);
    if (s == DP_OK && blob.n_local != m->n_local) {
        s = dp_fail(DP_ERR_USAGE, "--backend nccl: process %d drives %d GPU%s, process 0 drives %d: every process must "
                    "list as many with --gpus (or none)", m->l.rank, m->n_local, m->n_local == 1 ? "" : "s",
                    blob.n_local);
        dp_sidechan_fail(m->sc, dp_last_error());
    }
    unsigned long long before[DP_MAX_LOCAL_DEVICES], after[DP_MAX_LOCAL_DEVICES], init_took = 0;
    const int readable = s == DP_OK && dp_nccl_device_used(m, before);
    if (s == DP_OK) s = init_comms(m, &blob.id);
    if (s == DP_OK && readable && dp_nccl_device_used(m, after))
        for (int i = 0; i < m->n_local; i++)
            if (after[i] > before[i] && after[i] - before[i] > init_took) init_took = after[i] - before[i];
    /* at one rank no step calls NCCL (every collective returns before it): the sim's step records */
    b->capturable = m->world == 1 || (graphs && m->n_local == 1);
    /* every wait on the devices polls the watch, from the warm-up on (its waits too: a transfer
       that never ends must meet the deadline); at one rank there is nothing to watch (no NCCL
       call), and an unwatched wait blocks instead of polling. A failure removes it (release_devices). */
    if (s == DP_OK && m->world > 1 && m->waits) m->waits->watch = nccl_watch, m->waits->ctx = m;
    /* every peer connected once, with a short deadline, before any data is read, and NCCL's
       memory measured meanwhile (nccl_warmup.c) */
    unsigned long long measured = 0;
    int known = 0;
    if (s == DP_OK) s = dp_nccl_warmup(b, &measured, &known);
    /* the start-time memory check counts what NCCL allocates later, on every GPU it uses: the
       measurement where the devices can say, else (host memory under the test double) nothing */
    if (s == DP_OK && !m->host_buffers && (known || !m->loaded.host_memory)) {
        const char *override = getenv("DPTRAIN_NCCL_RESERVE_MIB");
        s = known ? dp_nccl_allowance_measured(m->world, nvls, measured, override, &allowance)
                  : dp_nccl_allowance(m->world, nvls, override, &allowance);
        if (s == DP_OK) {
            m->allowance = allowance;
            b->comm_memory_known = known, b->comm_memory_init = init_took, b->comm_memory_measured = measured;
            b->comm_memory_reserved = allowance;
        }
    }
    if (s != DP_OK) {
        b->failed = 1;
        nccl_destroy(b);
        return s;
    }
    m->creating = 0;
    *out = b;
    return DP_OK;
}

#endif
