/* rendezvous.h: how the processes of a multi-process GPU job find each other, the ways people
 * launch PyTorch: torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
 * MASTER_PORT), or mpirun's (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK; the blob then goes over
 * MPI, not here). Rank 0 hands a blob (NCCL's unique id) to every other rank over one TCP
 * connection each to MASTER_ADDR:MASTER_PORT; every wait has a deadline, and every failure
 * names the variable, the rank, the address or the missing ranks. No GPU needed: the NCCL
 * backend (issue #8) builds on it, and tests/test_rendezvous.c runs it over loopback. */
#ifndef DP_RENDEZVOUS_H
#define DP_RENDEZVOUS_H

#include <stddef.h>

#include "core/status.h"

typedef enum { DP_LAUNCH_SINGLE = 0, DP_LAUNCH_TORCHRUN, DP_LAUNCH_MPIRUN } dp_launch_kind;

typedef struct {
    dp_launch_kind kind;
    int rank, world, local_rank;
    char addr[256];  /* torchrun: MASTER_ADDR */
    int port;        /* torchrun: MASTER_PORT */
} dp_launch;

/* Reads the launch from the environment: torchrun's variables if RANK or WORLD_SIZE is set
 * (then all five must be, consistently: DP_ERR_USAGE naming the variable otherwise), else
 * mpirun's, else a single process (rank 0 of 1). */
dp_status dp_launch_from_env(dp_launch *l);

/* Rank 0 sends blob (n bytes) to every other rank; the others receive it into blob. Ranks
 * check each other's WORLD_SIZE and that no rank appears twice. Fails after timeout_s naming
 * the ranks that never connected (rank 0) or the address that never answered (the others). */
dp_status dp_rendezvous_share(const dp_launch *l, void *blob, size_t n, double timeout_s);

#endif
