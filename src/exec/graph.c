#include "exec/graph.h"

#include <stdio.h>
#include <string.h>

uint64_t dp_graph_key(uint64_t h, const int *v, int n) {
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) h = (h ^ (uint64_t)(((unsigned)v[i] >> (8 * k)) & 0xffu)) * 1099511628211ull;
    return h;
}

static void stats_add(dp_comm_stats *to, const dp_comm_stats *d, int sign) {
    for (int k = 0; k < DP_COLL_KINDS; k++) {
        to->calls[k] += sign * d->calls[k];
        to->bytes[k] += sign * d->bytes[k];
        to->link_bytes[k] += sign * d->link_bytes[k];
        to->seconds[k] += sign * d->seconds[k];
    }
}

dp_status dp_graph_run(dp_graph_cache *c, const dp_dev *d, dp_backend_t b, int enabled, uint64_t key,
                       dp_status (*fn)(void *arg), void *arg) {
    if (!enabled || !d->capture_begin || c->open) return fn(arg);
    dp_graph_slot *s = NULL;
    for (int i = 0; i < DP_GRAPH_SLOTS; i++)
        if (c->slot[i].used && c->slot[i].key == key) s = &c->slot[i];
    if (s && s->graph) {
        DP_TRY(d->replay(d, s->graph));
        stats_add(&b->stats, &s->delta, 1);
        c->replayed++;
        return DP_OK;
    }
    if (!s) { /* first sight: run it, and remember the key (a shape seen once, e.g. the last batch, stays eager) */
        /* a free slot, else one holding a key seen once, else round-robin: recorded graphs go last */
        for (int i = 0; i < DP_GRAPH_SLOTS && !s; i++)
            if (!c->slot[i].used) s = &c->slot[i];
        for (int i = 0; i < DP_GRAPH_SLOTS && !s; i++)
            if (!c->slot[(c->next + i) % DP_GRAPH_SLOTS].graph) s = &c->slot[(c->next + i) % DP_GRAPH_SLOTS];
        if (!s) s = &c->slot[c->next];
        c->next = (int)(s - c->slot + 1) % DP_GRAPH_SLOTS;
        d->graph_free(d, s->graph);
        memset(s, 0, sizeof *s);
        s->used = 1, s->key = key;
        return fn(arg);
    }
    const dp_comm_stats before = b->stats;
    DP_TRY(d->capture_begin(d));
    b->capturing = 1; /* the backend defers an abort until the recording has ended */
    dp_status st = fn(arg);
    char why[DP_ERROR_MAX] = ""; /* fn's failure is the cause, not the unfinished recording's */
    if (st != DP_OK) snprintf(why, sizeof why, "%s", dp_last_error());
    void *g = NULL;
    dp_status end = d->capture_end(d, &g); /* ends the recording whatever fn returned */
    b->capturing = 0;
    if (st != DP_OK) {
        d->graph_free(d, g);
        return end == DP_OK ? st : dp_fail(st, "%s", why);
    }
    DP_TRY(end);
    s->graph = g;
    s->delta = b->stats;
    stats_add(&s->delta, &before, -1);
    c->recorded++;
    return d->replay(d, g); /* recording ran nothing: run it now */
}

typedef struct {
    dp_graph_cache *c;
    dp_status (*fn)(void *arg);
    void *arg;
} launch_call;

static dp_status run_open(void *p) {
    launch_call *l = p;
    l->c->open = 1;
    dp_status s = l->fn(l->arg);
    l->c->open = 0;
    return s;
}

dp_status dp_graph_run_launch(dp_graph_cache *c, const dp_dev *d, dp_backend_t b, int enabled, uint64_t key,
                              dp_status (*fn)(void *arg), void *arg) {
    launch_call l = {c, fn, arg};
    return dp_graph_run(c, d, b, enabled, key, run_open, &l);
}

void dp_graph_cache_free(dp_graph_cache *c, const dp_dev *d) {
    for (int i = 0; i < DP_GRAPH_SLOTS; i++)
        if (c->slot[i].graph) d->graph_free(d, c->slot[i].graph);
    memset(c, 0, sizeof *c);
}
