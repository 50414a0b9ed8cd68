/* tcpstore.h: a client of PyTorch's c10d TCPStore, the key-value store that torchrun's agent hosts on
 * MASTER_ADDR:MASTER_PORT (and announces with TORCHELASTIC_USE_AGENT_STORE=True), with just what a
 * rendezvous needs: set, check, wait-and-get, add. Every call has a deadline.
 *
 * The wire format (torch/csrc/distributed/c10d/TCPStore.cpp and its two servers, TCPStoreBackend.cpp
 * and TCPStoreLibUvBackend.cpp): a request is one command byte and its arguments; a key or a value is
 * a little-endian uint64 length and its bytes; integers are little-endian. torch 2.x numbers the
 * commands from VALIDATE = 0 and ignores a connection until it has sent VALIDATE with a magic number;
 * torch 1.x has no VALIDATE and numbers them from SET = 0 (everything else in the same order).
 * dp_store_connect asks each dialect in turn for the number of keys and keeps the one that answers. */
#ifndef DP_TCPSTORE_H
#define DP_TCPSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct {
    int fd;
    int v2;           /* 1: torch 2.x's dialect (VALIDATE first, commands shifted by one) */
    char where[300];  /* "host:port", for messages */
} dp_store;

/* Connects and finds the dialect; who ("rank 1") starts the messages. DP_ERR_BACKEND when nothing
 * answers as a TCPStore before the deadline. */
dp_status dp_store_connect(dp_store *s, const char *host, int port, double deadline, const char *who);
dp_status dp_store_set(dp_store *s, const char *key, const void *val, size_t n, double deadline);
/* Waits (up to the deadline) until key exists, then reads its value into val (cap bytes at most;
 * *n: its length). DP_ERR_BACKEND naming the key when the deadline passes first. */
dp_status dp_store_get(dp_store *s, const char *key, void *val, size_t cap, size_t *n, double deadline);
/* Whether key exists, without waiting. */
dp_status dp_store_check(dp_store *s, const char *key, int *exists, double deadline);
/* Adds delta to the integer at key (0 when new); *out: the new value. */
dp_status dp_store_add(dp_store *s, const char *key, int64_t delta, int64_t *out, double deadline);
void dp_store_close(dp_store *s);

#endif
