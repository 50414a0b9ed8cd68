/* nccl_sidechan.h: a side channel beside the NCCL communicator that tells every rank at once when
 * one fails, and which one failed first. NCCL's shared-memory and NVLink transports do not notice a
 * dead peer: without it, every survivor would wait out its whole --timeout, and then name only the
 * collective it was in. Rank 0 hosts a TCP hub that every other rank connects to while the
 * communicator is set up; a rank that fails sends its message there and rank 0 relays it; a rank
 * whose connection closes before it said it finished (killed, crashed) is reported as such. When the
 * channel cannot be set up (a firewall), the run goes on without it, after one warning. */
#ifndef DP_NCCL_SIDECHAN_H
#define DP_NCCL_SIDECHAN_H

#include <stddef.h>

#include "core/status.h"

typedef struct dp_sidechan dp_sidechan;

/* Where rank 0's hub listens, shared with the other ranks beside NCCL's unique id. */
typedef struct {
    char host[64];
    int port; /* 0: no hub (rank 0 could not listen) */
} dp_sidechan_addr;

/* Rank 0: listens and fills *addr. Never fails the run: no hub gives port 0. */
void dp_sidechan_listen(dp_sidechan_addr *addr, dp_sidechan **out);
/* Every process, once the address is shared (rank and world count processes; per: NCCL ranks
 * each holds, for messages): process 0 accepts world - 1 connections, the others connect; at most
 * timeout_s. A channel that is not complete is closed with a warning on stderr (*out may be NULL
 * then: every call below takes NULL). Process 0 passes what dp_sidechan_listen gave. */
void dp_sidechan_connect(dp_sidechan **sc, const dp_sidechan_addr *addr, int rank, int world, int per,
                         double timeout_s);
/* Whether another rank failed: 1 with its message in why (rank 0 relays it to the rest first). */
int dp_sidechan_poll(dp_sidechan *sc, char *why, size_t cap);
/* The same, waiting up to seconds for a message (a peer's closed connection is often the
 * consequence of another rank's failure, whose message is on its way through rank 0). */
int dp_sidechan_wait(dp_sidechan *sc, char *why, size_t cap, double seconds);
/* This rank failed: its message to the others (once; a relayed failure is not sent back). */
void dp_sidechan_fail(dp_sidechan *sc, const char *why);
/* This rank finished well: says so and closes. */
void dp_sidechan_close(dp_sidechan *sc, int finished);

#endif
