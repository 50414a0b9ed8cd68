/* nccl_double.c: a test double of the NCCL subset dptrain calls (backends/nccl.c), so that
 * `--backend nccl` runs with 2-8 ranks on a machine without GPUs (NCCL itself refuses two ranks
 * on one GPU, and CI has none). Loaded with LD_PRELOAD over the real libnccl; tests only.
 *
 * Ranks are communicators on one machine, one or several per process (`--gpus`: one per device,
 * created and used in one group), joined pairwise by Unix stream sockets in the abstract
 * namespace (named by the unique id: no files, no ports). A group may hold operations of several
 * communicators of the process: each communicator queues its share, and every call that
 * progresses (ncclCommGetAsyncError, a blocking wait) progresses every communicator of the
 * process at once, without blocking on any one of them, so communicators of one process that
 * send to each other cannot deadlock. Buffers are host memory: the double
 * says so through dp_nccl_double_host_memory(), which backends/nccl.c looks up to let a CPU
 * device take NCCL's collectives. Everything else behaves as a non-blocking communicator:
 * init and every group end return ncclInProgress, the work progresses inside
 * ncclCommGetAsyncError (the caller polls it, as dptrain does), errors arrive asynchronously,
 * abort, finalize and destroy end the communicator.
 *
 * The checker: a receive first sends the sender a ready-to-receive note describing itself (the
 * call, its element count and type, its operation number); the send compares it with its own
 * description before any data moves, so ranks that issue different operations (another
 * collective, another count, another type) fail at once with a message naming both ranks,
 * instead of hanging. A peer that exits or aborts is seen as a closed connection.
 *
 * It says how many GPUs the machine has (dp_nccl_double_gpu_count: DP_NCCL_DOUBLE_GPUS, default
 * 8), which is what `--gpus` is checked against under it. A test that preloads it into itself
 * may hand it hooks (dp_nccl_double_set_hooks): the host address behind a device pointer, a wait
 * for the work queued so far on a stream, called as a group's operations start, and a write queued
 * on a stream: what a receive or a copy brings lands in a buffer of the double's and, once the
 * group is done, reaches the user's buffer as a write queued on the operation's stream. So
 * buffers of a fake GPU (tests/fakegpu/) move in stream order both ways, as NCCL's would: work
 * queued on another stream that reads a result without waiting for the collective's stream sees
 * the old bytes.
 *
 * Memory, with a hook (dp_nccl_double_set_memory_hook: a charge of device memory on the device a
 * stream belongs to, given back with a negative charge): a communicator's first send or receive
 * with each peer takes DP_NCCL_DOUBLE_PEER_MIB MiB (default 0) on that call's stream, as NCCL's
 * lazily connected point-to-point buffers do, until it is destroyed or aborted.
 *
 * Faults, for tests (DP_NCCL_DOUBLE_FAULT="KIND@RANK:OP[,KIND@RANK:OP...]", OP counting the
 * rank's NCCL calls that move data from 1):
 *   stall@R:K        operation K on rank R never completes
 *   error@R:K        operation K on rank R fails (ncclSystemError)
 *   exit@R:K         rank R exits at once (status 9, as if killed) when it issues operation K
 *   warn@R:K         operation K on rank R succeeds but leaves a message in ncclGetLastError (as
 *                    NCCL's warnings on a path it recovers from do)
 *   abort-blocks@R:0 ncclCommAbort on rank R blocks for ever
 *   abort-slow@R:MS  ncclCommAbort on rank R takes MS milliseconds, then returns
 *   init@R:0         rank R's communicator fails to come up (ncclSystemError from its init)
 *   capture-error@R:K the K-th operation rank R issues while its stream records a graph fails
 * DP_NCCL_DOUBLE_DEVICE=1: the device mode (below, before launch) for one process driving every rank
 * on CUDA; over the fake GPU (dp_nccl_double_set_device_hooks), groups run as host functions in
 * their streams' order, recordable into the fake GPU's graphs, with ranks in any process (below).
 * DP_NCCL_DOUBLE_VERSION=N makes ncclGetVersion report N (21804: 2.18.4), for dptrain's version floor. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <nccl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cuda_stage.h"

#define MAGIC 0x44504e43u /* "DPNC" */
#define MAX_RANKS 64
#define MAX_COMMS 16 /* communicators in one process (and in one group) */
#define WHAT 96

enum { MSG_HELLO = 1, MSG_RTR, MSG_DATA };
enum { OP_SEND, OP_RECV, OP_COPY };

typedef struct {
    uint32_t magic, type;
    int32_t from, world;
    int64_t index;           /* the sender's operation number */
    uint64_t count, bytes;   /* elements and payload bytes (DATA) */
    int32_t dtype, pad;
    char what[WHAT];         /* "all-gather of 100 floats" */
} msg;

typedef struct {
    int kind, peer;
    char *buf;
    const char *src; /* OP_COPY */
    const void *stream; /* the stream it was issued on (waited for as it starts, with a hook) */
    char *dev_buf;      /* buf as the caller gave it (a device pointer with the hooks) */
    char *user;         /* with the write hook or CUDA memory: dev_buf, written on the stream at the end */
    int owned;          /* buf is the double's own host copy (staged), freed with the group */
    size_t count, bytes;
    ncclDataType_t dtype;
    long index;
    char what[WHAT];
    int started, done;
    int part_of;        /* 1 + q: the receive of rank q's part of an all-reduce (into the group's parts[q]) */
    /* sum: after every transfer of the group, rank-order sum of `parts` into buf */
} op;

typedef struct out_item { /* a queued outbound message */
    msg h;
    const char *payload;
    size_t len, off; /* over header + payload */
    struct out_item *next;
} out_item;

typedef struct {
    int fd, closed; /* closed: the peer ended its side after its last operation with this rank */
    /* inbound: a header being read, then its payload into the receive it matched */
    msg in;
    size_t in_off;
    op *in_op;
    size_t in_payload_off;
    msg rtr[16]; /* ready-to-receive notes not yet met by a send */
    int n_rtr;
    out_item *out_head, *out_tail;
} link_t;

typedef struct group {
    op *ops;
    int n, cap;
    /* an all-reduce's sum, done once its transfers are: parts[q] (q != rank) summed in rank order */
    float *sum_dst;
    float **parts;
    size_t sum_n;
    int sum_op; /* CUDA memory: 1 + the index of the op whose (staged) buffer the sum goes into */
    const void *stream; /* the stream its calls were issued on */
    int in_stream;      /* run by a host function in its stream's order (the device mode over the fake GPU) */
    int *done_flag;     /* in_stream: set once its results are written */
    struct group *next;
} group;

