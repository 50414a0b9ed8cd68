/* stream.c: the fake GPU's streams. Each is a FIFO of operations run by its own worker thread,
 * after a random delay, so that two streams, or a stream and the host, are ordered only where
 * the code asked for it, and a missing wait or join changes results often enough for a test to
 * see. Cross-stream ordering is by markers: every node has a sequence number in its stream, and
 * a stream's `done` is published when its node has run (a CUDA event "recorded" after the work
 * queued so far); a wait marker on another stream, queued with the number its target had reached
 * in the queue then, blocks that stream's worker until the target has run that far (the
 * cudaStreamWaitEvent). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fg_internal.h"

/* ---- the open devices, so that a kernel's dp_kctx.stream can be checked before it is used */

#define FG_MAX_DEVICES 16
static pthread_mutex_t devices_mu = PTHREAD_MUTEX_INITIALIZER;
static fg_dev *devices[FG_MAX_DEVICES];

int fg_devices_add(fg_dev *g) {
    int rc = -1;
    pthread_mutex_lock(&devices_mu);
    for (int i = 0; i < FG_MAX_DEVICES && rc; i++)
        if (!devices[i]) devices[i] = g, rc = 0;
    pthread_mutex_unlock(&devices_mu);
    return rc;
}

void fg_devices_remove(fg_dev *g) {
    pthread_mutex_lock(&devices_mu);
    for (int i = 0; i < FG_MAX_DEVICES; i++)
        if (devices[i] == g) devices[i] = NULL;
    pthread_mutex_unlock(&devices_mu);
}

fg_stream *fg_stream_from(const void *stream, const char *call) {
    fg_stream *found = NULL;
    pthread_mutex_lock(&devices_mu);
    for (int i = 0; i < FG_MAX_DEVICES && !found; i++)
        for (int j = 0; devices[i] && j < FG_NSTREAMS && !found; j++)
            if (stream == &devices[i]->s[j]) found = &devices[i]->s[j];
    pthread_mutex_unlock(&devices_mu);
    if (!found) {
        /* a kernel with no stream to queue on is a bug of the caller (or a device closed under it) */
        fprintf(stderr,
                "fakegpu: %s: dp_kctx.stream %p is not a stream of an open fakegpu device (pass the kc of one of "
                "the device's streams: main, lanes[i] or coll)\n",
                call, stream);
        abort();
    }
    return found;
}

/* ---- failures */

static void set_fail_locked(fg_dev *g, dp_status s, const char *fmt, va_list ap) {
    if (g->fail != DP_OK) return; /* the first one is the cause */
    g->fail = s;
    vsnprintf(g->fail_msg, sizeof g->fail_msg, fmt, ap);
}

void fg_set_fail(fg_dev *g, dp_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&g->mu);
    set_fail_locked(g, s, fmt, ap);
    pthread_mutex_unlock(&g->mu);
    va_end(ap);
}

static void set_fail_held(fg_dev *g, dp_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_fail_locked(g, s, fmt, ap);
    va_end(ap);
}

/* ---- queues */

static _Atomic unsigned long launched[2][3]; /* [owned: eager, else a replay's][fg_op.launch] */

dp_fakegpu_launch_counts dp_fakegpu_launches(void) {
    return (dp_fakegpu_launch_counts){.kernels = launched[1][FG_KERNEL], .copies = launched[1][FG_COPY],
                                      .graph_kernels = launched[0][FG_KERNEL], .graph_copies = launched[0][FG_COPY]};
}

int fg_push(fg_dev *g, int si, fg_op *op, int owned) {
    fg_node *n = malloc(sizeof *n);
    if (!n) return -1;
    if (op->launch) launched[owned != 0][op->launch]++;
    fg_stream *s = &g->s[si];
    n->next = NULL, n->op = op, n->owned = owned;
    n->arg = op->on_enqueue ? op->on_enqueue(g, op) : 0;
    n->seq = ++s->enqueued;
    if (s->tail) s->tail->next = n;
    else s->head = n;
    s->tail = n;
    pthread_cond_signal(&s->work);
    return 0;
}

void fg_submit(fg_dev *g, int si, fg_op *op) {
    pthread_mutex_lock(&g->mu);
    if (g->capturing) {
        fg_record(g, si, op);
    } else if (fg_push(g, si, op, 1) != 0) {
        set_fail_held(g, DP_ERR_NOMEM, "fakegpu: out of host memory queueing %s", op->what);
        free(op);
    }
    pthread_mutex_unlock(&g->mu);
}

/* ---- markers */

static uint64_t wait_mark(fg_dev *g, fg_op *op) { return g->s[op->waits_for].enqueued; }

