/* nccl_warmup.c: the NCCL backend's warm-up at start (nccl_impl.h: dp_nccl_warmup). Right after
 * the communicators come up, before any data is read, every kind of traffic the run will use
 * moves once: the canonical sum of `world` floats (every pair of ranks, both ways: NCCL connects
 * each peer's point-to-point buffers), a broadcast and an all-gather (its rings) and the barrier
 * (an all-reduce). A transport that does not work (P2P across a switch that drops it, SHM in a
 * container without /dev/shm room, a network interface the peers cannot reach) then ends every
 * rank within seconds with hints, not after --timeout at the first bucket; and the device memory
 * NCCL takes for these connections is read with the device's mem_info before and after, so the
 * reserve for what it may still take is a measurement, not an estimate (nccl_memory.h). The
 * warm-up's buffers are its own and freed after: no training buffer, seed or count changes. */
#include "dp_config.h"

#if DP_HAVE_NCCL

#include <stdio.h>
#include <string.h>

#include "backends/nccl_impl.h"
#include "kernels/device.h"

#define WARMUP_DEADLINE_S 60.0 /* a healthy world connects in seconds; --timeout if shorter */

/* The hint every warm-up failure carries: what narrows a transport problem down. */
static dp_status with_hints(const nccl_impl *m, dp_status s) {
    char why[1400];
    snprintf(why, sizeof why, "%s", dp_last_error());
    if (strstr(why, "NCCL_DEBUG=INFO")) return s; /* another rank's failure, hints and all */
    return dp_fail(s, "%s (in the warm-up at start, before any data was read: NCCL could not move data "
                   "between the %d ranks); rerun with NCCL_DEBUG=INFO to see the transport of each peer (P2P, SHM, "
                   "NET), and try NCCL_P2P_DISABLE=1 (GPUs that cannot peer, ACS or an IOMMU on the PCIe switch, a "
                   "VM), NCCL_SHM_DISABLE=1 (a small /dev/shm, containers) or NCCL_SOCKET_IFNAME=<interface> (the "
                   "network the ranks share)", why, m->world);
}

int dp_nccl_device_used(const nccl_impl *m, unsigned long long used[]) {
    for (int i = 0; i < m->n_local; i++) {
        const dp_dev *h = m->loc[i].home;
        unsigned long long free_b = 0, total_b = 0;
        if (m->host_buffers || !h->mem_info || h->mem_info(h, &free_b, &total_b) != DP_OK) return 0;
        used[i] = total_b - free_b;
    }
    return 1;
}

void dp_nccl_warmup_hint(const nccl_impl *m) { (void)with_hints(m, DP_ERR_BACKEND); }

static dp_status traffic(dp_backend_t b, nccl_impl *m, float *const *sum, const float *const *one, float *const *all) {
    DP_TRY(dp_nccl_allreduce(b, sum, (size_t)m->world, DP_SUM));
    DP_TRY(dp_nccl_broadcast(b, sum, 1, 0));
    DP_TRY(dp_nccl_allgather(b, one, all, 1));
    return dp_nccl_barrier(b);
}

dp_status dp_nccl_warmup(dp_backend_t b, unsigned long long *measured, int *known) {
    nccl_impl *m = dp_nccl_impl(b);
    *measured = 0, *known = 0;
    if (m->world == 1) { /* no peer: the collectives never call NCCL, and nothing more is taken */
        unsigned long long used[DP_MAX_LOCAL_DEVICES];
        *known = dp_nccl_device_used(m, used);
        return DP_OK;
    }
    const size_t w = (size_t)m->world;
    /* per local rank: `world` floats summed, broadcast from the first; one float all-gathered into them */
    float *buf[DP_MAX_LOCAL_DEVICES] = {0}, *one[DP_MAX_LOCAL_DEVICES] = {0};
    dp_status s = dp_nccl_reserve(b, w); /* the barrier's and the sum's receive buffer; grown at set-up later */
    for (int i = 0; s == DP_OK && i < m->n_local; i++) {
        const dp_dev_stream *q = m->loc[i].st;
        s = q->alloc(q, &buf[i], w + 1, "the nccl warm-up's buffer");
        one[i] = buf[i] ? buf[i] + w : NULL;
    }
    if (s == DP_OK) /* the zeroing queued by alloc is done before the first reading */
        for (int i = 0; s == DP_OK && i < m->n_local; i++) s = m->loc[i].st->wait(m->loc[i].st);
    unsigned long long before[DP_MAX_LOCAL_DEVICES], after[DP_MAX_LOCAL_DEVICES];
    const int readable = s == DP_OK && dp_nccl_device_used(m, before);
    if (s == DP_OK) {
        const double timeout = m->timeout_s;
        if (m->timeout_s > WARMUP_DEADLINE_S) m->timeout_s = WARMUP_DEADLINE_S;
        m->warming = 1; /* an abort meanwhile tells the other ranks the hints too (dp_nccl_warmup_hint) */
        s = traffic(b, m, buf, (const float *const *)one, buf);
        m->warming = 0;
        m->timeout_s = timeout;
        if (s != DP_OK) s = with_hints(m, s);
    }
    if (s == DP_OK && readable && dp_nccl_device_used(m, after)) {
        for (int i = 0; i < m->n_local; i++) {
            const unsigned long long took = after[i] > before[i] ? after[i] - before[i] : 0;
            if (took > *measured) *measured = took;
        }
        *known = 1;
    }
    /* after a failure the communicators are aborted, but a free waits for the device: under the watchdog */
    if (s != DP_OK) dp_nccl_watchdog_enter_brief(m->wd, "freeing the nccl warm-up's buffers after a failed warm-up");
    for (int i = 0; i < m->n_local; i++)
        if (buf[i]) m->loc[i].st->dev->free(m->loc[i].st->dev, buf[i]);
    if (s != DP_OK) dp_nccl_watchdog_leave(m->wd);
    return s;
}

#endif
