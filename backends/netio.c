/* netio.c: socket helpers with a deadline (netio.h). */
#include "backends/netio.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/timer.h"

int dp_net_wait(int fd, short events, double deadline) {
    for (;;) {
        double left = deadline - dp_now();
        if (left <= 0) return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r > 0) return 1;
        if (r < 0 && errno != EINTR) return -1;
    }
}

int dp_net_send(int fd, const void *buf, size_t n, double deadline) {
    const char *p = buf;
    while (n) {
        if (dp_net_wait(fd, POLLOUT, deadline) <= 0) return -1;
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k <= 0) return -1;
        p += k, n -= (size_t)k;
    }
    return 0;
}

int dp_net_recv(int fd, void *buf, size_t n, double deadline) {
    char *p = buf;
    while (n) {
        if (dp_net_wait(fd, POLLIN, deadline) <= 0) return -1;
        ssize_t k = recv(fd, p, n, 0);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k <= 0) return -1;
        p += k, n -= (size_t)k;
    }
    return 0;
}

/* One address: connect() started non-blocking, its result polled up to the deadline (a blocking
 * connect to a host that drops SYNs would wait the kernel's two minutes). */
static int connect_one(const struct addrinfo *a, double deadline) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) return fd;
    if (errno != EINPROGRESS || dp_net_wait(fd, POLLOUT, deadline) <= 0) {
        close(fd);
        return -1;
    }
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int dp_net_connect(const char *host, int port, double deadline, int *resolved) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo *ai = NULL;
    *resolved = 0;
    if (getaddrinfo(host, service, &hints, &ai) != 0 || !ai) return -1;
    *resolved = 1;
    int fd = -1;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) fd = connect_one(a, deadline);
    freeaddrinfo(ai);
    return fd;
}
