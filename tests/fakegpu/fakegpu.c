/* fakegpu.c: the fake GPU device (fakegpu.h): opening and closing it, memory, waits, the orderings
 * between its streams, and the dp_dev it hands out, with the streams kernels/cuda/device.cu's has
 * (main, lanes, collective: kernels/device.h's dp_dev_streams_init). The streams are in stream.c,
 * graphs in capture.c, transfers in transfer.c, timing events in events.c, kernels in kernels.c. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fg_internal.h"

#define FG_ORDINALS 8
#define FG_TOTAL_BYTES (16ull << 30) /* what mem_info reports as the device's memory */
/* device blocks are aligned as the CPU's arenas: the sim ring cuts chunks by address */
#define FG_ALIGN ((size_t)2 << 20)

dp_status fg_forbidden(fg_dev *g, const char *call) {
    pthread_mutex_lock(&g->mu);
    const dp_status st = fg_forbidden_locked(g, call);
    pthread_mutex_unlock(&g->mu);
    return st;
}

/* ---- memory */

static _Atomic unsigned long device_allocs;
unsigned long dp_fakegpu_allocs(void) { return device_allocs; }

static dp_status fg_s_alloc(const dp_dev_stream *s, float **p, size_t n, const char *what) {
    fg_dev *g = fg_of(s->dev);
    *p = NULL;
    DP_TRY(fg_forbidden(g, "alloc"));
    if (n > SIZE_MAX / sizeof(float)) return dp_fail(DP_ERR_NOMEM, "fakegpu: %zu floats for %s: too many", n, what);
    const size_t bytes = (n ? n : 1) * sizeof(float);
    void *real = NULL;
    const int e = posix_memalign(&real, FG_ALIGN, bytes);
    if (e != 0)
        return dp_fail(DP_ERR_NOMEM, "fakegpu: out of memory for %s: %zu bytes (posix_memalign: %s)", what, bytes,
                       strerror(e));
    if ((uintptr_t)real & FG_ALIAS_BIT) {
        free(real);
        return dp_fail(DP_ERR_INTERNAL, "fakegpu: alloc: host address %p has the alias bit set", real);
    }
    /* NaN until the zeroing queued below runs: a stream that uses the block before it shows */
    memset(real, 0xff, bytes);
    if (fg_blocks_add(g, &g->mem, (uintptr_t)real, bytes, what) != 0) {
        free(real);
        return dp_fail(DP_ERR_NOMEM, "fakegpu: out of host memory recording the allocation for %s", what);
    }
    float *fake = (float *)((uintptr_t)real ^ FG_ALIAS_BIT);
    const dp_status st = fg_s_zero(s, fake, bytes); /* cudaMemsetAsync on the stream, as device.cu */
    if (st != DP_OK) {
        fg_blocks_remove(g, &g->mem, (uintptr_t)real);
        free(real);
        return st;
    }
    *p = fake;
    device_allocs++;
    return DP_OK;
}
static dp_status fg_alloc(const dp_dev *d, float **p, size_t n, const char *what) { return fg_s_alloc(&d->main, p, n, what); }

static void fg_free(const dp_dev *d, void *p) {
    if (!p) return;
    fg_dev *g = fg_of(d);
    pthread_mutex_lock(&g->mu);
    if (fg_forbidden_locked(g, "free") != DP_OK) { /* capture_end reports it; the block stays */
        pthread_mutex_unlock(&g->mu);
        return;
    }
    fg_drain_locked(g, -1); /* cudaFree synchronises the device */
    fg_count_host_wait();
    pthread_mutex_unlock(&g->mu);
    const uintptr_t real = (uintptr_t)p ^ FG_ALIAS_BIT;
    if (!((uintptr_t)p & FG_ALIAS_BIT) || !fg_blocks_remove(g, &g->mem, real)) {
        fprintf(stderr, "fakegpu: free(%p): not a pointer alloc returned, or freed twice\n", p);
        abort();
    }
    free((void *)real);
}

static dp_status fg_host_alloc(const dp_dev *d, void **p, size_t bytes, const char *what) {
    fg_dev *g = fg_of(d);
    *p = NULL;
    DP_TRY(fg_forbidden(g, "host_alloc"));
    void *h = NULL;
    const int e = posix_memalign(&h, 64, bytes ? bytes : 1);
    if (e != 0)
        return dp_fail(DP_ERR_NOMEM, "fakegpu: no host memory for %s (%zu bytes; posix_memalign: %s)", what, bytes,
                       strerror(e));
    memset(h, 0, bytes ? bytes : 1);
    if (fg_blocks_add(g, &g->host, (uintptr_t)h, bytes ? bytes : 1, what) != 0) {
        free(h);
        return dp_fail(DP_ERR_NOMEM, "fakegpu: out of host memory recording the host block for %s", what);
    }
    *p = h;
    return DP_OK;
}

