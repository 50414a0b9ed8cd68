/* events.c: timing events on the fake GPU. event_record queues an op on a stream that
 * notes the time its worker ran it; event_elapsed gives the seconds between two such times and,
 * as cudaEventElapsedTime, fails for an event still queued (the caller did not wait) or never
 * recorded; event_wait returns once its last recording has run (cudaEventQuery, then
 * cudaEventSynchronize when not done). */
#include <stdlib.h>
#include <time.h>

#include "fg_internal.h"

typedef struct {
    double t;     /* when its last recording ran (monotonic seconds) */
    int pending;  /* recordings queued and not yet run */
    int recorded; /* queued at least once */
} fg_event;

typedef struct {
    int n;
    fg_event e[];
} fg_events;

typedef struct {
    fg_op op;
    fg_events *ev;
    int i;
} ev_op;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t ev_queued(fg_dev *g, fg_op *op) {
    (void)g; /* g->mu held */
    ev_op *o = (ev_op *)op;
    o->ev->e[o->i].pending++, o->ev->e[o->i].recorded = 1;
    return 0;
}

static void ev_run(fg_dev *g, fg_op *op, uint64_t unused) {
    (void)unused;
    ev_op *o = (ev_op *)op;
    const double t = now_s();
    pthread_mutex_lock(&g->mu);
    o->ev->e[o->i].t = t;
    o->ev->e[o->i].pending--;
    pthread_mutex_unlock(&g->mu);
}

dp_status fg_events_create(const dp_dev *d, int n, void **events) {
    (void)d;
    *events = NULL;
    if (n < 0) return dp_fail(DP_ERR_INTERNAL, "fakegpu: events_create: %d events", n);
    fg_events *ev = calloc(1, sizeof *ev + (size_t)n * sizeof(fg_event));
    if (!ev) return dp_fail(DP_ERR_NOMEM, "fakegpu: out of host memory for %d timing events", n);
    ev->n = n;
    *events = ev;
    return DP_OK;
}

dp_status fg_s_record(const dp_dev_stream *s, void *events, int i) {
    fg_events *ev = events;
    if (!ev || i < 0 || i >= ev->n) return dp_fail(DP_ERR_INTERNAL, "fakegpu: event_record: no event %d", i);
    ev_op *o = malloc(sizeof *o);
    if (!o) return dp_fail(DP_ERR_NOMEM, "fakegpu: out of host memory queueing event_record");
    *o = (ev_op){.op = {.run = ev_run, .on_enqueue = ev_queued, .what = "event_record", .waits_for = -1},
                 .ev = ev, .i = i};
    fg_submit(fg_of(s->dev), fg_stream_of(s), &o->op);
    return DP_OK;
}
dp_status fg_event_record(const dp_dev *d, void *events, int i) { return fg_s_record(&d->main, events, i); }

dp_status fg_event_elapsed(const dp_dev *d, void *events, int i, int j, double *seconds) {
    fg_events *ev = events;
    fg_dev *g = fg_of(d);
    *seconds = 0;
    if (!ev || i < 0 || j < 0 || i >= ev->n || j >= ev->n)
        return dp_fail(DP_ERR_INTERNAL, "fakegpu: event_elapsed: no event %d or %d", i, j);
    dp_status st = DP_OK;
    pthread_mutex_lock(&g->mu);
    for (int k = 0; k < 2 && st == DP_OK; k++) {
        const fg_event *e = &ev->e[k ? j : i];
        if (!e->recorded)
            st = dp_fail(DP_ERR_BACKEND, "fakegpu: event_elapsed: event %d was never recorded (CUDA: "
                         "cudaErrorInvalidResourceHandle)", k ? j : i);
        else if (e->pending)
            st = dp_fail(DP_ERR_BACKEND, "fakegpu: event_elapsed: event %d has not completed: no wait since it was "
                         "recorded (CUDA: cudaErrorNotReady)", k ? j : i);
    }
    if (st == DP_OK) *seconds = ev->e[j].t - ev->e[i].t;
    pthread_mutex_unlock(&g->mu);
    return st;
}

dp_status fg_event_wait(const dp_dev *d, void *events, int i) {
    fg_events *ev = events;
    fg_dev *g = fg_of(d);
    if (!ev || i < 0 || i >= ev->n) return dp_fail(DP_ERR_INTERNAL, "fakegpu: event_wait: no event %d", i);
    DP_TRY(fg_forbidden(g, "event_wait (cudaEventSynchronize)"));
    pthread_mutex_lock(&g->mu);
    const int waits = ev->e[i].pending > 0;
    while (ev->e[i].pending) pthread_cond_wait(&g->progress, &g->mu);
    pthread_mutex_unlock(&g->mu);
    if (waits) fg_count_host_wait(); /* only a wait holds the host; a query that finds it done does not */
    return DP_OK;
}

void fg_events_free(const dp_dev *d, void *events, int n) {
    (void)n;
    if (!events) return;
    fg_drain(fg_of(d), -1); /* a queued event_record still writes them */
    free(events);
}