struct ncclComm {
    int rank, world, blocking, init_done, listen_fd, stalled;
    ncclUniqueId id;
    link_t p[MAX_RANKS];
    group *head, *tail; /* in flight, in issue order */
    ncclResult_t async;
    char last[512];
    long n_ops;
    double init_deadline;
    unsigned char connected[MAX_RANKS]; /* a send or receive with this peer was issued (the memory charge) */
    const void *charged_on;             /* the stream the charge was made on, and its bytes */
    long long charged;
    const void *stream_seen; /* the stream of its last call (whether a capture is open on it, at an abort) */
    long n_capture_ops;      /* its data-moving calls issued while their stream recorded a graph */
    int users, dead;         /* stream functions running its groups; dead: destroyed, freed by the last user */
};

/* The group being built: each communicator's share of it. */
static struct {
    int depth, n;
    group *g[MAX_COMMS];
    ncclComm_t comm[MAX_COMMS];
} grp;

/* Every live communicator of this process, progressed together. */
static ncclComm_t live[MAX_COMMS];
static int n_live;

int dp_nccl_double_host_memory(void) { return 1; }

/* Test hooks (NULL: buffers are host memory, streams are not waited for). */
static void *(*hook_host)(const void *device_ptr);
static void (*hook_sync)(const void *stream);
static void (*hook_write)(const void *stream, void *dst, const void *src, size_t bytes);
static const void *issuing; /* the stream of the call being issued */

void dp_nccl_double_set_hooks(void *(*host_address)(const void *), void (*stream_sync)(const void *),
                              void (*stream_write)(const void *, void *, const void *, size_t)) {
    hook_host = host_address, hook_sync = stream_sync, hook_write = stream_write;
}

static void *host_of(const void *p) { return hook_host && p ? hook_host(p) : (void *)p; }

/* The device mode over the fake GPU (dp_nccl_double_set_device_hooks, DP_NCCL_DOUBLE_DEVICE=1): a
 * group is queued on its stream as a host function (hook_call) that moves its bytes when the stream
 * reaches it, as NCCL's kernels run, so a group issued while the stream records a graph is recorded
 * and runs again at each replay; hook_capturing says whether a stream's device is recording. The
 * stream functions run on the fake GPU's workers: one recursive mutex guards the double's state. */
static void (*hook_call)(const void *stream, void (*fn)(void *), const void *arg, size_t bytes);
static int (*hook_capturing)(const void *stream);
static pthread_mutex_t dbl_mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
#define LOCK() pthread_mutex_lock(&dbl_mu)
#define UNLOCK() pthread_mutex_unlock(&dbl_mu)
static _Atomic unsigned long aborts_in_capture, host_syncs;
/* The times a group's start held the host until its stream's earlier work was done (the sync hook:
 * the host path's one round trip a group, which the device mode does not make). */
unsigned long dp_nccl_double_host_syncs(void) { return host_syncs; }

void dp_nccl_double_set_device_hooks(void (*call)(const void *, void (*)(void *), const void *, size_t),
                                     int (*capturing)(const void *)) {
    hook_call = call, hook_capturing = capturing;
}
/* ncclCommAbort calls made while a graph was being recorded on the communicator's stream: CUDA
 * refuses the frees and synchronisations an abort makes there (and the capture is lost). */
unsigned long dp_nccl_double_aborts_in_capture(void) { return aborts_in_capture; }
static int capturing(const void *stream) { return hook_capturing && stream && hook_capturing(stream); }

static void (*hook_charge)(const void *stream, long long bytes);
void dp_nccl_double_set_memory_hook(void (*charge)(const void *stream, long long bytes)) { hook_charge = charge; }

/* The first send or receive with a peer takes its connection's memory (DP_NCCL_DOUBLE_PEER_MIB). */
static void charge_connection(ncclComm_t c, const op *o) {
    const char *v = getenv("DP_NCCL_DOUBLE_PEER_MIB");
    if (!hook_charge || !v || atoll(v) <= 0 || !o->stream || (o->kind != OP_SEND && o->kind != OP_RECV) ||
        o->peer < 0 || o->peer >= MAX_RANKS || c->connected[o->peer])
        return;
    if (c->charged_on && c->charged_on != o->stream) return; /* one device a communicator */
    const long long bytes = atoll(v) << 20;
    c->connected[o->peer] = 1, c->charged_on = o->stream, c->charged += bytes;
    hook_charge(o->stream, bytes);
}

int dp_nccl_double_gpu_count(void) {
    const char *v = getenv("DP_NCCL_DOUBLE_GPUS");
    return v && atoi(v) > 0 ? atoi(v) : 8;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static ncclResult_t fail(ncclComm_t c, ncclResult_t r, const char *fmt, ...) {
    LOCK();
    if (c->async == ncclSuccess || c->async == ncclInProgress) {
        va_list ap;
        va_start(ap, fmt);
        int k = snprintf(c->last, sizeof c->last, "nccl test double: rank %d: ", c->rank);
        vsnprintf(c->last + k, sizeof c->last - (size_t)k, fmt, ap);
        va_end(ap);
        c->async = r;
    }
    UNLOCK();
    return r;
}

/* ---- faults ---- */
/* Whether KIND@rank:index is asked for (index < 0: any; its number into *value, may be NULL). */
static int fault_value(const char *kind, int rank, long index, long *value) {
    for (const char *f = getenv("DP_NCCL_DOUBLE_FAULT"); f && *f; f = strchr(f, ',') ? strchr(f, ',') + 1 : NULL) {
        char k[32];
        int r;
        long i;
        if (sscanf(f, "%31[^@]@%d:%ld", k, &r, &i) == 3 && strcmp(k, kind) == 0 && r == rank &&
            (i == index || index < 0)) {
            if (value) *value = i;
            return 1;
        }
    }
    return 0;
}

static int fault(const char *kind, int rank, long index) { return fault_value(kind, rank, index, NULL); }

static size_t type_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}

/* ---- sockets ---- */
static void addr_of(const ncclUniqueId *id, int rank, struct sockaddr_un *a, socklen_t *len) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    /* abstract namespace: a leading NUL, then the id's text */
    int k = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "%.80s-r%d", id->internal, rank);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)k);
}

