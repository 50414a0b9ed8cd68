/* registry.c: the backend table (backend_kind.h) -> constructors and device policy, and the thin
 * wrappers that keep the communication statistics in one place for every backend. */
#include <stdio.h>
#include <string.h>

#include "backends/backend_kind.h"
#include "core/timer.h"
#include "dp_backends.h"

#define X(n) extern const dp_backend_kind dp_##n##_backend;
DP_BACKEND_KINDS
#undef X

#define X(n) &dp_##n##_backend,
static const dp_backend_kind *const kinds[] = {DP_BACKEND_KINDS};
#undef X
#define N_KINDS ((int)(sizeof kinds / sizeof kinds[0]))

#define X(n) #n,
const char *const dp_backend_names[] = {DP_BACKEND_KINDS NULL};
#undef X

const dp_backend_kind *dp_backend_kind_find(const char *name) {
    for (int i = 0; name && i < N_KINDS; i++)
        if (strcmp(kinds[i]->name, name) == 0) return kinds[i];
    return NULL;
}

const dp_backend_kind *dp_backend_kind_taking_gpus(void) {
    for (int i = 0; i < N_KINDS; i++)
        if (kinds[i]->takes_gpus) return kinds[i];
    return NULL;
}

/* "sim, mpi or nccl" */
static void names_text(char *buf, size_t cap) {
    buf[0] = '\0';
    for (int i = 0; i < N_KINDS; i++) {
        const size_t at = strlen(buf);
        snprintf(buf + at, cap - at, "%s%s", i == 0 ? "" : i == N_KINDS - 1 ? " or " : ", ", kinds[i]->name);
    }
}

static dp_status not_built(const dp_backend_kind *k) {
    return dp_fail(DP_ERR_UNSUPPORTED, "--backend %s: not compiled into this build (%s)", k->name, k->how_to_get);
}

dp_status dp_backend_device(const char *backend, const char *device_flag, int gpu_flag, const int *gpus, int n_gpus,
                            const char **device, int *ordinals, int *n) {
    *device = device_flag ? device_flag : "cpu", ordinals[0] = gpu_flag >= 0 ? gpu_flag : 0, *n = 1;
    const dp_backend_kind *k = dp_backend_kind_find(backend);
    const dp_device_request r = {.device_flag = device_flag, .gpu_flag = gpu_flag, .gpus = gpus, .n_gpus = n_gpus};
    if (k && k->devices_ok) DP_TRY(k->devices_ok(&r, ordinals, n));
    if (n_gpus && !(k && k->takes_gpus)) {
        const dp_backend_kind *with = dp_backend_kind_taking_gpus();
        if (!with) return dp_fail(DP_ERR_USAGE, "--gpus: no backend of this build drives several GPUs in one process");
        return dp_fail(DP_ERR_USAGE, "--gpus is for --backend %s (one process driving several GPUs)", with->name);
    }
    if (k && !device_flag && k->default_device) *device = k->default_device;
    return DP_OK;
}

dp_status dp_backend_create(const dp_backend_config *cfg, dp_backend_t *out) {
    *out = NULL;
    const char *name = cfg->name ? cfg->name : "sim";
    const dp_backend_kind *k = dp_backend_kind_find(name);
    if (!k) {
        char names[128];
        names_text(names, sizeof names);
        return dp_fail(DP_ERR_USAGE, "--backend: unknown backend '%s' (expected %s)", name, names);
    }
    if (!k->built) return not_built(k);
    DP_TRY(k->create(cfg, out));
    (*out)->kind = k;
    return DP_OK;
}

int dp_backend_in_process(dp_backend_t b) {
    return (b->kind && b->kind->in_process) || b->iface->n_local(b) == b->iface->world_size(b);
}

void dp_backend_describe(char *buf, size_t n) {
    /* from what was compiled: nothing here loads the GPU plugin */
    buf[0] = '\0';
    for (int i = 0; i < N_KINDS; i++) {
        const size_t at = strlen(buf);
        snprintf(buf + at, n - at, "%s%s (%s)", i ? ", " : "", kinds[i]->name,
                 kinds[i]->built ? kinds[i]->describe : "not built");
    }
}

void dp_backend_destroy(dp_backend_t b) {
    if (b) b->iface->destroy(b);
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
