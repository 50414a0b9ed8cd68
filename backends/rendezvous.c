/* rendezvous.c: the launch variables and the TCP exchange of rank 0's blob (rendezvous.h).
 * The handshake: a rank connects and sends {magic, rank, world}; rank 0 answers {status} and,
 * when the status is 0, the blob. */
#include "backends/rendezvous.h"

#include <errno.h>
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

#include "core/timer.h"

#define MAGIC 0x44505256u /* "DPRV" */

enum { ST_OK = 0, ST_WORLD = 1, ST_DUPLICATE = 2, ST_RANGE = 3 };

/* An integer variable in [lo, hi]; *present says whether it was set. */
static dp_status env_int(const char *name, int lo, int hi, int *out, int *present) {
    const char *v = getenv(name);
    *present = v != NULL;
    if (!v) return DP_OK;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi)
        return dp_fail(DP_ERR_USAGE, "launch: %s='%s' is not an integer from %d to %d", name, v, lo, hi);
    *out = (int)x;
    return DP_OK;
}

static dp_status from_torchrun(dp_launch *l) {
    int have_rank, have_world, have_local, have_port;
    DP_TRY(env_int("WORLD_SIZE", 1, 1 << 20, &l->world, &have_world));
    DP_TRY(env_int("RANK", 0, INT_MAX, &l->rank, &have_rank));
    DP_TRY(env_int("LOCAL_RANK", 0, INT_MAX, &l->local_rank, &have_local));
    DP_TRY(env_int("MASTER_PORT", 1, 65535, &l->port, &have_port));
    const char *addr = getenv("MASTER_ADDR");
    const char *missing = !have_world ? "WORLD_SIZE" : !have_rank ? "RANK" : !have_local ? "LOCAL_RANK"
                          : !addr || !*addr ? "MASTER_ADDR" : !have_port ? "MASTER_PORT" : NULL;
    if (missing)
        return dp_fail(DP_ERR_USAGE, "launch: %s is not set, but %s is: a torchrun-style launch needs RANK, WORLD_SIZE, "
                       "LOCAL_RANK, MASTER_ADDR and MASTER_PORT", missing, have_rank ? "RANK" : "WORLD_SIZE");
    if (l->rank >= l->world)
        return dp_fail(DP_ERR_USAGE, "launch: RANK=%d is not below WORLD_SIZE=%d", l->rank, l->world);
    if (strlen(addr) >= sizeof l->addr)
        return dp_fail(DP_ERR_USAGE, "launch: MASTER_ADDR is longer than %zu characters", sizeof l->addr - 1);
    snprintf(l->addr, sizeof l->addr, "%s", addr);
    l->kind = DP_LAUNCH_TORCHRUN;
    return DP_OK;
}

dp_status dp_launch_from_env(dp_launch *l) {
    memset(l, 0, sizeof *l);
    l->world = 1;
    if (getenv("RANK") || getenv("WORLD_SIZE")) return from_torchrun(l);
    int have_rank, have_size, have_local;
    DP_TRY(env_int("OMPI_COMM_WORLD_RANK", 0, INT_MAX, &l->rank, &have_rank));
    DP_TRY(env_int("OMPI_COMM_WORLD_SIZE", 1, 1 << 20, &l->world, &have_size));
    DP_TRY(env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0, INT_MAX, &l->local_rank, &have_local));
    if (have_rank && have_size) {
        if (l->rank >= l->world)
            return dp_fail(DP_ERR_USAGE, "launch: OMPI_COMM_WORLD_RANK=%d is not below OMPI_COMM_WORLD_SIZE=%d", l->rank,
                           l->world);
        if (!have_local) l->local_rank = 0;
        l->kind = DP_LAUNCH_MPIRUN;
        return DP_OK;
    }
    l->rank = 0, l->world = 1, l->local_rank = 0;
    l->kind = DP_LAUNCH_SINGLE;
    return DP_OK;
}

/* Waits until fd is readable (POLLIN) or writable (POLLOUT), up to the deadline. */
static int wait_fd(int fd, short events, double deadline) {
    for (;;) {
        double left = deadline - dp_now();
        if (left <= 0) return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r > 0) return 1;
        if (r < 0 && errno != EINTR) return -1;
    }
}

static int send_all(int fd, const void *buf, size_t n, double deadline) {
    const char *p = buf;
    while (n) {
        if (wait_fd(fd, POLLOUT, deadline) <= 0) return -1;
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k <= 0) return -1;
        p += k, n -= (size_t)k;
    }
    return 0;
}

static int recv_all(int fd, void *buf, size_t n, double deadline) {
    char *p = buf;
    while (n) {
        if (wait_fd(fd, POLLIN, deadline) <= 0) return -1;
        ssize_t k = recv(fd, p, n, 0);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k <= 0) return -1;
        p += k, n -= (size_t)k;
    }
    return 0;
}

