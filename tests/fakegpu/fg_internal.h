/* fg_internal.h: the parts of the fake GPU (fakegpu.h) its files share: the device, its streams
 * and the operations they queue. One mutex (fg_dev.mu) guards queues, counters and the capture;
 * another (mem_mu) the memory tables, which workers read while translating. */
#ifndef DP_FG_INTERNAL_H
#define DP_FG_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "fakegpu.h"

/* The streams: main, collective, then the lanes. */
enum { FG_MAIN = 0, FG_COLL = 1, FG_LANE0 = 2, FG_NSTREAMS = 2 + DP_DEV_LANES };

typedef struct fg_dev fg_dev;
typedef struct fg_op fg_op;

/* An operation a stream runs: a kernel, a copy, a marker. Ops own copies of everything they read
 * from the caller (as a CUDA launch copies its arguments), so a graph can run them again. */
struct fg_op {
    /* runs on the stream's worker; `arg` is what on_enqueue returned when this run was queued */
    void (*run)(fg_dev *g, fg_op *op, uint64_t arg);
    /* NULL, or called (g->mu held) each time the op is queued, eagerly or by a replay */
    uint64_t (*on_enqueue)(fg_dev *g, fg_op *op);
    const char *what;  /* names the operation in messages: "conv2d_forward", "upload" */
    int waits_for;     /* a wait marker: the stream it waits for; else -1 */
    int launch;        /* what a GPU would be charged a launch for (dp_fakegpu_launches): FG_KERNEL, FG_COPY; else 0 */
};

enum { FG_KERNEL = 1, FG_COPY = 2 };

/* A queued run of an op; the op is freed with it unless a graph owns it. */
typedef struct fg_node {
    struct fg_node *next;
    fg_op *op;
    uint64_t seq, arg; /* its place in its stream (1, 2, ...), on_enqueue's value */
    int owned;
} fg_node;

typedef struct {
    fg_dev *g;
    int index;
    pthread_t thread;
    int started, cond_ready;
    pthread_cond_t work;      /* signalled when a node is queued or the worker must stop */
    fg_node *head, *tail;
    uint64_t enqueued, done;  /* seq of the last node queued, of the last node run */
    uint64_t rng;             /* the worker's delays (only it touches this) */
    /* while recording: whether the stream joined the capture (the main stream, or one that waited
       for a stream in it), ops recorded on it, and how many of those the main stream waited for */
    int in_capture;
    uint64_t recorded, joined;
} fg_stream;

/* A block of memory: device (real address; the caller sees real ^ FG_ALIAS_BIT) or host_alloc'd. */
typedef struct {
    uintptr_t real;
    size_t bytes;
    char what[48];
} fg_block;

typedef struct {
    fg_block *b;
    size_t n, cap;
} fg_blocks;

/* What a graph recorded: each op with its stream, in the order they were queued. */
typedef struct {
    int stream;
    fg_op *op;
} fg_rec;

typedef struct {
    fg_dev *g;
    fg_rec *ops;
    size_t n;
} fg_graph;

struct fg_dev {
    dp_dev dev; /* the device (impl: this; each of its streams' impl: its fg_stream) */
    int ordinal;
    unsigned delay_us;
    uint64_t seed;
    int sync_ready; /* mu, mem_mu and progress are initialised */
    pthread_mutex_t mu;
    pthread_cond_t progress; /* broadcast whenever a node has run */
    fg_stream s[FG_NSTREAMS];
    int stop;
    /* the first failure of a queued op, reported (and cleared) by the next wait */
    dp_status fail;
    char fail_msg[512];
    /* graph recording */
    int capturing;
    fg_rec *rec;
    size_t n_rec, cap_rec;
    char invalid[512]; /* why the recording is invalid ("": it is not) */
    /* the host threads that queued each kernel kind (mu; dp_fakegpu_launch_threads) */
    struct {
        const char *name;
        pthread_t thread;
    } launchers[64];
    int n_launchers;
    /* memory (mem_mu) */
    pthread_mutex_t mem_mu;
    fg_blocks mem, host;
    _Atomic long long charged; /* device memory taken outside alloc (dp_fakegpu_stream_charge) */
};

/* The bit that makes a device address non-canonical, so that the host faults on it (x86-64:
 * addresses are sign-extended from bit 47, or 56 with 5-level paging; arm64: bits 48..55 must be
 * clear in user space, and the top byte is ignored, so the bit must lie below it). */
#if defined(__x86_64__)
#define FG_ALIAS_BIT ((uintptr_t)1 << 62)
#elif defined(__aarch64__)
#define FG_ALIAS_BIT ((uintptr_t)1 << 54)
#else
#error "fakegpu: no non-canonical address bit known for this architecture"
#endif

static inline fg_dev *fg_of(const dp_dev *d) { return (fg_dev *)d->impl; }
/* The fake stream behind one of the device's streams. */
static inline int fg_stream_of(const dp_dev_stream *s) { return ((const fg_stream *)s->impl)->index; }

