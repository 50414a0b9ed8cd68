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
 * check each other's WORLD_SIZE and that no rank appears twice. Fails after timeout_s naming
 * the ranks that never connected (rank 0) or the address that never answered (the others). */
dp_status dp_rendezvous_share(const dp_launch *l, void *blob, size_t n, double timeout_s);

#endif