static void fg_host_free(const dp_dev *d, void *p) {
    if (!p) return;
    fg_dev *g = fg_of(d);
    pthread_mutex_lock(&g->mu);
    if (fg_forbidden_locked(g, "host_free") != DP_OK) {
        pthread_mutex_unlock(&g->mu);
        return;
    }
    fg_drain_locked(g, -1); /* cudaFreeHost synchronises the device: a queued upload may read p */
    fg_count_host_wait();
    pthread_mutex_unlock(&g->mu);
    if (!fg_blocks_remove(g, &g->host, (uintptr_t)p)) {
        fprintf(stderr, "fakegpu: host_free(%p): not a pointer host_alloc returned, or freed twice\n", p);
        abort();
    }
    free(p);
}

static dp_status fg_mem_info(const dp_dev *d, unsigned long long *free_b, unsigned long long *total_b) {
    size_t live = 0;
    fg_blocks_live(fg_of(d), &fg_of(d)->mem, &live);
    const long long charged = fg_of(d)->charged;
    if (charged > 0) live += (size_t)charged;
    *total_b = FG_TOTAL_BYTES;
    *free_b = live < FG_TOTAL_BYTES ? FG_TOTAL_BYTES - live : 0;
    return DP_OK;
}

size_t dp_fakegpu_live(const dp_dev *d, size_t *bytes) {
    size_t a = 0, b = 0;
    const size_t n = fg_blocks_live(fg_of(d), &fg_of(d)->mem, &a) + fg_blocks_live(fg_of(d), &fg_of(d)->host, &b);
    if (bytes) *bytes = a + b;
    return n;
}

/* ---- waits and orderings */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static _Atomic unsigned long host_waits;
void fg_count_host_wait(void) { host_waits++; }
unsigned long dp_fakegpu_host_waits(void) { return host_waits; }

/* The stream drained; with a watch in the wait policy (nccl) polled, so a dead peer ends the wait. */
dp_status fg_s_wait(const dp_dev_stream *st_) {
    fg_dev *g = fg_of(st_->dev);
    fg_count_host_wait();
    const dp_wait_policy *w = st_->dev->waits;
    const fg_stream *s = &g->s[fg_stream_of(st_)];
    pthread_mutex_lock(&g->mu);
    dp_status st = fg_forbidden_locked(g, "wait");
    const double t0 = now_s();
    while (st == DP_OK && s->done < s->enqueued) {
        if (!w->watch) {
            pthread_cond_wait(&g->progress, &g->mu);
            continue;
        }
        struct timespec at;
        clock_gettime(CLOCK_MONOTONIC, &at);
        at.tv_nsec += 1000000;
        if (at.tv_nsec >= 1000000000) at.tv_sec++, at.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&g->progress, &g->mu, &at);
        if (s->done >= s->enqueued) break;
        pthread_mutex_unlock(&g->mu);
        st = w->watch(w->ctx, now_s() - t0);
        pthread_mutex_lock(&g->mu);
    }
    if (st == DP_OK && g->fail != DP_OK) { /* a queued op that failed: reported once, as a CUDA error */
        st = dp_fail(g->fail, "%s", g->fail_msg);
        g->fail = DP_OK;
    }
    pthread_mutex_unlock(&g->mu);
    return st;
}
dp_status fg_wait(const dp_dev *d) { return fg_s_wait(&d->main); }

static dp_status fg_fork(const dp_dev *d, int n) {
    for (int i = 0; i < n && i < DP_DEV_LANES; i++) DP_TRY(fg_stream_wait(fg_of(d), FG_LANE0 + i, FG_MAIN));
    return DP_OK;
}

static dp_status fg_join(const dp_dev *d, int n) {
    for (int i = 0; i < n && i < DP_DEV_LANES; i++) DP_TRY(fg_stream_wait(fg_of(d), FG_MAIN, FG_LANE0 + i));
    return DP_OK;
}

static dp_status fg_s_wait_for(const dp_dev_stream *s, const dp_dev_stream *on) {
    return fg_stream_wait(fg_of(s->dev), fg_stream_of(s), fg_stream_of(on));
}

/* ---- opening and closing */

static void fg_close(dp_dev *d) {
    fg_dev *g = fg_of(d);
    fg_streams_stop(g); /* runs what is queued first */
    fg_devices_remove(g);
    fg_capture_discard(g);
    fg_blocks_release(&g->mem, "device memory");
    fg_blocks_release(&g->host, "host_alloc memory");
    free(g);
}