static int nonblock(int fd) { return fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

static void enqueue(ncclComm_t c, int q, const msg *h, const char *payload) {
    out_item *it = calloc(1, sizeof *it);
    if (!it) {
        fail(c, ncclSystemError, "out of memory queueing a message to rank %d", q);
        return;
    }
    it->h = *h;
    it->payload = payload;
    it->len = sizeof(msg) + (payload ? h->bytes : 0);
    if (c->p[q].out_tail) c->p[q].out_tail->next = it;
    else c->p[q].out_head = it;
    c->p[q].out_tail = it;
}

static msg header(ncclComm_t c, uint32_t type, const op *o) {
    msg h;
    memset(&h, 0, sizeof h);
    h.magic = MAGIC, h.type = type, h.from = c->rank, h.world = c->world;
    if (o) {
        h.index = o->index, h.count = o->count, h.dtype = (int32_t)o->dtype;
        h.bytes = type == MSG_DATA ? o->bytes : 0;
        memcpy(h.what, o->what, WHAT);
    }
    return h;
}

/* Writes what the socket takes; 0, or -1 after recording the failure. */
static int flush_out(ncclComm_t c, int q) {
    link_t *p = &c->p[q];
    while (p->out_head) {
        out_item *it = p->out_head;
        const char *src;
        size_t avail;
        if (it->off < sizeof(msg)) src = (const char *)&it->h + it->off, avail = sizeof(msg) - it->off;
        else src = it->payload + (it->off - sizeof(msg)), avail = it->len - it->off;
        ssize_t w = send(p->fd, src, avail, MSG_NOSIGNAL);
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (w <= 0) {
            fail(c, ncclRemoteError, "the connection to rank %d closed while sending (rank %d exited, was killed or "
                 "aborted)", q, q);
            return -1;
        }
        it->off += (size_t)w;
        if (it->off < it->len) continue;
        p->out_head = it->next;
        if (!p->out_head) p->out_tail = NULL;
        free(it);
    }
    return 0;
}

/* The first receive from q in flight that has not got its data. */
static op *pending_recv(ncclComm_t c, int q) {
    for (group *g = c->head; g; g = g->next)
        for (int i = 0; i < g->n; i++)
            if (g->ops[i].kind == OP_RECV && g->ops[i].peer == q && g->ops[i].started && !g->ops[i].done)
                return &g->ops[i];
    return NULL;
}

/* Whether a send to q in flight still waits for q's ready-to-receive note. */
static int awaits(ncclComm_t c, int q) {
    for (group *g = c->head; g; g = g->next)
        for (int i = 0; i < g->n; i++)
            if (g->ops[i].kind == OP_SEND && g->ops[i].peer == q && !g->ops[i].done) return 1;
    return 0;
}

/* Reads what has arrived from q. */
static int read_in(ncclComm_t c, int q) {
    link_t *p = &c->p[q];
    for (;;) {
        char *dst;
        size_t want;
        if (p->in_off < sizeof(msg)) dst = (char *)&p->in + p->in_off, want = sizeof(msg) - p->in_off;
        else dst = p->in_op->buf + p->in_payload_off, want = p->in.bytes - p->in_payload_off;
        ssize_t r = want ? recv(p->fd, dst, want, 0) : 0;
        if (want && r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (want && r == 0 && p->in_off == 0 && !p->out_head && !pending_recv(c, q) && !awaits(c, q)) {
            p->closed = 1; /* a peer that finished: an error only if an operation needs it later */
            return 0;
        }
        if (want && r <= 0) {
            op *o = pending_recv(c, q);
            fail(c, ncclRemoteError, "the connection to rank %d closed (rank %d exited, was killed or aborted%s%s)%s%s",
                 q, q, r < 0 ? "; " : "", r < 0 ? strerror(errno) : "", o ? " while this rank waited for its data for " : "",
                 o ? o->what : "");
            return -1;
        }
        if (p->in_off < sizeof(msg)) {
            p->in_off += (size_t)r;
            if (p->in_off < sizeof(msg)) continue;
            if (p->in.magic != MAGIC || p->in.from != q) {
                fail(c, ncclInternalError, "a garbled message from rank %d", q);
                return -1;
            }
            if (p->in.type == MSG_RTR) {
                if (p->n_rtr == 16) {
                    fail(c, ncclInternalError, "rank %d posted more than 16 receives that this rank never met", q);
                    return -1;
                }
                p->rtr[p->n_rtr++] = p->in;
                p->in_off = 0;
                continue;
            }
            if (p->in.type != MSG_DATA) {
                fail(c, ncclInternalError, "an unexpected message (type %u) from rank %d", p->in.type, q);
                return -1;
            }
            p->in_op = pending_recv(c, q);
            if (!p->in_op || p->in_op->bytes != p->in.bytes) {
                fail(c, ncclInternalError, "data from rank %d (%s) that no receive here asked for", q, p->in.what);
                return -1;
            }
            p->in_payload_off = 0;
        } else {
            p->in_payload_off += (size_t)r;
        }
        if (p->in_payload_off == p->in.bytes) {
            p->in_op->done = 1;
            p->in_off = 0, p->in_op = NULL;
        }
    }
}

/* A send meets the receiver's ready-to-receive note: the checker. */
static int match_send(ncclComm_t c, op *o) {
    link_t *p = &c->p[o->peer];
    if (!p->n_rtr) return 0;
    const msg *r = &p->rtr[0];
    if (r->count != o->count || r->dtype != (int32_t)o->dtype || strcmp(r->what, o->what) != 0) {
        fail(c, ncclInvalidUsage, "mismatched operations: this rank's operation %ld sends rank %d %s, but rank %d's "
             "operation %ld waits to receive %s from it", o->index, o->peer, o->what, o->peer, (long)r->index, r->what);
        return -1;
    }
    memmove(p->rtr, p->rtr + 1, (size_t)(--p->n_rtr) * sizeof(msg));
    msg h = header(c, MSG_DATA, o);
    enqueue(c, o->peer, &h, o->buf);
    o->done = 1; /* the bytes are queued; the caller keeps buf until the group completes */
    return 0;
}

static void sum_parts(group *g, int world, int me) {
    /* rank order, as dptrain's canonical order does for its own sums */
    for (size_t i = 0; i < g->sum_n; i++) {
        float s = 0;
        for (int q = 0; q < world; q++) s += q == me ? g->sum_dst[i] : g->parts[q][i];
        g->parts[me][i] = s;
    }
    memcpy(g->sum_dst, g->parts[me], g->sum_n * sizeof(float));
}

static void group_free(group *g) {
    if (!g) return;
    for (int i = 0; i < g->n; i++)
        if (g->ops[i].owned) free(g->ops[i].buf);
    if (g->parts)
        for (int q = 0; q < MAX_RANKS; q++) free(g->parts[q]);
    free(g->parts);
    free(g->ops);
    free(g);
}

/* Init: connect to every lower rank (retrying until it listens), accept every higher one.
 * Returns whether the communicator is ready. */
static int init_step(ncclComm_t c) {
    if (c->init_done) return 1;
    int missing = 0;
    for (int q = 0; q < c->world; q++) {
        if (q == c->rank || c->p[q].fd >= 0) continue;
        missing++;
        if (q < c->rank) {
            int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
            struct sockaddr_un a;
            socklen_t len;
            addr_of(&c->id, q, &a, &len);
            if (fd >= 0 && connect(fd, (struct sockaddr *)&a, len) == 0) {
                msg h = header(c, MSG_HELLO, NULL);
                if (send(fd, &h, sizeof h, MSG_NOSIGNAL) == (ssize_t)sizeof h && nonblock(fd) == 0) {
                    c->p[q].fd = fd, missing--;
                    continue;
                }
            }
            if (fd >= 0) close(fd);
        }
    }
    struct pollfd pf = {.fd = c->listen_fd, .events = POLLIN};
    while (missing && poll(&pf, 1, 0) == 1) {
        int fd = accept4(c->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) break;
        msg h;
        /* the connecting rank sent its hello before this accept could see it */
        if (recv(fd, &h, sizeof h, MSG_WAITALL) != (ssize_t)sizeof h || h.magic != MAGIC || h.type != MSG_HELLO ||
            h.from <= c->rank || h.from >= c->world || c->p[h.from].fd >= 0) {
            close(fd);
            continue;
        }
        if (h.world != c->world) {
            close(fd);
            fail(c, ncclInvalidUsage, "rank %d joined with %d ranks, this rank with %d", h.from, h.world, c->world);
            return 0;
        }
        nonblock(fd);
        c->p[h.from].fd = fd, missing--;
    }
    if (missing) {
        if (now_s() > c->init_deadline)
            fail(c, ncclSystemError, "%d of the %d other ranks never connected within 300 s", missing, c->world - 1);
        return 0;
    }
    c->init_done = 1;
    if (c->async == ncclInProgress) c->async = ncclSuccess;
    return 1;
}

/* A host buffer of the double's for o's bytes (o->buf then points there; freed with the group). */
static int own_buffer(ncclComm_t c, op *o) {
    char *own = malloc(o->bytes ? o->bytes : 1);
    if (!own) {
        fail(c, ncclSystemError, "out of memory for %s", o->what);
        return -1;
    }
    o->buf = own, o->owned = 1;
    return 0;
}

/* What o moves, in host memory: with the write hook, what it brings lands in the double's buffer
 * first; with CUDA memory (cuda), a send's and a copy's device source comes down now (its stream
 * has been waited for) and what a receive or a copy brings goes up at the end. */
static int stage(ncclComm_t c, op *o, int cuda) {
    char err[256];
    if (o->kind != OP_SEND && hook_write && o->stream && !o->user) {
        o->user = o->dev_buf;
        return own_buffer(c, o);
    }
    if (!cuda) return 0;
    if (o->kind == OP_COPY && dbl_cuda_is_device(o->src)) { /* down into a copy of its own, freed once moved */
        char *src = malloc(o->bytes ? o->bytes : 1);
        if (!src) return fail(c, ncclSystemError, "out of memory for %s", o->what), -1;
        if (dbl_cuda_down(src, o->src, o->bytes, o->stream, err, sizeof err) < 0) {
            free(src);
            return fail(c, ncclUnhandledCudaError, "%s: %s", o->what, err), -1;
        }
        if (o->kind == OP_COPY && dbl_cuda_is_device(o->dev_buf)) {
            o->user = o->dev_buf;
            if (own_buffer(c, o) < 0) return free(src), -1;
        }
        if (o->bytes) memcpy(o->buf, src, o->bytes);
        free(src);
        o->src = o->buf; /* moved: the copy below is a no-op */
        return 0;
    }
    if (!dbl_cuda_is_device(o->dev_buf)) return 0;
    if (o->kind != OP_SEND) o->user = o->dev_buf;
    if (own_buffer(c, o) < 0) return -1;
    if (o->kind == OP_SEND && dbl_cuda_down(o->buf, o->dev_buf, o->bytes, o->stream, err, sizeof err) < 0)
        return fail(c, ncclUnhandledCudaError, "%s: %s", o->what, err), -1;
    return 0;
}

/* Starts the oldest group's operations (later groups wait: NCCL runs groups in order). Returns
 * whether there is traffic to wait for (no group, a stall or a failure: none). */
static int start_head(ncclComm_t c) {
    c->stalled = 0;
    if (!c->head) return 0;
    for (int i = 0; i < c->head->n; i++)
        if (fault("stall", c->rank, c->head->ops[i].index)) return c->stalled = 1, 0;
    group *g = c->head;
    const int cuda = !hook_sync && dbl_cuda_on();
    char err[256];
    for (int i = 0; i < g->n && (hook_sync || cuda) && !g->in_stream; i++) /* NCCL's work runs after what its stream queued before */
        if (!g->ops[i].started && g->ops[i].stream && (i == 0 || g->ops[i].stream != g->ops[i - 1].stream)) {
            if (hook_sync) hook_sync(g->ops[i].stream), host_syncs++;
            else if (dbl_cuda_sync(g->ops[i].stream, err, sizeof err) < 0) {
                fail(c, ncclUnhandledCudaError, "before %s: %s", g->ops[i].what, err);
                return 0;
            }
        }
    for (int i = 0; i < g->n; i++) {
        op *o = &g->ops[i];
        if (o->started) continue;
        o->started = 1;
        if (stage(c, o, cuda) < 0) return 0;
        if (o->kind == OP_COPY) {
            if (o->bytes && o->buf != o->src) memmove(o->buf, o->src, o->bytes);
            o->done = 1;
        } else if (o->kind == OP_RECV) {
            msg h = header(c, MSG_RTR, o);
            enqueue(c, o->peer, &h, NULL);
        }
        if (o->kind != OP_COPY && c->p[o->peer].closed) {
            fail(c, ncclRemoteError, "rank %d has closed its connection (it exited or aborted) before this rank's %s",
                 o->peer, o->what);
            return 0;
        }
    }
    return 1;
}

/* The sockets of c to poll, appended at pf[*np]. */
static void poll_set(ncclComm_t c, struct pollfd *pf, int *who, int *np) {
    for (int q = 0; q < c->world; q++) {
        if (q == c->rank || c->p[q].closed) continue;
        pf[*np] = (struct pollfd){.fd = c->p[q].fd, .events = (short)(POLLIN | (c->p[q].out_head ? POLLOUT : 0))};
        who[(*np)++] = q;
    }
}

/* After the poll: what arrived, what can leave, and the oldest group done once all of it is. */
static void advance(ncclComm_t c, const struct pollfd *pf, const int *who, int np) {
    for (int k = 0; k < np; k++) {
        if ((pf[k].revents & (POLLIN | POLLHUP | POLLERR)) && read_in(c, who[k]) < 0) return;
        if (flush_out(c, who[k]) < 0) return;
    }
    group *g = c->head;
    int left = 0;
    for (int i = 0; i < g->n; i++) {
        op *o = &g->ops[i];
        if (o->kind == OP_SEND && !o->done && match_send(c, o) < 0) return;
        left += !o->done;
    }
    for (int q = 0; q < c->world; q++)
        if (q != c->rank && !c->p[q].closed && flush_out(c, q) < 0) return;
    int queued = 0; /* sends complete once their bytes have left */
    for (int q = 0; q < c->world; q++) queued += q != c->rank && c->p[q].out_head != NULL;
    if (left || queued) return;
    if (g->sum_op) g->sum_dst = (float *)(void *)g->ops[g->sum_op - 1].buf; /* its staged copy */
    if (g->sum_dst) sum_parts(g, c->world, c->rank);
    for (int i = 0; i < g->n; i++) { /* the results, queued on their streams */
        op *o = &g->ops[i];
        char err[256];
        if (!o->user) continue;
        if (g->in_stream) memcpy(host_of(o->user), o->buf, o->bytes); /* in its stream's order already */
        else if (hook_write) hook_write(o->stream, o->user, o->buf, o->bytes);
        else if (dbl_cuda_up(o->user, o->buf, o->bytes, o->stream, err, sizeof err) < 0) {
            fail(c, ncclUnhandledCudaError, "%s: %s", o->what, err);
            return;
        }
    }
    c->head = g->next;
    if (!c->head) c->tail = NULL;
    if (g->done_flag) *g->done_flag = 1;
    group_free(g);
}

static int ok(ncclComm_t c) { return c->async == ncclSuccess || c->async == ncclInProgress; }

/* One round of progress of every communicator of the process: init, then the groups in flight,
 * one poll over all their sockets (at most wait_ms): none blocks the others. */
static void progress_all(int wait_ms) {
    static struct pollfd pf[MAX_COMMS * MAX_RANKS];
    static int who[MAX_COMMS * MAX_RANKS];
    static int inside; /* a hook that calls back into NCCL (a watch) must not re-enter this */
    LOCK();
    if (inside) {
        UNLOCK();
        return;
    }
    inside = 1;
    int from[MAX_COMMS], count[MAX_COMMS], busy[MAX_COMMS], np = 0, waiting = 0;
    for (int k = 0; k < n_live; k++) {
        ncclComm_t c = live[k];
        busy[k] = ok(c) && init_step(c) && start_head(c);
        waiting |= ok(c) && (!c->init_done || c->stalled);
        from[k] = np, count[k] = 0;
        if (busy[k]) poll_set(c, pf, who, &np), count[k] = np - from[k];
    }
    if (np) poll(pf, (nfds_t)np, wait_ms);
    else if (waiting && wait_ms) usleep(1000);
    for (int k = 0; k < n_live; k++)
        if (busy[k] && ok(live[k])) advance(live[k], pf + from[k], who + from[k], count[k]);
    inside = 0;
    UNLOCK();
}

static group *share_of(ncclComm_t c, int create);

/* ---- the API ---- */
ncclResult_t ncclGetVersion(int *version) {
    if (!version) return ncclInvalidArgument;
    const char *v = getenv("DP_NCCL_DOUBLE_VERSION"); /* a test of dptrain's floor: pretend to be that NCCL */
    *version = v && *v ? atoi(v) : NCCL_VERSION_CODE;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    if (!id) return ncclInvalidArgument;
    memset(id, 0, sizeof *id);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(id->internal, sizeof id->internal, "dp-nccl-double-%d-%ld-%ld", (int)getpid(), (long)ts.tv_sec,
             ts.tv_nsec);
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t c) { return c ? c->last : ""; }

ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config) {
    if (!out || nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    if (n_live == MAX_COMMS) return ncclInvalidUsage;
    ncclComm_t c = calloc(1, sizeof *c);
    if (!c) return ncclSystemError;
    live[n_live++] = c;
    c->rank = rank, c->world = nranks;
    c->blocking = !config || config->blocking != 0;
    c->id = id;
    c->id.internal[sizeof c->id.internal - 1] = 0;
    for (int q = 0; q < MAX_RANKS; q++) c->p[q].fd = -1;
    c->init_deadline = now_s() + 300;
    c->async = ncclInProgress;
    *out = c;
    c->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a;
    socklen_t len;
    addr_of(&id, rank, &a, &len);
    if (c->listen_fd < 0 || bind(c->listen_fd, (struct sockaddr *)&a, len) != 0 || listen(c->listen_fd, MAX_RANKS) != 0)
        return fail(c, ncclSystemError, "cannot listen for the other ranks: %s", strerror(errno));
    if (fault("init", rank, 0)) return fail(c, ncclSystemError, "injected fault in ncclCommInitRankConfig (DP_NCCL_DOUBLE_FAULT)");
    nonblock(c->listen_fd);
    if (grp.depth > 0) { /* created in a group: ready when the group's end says so (an empty share of it) */
        if (!share_of(c, 1)) return fail(c, ncclSystemError, "one group over more than %d communicators", MAX_COMMS);
        return ncclInProgress;
    }
    if (c->blocking) {
        while (c->async == ncclInProgress) progress_all(1);
        return c->async;
    }
    progress_all(0);
    return c->async;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r) {
    if (!c || !r) return ncclInvalidArgument;
    progress_all(1);
    LOCK();
    *r = c->async != ncclSuccess ? c->async : (c->head ? ncclInProgress : ncclSuccess);
    UNLOCK();
    return ncclSuccess;
}

/* c's share of the group being built (created when create is set; NULL: none). */
static group *share_of(ncclComm_t c, int create) {
    for (int k = 0; k < grp.n; k++)
        if (grp.comm[k] == c) return grp.g[k];
    if (!create || grp.n == MAX_COMMS) return NULL;
    group *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    grp.comm[grp.n] = c, grp.g[grp.n++] = g;
    return g;
}

static void group_discard(void) {
    for (int k = 0; k < grp.n; k++) group_free(grp.g[k]);
    grp.n = 0;
}

static ncclResult_t add_op(ncclComm_t c, op o) {
    if (!c) return ncclInvalidArgument;
    if (c->async != ncclSuccess && c->async != ncclInProgress) return c->async;
    if (!c->init_done) return fail(c, ncclInvalidUsage, "an operation before the communicator was ready");
    group *g = share_of(c, 1);
    if (!g) return fail(c, ncclSystemError, "one group over more than %d communicators, or out of memory", MAX_COMMS);
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 8;
        op *ops = realloc(g->ops, (size_t)cap * sizeof *ops);
        if (!ops) return ncclSystemError;
        g->ops = ops, g->cap = cap;
    }
    g->ops[g->n++] = o;
    if (!g->stream) g->stream = issuing;
    c->stream_seen = issuing;
    charge_connection(c, &o);
    return ncclSuccess;
}

/* ---- the device mode (DP_NCCL_DOUBLE_DEVICE=1) ----
 * With every rank of a group's communicators in this process (one process, --gpus) and the buffers
 * CUDA device memory, a matched send and receive is a copy queued between the two streams
 * (cuda_stage.h: dbl_cuda_transfer: the sender's stream waits for the receiver's work so far,
 * copies, and the receiver's stream waits for the copy), nothing is waited for on the host, and the
 * group is done when its end returns, as NCCL's kernels are queued: asynchronous as NCCL is (a host
 * write to a send buffer before the copy ran, or work that reads a result without the collective's
 * order, changes the bytes), and capturable. A group with a sum (ncclAllReduce) or with ranks in
 * other processes takes the host path above. */
static int device_mode(void) {
    const char *v = getenv("DP_NCCL_DOUBLE_DEVICE");
    return v && strcmp(v, "1") == 0 && !hook_host && dbl_cuda_device_calls();
}

/* The nth (from 0) operation of kind `kind` with peer q in g, or NULL. */
static op *nth_op(group *g, int kind, int q, int nth) {
    for (int i = 0; i < g->n; i++)
        if (g->ops[i].kind == kind && g->ops[i].peer == q && nth-- == 0) return &g->ops[i];
    return NULL;
}

/* Whether the group being ended holds every rank of one world, each once, with no sum. */
static int whole_world_here(int n) {
    if (n < 1 || n != grp.comm[0]->world || !device_mode()) return 0;
    int seen[MAX_RANKS] = {0};
    for (int k = 0; k < n; k++) {
        const ncclComm_t c = grp.comm[k];
        if (!ok(c) || !c->init_done || c->world != n || strcmp(c->id.internal, grp.comm[0]->id.internal) != 0 || seen[c->rank]++ ||
            grp.g[k]->sum_dst)
            return 0;
    }
    return 1;
}

static ncclResult_t launch_on_device(int n) {
    static int said;
    if (!said++) /* a test that asks for the mode must see that it got it */
        fprintf(stderr, "nccl test double: device mode: transfers queued on the CUDA streams (DP_NCCL_DOUBLE_DEVICE=1)\n");
    ncclComm_t by_rank[MAX_RANKS];
    group *g_of[MAX_RANKS];
    for (int k = 0; k < n; k++) by_rank[grp.comm[k]->rank] = grp.comm[k], g_of[grp.comm[k]->rank] = grp.g[k];
    ncclResult_t r = ncclSuccess;
    char err[256];
    for (int a = 0; a < n && r == ncclSuccess; a++) {
        group *g = g_of[a];
        int sent[MAX_RANKS] = {0};
        for (int i = 0; i < g->n && r == ncclSuccess; i++) {
            op *o = &g->ops[i];
            if (o->kind == OP_COPY) {
                if (o->bytes && o->dev_buf != o->src &&
                    dbl_cuda_transfer(o->dev_buf, o->stream, o->src, o->stream, o->bytes, err, sizeof err) < 0)
                    r = fail(by_rank[a], ncclUnhandledCudaError, "%s: %s", o->what, err);
                continue;
            }
            if (o->kind != OP_SEND) continue;
            const int b = o->peer;
            op *rv = nth_op(g_of[b], OP_RECV, a, sent[b]++);
            if (!rv || rv->bytes != o->bytes || strcmp(rv->what, o->what) != 0) {
                r = fail(by_rank[a], ncclInvalidUsage, "mismatched operations: this rank's operation %ld sends rank %d "
                         "%s, but rank %d's matching operation %s%s", o->index, b, o->what, b,
                         rv ? "waits to receive " : "is missing from the group", rv ? rv->what : "");
                fail(by_rank[b], ncclInvalidUsage, "mismatched operations with rank %d (its message says which)", a);
            } else if (dbl_cuda_transfer(rv->dev_buf, rv->stream, o->dev_buf, o->stream, o->bytes, err, sizeof err) < 0) {
                r = fail(by_rank[a], ncclUnhandledCudaError, "%s to rank %d: %s", o->what, b, err);
            }
        }
        for (int q = 0; q < n && r == ncclSuccess; q++) /* every receive from a met by one of a's sends */
            if (q != a && nth_op(g_of[q], OP_RECV, a, sent[q]))
                r = fail(by_rank[q], ncclInvalidUsage, "mismatched operations: a receive from rank %d that no send "
                         "of rank %d's in this group meets", a, a);
    }
    for (int k = 0; k < n; k++) group_free(grp.g[k]);
    grp.n = 0;
    return r;
}

/* ---- the device mode over the fake GPU (DP_NCCL_DOUBLE_DEVICE=1 with the device hooks) ----
 * Each communicator's share of a group becomes a host function queued on the share's stream
 * (run_share): when the stream reaches it, it puts a copy of the share in flight and progresses
 * every communicator until that copy is done, reading send buffers and writing results in device
 * memory directly (the stream's earlier work is done, its later work waits). Nothing is waited for
 * on the host, the group end returns at once, and a share issued while its stream records a graph
 * is recorded with it and moves its bytes again at each replay, in stream order with the eager
 * ones: the mixing of captured and eager collectives on one communicator that
 * NCCL_GRAPH_MIXING_SUPPORT=1 allows. */
typedef struct {
    ncclComm_t c;
    const void *stream;
    int n, has_sum;
    float *sum_dst;
    size_t sum_n;
    op ops[]; /* as issued, before staging; part_of marks the all-reduce's receives of parts */
} share_blob;

static int on_streams(int n) {
    const char *v = getenv("DP_NCCL_DOUBLE_DEVICE");
    if (!hook_call || !hook_host || !v || strcmp(v, "1") != 0 || n < 1) return 0;
    for (int k = 0; k < n; k++)
        if (!grp.g[k]->n || !grp.g[k]->stream) return 0; /* an init's empty share, or host buffers */
    return 1;
}

static int is_live(ncclComm_t c) {
    for (int k = 0; k < n_live; k++)
        if (live[k] == c) return 1;
    return 0;
}

/* A fresh copy of the share in flight, with its own parts for a sum; NULL: out of memory. */
static group *share_copy(const share_blob *b) {
    group *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->ops = malloc((size_t)b->n * sizeof *g->ops);
    if (!g->ops) return free(g), NULL;
    memcpy(g->ops, b->ops, (size_t)b->n * sizeof *g->ops);
    g->n = g->cap = b->n, g->stream = b->stream, g->in_stream = 1;
    if (b->has_sum) {
        g->parts = calloc(MAX_RANKS, sizeof *g->parts);
        if (!g->parts) return group_free(g), NULL;
        for (int q = 0; q < b->c->world; q++)
            if (!(g->parts[q] = malloc(b->sum_n ? b->sum_n * sizeof(float) : 1))) return group_free(g), NULL;
        g->sum_dst = b->sum_dst, g->sum_n = b->sum_n;
    }
    for (int i = 0; i < g->n; i++) {
        op *o = &g->ops[i];
        o->started = o->done = o->owned = 0, o->user = NULL;
        if (o->part_of) o->buf = o->dev_buf = (char *)g->parts[o->part_of - 1];
    }
    return g;
}

/* On the stream's worker: the share moves its bytes now, in the stream's order. */
static void run_share(void *arg) {
    const share_blob *b = arg;
    ncclComm_t c = b->c;
    LOCK();
    if (!is_live(c) || !ok(c)) { /* aborted or failed: the run is ending, the bytes stay */
        UNLOCK();
        return;
    }
    group *g = share_copy(b);
    if (!g) {
        fail(c, ncclSystemError, "out of memory for a group in stream order");
        UNLOCK();
        return;
    }
    int done = 0;
    g->done_flag = &done;
    if (c->tail) c->tail->next = g;
    else c->head = g;
    c->tail = g;
    c->users++;
    while (!done && ok(c) && !c->dead) {
        progress_all(0);
        if (done || !ok(c) || c->dead) break;
        UNLOCK();
        const struct timespec pause_ts = {0, 20000};
        nanosleep(&pause_ts, NULL);
        LOCK();
    }
    if (!done && !c->dead) g->done_flag = NULL; /* failed: it stays queued until the abort frees it */
    if (--c->users == 0 && c->dead) free(c);
    UNLOCK();
}

static ncclResult_t launch_on_streams(int n) {
    ncclResult_t r = ncclSuccess;
    for (int k = 0; k < n; k++) {
        ncclComm_t c = grp.comm[k];
        group *g = grp.g[k];
        if (r == ncclSuccess && !ok(c)) r = c->async;
        const size_t bytes = sizeof(share_blob) + (size_t)g->n * sizeof(op);
        share_blob *b = r == ncclSuccess ? malloc(bytes) : NULL;
        if (r == ncclSuccess && !b) r = fail(c, ncclSystemError, "out of memory queueing a group on its stream");
        if (b) {
            *b = (share_blob){.c = c, .stream = g->stream, .n = g->n, .has_sum = g->sum_dst != NULL,
                              .sum_dst = g->sum_dst, .sum_n = g->sum_n};
            memcpy(b->ops, g->ops, (size_t)g->n * sizeof(op));
            hook_call(g->stream, run_share, b, bytes);
            free(b);
        }
        group_free(g);
    }
    grp.n = 0;
    return r;
}

/* Queues each communicator's share of the group; blocking communicators wait for all of it. */
static ncclResult_t launch_locked(void) {
    const int n = grp.n;
    if (whole_world_here(n)) return launch_on_device(n);
    if (on_streams(n)) return launch_on_streams(n);
    ncclComm_t cs[MAX_COMMS];
    ncclResult_t r = ncclSuccess;
    int blocking = 0;
    for (int k = 0; k < n; k++) {
        ncclComm_t c = cs[k] = grp.comm[k];
        group *g = grp.g[k];
        if (!ok(c)) {
            group_free(g);
            if (r == ncclSuccess) r = c->async;
            continue;
        }
        if (c->tail) c->tail->next = g;
        else c->head = g;
        c->tail = g;
        blocking |= c->blocking;
    }
    grp.n = 0;
    if (r != ncclSuccess) return r;
    for (int pending = 1; pending;) {
        progress_all(blocking);
        pending = 0;
        for (int k = 0; k < n; k++) {
            if (!ok(cs[k])) return cs[k]->async;
            pending |= cs[k]->head != NULL;
        }
        if (!blocking) return pending ? ncclInProgress : ncclSuccess;
    }
    return ncclSuccess;
}

static ncclResult_t launch(void) {
    LOCK();
    const ncclResult_t r = launch_locked();
    UNLOCK();
    return r;
}

/* A data-moving call: its number, and the faults that fire when it is issued. */
static ncclResult_t issue(ncclComm_t c, long *index) {
    if (!c) return ncclInvalidArgument;
    *index = ++c->n_ops;
    if (fault("exit", c->rank, *index)) _exit(9);
    if (fault("error", c->rank, *index))
        return fail(c, ncclSystemError, "injected fault at operation %ld (DP_NCCL_DOUBLE_FAULT)", *index);
    if (capturing(issuing) && fault("capture-error", c->rank, ++c->n_capture_ops))
        return fail(c, ncclSystemError, "injected fault at operation %ld, the %ld-th issued while its stream records "
                    "a graph (DP_NCCL_DOUBLE_FAULT)", *index, c->n_capture_ops);
    if (fault("warn", c->rank, *index))
        snprintf(c->last, sizeof c->last, "nccl test double: rank %d: an injected warning at operation %ld, recovered "
                 "from (DP_NCCL_DOUBLE_FAULT)", c->rank, *index);
    return ncclSuccess;
}

static op make(int kind, int peer, void *buf, size_t count, ncclDataType_t t, long index, const char *what) {
    op o;
    memset(&o, 0, sizeof o);
    o.kind = kind, o.peer = peer, o.buf = host_of(buf), o.dev_buf = buf, o.count = count, o.dtype = t;
    o.index = index;
    o.stream = issuing;
    o.bytes = count * type_size(t);
    snprintf(o.what, sizeof o.what, "%s", what);
    return o;
}

static void describe(char *w, const char *call, size_t count, ncclDataType_t t, int root) {
    const char *ty = t == ncclFloat32 ? "float" : t == ncclInt32 ? "int32" : "element";
    if (root >= 0) snprintf(w, WHAT, "%s (root %d) of %zu %ss", call, root, count, ty);
    else snprintf(w, WHAT, "%s of %zu %ss", call, count, ty);
}

/* Inside the double, group_start/group_end: calls to the exported names would go through the
 * PLT to whichever libnccl was loaded first (the real one, in a process that has both). */
static ncclResult_t group_start(void) {
    grp.depth++;
    return ncclSuccess;
}

static ncclResult_t group_end(void) {
    if (grp.depth <= 0) return ncclInvalidUsage;
    if (--grp.depth > 0) return ncclSuccess;
    return launch();
}

ncclResult_t ncclGroupStart(void) { return group_start(); }
ncclResult_t ncclGroupEnd(void) { return group_end(); }

/* The calls outside ncclGroupStart/End are groups of one call. */
#define IMPLICIT_GROUP(c, body)                  \
    do {                                         \
        ncclResult_t r_ = group_start();         \
        if (r_ != ncclSuccess) return r_;        \
        r_ = (body);                             \
        if (r_ != ncclSuccess) {                 \
            grp.depth--;                         \
            group_discard();                     \
            return r_;                           \
        }                                        \
        return group_end();                      \
    } while (0)

static ncclResult_t p2p(int kind, void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c) {
    long index;
    ncclResult_t r = issue(c, &index);
    if (r != ncclSuccess) return r;
    if (!type_size(t)) return fail(c, ncclInvalidArgument, "a data type the double does not move (%d)", (int)t);
    if (peer < 0 || peer >= c->world || peer == c->rank)
        return fail(c, ncclInvalidArgument, "%s rank %d of %d", kind == OP_SEND ? "send to" : "receive from", peer,
                    c->world);
    /* the checker compares the call, the count and the type: a send describes itself as the
       receive it must meet */
    char w[WHAT];
    describe(w, "send/receive", count, t, -1);
    return add_op(c, make(kind, peer, buf, count, t, index, w));
}

ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
    issuing = s;
    if (grp.depth == 0) IMPLICIT_GROUP(c, p2p(OP_SEND, (void *)buf, count, t, peer, c));
    return p2p(OP_SEND, (void *)buf, count, t, peer, c);
}

ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
    issuing = s;
    if (grp.depth == 0) IMPLICIT_GROUP(c, p2p(OP_RECV, buf, count, t, peer, c));
    return p2p(OP_RECV, buf, count, t, peer, c);
}

