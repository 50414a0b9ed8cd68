/* registry.c: backend names -> constructors, and the thin wrappers that keep the
 * communication statistics in one place for every backend. */
#include <stdio.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/gpu_plugin.h"
#include "core/timer.h"
#include "dp_config.h"

dp_status dp_sim_backend_create(const dp_backend_config *cfg, dp_backend_t *out);
#if DP_HAVE_MPI
dp_status dp_mpi_backend_create(const dp_backend_config *cfg, dp_backend_t *out);
#endif

dp_status dp_backend_device(const char *backend, const char *device_flag, int gpu_flag, const int *gpus, int n_gpus,
                            const char **device, int *ordinals, int *n) {
    *device = device_flag ? device_flag : "cpu", ordinals[0] = gpu_flag >= 0 ? gpu_flag : 0, *n = 1;
    if (device_flag && strcmp(device_flag, "cpu") != 0 && backend && strcmp(backend, "mpi") == 0)
        return dp_fail(DP_ERR_USAGE, "--device %s: --backend mpi moves host memory, so its replicas compute on the CPU "
                       "(drop --device; GPUs across processes are --backend nccl)", device_flag);
    const int nccl = backend && strcmp(backend, "nccl") == 0;
    if (n_gpus && !nccl)
        return dp_fail(DP_ERR_USAGE, "--gpus is for --backend nccl (one process driving several GPUs)");
    if (!nccl) return DP_OK;
#if DP_HAVE_NCCL /* one GPU per process (the launch says which), or the listed ones */
    const dp_gpu_plugin *p; /* the backend is in the GPU plugin: loaded now */
    DP_TRY(dp_gpu_plugin_get("--backend nccl", &p));
    const int on_cpu = device_flag && strcmp(device_flag, "cpu") == 0;
    if (on_cpu && !p->nccl_moves_host_memory())
        return dp_fail(DP_ERR_USAGE, "--device cpu: --backend nccl moves GPU memory (drop --device, or use --backend "
                       "sim or mpi for the CPU)");
    if (n_gpus > DP_MAX_LOCAL_DEVICES) return dp_fail(DP_ERR_USAGE, "--gpus: at most %d GPUs", DP_MAX_LOCAL_DEVICES);
    if (n_gpus) {
        DP_TRY(p->nccl_precheck_gpus(gpus, n_gpus));
        for (int i = 0; i < n_gpus; i++) ordinals[i] = gpus[i];
        *n = n_gpus;
    } else {
        ordinals[0] = gpu_flag; /* -1: not given, the launch decides */
        DP_TRY(p->nccl_precheck(ordinals));
    }
    if (!device_flag) *device = "cuda"; /* a test device (fakegpu) stays what was asked */
    return DP_OK;
#else
    (void)gpus;
    return dp_fail(DP_ERR_UNSUPPORTED, "--backend nccl: not compiled into this build (needs the CUDA toolkit and "
                   "NCCL at build time; set NCCL_ROOT and rebuild)");
#endif
}

dp_status dp_backend_create(const dp_backend_config *cfg, dp_backend_t *out) {
    *out = NULL;
    const char *name = cfg->name ? cfg->name : "sim";
    if (strcmp(name, "sim") == 0) return dp_sim_backend_create(cfg, out);
    if (strcmp(name, "mpi") == 0) {
#if DP_HAVE_MPI
        return dp_mpi_backend_create(cfg, out);
#else
        return dp_fail(DP_ERR_UNSUPPORTED,
                       "--backend mpi: not compiled into this build (install libopenmpi-dev openmpi-bin and rebuild)");
#endif
    }
    if (strcmp(name, "nccl") == 0) {
#if DP_HAVE_NCCL
        const dp_gpu_plugin *p;
        DP_TRY(dp_gpu_plugin_get("--backend nccl", &p));
        return p->nccl_create(cfg, out);
#else
        return dp_fail(DP_ERR_UNSUPPORTED, "--backend nccl: not compiled into this build (needs the CUDA toolkit and "
                                           "NCCL at build time; set NCCL_ROOT and rebuild)");
#endif
    }
    return dp_fail(DP_ERR_USAGE, "--backend: unknown backend '%s' (expected sim, mpi or nccl)", name);
}

void dp_backend_destroy(dp_backend_t b) {
    if (b) b->iface->destroy(b);
}

