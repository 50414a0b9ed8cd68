/* nccl_sidechan.c: see nccl_sidechan.h. Fixed 512-byte messages over TCP; rank 0 holds one
 * connection per other rank, the others one to rank 0. Every socket is non-blocking and every wait
 * has a deadline (netio.h), so the channel itself can never hang a rank. */
#include "backends/nccl_sidechan.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "backends/netio.h"
#include "core/printable.h"
#include "core/timer.h"

#define SC_MAGIC 0x44505343u /* "DPSC" */
enum { SC_HELLO = 1, SC_READY, SC_FAIL, SC_DONE };

typedef struct {
    uint32_t magic, type;
    int32_t rank, pad;
    char text[496];
} sc_msg;

struct dp_sidechan {
    int rank, world, listen_fd, failed;
    int per;        /* NCCL ranks per process (--gpus): process p holds ranks p per .. p per + per - 1 */
    int *fd;        /* rank 0: one per other rank (-1: closed); others: fd[0], the hub */
    int *done;      /* rank 0: that rank said it finished */
    sc_msg *in;     /* a message being read, per connection */
    size_t *in_off;
};

static dp_sidechan *make(int rank, int world) {
    dp_sidechan *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->rank = rank, s->world = world, s->listen_fd = -1;
    s->fd = malloc((size_t)world * sizeof *s->fd);
    s->done = calloc((size_t)world, sizeof *s->done);
    s->in = calloc((size_t)world, sizeof *s->in);
    s->in_off = calloc((size_t)world, sizeof *s->in_off);
    if (!s->fd || !s->done || !s->in || !s->in_off) {
        free(s->fd), free(s->done), free(s->in), free(s->in_off), free(s);
        return NULL;
    }
    for (int q = 0; q < world; q++) s->fd[q] = -1;
    return s;
}

static void drop(dp_sidechan *s) {
    if (!s) return;
    for (int q = 0; q < s->world; q++)
        if (s->fd[q] >= 0) close(s->fd[q]);
    if (s->listen_fd >= 0) close(s->listen_fd);
    free(s->fd), free(s->done), free(s->in), free(s->in_off), free(s);
}

static sc_msg message(int type, int rank, const char *text) {
    sc_msg m;
    memset(&m, 0, sizeof m);
    m.magic = SC_MAGIC, m.type = (uint32_t)type, m.rank = rank;
    if (text) snprintf(m.text, sizeof m.text, "%s", text);
    return m;
}

void dp_sidechan_listen(dp_sidechan_addr *addr, dp_sidechan **out) {
    memset(addr, 0, sizeof *addr);
    *out = NULL;
    int port = 0;
    const int fd = dp_net_listen(0, 256, &port); /* IPv6 and IPv4, as rank 0's rendezvous */
    if (fd < 0 || gethostname(addr->host, sizeof addr->host - 1) != 0) {
        if (fd >= 0) close(fd);
        memset(addr, 0, sizeof *addr);
        return;
    }
    addr->port = port;
    dp_sidechan *s = make(0, 1);
    if (!s) {
        close(fd);
        addr->port = 0;
        return;
    }
    s->listen_fd = fd;
    *out = s;
}

static void give_up(dp_sidechan **sc, int rank, const char *why) {
    fprintf(stderr, "dptrain: nccl: rank %d: no side channel (%s): a failed rank is noticed by the others only after "
            "--timeout\n", rank, why);
    drop(*sc);
    *sc = NULL;
}

/* Rank 0: every other rank's hello, then READY to each. NULL, or why the channel is incomplete. */
static const char *accept_all(dp_sidechan *s, double deadline) {
    for (int joined = 0; joined < s->world - 1;) {
        if (dp_net_wait(s->listen_fd, POLLIN, deadline) != 1) return "not every rank connected in time";
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) continue;
        sc_msg h;
        if (dp_net_recv(fd, &h, sizeof h, deadline) != 0 || h.magic != SC_MAGIC || h.type != SC_HELLO || h.rank <= 0 ||
            h.rank >= s->world || s->fd[h.rank] >= 0) {
            close(fd); /* not one of ours (a port scan, a stale rank): not counted */
            continue;
        }
        s->fd[h.rank] = fd, joined++;
    }
    sc_msg ready = message(SC_READY, 0, NULL);
    for (int q = 1; q < s->world; q++)
        if (dp_net_send(s->fd[q], &ready, sizeof ready, deadline) != 0)
            return "a rank's connection closed while the channel was set up";
    close(s->listen_fd), s->listen_fd = -1;
    return NULL;
}

/* Another rank: connect to rank 0's hub, say hello, wait for READY. NULL, or why not. */
static const char *join_hub(dp_sidechan *s, const dp_sidechan_addr *addr, double deadline) {
    int resolved = 0;
    int fd = dp_net_connect(addr->host, addr->port, deadline, &resolved);
    const char *master = getenv("MASTER_ADDR"); /* rank 0's host name may not resolve here: its address may */
    if (fd < 0 && master && *master) fd = dp_net_connect(master, addr->port, deadline, &resolved);
    if (fd < 0) return "cannot reach rank 0's host";
    s->fd[0] = fd;
    sc_msg hello = message(SC_HELLO, s->rank, NULL), ready;
    if (dp_net_send(fd, &hello, sizeof hello, deadline) != 0 || dp_net_recv(fd, &ready, sizeof ready, deadline) != 0 ||
        ready.magic != SC_MAGIC || ready.type != SC_READY)
        return "rank 0 did not complete it in time";
    return NULL;
}

