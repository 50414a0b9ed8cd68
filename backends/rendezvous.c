/* rendezvous.c: the exchange of rank 0's blob (rendezvous.h), over rank 0's own TCP server or
 * through torchrun's agent store.
 * Own server: a rank connects and sends {magic, rank, world, job token}; rank 0 answers {status} and,
 * when the status is 0, the blob (ST_TOKEN: rank 0's token, for the refused rank's message).
 * Agent store (keys under dptrain/<TORCHELASTIC_RUN_ID>/attempt_<TORCHELASTIC_RESTART_COUNT>/, so that
 * a restarted group never reads the previous attempt's id): rank 0 sets "id" = {magic, world, blob}; every other rank r
 * sets "world/<r>" to its WORLD_SIZE, adds 1 to "rank/<r>" (a 2 is a second process with that RANK),
 * then waits for "id" and compares the world sizes; rank 0 waits until every "rank/<r>" exists and
 * checks every "world/<r>", so both sides name a missing or mismatched rank. */
#include "backends/rendezvous.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "backends/netio.h"
#include "backends/tcpstore.h"
#include "core/printable.h"
#include "core/timer.h"

#define MAGIC 0x44505233u /* "DPR3": the hello with a whole job token (an older dptrain's "DPR2" is not ours) */
#define HELLO_S 5.0       /* seconds an accepted connection has to send its whole hello */
#define MAX_PENDING 64    /* connections read at once; more wait in the listen backlog */

enum { ST_OK = 0, ST_WORLD = 1, ST_DUPLICATE = 2, ST_RANGE = 3, ST_TOKEN = 4 };

typedef struct {
    uint32_t magic, rank, world;
    char token[DP_RDV_TOKEN_MAX]; /* the job token, NUL-padded ("" when none), compared whole */
} hello_t;

/* The job token (rendezvous.h): the first of DPTRAIN_JOB_TOKEN, torchrun's run id and restart
 * count, Slurm's job id, with the variable it came from, so that a refusal says where to look. */
dp_status dp_rendezvous_token(const dp_launch *l, char tok[DP_RDV_TOKEN_MAX]) {
    const char *e = getenv("DPTRAIN_JOB_TOKEN"), *slurm = getenv("SLURM_JOB_ID");
    const char *var = NULL, *val = NULL; /* the variable, when the token is one variable's value */
    if (e && *e) var = "DPTRAIN_JOB_TOKEN", val = e;
    else if (!l->run_id[0] && slurm && *slurm) var = "SLURM_JOB_ID", val = slurm;
    memset(tok, 0, DP_RDV_TOKEN_MAX);
    if (var && strlen(val) > DP_JOB_TOKEN_VALUE_MAX) /* cut, two jobs that differ further on would join as one */
        return dp_fail(DP_ERR_USAGE, "rank %d: %s is %zu characters long; a job token may have at most %d: give every "
                       "rank of the job a shorter unique value (a hash of this one)", l->rank, var, strlen(val),
                       DP_JOB_TOKEN_VALUE_MAX);
    if (var) snprintf(tok, DP_RDV_TOKEN_MAX, "%s=%s", var, val);
    else if (l->run_id[0]) snprintf(tok, DP_RDV_TOKEN_MAX, "TORCHELASTIC_RUN_ID=%s/restart %d", l->run_id, l->restart);
    return DP_OK;
}

/* The characters of a token shown in a message: enough to recognise it, escaped (it may come from
 * the network, or from another program's variables) */
#define SHOWN 100

/* A token as a message shows it, into buf (SHOWN bytes); *cut says whether it was shortened. */
static const char *shown(const char *tok, char *buf, int *cut) {
    char whole[4 * DP_RDV_TOKEN_MAX + 1];
    *cut = 0;
    if (!tok[0]) return strcpy(buf, "none");
    dp_printable(tok, buf, SHOWN);
    *cut = strcmp(buf, dp_printable(tok, whole, sizeof whole)) != 0;
    return buf;
}

/* Two tokens as a message shows them (a, b: SHOWN bytes each), and where they differ when either was
 * cut (the difference may be past what is shown): note gets "; the two differ from character N". */
static void show_two(const char *ta, const char *tb, char *a, char *b, char *note, size_t cap) {
    int cut_a, cut_b;
    shown(ta, a, &cut_a), shown(tb, b, &cut_b);
    size_t i = 0;
    while (ta[i] && ta[i] == tb[i]) i++;
    note[0] = '\0';
    if (cut_a || cut_b) snprintf(note, cap, "; the two differ from character %zu", i + 1);
}