void dp_backend_describe(char *buf, size_t n) {
    /* from what was compiled: nothing here loads the GPU plugin */
    snprintf(buf, n, "sim (%s), mpi (%s), nccl (%s)", DP_HAVE_CUDA ? "cpu, cuda" : "cpu", DP_HAVE_MPI ? "cpu" : "not built",
             DP_HAVE_NCCL ? "cuda, one process per GPU or several GPUs per process; loaded on use from "
                            DP_GPU_PLUGIN_FILE : "not built");
}

static void record(dp_backend_t b, dp_coll_kind kind, double bytes, double t0, double t1) {
    dp_coll_trace *tr = b->trace;
    if (tr->n == tr->cap) {
        tr->dropped++;
        return;
    }
    tr->recs[tr->n++] = (dp_coll_record){.kind = kind, .bytes = bytes, .algorithm = tr->algorithm,
                                         .t_issue = t0 - tr->t0, .seconds = t1 - t0, .ready_node = tr->ready_node};
}

/* Times the call and counts its bytes (and records it when a trace is attached). */
#define TIMED(kind, nfloats, linkf, call)                                   \
    do {                                                                    \
        double t0_ = dp_now();                                              \
        dp_status s_ = (call);                                              \
        double t1_ = dp_now();                                              \
        b->stats.seconds[kind] += t1_ - t0_;                                \
        if (b->trace) record(b, kind, 4.0 * (double)(nfloats), t0_, t1_);   \
        b->stats.calls[kind]++;                                             \
        b->stats.bytes[kind] += 4.0 * (double)(nfloats);                    \
        b->stats.link_bytes[kind] += 4.0 * (double)(linkf);                 \
        return s_;                                                          \
    } while (0)

static double ring_link_floats(dp_backend_t b, size_t n) {
    int w = b->iface->world_size(b);
    return w > 1 ? 2.0 * (w - 1) / w * (double)n : 0.0;
}

dp_status dp_allreduce(dp_backend_t b, float *const *bufs, size_t n, dp_redop op) {
    TIMED(DP_COLL_ALLREDUCE, n, ring_link_floats(b, n), b->iface->allreduce(b, bufs, n, op));
}

dp_status dp_broadcast(dp_backend_t b, float *const *bufs, size_t n, int root) {
    TIMED(DP_COLL_BROADCAST, n, b->iface->world_size(b) > 1 ? n : 0, b->iface->broadcast(b, bufs, n, root));
}

dp_status dp_reduce(dp_backend_t b, float *const *bufs, size_t n, dp_redop op, int root) {
    TIMED(DP_COLL_REDUCE, n, b->iface->world_size(b) > 1 ? n : 0, b->iface->reduce(b, bufs, n, op, root));
}

dp_status dp_allgather(dp_backend_t b, const float *const *send, float *const *recv, size_t n) {
    int w = b->iface->world_size(b);
    TIMED(DP_COLL_ALLGATHER, n, (double)(w - 1) * n, b->iface->allgather(b, send, recv, n));
}

/* The root's link carries the n - 1 other shares. */
dp_status dp_gather(dp_backend_t b, const float *const *send, float *const *recv, size_t n, int root) {
    int w = b->iface->world_size(b);
    TIMED(DP_COLL_GATHER, n, (double)(w - 1) * n, b->iface->gather(b, send, recv, n, root));
}

dp_status dp_scatter(dp_backend_t b, const float *const *send, float *const *recv, size_t n, int root) {
    int w = b->iface->world_size(b);
    TIMED(DP_COLL_SCATTER, n, (double)(w - 1) * n, b->iface->scatter(b, send, recv, n, root));
}

dp_status dp_barrier(dp_backend_t b) { TIMED(DP_COLL_BARRIER, 0, 0, b->iface->barrier(b)); }

dp_status dp_allreduce_start(dp_backend_t b, float *const *bufs, size_t n, dp_redop op, dp_req *req) {
    if (!b->iface->allreduce_start) {
        *req = -1;
        return dp_allreduce(b, bufs, n, op);
    }
    TIMED(DP_COLL_ALLREDUCE, n, ring_link_floats(b, n), b->iface->allreduce_start(b, bufs, n, op, req));
}

dp_status dp_wait(dp_backend_t b, dp_req req) {
    if (!b->iface->wait || req < 0) return DP_OK;
    double t0 = dp_now();
    dp_status s = b->iface->wait(b, req);
    b->stats.seconds[DP_COLL_ALLREDUCE] += dp_now() - t0;
    return s;
}