void dp_sidechan_connect(dp_sidechan **sc, const dp_sidechan_addr *addr, int rank, int world, int per,
                         double timeout_s) {
    const double deadline = dp_now() + timeout_s;
    if (world <= 1 || !addr->port) {
        if (world > 1 && rank == 0) fprintf(stderr, "dptrain: nccl: rank 0: no side channel (could not listen)\n");
        drop(*sc);
        *sc = NULL;
        return;
    }
    dp_sidechan *s = make(rank, world);
    if (s) s->per = per > 1 ? per : 1;
    if (s && rank == 0 && *sc) s->listen_fd = (*sc)->listen_fd, (*sc)->listen_fd = -1; /* the hub's socket */
    drop(*sc);
    *sc = s;
    const char *why = !s ? "out of memory" : rank == 0 ? accept_all(s, deadline) : join_hub(s, addr, deadline);
    if (why) give_up(sc, rank, why);
}

/* Best effort, never blocking long: a peer that does not read is not waited for. */
static void post(int fd, const sc_msg *m) {
    if (fd >= 0) (void)dp_net_send(fd, m, sizeof *m, dp_now() + 1.0);
}

static void relay(dp_sidechan *s, int from, const sc_msg *m) {
    for (int q = 1; q < s->world; q++)
        if (q != from) post(s->fd[q], m);
}

/* Reads connection q: 1 a failure (why filled), 0 nothing yet or a clean end. */
static int read_one(dp_sidechan *s, int q, char *why, size_t cap) {
    for (;;) {
        ssize_t r = recv(s->fd[q], (char *)&s->in[q] + s->in_off[q], sizeof(sc_msg) - s->in_off[q], 0);
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
        if (r <= 0) { /* closed: a rank that never said it finished was killed or crashed */
            close(s->fd[q]), s->fd[q] = -1;
            const int peer = s->rank == 0 ? q : 0;
            if (s->rank == 0 ? s->done[q] : 0) return 0;
            if (s->per > 1)
                snprintf(why, cap, "the process of ranks %d-%d ended before it finished (killed, or crashed)",
                         peer * s->per, peer * s->per + s->per - 1);
            else
                snprintf(why, cap, "rank %d's process ended before it finished (killed, or crashed)", peer);
            return 1;
        }
        s->in_off[q] += (size_t)r;
        if (s->in_off[q] < sizeof(sc_msg)) continue;
        s->in_off[q] = 0;
        const sc_msg *m = &s->in[q];
        if (m->magic != SC_MAGIC) continue;
        if (m->type == SC_DONE) {
            if (s->rank == 0) s->done[q] = 1;
            else close(s->fd[0]), s->fd[0] = -1; /* rank 0 finished: no relay from here on */
            return 0;
        }
        if (m->type == SC_FAIL) { /* from the network: bounded, and made printable */
            const size_t len = strnlen(m->text, sizeof m->text);
            dp_printable_message(m->text, len, why, cap);
            return 1;
        }
    }
}

int dp_sidechan_poll(dp_sidechan *s, char *why, size_t cap) {
    if (!s || s->failed) return 0;
    for (int q = s->rank == 0 ? 1 : 0; q < (s->rank == 0 ? s->world : 1); q++) {
        if (s->fd[q] < 0) continue;
        struct pollfd p = {.fd = s->fd[q], .events = POLLIN};
        if (poll(&p, 1, 0) != 1) continue;
        if (read_one(s, q, why, cap)) {
            s->failed = 1;
            if (s->rank == 0) {
                sc_msg m = message(SC_FAIL, q, why);
                relay(s, q, &m);
            }
            return 1;
        }
    }
    return 0;
}

int dp_sidechan_wait(dp_sidechan *s, char *why, size_t cap, double seconds) {
    const double until = dp_now() + seconds;
    for (;;) {
        if (dp_sidechan_poll(s, why, cap)) return 1;
        if (!s || s->failed || dp_now() > until) return 0;
        const struct timespec nap = {0, 10 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
}

void dp_sidechan_fail(dp_sidechan *s, const char *why) {
    if (!s || s->failed) return;
    s->failed = 1;
    sc_msg m = message(SC_FAIL, s->rank, why);
    if (s->rank == 0) relay(s, 0, &m);
    else post(s->fd[0], &m);
}

void dp_sidechan_close(dp_sidechan *s, int finished) {
    if (!s) return;
    if (finished) {
        sc_msg m = message(SC_DONE, s->rank, NULL);
        if (s->rank == 0) relay(s, 0, &m);
        else post(s->fd[0], &m);
    }
    drop(s);
}