typedef struct {
    int fd;
    double by; /* its hello must be complete by then */
    size_t got;
    hello_t h;
} pending_t;

/* Answers one complete hello: the status, then the blob (ST_OK) or rank 0's token (ST_TOKEN). The
 * answers are a few hundred bytes into a fresh socket's buffer, so the sends do not wait. */
static dp_status answer(const dp_launch *l, const char *token, const void *blob, size_t n, hello_t *h, int c,
                        char *seen, int *joined, char *foreign, size_t foreign_cap, int *n_foreign) {
    const int r = (int)h->rank, world = (int)h->world;
    const double by = dp_now() + HELLO_S;
    /* every byte: both sides NUL-pad their token */
    uint32_t status = memcmp(h->token, token, DP_RDV_TOKEN_MAX) != 0 ? ST_TOKEN
                      : world != l->world                          ? ST_WORLD
                      : r < 1 || r >= l->world                     ? ST_RANGE
                      : seen[r]                                    ? ST_DUPLICATE
                                                                   : ST_OK;
    const int told = dp_net_send(c, &status, sizeof status, by) == 0; /* else that rank reports it */
    if (told && status == ST_OK && dp_net_send(c, blob, n, by) == 0) seen[r] = 1, (*joined)++;
    if (told && status == ST_TOKEN) dp_net_send(c, token, DP_RDV_TOKEN_MAX, by);
    if (status == ST_TOKEN) { /* another job's rank: refused, and this job goes on waiting for its own */
        char theirs[SHOWN], mine[SHOWN], note[64];
        h->token[DP_RDV_TOKEN_MAX - 1] = '\0'; /* compared; now only shown */
        show_two(h->token, token, theirs, mine, note, sizeof note);
        (*n_foreign)++;
        snprintf(foreign, foreign_cap, "rank %d with job token '%s'; this job's token: '%s'%s", r, theirs, mine, note);
        return DP_OK;
    }
    if (status == ST_WORLD)
        return dp_fail(DP_ERR_USAGE, "rank 0: rank %d was started with WORLD_SIZE=%d, rank 0 with %d", r, world, l->world);
    if (status == ST_DUPLICATE) return dp_fail(DP_ERR_USAGE, "rank 0: two processes were started with RANK=%d", r);
    return DP_OK;
}

/* Rank 0's side over fd (bound; listened on here). Every accepted connection is read at once with
 * the others, each with HELLO_S seconds for its hello: a silent one (a health check, a port scanner)
 * holds no one, and is dropped. */