static ncclResult_t bcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root, ncclComm_t c) {
    long index;
    ncclResult_t r = issue(c, &index);
    if (r != ncclSuccess) return r;
    if (!type_size(t) || root < 0 || root >= c->world)
        return fail(c, ncclInvalidArgument, "broadcast: type %d, root %d of %d", (int)t, root, c->world);
    char w[WHAT];
    describe(w, "broadcast", count, t, root);
    if (c->rank == root) {
        op cp = make(OP_COPY, root, recv, count, t, index, w);
        cp.src = host_of(send);
        if ((r = add_op(c, cp)) != ncclSuccess) return r;
        for (int q = 0; q < c->world && r == ncclSuccess; q++)
            if (q != root) r = add_op(c, make(OP_SEND, q, (void *)send, count, t, index, w));
        return r;
    }
    return add_op(c, make(OP_RECV, root, recv, count, t, index, w));
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t s) {
    issuing = s;
    if (grp.depth == 0) IMPLICIT_GROUP(c, bcast(send, recv, count, t, root, c));
    return bcast(send, recv, count, t, root, c);
}

static ncclResult_t gather_all(const void *send, void *recv, size_t count, ncclDataType_t t, ncclComm_t c) {
    long index;
    ncclResult_t r = issue(c, &index);
    if (r != ncclSuccess) return r;
    const size_t sz = type_size(t);
    if (!sz) return fail(c, ncclInvalidArgument, "all-gather: type %d", (int)t);
    char w[WHAT];
    describe(w, "all-gather", count, t, -1);
    op cp = make(OP_COPY, c->rank, (char *)recv + (size_t)c->rank * count * sz, count, t, index, w);
    cp.src = host_of(send);
    if ((r = add_op(c, cp)) != ncclSuccess) return r;
    for (int q = 0; q < c->world && r == ncclSuccess; q++) {
        if (q == c->rank) continue;
        r = add_op(c, make(OP_SEND, q, (void *)send, count, t, index, w));
        if (r == ncclSuccess) r = add_op(c, make(OP_RECV, q, (char *)recv + (size_t)q * count * sz, count, t, index, w));
    }
    return r;
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t, ncclComm_t c,
                           cudaStream_t s) {
    issuing = s;
    if (grp.depth == 0) IMPLICIT_GROUP(c, gather_all(send, recv, count, t, c));
    return gather_all(send, recv, count, t, c);
}