/* ---- stream.c: workers, queues, waits */
dp_status fg_streams_start(fg_dev *g);
void fg_streams_stop(fg_dev *g); /* drains, stops and joins the workers */
/* Queues op on stream si, or records it while a graph is being recorded; takes ownership. */
void fg_submit(fg_dev *g, int si, fg_op *op);
/* Queues op on stream si, g->mu held; owned: freed once run (else a graph keeps it). 0, or -1: no memory. */
int fg_push(fg_dev *g, int si, fg_op *op, int owned);
/* Makes stream si wait for everything queued on stream `on` so far (see stream.c). */
dp_status fg_stream_wait(fg_dev *g, int si, int on);
/* Blocks until stream si (-1: every stream) has run everything queued; g->mu held. */
void fg_drain_locked(fg_dev *g, int si);
void fg_drain(fg_dev *g, int si);
/* Records the first failure of a queued op (or of queueing one) for the next wait. */
void fg_set_fail(fg_dev *g, dp_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The stream a kernel's dp_kctx names: aborts unless it is a stream of an open fakegpu device. */
fg_stream *fg_stream_from(const void *stream, const char *call);
int fg_devices_add(fg_dev *g); /* -1: too many open */
void fg_devices_remove(fg_dev *g);

/* ---- capture.c: recording and replaying graphs */
/* Records op on stream si (g->mu held): checks it could be captured on CUDA, else invalidates. */
void fg_record(fg_dev *g, int si, fg_op *op);
/* Fails a call CUDA forbids while a stream captures (it invalidates the capture too); g->mu held. */
dp_status fg_forbidden_locked(fg_dev *g, const char *call);
dp_status fg_capture_begin(const dp_dev *d);
dp_status fg_capture_end(const dp_dev *d, void **graph);
dp_status fg_replay(const dp_dev *d, void *graph);
void fg_graph_free(const dp_dev *d, void *graph);
void fg_capture_discard(fg_dev *g); /* close: frees what an unfinished recording holds */

/* ---- memory.c: the block tables and address translation */
int fg_blocks_add(fg_dev *g, fg_blocks *t, uintptr_t real, size_t bytes, const char *what);
/* Removes the block starting at real and returns its size, or returns 0 if there is none. */
size_t fg_blocks_remove(fg_dev *g, fg_blocks *t, uintptr_t real);
/* 1 if [p, p + bytes) lies inside one host_alloc block. */
int fg_is_pinned(fg_dev *g, const void *p, size_t bytes);
/* The real address of device pointer `fake` whose bytes [off, off + bytes) the call touches:
 * aborts, naming the call and the argument, unless they lie inside one live allocation. */
void *fg_real(fg_dev *g, const void *fake, size_t off, size_t bytes, const char *call, const char *arg);
/* Frees what is left, reporting each block to stderr as a leak; returns how many there were. */
size_t fg_blocks_release(fg_blocks *t, const char *kind);
/* live blocks and bytes in t */
size_t fg_blocks_live(fg_dev *g, const fg_blocks *t, size_t *bytes);

/* ---- fakegpu.c: the device */
dp_status fg_wait(const dp_dev *d);
dp_status fg_s_wait(const dp_dev_stream *s);
/* One more call that held the host until queued work finished (dp_fakegpu_host_waits). */
void fg_count_host_wait(void);
/* fg_forbidden_locked, taking the lock */
dp_status fg_forbidden(fg_dev *g, const char *call);

/* ---- transfer.c: upload, copy, zero (on a stream, or the main one), download */
dp_status fg_s_upload(const dp_dev_stream *s, void *dst, const void *src, size_t bytes);
dp_status fg_s_copy(const dp_dev_stream *s, void *dst, const void *src, size_t bytes);
dp_status fg_s_zero(const dp_dev_stream *s, void *p, size_t bytes);
dp_status fg_upload(const dp_dev *d, void *dst, const void *src, size_t bytes);
dp_status fg_copy(const dp_dev *d, void *dst, const void *src, size_t bytes);
dp_status fg_zero(const dp_dev *d, void *p, size_t bytes);
dp_status fg_download(const dp_dev *d, void *dst, const void *src, size_t bytes);

/* ---- events.c: timing events */
dp_status fg_events_create(const dp_dev *d, int n, void **events);
dp_status fg_event_record(const dp_dev *d, void *events, int i);
dp_status fg_s_record(const dp_dev_stream *s, void *events, int i);
dp_status fg_event_elapsed(const dp_dev *d, void *events, int i, int j, double *seconds);
void fg_events_free(const dp_dev *d, void *events, int n);
dp_status fg_event_wait(const dp_dev *d, void *events, int i);

/* ---- kernels.c: the kernel table that queues the CPU kernels */
extern const dp_kernels dp_fakegpu_kernels;

#endif