static dp_status serve_on(int fd, const dp_launch *l, const void *blob, size_t n, double deadline, double timeout_s) {
    if (listen(fd, 128) != 0) {
        close(fd);
        return dp_fail(DP_ERR_BACKEND, "rank 0: cannot listen on port %d (MASTER_PORT): %s", l->port, strerror(errno));
    }
    char token[DP_RDV_TOKEN_MAX];
    if (dp_rendezvous_token(l, token) != DP_OK) {
        close(fd);
        return DP_ERR_USAGE;
    }
    char *seen = calloc((size_t)l->world, 1);
    pending_t *pend = calloc(MAX_PENDING, sizeof *pend);
    if (!seen || !pend) {
        free(seen), free(pend), close(fd);
        return dp_fail(DP_ERR_NOMEM, "rank 0: out of memory for %d ranks", l->world);
    }
    int n_pend = 0, n_foreign = 0;
    char foreign[2 * SHOWN + 128] = "";
    dp_status st = DP_OK;
    for (int joined = 1; joined < l->world && st == DP_OK;) {
        const double now = dp_now();
        if (now >= deadline) {
            char list[256] = "", other[sizeof foreign + 96] = "";
            size_t used = 0;
            for (int r = 1; r < l->world && used + 16 < sizeof list; r++)
                if (!seen[r]) used += (size_t)snprintf(list + used, sizeof list - used, "%s%d", used ? ", " : "", r);
            if (n_foreign)
                snprintf(other, sizeof other, "; %d connection%s of another job refused (the last: %s)", n_foreign,
                         n_foreign == 1 ? "" : "s", foreign);
            st = dp_fail(DP_ERR_BACKEND, "rank 0: ranks %s did not connect to port %d within %.0f s (started with "
                         "another MASTER_ADDR or MASTER_PORT, or not started?)%s", list, l->port, timeout_s, other);
            break;
        }
        /* drop the connections whose hello is late */
        double wake = deadline;
        for (int i = 0; i < n_pend;) {
            if (pend[i].by <= now) {
                close(pend[i].fd);
                pend[i] = pend[--n_pend];
                continue;
            }
            if (pend[i].by < wake) wake = pend[i].by;
            i++;
        }
        struct pollfd p[MAX_PENDING + 1];
        int np = 0;
        for (int i = 0; i < n_pend; i++) p[np++] = (struct pollfd){.fd = pend[i].fd, .events = POLLIN};
        const int lis = n_pend < MAX_PENDING ? np : -1; /* full: the rest wait in the backlog */
        if (lis >= 0) p[np++] = (struct pollfd){.fd = fd, .events = POLLIN};
        const int ms = (int)((wake - now) * 1000) + 1;
        const int k = poll(p, (nfds_t)np, ms);
        if (k < 0 && errno != EINTR) {
            st = dp_fail(DP_ERR_BACKEND, "rank 0: poll on port %d failed: %s", l->port, strerror(errno));
            break;
        }
        if (k <= 0) continue;
        /* the hellos that arrived; pend[i] is p[i] (new connections are appended after this pass) */
        for (int i = np - (lis >= 0 ? 2 : 1); i >= 0 && st == DP_OK; i--) {
            if (!p[i].revents) continue;
            pending_t *q = &pend[i];
            const ssize_t got = recv(q->fd, (char *)&q->h + q->got, sizeof q->h - q->got, 0);
            if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (got > 0) q->got += (size_t)got;
            const int ours = q->got < sizeof(uint32_t) || q->h.magic == MAGIC;
            if (got > 0 && ours && q->got < sizeof q->h) continue; /* the rest of the hello is on its way */
            if (got > 0 && ours) {
                st = answer(l, token, blob, n, &q->h, q->fd, seen, &joined, foreign, sizeof foreign, &n_foreign);
            } /* else closed, or not one of ours (a port scanner, another program): dropped */
            close(q->fd);
            *q = pend[--n_pend];
        }
        if (st != DP_OK) break;
        if (lis >= 0 && (p[lis].revents & POLLIN))
            while (n_pend < MAX_PENDING) {
                int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (c < 0) break;
                const double by = dp_now() + HELLO_S;
                pend[n_pend++] = (pending_t){.fd = c, .by = by < deadline ? by : deadline};
            }
    }
    for (int i = 0; i < n_pend; i++) close(pend[i].fd);
    free(pend);
    free(seen);
    close(fd);
    return st;
}

static dp_status serve(const dp_launch *l, const void *blob, size_t n, double deadline, double timeout_s) {
    int bound = 0;
    const int fd = dp_net_listen(l->port, 128, &bound); /* IPv6 and IPv4: MASTER_ADDR may be either */
    if (fd < 0)
        return dp_fail(DP_ERR_BACKEND, "rank 0: cannot listen on port %d (MASTER_PORT): %s (another job there? under a real "
                       "torchrun its agent's store is, and TORCHELASTIC_USE_AGENT_STORE=True says so)",
                       l->port, strerror(errno));
    return serve_on(fd, l, blob, n, deadline, timeout_s);
}

dp_status dp_rendezvous_serve_fd(int fd, const dp_launch *l, const void *blob, size_t n, double timeout_s) {
    const int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    return serve_on(fd, l, blob, n, dp_now() + timeout_s, timeout_s);
}