/* An unsigned environment setting, at most max; def when unset. */
static dp_status env_u64(const char *name, unsigned long long def, unsigned long long max, unsigned long long *out) {
    const char *v = getenv(name);
    *out = def;
    if (!v || !*v) return DP_OK;
    char *end = NULL;
    errno = 0;
    const unsigned long long x = strtoull(v, &end, 0);
    if (errno || *end || v[0] == '-' || x > max)
        return dp_fail(DP_ERR_USAGE, "%s=%s: expected an integer in 0..%llu", name, v, max);
    *out = x;
    return DP_OK;
}

/* The operations; fg_open copies them in and adds the streams and the opener's wait policy. */
static const dp_dev fg_ops = {
    .name = "fakegpu",
    .caps = DP_CAP_ASYNC | DP_CAP_LANES | DP_CAP_GRAPHS | DP_CAP_EVENTS | DP_CAP_COLL_STREAM,
    .k = &dp_fakegpu_kernels,
    .n_lanes = DP_DEV_LANES,
    .alloc = fg_alloc, .free = fg_free, .host_alloc = fg_host_alloc, .host_free = fg_host_free,
    .upload = fg_upload, .copy = fg_copy, .zero = fg_zero, .download = fg_download, .wait = fg_wait,
    .capture_begin = fg_capture_begin, .capture_end = fg_capture_end, .replay = fg_replay,
    .graph_free = fg_graph_free, .fork = fg_fork, .join = fg_join, .mem_info = fg_mem_info,
    .events_create = fg_events_create, .event_record = fg_event_record,
    .event_elapsed = fg_event_elapsed, .events_free = fg_events_free,
    .event_wait = fg_event_wait,
    .close = fg_close,
};

static const dp_dev_stream fg_stream_ops = {.alloc = fg_s_alloc, .upload = fg_s_upload, .copy = fg_s_copy,
                                             .wait = fg_s_wait, .record = fg_s_record, .wait_for = fg_s_wait_for};
static const dp_wait_policy fg_blocking = {0};

static dp_status fg_open(int ordinal, int tf32, const dp_wait_policy *waits, dp_dev **out) {
    *out = NULL;
    if (tf32) return dp_fail(DP_ERR_USAGE, "--tf32: the fakegpu device computes in fp32 only (its kernels are the CPU's)");
    if (ordinal < 0 || ordinal >= FG_ORDINALS)
        return dp_fail(DP_ERR_USAGE, "--gpu %d: the fakegpu device has ordinals 0..%d", ordinal, FG_ORDINALS - 1);
    dp_dev *cpu; /* its kernels are the CPU's: what opening the CPU device sets up holds for them too */
    DP_TRY(dp_dev_open("cpu", 0, 0, NULL, &cpu));
    unsigned long long seed, delay;
    DP_TRY(env_u64("DP_FAKEGPU_SEED", 0x5eed, ~0ull, &seed));
    DP_TRY(env_u64("DP_FAKEGPU_DELAY_US", 200, 1000000, &delay));
    fg_dev *g = calloc(1, sizeof *g);
    if (!g) return dp_fail(DP_ERR_NOMEM, "fakegpu: out of memory opening device %d", ordinal);
    g->ordinal = ordinal, g->seed = seed + (unsigned long long)ordinal, g->delay_us = (unsigned)delay;
    dp_status st = fg_streams_start(g);
    if (st == DP_OK && fg_devices_add(g) != 0)
        st = dp_fail(DP_ERR_INTERNAL, "fakegpu: too many fakegpu devices open at once");
    if (st != DP_OK) {
        fg_streams_stop(g);
        free(g);
        return st;
    }
    dp_dev *d = &g->dev;
    *d = fg_ops;
    d->impl = g;
    d->waits = waits ? waits : &fg_blocking;
    dp_kctx lane_kc[DP_DEV_LANES];
    for (int i = 0; i < DP_DEV_LANES; i++) lane_kc[i] = (dp_kctx){.nthreads = 1, .stream = &g->s[FG_LANE0 + i], .ordinal = ordinal};
    const dp_kctx coll_kc = {.nthreads = 1, .stream = &g->s[FG_COLL], .ordinal = ordinal};
    dp_dev_streams_init(d, &fg_stream_ops, (dp_kctx){.nthreads = 1, .stream = &g->s[FG_MAIN], .ordinal = ordinal},
                        lane_kc, DP_DEV_LANES, &coll_kc);
    d->main.impl = &g->s[FG_MAIN], d->coll.impl = &g->s[FG_COLL];
    for (int i = 0; i < DP_DEV_LANES; i++) d->lanes[i].impl = &g->s[FG_LANE0 + i];
    snprintf(d->desc, sizeof d->desc, "fakegpu:%d (CPU kernels on worker-thread streams, delays up to %u us, seed %llu)",
             ordinal, g->delay_us, seed);
    *out = d;
    return DP_OK;
}

const dp_dev_kind dp_fakegpu_device = {.name = "fakegpu", .open = fg_open};

dp_status dp_fakegpu_register(void) { return dp_dev_register(&dp_fakegpu_device); }
