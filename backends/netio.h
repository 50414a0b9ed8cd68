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

#endif
