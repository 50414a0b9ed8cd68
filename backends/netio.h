/* netio.h: blocking-free socket helpers with a deadline (core/timer.h's dp_now() clock), shared by
 * the rendezvous (rendezvous.c) and the TCPStore client (tcpstore.c): no call here can outlive its
 * deadline, so a silent peer ends in a message instead of a hang. */
#ifndef DP_NETIO_H
#define DP_NETIO_H

#include <stddef.h>

/* Waits until fd is readable (POLLIN) or writable (POLLOUT): 1 ready, 0 deadline passed, -1 error. */
int dp_net_wait(int fd, short events, double deadline);
/* All n bytes, or -1 (peer gone, error, deadline). */
int dp_net_send(int fd, const void *buf, size_t n, double deadline);
int dp_net_recv(int fd, void *buf, size_t n, double deadline);
/* A non-blocking TCP connection to host:port, tried on each of its addresses until one answers or
 * the deadline passes: the socket (non-blocking, close-on-exec), or -1 with *resolved saying whether
 * the name resolved at all. */
int dp_net_connect(const char *host, int port, double deadline, int *resolved);
/* A non-blocking, close-on-exec TCP socket listening on port (0: one the kernel picks) of every
 * address of this machine, IPv6 and IPv4 alike: one dual-stack socket on :: (IPV6_V6ONLY off,
 * whatever the system's default), or IPv4 alone where IPv6 is off. *bound: the port. -1 with errno
 * set when neither can listen. */
int dp_net_listen(int port, int backlog, int *bound);
/* "host:port", or "[host]:port" for an IPv6 address, the host made printable (core/printable.h):
 * for messages. Returns buf. */
const char *dp_net_where(const char *host, int port, char *buf, size_t cap);

#endif
