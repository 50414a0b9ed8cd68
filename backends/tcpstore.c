/* tcpstore.c: the TCPStore client (tcpstore.h). */
#include "backends/tcpstore.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/netio.h"
#include "core/printable.h"
#include "core/timer.h"

/* torch 1.x's numbering; torch 2.x's is one more (VALIDATE = 0 comes first) */
enum { Q_SET = 0, Q_GET = 2, Q_ADD = 3, Q_CHECK = 4, Q_WAIT = 5, Q_GETNUMKEYS = 6 };
enum { V2_VALIDATE = 0 };
#define V2_MAGIC 0x3C85F7CEu
enum { CHECK_READY = 0 };
enum { WAIT_STOP_WAITING = 0 };

/* A request under construction: little-endian whatever the host. */
typedef struct {
    unsigned char *p;
    size_t n, cap;
} req;

static void put(req *r, const void *src, size_t n) {
    if (r->n + n <= r->cap) memcpy(r->p + r->n, src, n);
    r->n += n; /* past cap: the caller sized it wrong, and send() refuses below */
}
static void put_u64(req *r, uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
    put(r, b, 8);
}
static uint64_t get_u64(const unsigned char *b) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
    return v;
}

static dp_status fail_io(const dp_store *s, const char *what) {
    return dp_fail(DP_ERR_BACKEND, "the TCPStore at %s: %s failed (the store went away, or did not answer in time)",
                   s->where, what);
}

/* Sends command cmd (1.x numbering) with an optional key, an optional value and an optional int64. */
static dp_status request(dp_store *s, int cmd, const char *key, const void *val, size_t n, const int64_t *num,
                         double deadline, const char *what) {
    const size_t klen = key ? strlen(key) : 0;
    req r = {.cap = 1 + (key ? 8 + klen : 0) + (val ? 8 + n : 0) + (num ? 8 : 0) + (cmd == Q_WAIT || cmd == Q_CHECK ? 8 : 0)};
    r.p = malloc(r.cap);
    if (!r.p) return dp_fail(DP_ERR_NOMEM, "out of memory for a TCPStore request of %zu bytes", r.cap);
    unsigned char c = (unsigned char)(cmd + s->v2);
    put(&r, &c, 1);
    if (cmd == Q_WAIT || cmd == Q_CHECK) put_u64(&r, 1); /* these take a list of keys: one */
    if (key) put_u64(&r, klen), put(&r, key, klen);
    if (val) put_u64(&r, n), put(&r, val, n);
    if (num) put_u64(&r, (uint64_t)*num);
    int ok = r.n <= r.cap && dp_net_send(s->fd, r.p, r.n, deadline) == 0;
    free(r.p);
    return ok ? DP_OK : fail_io(s, what);
}

/* The number of keys, asked four times: the question each dialect is asked when connecting. To a
 * 1.x server, 2.x's VALIDATE reads as a SET whose key length is the magic number and the next four
 * bytes: the four questions make that length absurd (about 2^58), so that server drops the
 * connection at once instead of waiting for gigabytes of key. */
static int probe(dp_store *s, double deadline) {
    unsigned char q[9], a[32];
    size_t n = 0;
    if (s->v2) {
        q[n++] = V2_VALIDATE;
        for (int i = 0; i < 4; i++) q[n++] = (unsigned char)(V2_MAGIC >> (8 * i));
    }
    for (int i = 0; i < 4; i++) q[n++] = (unsigned char)(Q_GETNUMKEYS + s->v2);
    return dp_net_send(s->fd, q, n, deadline) == 0 && dp_net_recv(s->fd, a, sizeof a, deadline) == 0;
}

dp_status dp_store_connect(dp_store *s, const char *host, int port, double deadline, const char *who) {
    memset(s, 0, sizeof *s);
    s->fd = -1;
    dp_net_where(host, port, s->where, sizeof s->where); /* printable: for messages */
    int resolved = 0;
    /* 2.x first (current torchrun); a 1.x server drops the 2.x probe (see probe), and a 2.x server
       ignores the 1.x one, so each gets a few seconds to answer */
    for (int v2 = 1; v2 >= 0; v2--) {
        struct timespec nap = {0, 50 * 1000 * 1000};
        while (s->fd < 0 && dp_now() < deadline) { /* the agent may not listen yet */
            s->fd = dp_net_connect(host, port, deadline, &resolved);
            if (s->fd < 0) nanosleep(&nap, NULL);
        }
        if (s->fd < 0) break;
        s->v2 = v2;
        double answer_by = dp_now() + 3.0;
        if (probe(s, answer_by < deadline ? answer_by : deadline)) return DP_OK;
        close(s->fd), s->fd = -1;
    }
    char shown[300];
    if (!resolved)
        return dp_fail(DP_ERR_USAGE, "%s: MASTER_ADDR '%s' does not resolve", who, dp_printable(host, shown, sizeof shown));
    return dp_fail(DP_ERR_BACKEND, "%s: nothing answered as torchrun's agent store (a c10d TCPStore) at %s before the "
                   "deadline (TORCHELASTIC_USE_AGENT_STORE=True: MASTER_ADDR and MASTER_PORT must name the agent's store)",
                   who, s->where);
}

dp_status dp_store_set(dp_store *s, const char *key, const void *val, size_t n, double deadline) {
    return request(s, Q_SET, key, val, n, NULL, deadline, "set");
}

dp_status dp_store_get(dp_store *s, const char *key, void *val, size_t cap, size_t *n, double deadline) {
    DP_TRY(request(s, Q_WAIT, key, NULL, 0, NULL, deadline, "wait"));
    unsigned char w;
    char shown[200]; /* a key holds TORCHELASTIC_RUN_ID */
    if (dp_net_recv(s->fd, &w, 1, deadline) != 0)
        return dp_fail(DP_ERR_BACKEND, "the TCPStore at %s: key '%s' did not appear before the deadline", s->where,
                       dp_printable(key, shown, sizeof shown));
    if (w != WAIT_STOP_WAITING)
        return dp_fail(DP_ERR_BACKEND, "the TCPStore at %s: unexpected answer %u to a wait", s->where, w);
    DP_TRY(request(s, Q_GET, key, NULL, 0, NULL, deadline, "get"));
    unsigned char len[8];
    if (dp_net_recv(s->fd, len, 8, deadline) != 0) return fail_io(s, "get");
    uint64_t got = get_u64(len);
    if (got > cap)
        return dp_fail(DP_ERR_BACKEND, "the TCPStore at %s: key '%s' holds %llu bytes, more than the %zu expected",
                       s->where, dp_printable(key, shown, sizeof shown), (unsigned long long)got, cap);
    if (dp_net_recv(s->fd, val, (size_t)got, deadline) != 0) return fail_io(s, "get");
    *n = (size_t)got;
    return DP_OK;
}

dp_status dp_store_check(dp_store *s, const char *key, int *exists, double deadline) {
    DP_TRY(request(s, Q_CHECK, key, NULL, 0, NULL, deadline, "check"));
    unsigned char a;
    if (dp_net_recv(s->fd, &a, 1, deadline) != 0) return fail_io(s, "check");
    *exists = a == CHECK_READY;
    return DP_OK;
}

dp_status dp_store_add(dp_store *s, const char *key, int64_t delta, int64_t *out, double deadline) {
    DP_TRY(request(s, Q_ADD, key, NULL, 0, &delta, deadline, "add"));
    unsigned char a[8];
    if (dp_net_recv(s->fd, a, 8, deadline) != 0) return fail_io(s, "add");
    *out = (int64_t)get_u64(a);
    return DP_OK;
}

void dp_store_close(dp_store *s) {
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
}
