/* capture.c: graph recording and replay on the fake GPU, with CUDA's stream-capture rules, so
 * that code whose recording CUDA would reject fails here too rather than in the GPU's CI:
 *   - capture_begin starts recording on the main stream; a stream joins the recording by waiting
 *     for one in it (fork, coll.wait_for(main)); an op on a stream that never joined fails the capture
 *     (CUDA would have run it at once, outside the graph), as does a wait on a stream outside it
 *     (cudaErrorStreamCaptureIsolation);
 *   - every stream's recorded work must be waited for by the main stream before capture_end
 *     (join, main.wait_for(coll)), else capture_end fails (cudaErrorStreamCaptureUnjoined);
 *   - calls that block the host (alloc, free, wait, download, host_alloc, host_free, an upload
 *     from pageable memory) fail and invalidate the recording (cudaErrorStreamCaptureUnsupported).
 * A graph keeps the recorded ops (each owns copies of its arguments); replay queues them again on
 * their streams in the recorded order, so the markers re-resolve against the streams as they are
 * then, and the graph runs after the main stream's earlier work, as cudaGraphLaunch does. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_internal.h"

static const char *stream_name(int i, char *buf, size_t n) {
    if (i == FG_MAIN) snprintf(buf, n, "the main stream");
    else if (i == FG_COLL) snprintf(buf, n, "the collective stream");
    else snprintf(buf, n, "lane stream %d", i - FG_LANE0);
    return buf;
}

/* Marks the recording invalid with the first reason; g->mu held. */
static void invalidate(fg_dev *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void invalidate(fg_dev *g, const char *fmt, ...) {
    if (g->invalid[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->invalid, sizeof g->invalid, fmt, ap);
    va_end(ap);
}

void fg_record(fg_dev *g, int si, fg_op *op) {
    fg_stream *s = &g->s[si];
    char a[32], b[32];
    if (op->waits_for >= 0) {
        fg_stream *t = &g->s[op->waits_for];
        if (s->in_capture && !t->in_capture)
            invalidate(g, "fakegpu: %s waits for %s, which is not part of the recording (CUDA: "
                       "cudaErrorStreamCaptureIsolation)", stream_name(si, a, sizeof a),
                       stream_name(op->waits_for, b, sizeof b));
        if (t->in_capture) s->in_capture = 1;
        if (si == FG_MAIN) t->joined = t->recorded;
    }
    if (!s->in_capture)
        invalidate(g, "fakegpu: %s queued on %s, which never waited for the recording main stream (a missing fork or "
                   "coll.wait_for(main): CUDA would run it at once, outside the graph)", op->what,
                   stream_name(si, a, sizeof a));
    if (!g->invalid[0] && g->n_rec == g->cap_rec) {
        const size_t cap = g->cap_rec ? 2 * g->cap_rec : 256;
        fg_rec *r = realloc(g->rec, cap * sizeof *r);
        if (r) g->rec = r, g->cap_rec = cap;
        else invalidate(g, "fakegpu: out of host memory recording %s", op->what);
    }
    if (g->invalid[0]) { /* nothing of an invalid recording will run */
        free(op);
        return;
    }
    g->rec[g->n_rec++] = (fg_rec){.stream = si, .op = op};
    s->recorded++;
}

dp_status fg_forbidden_locked(fg_dev *g, const char *call) {
    if (!g->capturing) return DP_OK;
    invalidate(g, "fakegpu: %s while a graph is being recorded", call);
    return dp_fail(DP_ERR_INTERNAL, "fakegpu: %s while a graph is being recorded", call);
}

static void free_recs(fg_rec *r, size_t n) {
    for (size_t i = 0; i < n; i++) free(r[i].op);
    free(r);
}

dp_status fg_capture_begin(const dp_dev *d) {
    fg_dev *g = fg_of(d);
    pthread_mutex_lock(&g->mu);
    if (g->capturing) {
        pthread_mutex_unlock(&g->mu);
        return dp_fail(DP_ERR_INTERNAL, "fakegpu: capture_begin while a graph is being recorded");
    }
    g->capturing = 1, g->invalid[0] = 0, g->n_rec = 0;
    for (int i = 0; i < FG_NSTREAMS; i++) {
        g->s[i].in_capture = i == FG_MAIN;
        g->s[i].recorded = g->s[i].joined = 0;
    }
    pthread_mutex_unlock(&g->mu);
    return DP_OK;
}

dp_status fg_capture_end(const dp_dev *d, void **graph) {
    fg_dev *g = fg_of(d);
    *graph = NULL;
    pthread_mutex_lock(&g->mu);
    if (!g->capturing) {
        pthread_mutex_unlock(&g->mu);
        return dp_fail(DP_ERR_INTERNAL, "fakegpu: capture_end without capture_begin");
    }
    g->capturing = 0;
    char a[32];
    for (int i = 0; i < FG_NSTREAMS; i++)
        if (i != FG_MAIN && g->s[i].recorded > g->s[i].joined)
            invalidate(g, "fakegpu: %s has recorded work the main stream never waited for (a missing join or "
                       "main.wait_for(coll); CUDA: cudaErrorStreamCaptureUnjoined)", stream_name(i, a, sizeof a));
    fg_rec *rec = g->rec;
    const size_t n = g->n_rec;
    g->rec = NULL, g->n_rec = g->cap_rec = 0;
    char why[sizeof g->invalid];
    memcpy(why, g->invalid, sizeof why);
    g->invalid[0] = 0;
    pthread_mutex_unlock(&g->mu);
    if (why[0]) {
        free_recs(rec, n);
        return dp_fail(DP_ERR_INTERNAL, "fakegpu: capture_end: the recording is invalid: %s", why);
    }
    fg_graph *gr = malloc(sizeof *gr);
    if (!gr) {
        free_recs(rec, n);
        return dp_fail(DP_ERR_NOMEM, "fakegpu: capture_end: out of host memory for the graph");
    }
    *gr = (fg_graph){.g = g, .ops = rec, .n = n};
    *graph = gr;
    return DP_OK;
}

static _Atomic unsigned long replays;
unsigned long dp_fakegpu_replays(void) { return replays; }

dp_status fg_replay(const dp_dev *d, void *graph) {
    fg_dev *g = fg_of(d);
    fg_graph *gr = graph;
    if (!gr || gr->g != g) return dp_fail(DP_ERR_INTERNAL, "fakegpu: replay of a graph this device did not record");
    pthread_mutex_lock(&g->mu);
    dp_status st = DP_OK;
    if (g->capturing) st = dp_fail(DP_ERR_INTERNAL, "fakegpu: replay while a graph is being recorded");
    for (size_t i = 0; st == DP_OK && i < gr->n; i++)
        if (fg_push(g, gr->ops[i].stream, gr->ops[i].op, 0) != 0)
            st = dp_fail(DP_ERR_NOMEM, "fakegpu: replay: out of host memory queueing %s", gr->ops[i].op->what);
    pthread_mutex_unlock(&g->mu);
    if (st == DP_OK) replays++;
    return st;
}

void fg_graph_free(const dp_dev *d, void *graph) {
    fg_graph *gr = graph;
    if (!gr) return;
    fg_drain(fg_of(d), -1); /* a replay may still be running the ops: they go when it is done */
    free_recs(gr->ops, gr->n);
    free(gr);
}

void fg_capture_discard(fg_dev *g) {
    free_recs(g->rec, g->n_rec);
    g->rec = NULL, g->n_rec = g->cap_rec = 0, g->capturing = 0;
}

/* ---- a host function in stream order (dp_fakegpu_stream_call), recorded like any op */

typedef struct {
    fg_op op;
    void (*fn)(void *arg);
    size_t bytes;
    _Alignas(max_align_t) unsigned char arg[]; /* the caller's bytes, copied: a replay runs fn on them again */
} call_op;

static void call_run(fg_dev *g, fg_op *op, uint64_t arg) {
    (void)g, (void)arg;
    call_op *c = (call_op *)op;
    c->fn(c->arg);
}

void dp_fakegpu_stream_call(const void *stream, void (*fn)(void *arg), const void *arg, size_t bytes) {
    fg_stream *s = fg_stream_from(stream, "dp_fakegpu_stream_call");
    call_op *c = malloc(sizeof *c + bytes);
    if (!c) abort();
    *c = (call_op){.op = {.run = call_run, .what = "a host function (dp_fakegpu_stream_call)", .waits_for = -1},
                   .fn = fn, .bytes = bytes};
    memcpy(c->arg, arg, bytes);
    fg_submit(s->g, s->index, &c->op);
}

int dp_fakegpu_stream_capturing(const void *stream) {
    fg_stream *s = fg_stream_from(stream, "dp_fakegpu_stream_capturing");
    pthread_mutex_lock(&s->g->mu);
    const int on = s->g->capturing;
    pthread_mutex_unlock(&s->g->mu);
    return on;
}
