/* rendezvous.h: how the processes of a multi-process GPU job find each other. Under torchrun
 * (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; backends/launch_env.h) rank 0 hands a
 * blob (NCCL's unique id) to every other rank: through torchrun's agent store when the agent hosts
 * one on MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True, as every torchrun of torch 2
 * does; backends/tcpstore.h), else over one TCP connection each to rank 0, which listens on
 * MASTER_PORT (the variables set by hand, or another launcher that only exports them). Under an MPI
 * launcher the blob goes over MPI, not here. Every wait has a deadline, and every failure names the
 * variable, the rank, the address or the missing ranks. No GPU needed: tests/test_rendezvous.c runs
 * it over loopback, tests/test_torchrun.c against PyTorch's own store and a real torchrun. */
#ifndef DP_RENDEZVOUS_H
#define DP_RENDEZVOUS_H

#include <stddef.h>

#include "backends/launch_env.h"
#include "core/status.h"

/* Rank 0 sends blob (n bytes) to every other rank; the others receive it into blob. Ranks
 * check each other's WORLD_SIZE and job token and that no rank appears twice. Fails after
 * timeout_s naming the ranks that never connected (rank 0) or the address that never answered
 * (the others).
 * Over rank 0's own server: a connection attempt is non-blocking and polled (a host that drops
 * SYNs ends at the deadline, not after the kernel's two minutes); rank 0 reads every accepted
 * connection at once, each with 5 s for its hello, so a silent one (a health check, a port
 * scanner) delays no rank and is dropped; a rank whose job token differs from rank 0's is refused,
 * both sides naming both tokens, and rank 0 goes on waiting for its own ranks. Rank 0 listens on
 * IPv6 and IPv4 alike (netio.h: dp_net_listen), so MASTER_ADDR may be an address of either family;
 * what a peer sends is escaped before a message shows it (core/printable.h). */
dp_status dp_rendezvous_share(const dp_launch *l, void *blob, size_t n, double timeout_s);

/* The job token every rank of one job shares, so that two jobs given one MASTER_ADDR:MASTER_PORT
 * cannot cross: "DPTRAIN_JOB_TOKEN=<value>" when that variable is set (a launcher or script may
 * set it to anything unique, e.g. rank 0's host, pid and time, exported before the ranks start),
 * else "TORCHELASTIC_RUN_ID=<id>/restart <n>" under torchrun, else "SLURM_JOB_ID=<id>" under Slurm,
 * else "" (none: every rank has the same, and only WORLD_SIZE and the ranks tell jobs apart). A
 * token is generated nowhere: the other ranks could learn it only through the connection it
 * guards. Tokens are compared whole, every byte: a value longer than DP_JOB_TOKEN_VALUE_MAX
 * characters is refused (DP_ERR_USAGE naming the variable), never cut. tok: DP_RDV_TOKEN_MAX
 * bytes, filled with NULs after the token. */
#define DP_JOB_TOKEN_VALUE_MAX 1000
#define DP_RDV_TOKEN_MAX 1024 /* the token with its variable's name, and the NUL */
dp_status dp_rendezvous_token(const dp_launch *l, char tok[DP_RDV_TOKEN_MAX]);

/* Rank 0's side over fd, a TCP socket already bound (tests bind port 0 and read the port, with no
 * race for a free port); it is listened on here (again, if the caller did) and closed. */
dp_status dp_rendezvous_serve_fd(int fd, const dp_launch *l, const void *blob, size_t n, double timeout_s);

#endif
