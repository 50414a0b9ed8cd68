/* netio.c: socket helpers with a deadline (netio.h). */
#include "backends/netio.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/printable.h"
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

/* One listening socket of family fam (AF_INET6: dual-stack) on port, or -1 with errno. */
static int listen_on(int fam, int port, int backlog) {
    int fd = socket(fam, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = in6addr_any, .sin6_port = htons((uint16_t)port)};
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY), .sin_port = htons((uint16_t)port)};
    /* IPv4 clients too (as ::ffff:a.b.c.d): a MASTER_ADDR of either family reaches rank 0 */
    int ok = fam == AF_INET6 ? setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero) == 0 &&
                                   bind(fd, (struct sockaddr *)&a6, sizeof a6) == 0
                             : bind(fd, (struct sockaddr *)&a4, sizeof a4) == 0;
    if (ok && listen(fd, backlog) == 0) return fd;
    const int e = errno;
    close(fd);
    errno = e;
    return -1;
}

int dp_net_listen(int port, int backlog, int *bound) {
    int fd = listen_on(AF_INET6, port, backlog);
    if (fd < 0 && errno != EADDRINUSE && errno != EACCES) fd = listen_on(AF_INET, port, backlog); /* IPv6 off */
    if (fd < 0) return -1;
    struct sockaddr_storage a;
    socklen_t len = sizeof a;
    *bound = port;
    if (getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        *bound = a.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&a)->sin6_port)
                                         : ntohs(((struct sockaddr_in *)&a)->sin_port);
    return fd;
}

const char *dp_net_where(const char *host, int port, char *buf, size_t cap) {
    char shown[300];
    dp_printable(host, shown, sizeof shown);
    const int v6 = strchr(shown, ':') != NULL;
    snprintf(buf, cap, "%s%s%s:%d", v6 ? "[" : "", shown, v6 ? "]" : "", port);
    return buf;
}