static void wait_run(fg_dev *g, fg_op *op, uint64_t mark) {
    pthread_mutex_lock(&g->mu);
    while (g->s[op->waits_for].done < mark) pthread_cond_wait(&g->progress, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

dp_status fg_stream_wait(fg_dev *g, int si, int on) {
    fg_op *op = malloc(sizeof *op);
    if (!op) return dp_fail(DP_ERR_NOMEM, "fakegpu: out of host memory for a stream wait marker");
    *op = (fg_op){.run = wait_run, .on_enqueue = wait_mark, .what = "a stream's wait for another", .waits_for = on};
    fg_submit(g, si, op);
    return DP_OK;
}

void fg_drain_locked(fg_dev *g, int si) {
    const int lo = si < 0 ? 0 : si, hi = si < 0 ? FG_NSTREAMS : si + 1;
    for (int i = lo; i < hi; i++)
        while (g->s[i].done < g->s[i].enqueued) pthread_cond_wait(&g->progress, &g->mu);
}

void fg_drain(fg_dev *g, int si) {
    pthread_mutex_lock(&g->mu);
    fg_drain_locked(g, si);
    pthread_mutex_unlock(&g->mu);
}

/* ---- workers (lock, unlock and wait on these default mutexes cannot fail: they are not checked) */

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Before each op: the GPU's queue latency, at random, so that interleavings vary run to run. */
static void delay(fg_stream *s) {
    const unsigned max = s->g->delay_us;
    if (!max) return;
    const uint64_t us = splitmix(&s->rng) % ((uint64_t)max + 1);
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void *worker(void *arg) {
    fg_stream *s = arg;
    fg_dev *g = s->g;
    pthread_mutex_lock(&g->mu);
    for (;;) {
        while (!s->head && !g->stop) pthread_cond_wait(&s->work, &g->mu);
        if (!s->head) break; /* stopping, and drained */
        fg_node *n = s->head;
        s->head = n->next;
        if (!s->head) s->tail = NULL;
        pthread_mutex_unlock(&g->mu);
        delay(s);
        n->op->run(g, n->op, n->arg);
        const uint64_t seq = n->seq;
        if (n->owned) free(n->op);
        free(n);
        pthread_mutex_lock(&g->mu);
        s->done = seq;
        pthread_cond_broadcast(&g->progress);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

static dp_status fail_pthread(const char *call, int e) {
    return dp_fail(DP_ERR_INTERNAL, "fakegpu: %s failed: %s", call, strerror(e));
}

dp_status fg_streams_start(fg_dev *g) {
    int e;
    pthread_condattr_t ca;
    if ((e = pthread_mutex_init(&g->mu, NULL)) != 0) return fail_pthread("pthread_mutex_init", e);
    if ((e = pthread_mutex_init(&g->mem_mu, NULL)) != 0) {
        pthread_mutex_destroy(&g->mu);
        return fail_pthread("pthread_mutex_init", e);
    }
    if ((e = pthread_condattr_init(&ca)) != 0) {
        pthread_mutex_destroy(&g->mem_mu), pthread_mutex_destroy(&g->mu);
        return fail_pthread("pthread_condattr_init", e);
    }
    /* waits that poll a watch time out on the monotonic clock */
    if ((e = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC)) == 0) e = pthread_cond_init(&g->progress, &ca);
    pthread_condattr_destroy(&ca);
    if (e != 0) {
        pthread_mutex_destroy(&g->mem_mu), pthread_mutex_destroy(&g->mu);
        return fail_pthread("pthread_cond_init (monotonic clock)", e);
    }
    g->sync_ready = 1;
    for (int i = 0; i < FG_NSTREAMS; i++) {
        fg_stream *s = &g->s[i];
        s->g = g, s->index = i, s->rng = g->seed ^ (0x632be59bd9b4e019ull * (uint64_t)(i + 1));
        if ((e = pthread_cond_init(&s->work, NULL)) != 0) return fail_pthread("pthread_cond_init", e);
        s->cond_ready = 1;
        if ((e = pthread_create(&s->thread, NULL, worker, s)) != 0)
            return fail_pthread("pthread_create (a stream's worker)", e);
        s->started = 1;
    }
    return DP_OK;
}

void fg_streams_stop(fg_dev *g) {
    if (!g->sync_ready) return;
    pthread_mutex_lock(&g->mu);
    fg_drain_locked(g, -1);
    g->stop = 1;
    for (int i = 0; i < FG_NSTREAMS; i++)
        if (g->s[i].cond_ready) pthread_cond_signal(&g->s[i].work);
    pthread_mutex_unlock(&g->mu);
    for (int i = 0; i < FG_NSTREAMS; i++) {
        fg_stream *s = &g->s[i];
        int e;
        if (s->started && (e = pthread_join(s->thread, NULL)) != 0)
            fprintf(stderr, "fakegpu: close: pthread_join (stream %d's worker) failed: %s\n", i, strerror(e));
        if (s->cond_ready) pthread_cond_destroy(&s->work);
        s->started = s->cond_ready = 0;
    }
    pthread_cond_destroy(&g->progress);
    pthread_mutex_destroy(&g->mem_mu);
    pthread_mutex_destroy(&g->mu);
    g->sync_ready = 0;
}

/* ---- a kernel that never returns (dp_fakegpu_stream_hang) */

static void hang_run(fg_dev *g, fg_op *op, uint64_t arg) {
    (void)g, (void)op, (void)arg;
    for (;;) pause(); /* nothing ends it: the process must end itself */
}

void dp_fakegpu_stream_hang(const dp_dev *d) {
    fg_op *op = malloc(sizeof *op);
    if (!op) abort();
    *op = (fg_op){.run = hang_run, .what = "a kernel that never returns (dp_fakegpu_stream_hang)", .waits_for = -1};
    fg_submit(fg_of(d), FG_MAIN, op);
}

/* ---- a long kernel (dp_fakegpu_stream_pause) */

typedef struct {
    fg_op op;
    unsigned us;
} pause_op;

static void pause_run(fg_dev *g, fg_op *op, uint64_t arg) {
    (void)g, (void)arg;
    const unsigned us = ((pause_op *)op)->us;
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

void dp_fakegpu_stream_pause(const dp_dev *d, unsigned us) {
    pause_op *o = malloc(sizeof *o);
    if (!o) abort();
    *o = (pause_op){.op = {.run = pause_run, .what = "a long kernel (dp_fakegpu_stream_pause)", .waits_for = -1},
                    .us = us};
    fg_submit(fg_of(d), FG_MAIN, &o->op);
}