/* Sum only, float only (all dptrain asks of it: its barrier); every rank's buffer to every
 * rank, added in rank order. */
static ncclResult_t all_reduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t red,
                               ncclComm_t c) {
    long index;
    ncclResult_t r = issue(c, &index);
    if (r != ncclSuccess) return r;
    if (t != ncclFloat32 || red != ncclSum)
        return fail(c, ncclInvalidArgument, "all-reduce: the double adds floats only (type %d, op %d)", (int)t, (int)red);
    if (share_of(c, 0) && share_of(c, 0)->sum_dst)
        return fail(c, ncclInvalidUsage, "two all-reduces of one communicator in one group (not in the double)");
    char w[WHAT];
    describe(w, "all-reduce", count, t, -1);
    op cp = make(OP_COPY, c->rank, recv, count, t, index, w);
    cp.src = host_of(send);
    const int cuda = !hook_host && dbl_cuda_on();
    if (!cuda) cp.stream = NULL; /* the sum below reads and writes recv on the host: not deferred */
    if ((r = add_op(c, cp)) != ncclSuccess) return r;
    group *g = share_of(c, 0);
    if (cuda) g->sum_op = g->n; /* CUDA memory: the sum goes into the copy's staged buffer, then up */
    g->parts = calloc(MAX_RANKS, sizeof *g->parts);
    if (!g->parts) return ncclSystemError;
    g->sum_dst = host_of(recv), g->sum_n = count;
    for (int q = 0; q < c->world; q++) {
        g->parts[q] = malloc(count ? count * sizeof(float) : 1);
        if (!g->parts[q]) return ncclSystemError;
    }
    for (int q = 0; q < c->world && r == ncclSuccess; q++) {
        if (q == c->rank) continue;
        r = add_op(c, make(OP_SEND, q, (void *)send, count, t, index, w));
        op part = make(OP_RECV, q, g->parts[q], count, t, index, w);
        part.part_of = q + 1;
        if (!cuda) part.stream = NULL; /* the double's own host buffer, summed on the host: no write hook */
        if (r == ncclSuccess) r = add_op(c, part);
    }
    return r;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t red,
                           ncclComm_t c, cudaStream_t s) {
    issuing = s;
    if (grp.depth == 0) IMPLICIT_GROUP(c, all_reduce(send, recv, count, t, red, c));
    return all_reduce(send, recv, count, t, red, c);
}

