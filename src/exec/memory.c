/* memory.c: the start-time memory estimate of a run (see memory.h). */
#include "exec/memory.h"

#include <stdio.h>

#include "core/sysmem.h"

static unsigned long long set_bytes(const dp_dataset *d) {
    return d ? (unsigned long long)d->n * ((unsigned long long)d->c * d->h * d->w + 1) : 0;
}

void dp_estimate_memory(const dp_model *m, const dp_dataset *train, const dp_dataset *test, const dp_mem_shape *sh,
                        dp_mem_estimate *out) {
    const unsigned long long F = sizeof(float), in = dp_shape_size(m->input);
    const unsigned long long lb = (unsigned long long)sh->lane_batch;
    out->data = set_bytes(train) + set_bytes(test);
    /* as dp_replica_create: three arenas of the parameters' size, the buffers, and a gradient
     * partial for every lane but the first */
    out->arenas = F * ((3ull + (unsigned long long)(sh->n_lanes - 1)) * m->params.n + m->buffers.n);
    out->acts = (unsigned long long)sh->n_slots * (F * dp_acts_floats_k(m, sh->k, sh->lane_batch, 1) + F * lb * in + 4ull * lb);
    out->loader = (unsigned long long)sh->loader_slots * sh->n_local *
                  (F * (unsigned long long)sh->max_local * in + 4ull * sh->max_local);
    out->total = out->data + (unsigned long long)sh->n_local * (out->arenas + out->acts) + out->loader;
}

dp_status dp_check_device_memory(const dp_mem_estimate *e, const dp_mem_shape *sh, int data_loaded,
                                 unsigned long long free_bytes, unsigned long long reserved, const char *device) {
    const int on_dev = sh->per_device > 0 ? sh->per_device : sh->n_local;
    const unsigned long long need = (unsigned long long)on_dev * (e->arenas + e->acts) + reserved;
    if (need > free_bytes) {
        char n[32], ar[32], ac[32], fr[32];
        return dp_fail(DP_ERR_NOMEM,
                       "this run needs about %s on %s: %d replica%s x (arenas %s + %d activation slot%s for %d samples "
                       "each: %s) and the device's workspaces; %s is free there: reduce --batch-size or --replicas, "
                       "or raise --chunks (smaller lanes)",
                       dp_format_bytes(need, n, sizeof n), device, on_dev, on_dev == 1 ? "" : "s",
                       dp_format_bytes(e->arenas, ar, sizeof ar), sh->n_slots, sh->n_slots == 1 ? "" : "s",
                       sh->lane_batch, dp_format_bytes(e->acts, ac, sizeof ac), dp_format_bytes(free_bytes, fr, sizeof fr));
    }
    /* on the host: the data, the loader, and a host copy of each replica's parameters, momentum, buffers */
    dp_mem_estimate h = *e;
    h.arenas = e->arenas / (unsigned long long)(sh->n_lanes + 2) * 3; /* ~3 of the (n_lanes + 2) arena-sized parts */
    h.acts = 0;
    h.total = h.data + (unsigned long long)sh->n_local * h.arenas + h.loader;
    return dp_check_memory(&h, sh, data_loaded);
}

dp_status dp_check_memory(const dp_mem_estimate *e, const dp_mem_shape *sh, int data_loaded) {
    dp_mem_avail a;
    dp_memory_available(&a);
    unsigned long long still = data_loaded ? e->total - e->data : e->total; /* loaded data is in MemAvailable */
    if (!a.bytes || still <= a.bytes) return DP_OK;
    char t[32], d[32], ar[32], ac[32], ld[32], av[32];
    return dp_fail(DP_ERR_NOMEM,
                   "this run needs about %s of memory: data %s, %d replica%s x (arenas %s + %d activation slot%s "
                   "for %d samples each: %s), loader %s; only %s is available (%s)%s: reduce --batch-size, "
                   "--replicas, --workers or the image size",
                   dp_format_bytes(e->total, t, sizeof t), dp_format_bytes(e->data, d, sizeof d), sh->n_local,
                   sh->n_local == 1 ? "" : "s", dp_format_bytes(e->arenas, ar, sizeof ar), sh->n_slots,
                   sh->n_slots == 1 ? "" : "s", sh->lane_batch, dp_format_bytes(e->acts, ac, sizeof ac),
                   dp_format_bytes(e->loader, ld, sizeof ld), dp_format_bytes(a.bytes, av, sizeof av), a.source,
                   data_loaded ? " with the data loaded" : "");
}