static dp_status join(const dp_launch *l, void *blob, size_t n, double deadline, double timeout_s) {
    /* rank 0 may start later: retry until the deadline, each attempt bounded (a dropped SYN would
       otherwise hold a blocking connect for minutes; dp_net_connect polls a non-blocking one) */
    struct timespec nap = {0, 50 * 1000 * 1000};
    int resolved = 0;
    hello_t hello;
    memset(&hello, 0, sizeof hello);
    hello.magic = MAGIC, hello.rank = (uint32_t)l->rank, hello.world = (uint32_t)l->world;
    DP_TRY(dp_rendezvous_token(l, hello.token));
    char where[320];
    dp_net_where(l->addr, l->port, where, sizeof where);
    while (dp_now() < deadline) {
        double attempt = dp_now() + 5;
        int res = 0, fd = dp_net_connect(l->addr, l->port, attempt < deadline ? attempt : deadline, &res);
        resolved |= res;
        if (fd < 0) {
            nanosleep(&nap, NULL);
            continue;
        }
        uint32_t status = 0;
        char theirs[DP_RDV_TOKEN_MAX] = "";
        int ok = dp_net_send(fd, &hello, sizeof hello, deadline) == 0 && dp_net_recv(fd, &status, sizeof status, deadline) == 0;
        if (ok && status == ST_OK) ok = dp_net_recv(fd, blob, n, deadline) == 0;
        if (ok && status == ST_TOKEN) ok = dp_net_recv(fd, theirs, sizeof theirs, deadline) == 0;
        close(fd);
        if (!ok)
            return dp_fail(DP_ERR_BACKEND, "rank %d: the connection to rank 0 at %s broke%s", l->rank, where,
                           l->kind == DP_LAUNCH_TORCHRUN ? " (a real torchrun's agent store there? it sets "
                           "TORCHELASTIC_USE_AGENT_STORE=True; or another program, or an older dptrain)" : "");
        theirs[sizeof theirs - 1] = '\0';
        if (status == ST_TOKEN) {
            char a[SHOWN], b[SHOWN], note[64];
            show_two(theirs, hello.token, a, b, note, sizeof note);
            return dp_fail(DP_ERR_USAGE, "rank %d: rank 0 at %s belongs to another job: its job token is '%s', this "
                           "rank's '%s'%s (two jobs on one MASTER_PORT? give every rank of a job the same "
                           "DPTRAIN_JOB_TOKEN)", l->rank, where, a, b, note);
        }
        if (status == ST_WORLD)
            return dp_fail(DP_ERR_USAGE, "rank %d: rank 0 at %s was started with another WORLD_SIZE than %d",
                           l->rank, where, l->world);
        if (status == ST_DUPLICATE)
            return dp_fail(DP_ERR_USAGE, "rank %d: another process was started with RANK=%d", l->rank, l->rank);
        if (status != ST_OK) return dp_fail(DP_ERR_USAGE, "rank %d: rank 0 refused RANK=%d", l->rank, l->rank);
        return DP_OK;
    }
    char host[300];
    if (!resolved)
        return dp_fail(DP_ERR_USAGE, "rank %d: MASTER_ADDR '%s' does not resolve", l->rank,
                       dp_printable(l->addr, host, sizeof host));
    return dp_fail(DP_ERR_BACKEND, "rank %d: rank 0 did not answer at %s within %.0f s (MASTER_ADDR and "
                   "MASTER_PORT must name rank 0's machine and a free port)", l->rank, where, timeout_s);
}

/* ---- through torchrun's agent store ---- */

typedef struct {
    uint32_t magic, world;
} store_head;

/* dptrain/<run id>/attempt_<restart>/<what>[/<rank>]: one job's keys apart from another's sharing the
 * store, and a restarted group's apart from the attempt before */
static void store_key(char *key, size_t cap, const dp_launch *l, const char *what, int r) {
    int n = snprintf(key, cap, "dptrain/%s%sattempt_%d/%s", l->run_id, l->run_id[0] ? "/" : "", l->restart, what);
    if (r >= 0 && n > 0 && (size_t)n < cap) snprintf(key + n, cap - (size_t)n, "/%d", r);
}

/* Rank 0: publishes the blob, then waits for every rank and checks their world sizes. */
static dp_status store_serve(dp_store *st, const dp_launch *l, const void *blob, size_t n, double deadline,
                             double timeout_s) {
    char key[192];
    unsigned char *val = malloc(sizeof(store_head) + n);
    if (!val) return dp_fail(DP_ERR_NOMEM, "rank 0: out of memory for the rendezvous blob");
    store_head h = {MAGIC, (uint32_t)l->world};
    memcpy(val, &h, sizeof h), memcpy(val + sizeof h, blob, n);
    store_key(key, sizeof key, l, "id", -1);
    dp_status s = dp_store_set(st, key, val, sizeof h + n, deadline);
    free(val);
    DP_TRY(s);
    struct timespec nap = {0, 20 * 1000 * 1000};
    for (int r = 1; r < l->world; r++) {
        int here = 0;
        store_key(key, sizeof key, l, "rank", r);
        while (!here) {
            if (dp_now() >= deadline)
                return dp_fail(DP_ERR_BACKEND, "rank 0: rank %d (and perhaps later ones) did not join through torchrun's "
                               "agent store at %s within %.0f s (not started, or started with another MASTER_PORT?)", r,
                               st->where, timeout_s);
            DP_TRY(dp_store_check(st, key, &here, deadline + 5)); /* the question asked in time gets its answer */
            if (!here) nanosleep(&nap, NULL);
        }
        char w[32] = "";
        size_t wn = 0;
        store_key(key, sizeof key, l, "world", r);
        DP_TRY(dp_store_get(st, key, w, sizeof w - 1, &wn, deadline));
        w[wn] = '\0';
        char shown_w[sizeof w * 4];
        if (atoi(w) != l->world) /* what the store holds: from whatever wrote it */
            return dp_fail(DP_ERR_USAGE, "rank 0: rank %d was started with WORLD_SIZE=%s, rank 0 with %d", r,
                           dp_printable(w, shown_w, sizeof shown_w), l->world);
    }
    return DP_OK;
}