static dp_status serve(const dp_launch *l, const void *blob, size_t n, double deadline, double timeout_s) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    char port[16];
    snprintf(port, sizeof port, "%d", l->port);
    struct addrinfo *ai = NULL;
    if (getaddrinfo(NULL, port, &hints, &ai) != 0 || !ai)
        return dp_fail(DP_ERR_BACKEND, "rank 0: cannot listen on port %d (MASTER_PORT)", l->port);
    int fd = -1;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) close(fd), fd = -1;
    }
    freeaddrinfo(ai);
    if (fd < 0)
        return dp_fail(DP_ERR_BACKEND, "rank 0: cannot listen on port %d (MASTER_PORT): %s (another job there?)",
                       l->port, strerror(errno));
    char *seen = calloc((size_t)l->world, 1);
    if (!seen) {
        close(fd);
        return dp_fail(DP_ERR_NOMEM, "rank 0: out of memory for %d ranks", l->world);
    }
    dp_status st = DP_OK;
    for (int joined = 1; joined < l->world && st == DP_OK;) {
        int w = wait_fd(fd, POLLIN, deadline);
        if (w <= 0) {
            char list[256] = "";
            size_t used = 0;
            for (int r = 1; r < l->world && used + 16 < sizeof list; r++)
                if (!seen[r]) used += (size_t)snprintf(list + used, sizeof list - used, "%s%d", used ? ", " : "", r);
            st = dp_fail(DP_ERR_BACKEND, "rank 0: ranks %s did not connect to port %d within %.0f s (started with "
                         "another MASTER_ADDR or MASTER_PORT, or not started?)", list, l->port, timeout_s);
            break;
        }
        int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) continue;
        uint32_t hello[3];
        if (recv_all(c, hello, sizeof hello, deadline) != 0 || hello[0] != MAGIC) {
            close(c); /* not one of ours (a port scanner, another program): ignore it */
            continue;
        }
        const int r = (int)hello[1], world = (int)hello[2];
        uint32_t status = world != l->world ? ST_WORLD : r < 1 || r >= l->world ? ST_RANGE : seen[r] ? ST_DUPLICATE : ST_OK;
        send_all(c, &status, sizeof status, deadline);
        if (status == ST_OK && send_all(c, blob, n, deadline) == 0) seen[r] = 1, joined++;
        close(c);
        if (status == ST_WORLD)
            st = dp_fail(DP_ERR_USAGE, "rank 0: rank %d was started with WORLD_SIZE=%d, rank 0 with %d", r, world,
                         l->world);
        else if (status == ST_DUPLICATE)
            st = dp_fail(DP_ERR_USAGE, "rank 0: two processes were started with RANK=%d", r);
    }
    free(seen);
    close(fd);
    return st;
}

static dp_status join(const dp_launch *l, void *blob, size_t n, double deadline, double timeout_s) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    char port[16];
    snprintf(port, sizeof port, "%d", l->port);
    /* rank 0 may start later: retry until the deadline */
    struct timespec nap = {0, 50 * 1000 * 1000};
    int resolved = 0;
    while (dp_now() < deadline) {
        struct addrinfo *ai = NULL;
        if (getaddrinfo(l->addr, port, &hints, &ai) != 0 || !ai) {
            nanosleep(&nap, NULL);
            continue;
        }
        resolved = 1;
        for (struct addrinfo *a = ai; a; a = a->ai_next) {
            int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
            if (fd < 0) continue;
            if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
                close(fd);
                continue;
            }
            uint32_t hello[3] = {MAGIC, (uint32_t)l->rank, (uint32_t)l->world}, status = 0;
            int ok = send_all(fd, hello, sizeof hello, deadline) == 0 && recv_all(fd, &status, sizeof status, deadline) == 0;
            if (ok && status == ST_OK) ok = recv_all(fd, blob, n, deadline) == 0;
            close(fd);
            freeaddrinfo(ai);
            if (!ok) return dp_fail(DP_ERR_BACKEND, "rank %d: the connection to rank 0 at %s:%d broke", l->rank, l->addr,
                                    l->port);
            if (status == ST_WORLD)
                return dp_fail(DP_ERR_USAGE, "rank %d: rank 0 at %s:%d was started with another WORLD_SIZE than %d",
                               l->rank, l->addr, l->port, l->world);
            if (status == ST_DUPLICATE)
                return dp_fail(DP_ERR_USAGE, "rank %d: another process was started with RANK=%d", l->rank, l->rank);
            if (status != ST_OK)
                return dp_fail(DP_ERR_USAGE, "rank %d: rank 0 refused RANK=%d", l->rank, l->rank);
            return DP_OK;
        }
        freeaddrinfo(ai);
        nanosleep(&nap, NULL);
    }
    if (!resolved) return dp_fail(DP_ERR_USAGE, "rank %d: MASTER_ADDR '%s' does not resolve", l->rank, l->addr);
    return dp_fail(DP_ERR_BACKEND, "rank %d: rank 0 did not answer at %s:%d within %.0f s (MASTER_ADDR and "
                   "MASTER_PORT must name rank 0's machine and a free port)", l->rank, l->addr, l->port, timeout_s);
}

dp_status dp_rendezvous_share(const dp_launch *l, void *blob, size_t n, double timeout_s) {
    if (l->world <= 1) return DP_OK;
    if (l->kind != DP_LAUNCH_TORCHRUN)
        return dp_fail(DP_ERR_INTERNAL, "rendezvous over TCP needs a torchrun-style launch (MASTER_ADDR, MASTER_PORT)");
    const double deadline = dp_now() + timeout_s;
    return l->rank == 0 ? serve(l, blob, n, deadline, timeout_s) : join(l, blob, n, deadline, timeout_s);
}