static void comm_free(ncclComm_t c) {
    LOCK();
    if (c->dead) { /* already destroyed; a stream function still holds it */
        UNLOCK();
        return;
    }
    if (c->charged && hook_charge) hook_charge(c->charged_on, -c->charged);
    for (int k = 0; k < n_live; k++)
        if (live[k] == c) live[k] = live[--n_live];
    for (int q = 0; q < MAX_RANKS; q++) {
        if (c->p[q].fd >= 0) close(c->p[q].fd);
        for (out_item *it = c->p[q].out_head, *n; it; it = n) n = it->next, free(it);
    }
    if (c->listen_fd >= 0) close(c->listen_fd);
    for (group *g = c->head, *n; g; g = n) n = g->next, group_free(g);
    c->head = c->tail = NULL;
    if (c->users) { /* a stream function runs one of its groups: it sees this and frees c */
        c->dead = 1;
        if (ok(c)) c->async = ncclSystemError;
        UNLOCK();
        return;
    }
    free(c);
    UNLOCK();
}

ncclResult_t ncclCommFinalize(ncclComm_t c) {
    if (!c) return ncclInvalidArgument;
    if (c->blocking)
        while (c->head && c->async == ncclSuccess) progress_all(1);
    LOCK();
    const ncclResult_t r = c->async != ncclSuccess ? c->async : (c->head ? ncclInProgress : ncclSuccess);
    UNLOCK();
    return r;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
    if (!c) return ncclInvalidArgument;
    comm_free(c);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c) {
    if (!c) return ncclSuccess;
    if (capturing(c->stream_seen)) {
        aborts_in_capture++;
        fprintf(stderr, "nccl test double: rank %d: ncclCommAbort while its stream records a graph (CUDA refuses the "
                "abort's frees and synchronisations there, and the capture is lost)\n", c->rank);
    }
    if (fault("abort-blocks", c->rank, -1))
        for (;;) pause();
    long ms = 0;
    if (fault_value("abort-slow", c->rank, -1, &ms) && ms > 0) {
        struct timespec ts = {(time_t)(ms / 1000), (ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    comm_free(c);
    return ncclSuccess;
}