/* Rank r > 0: announces itself, then reads the blob. */
static dp_status store_join(dp_store *st, const dp_launch *l, void *blob, size_t n, double deadline, double timeout_s) {
    char key[192], w[32];
    snprintf(w, sizeof w, "%d", l->world);
    store_key(key, sizeof key, l, "world", l->rank);
    DP_TRY(dp_store_set(st, key, w, strlen(w), deadline));
    int64_t count = 0;
    store_key(key, sizeof key, l, "rank", l->rank);
    DP_TRY(dp_store_add(st, key, 1, &count, deadline));
    if (count > 1) return dp_fail(DP_ERR_USAGE, "rank %d: another process was started with RANK=%d", l->rank, l->rank);
    unsigned char *val = malloc(sizeof(store_head) + n);
    if (!val) return dp_fail(DP_ERR_NOMEM, "rank %d: out of memory for the rendezvous blob", l->rank);
    size_t got = 0;
    store_key(key, sizeof key, l, "id", -1);
    dp_status s = dp_store_get(st, key, val, sizeof(store_head) + n, &got, deadline);
    store_head h = {0, 0};
    if (s == DP_OK && got >= sizeof h) memcpy(&h, val, sizeof h);
    if (s != DP_OK) {
        if (dp_now() >= deadline) /* else the store's own message stands */
            s = dp_fail(DP_ERR_BACKEND, "rank %d: rank 0 did not publish its id in torchrun's agent store at %s within "
                        "%.0f s", l->rank, st->where, timeout_s);
    } else if (got != sizeof h + n || h.magic != MAGIC) {
        char shown_key[sizeof key];
        s = dp_fail(DP_ERR_BACKEND, "rank %d: the agent store's key '%s' is not dptrain's (%zu bytes)", l->rank,
                    dp_printable(key, shown_key, sizeof shown_key), got);
    }
    else if ((int)h.world != l->world)
        s = dp_fail(DP_ERR_USAGE, "rank %d: rank 0 was started with WORLD_SIZE=%u, this rank with %d", l->rank, h.world,
                    l->world);
    else
        memcpy(blob, val + sizeof h, n);
    free(val);
    return s;
}

static dp_status through_store(const dp_launch *l, void *blob, size_t n, double deadline, double timeout_s) {
    char who[32];
    snprintf(who, sizeof who, "rank %d", l->rank);
    dp_store st;
    DP_TRY(dp_store_connect(&st, l->addr, l->port, deadline, who));
    dp_status s = l->rank == 0 ? store_serve(&st, l, blob, n, deadline, timeout_s)
                               : store_join(&st, l, blob, n, deadline, timeout_s);
    dp_store_close(&st);
    if (s != DP_OK && strncmp(dp_last_error(), "rank ", 5) != 0) { /* the store's own message: say whose */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", dp_last_error());
        s = dp_fail(s, "rank %d: %s", l->rank, msg);
    }
    return s;
}

dp_status dp_rendezvous_share(const dp_launch *l, void *blob, size_t n, double timeout_s) {
    if (l->world <= 1) return DP_OK;
    if (l->kind != DP_LAUNCH_TORCHRUN)
        return dp_fail(DP_ERR_INTERNAL, "rendezvous over TCP needs a torchrun-style launch (MASTER_ADDR, MASTER_PORT)");
    const double deadline = dp_now() + timeout_s;
    /* a real torchrun's agent already listens on MASTER_PORT: be its client, never bind there */
    if (l->agent_store) return through_store(l, blob, n, deadline, timeout_s);
    return l->rank == 0 ? serve(l, blob, n, deadline, timeout_s) : join(l, blob, n, deadline, timeout_s);
}
