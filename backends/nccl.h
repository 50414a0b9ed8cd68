/* nccl.h: what the trainer asks the NCCL backend (backends/nccl.c) before it opens the GPU:
 * the launch (backends/rendezvous.h) and the GPU this rank drives (LOCAL_RANK under torchrun or
 * mpirun, 0 for one process), refused in one line naming the rank and the device. */
#ifndef DP_NCCL_H
#define DP_NCCL_H

#include "core/status.h"

dp_status dp_nccl_precheck(int *gpu);
/* --gpus: every listed GPU is one this machine has (under the test double: one it says it has),
 * and the launch is one process per node (several processes there would drive the same GPUs);
 * DP_ERR_USAGE naming the GPU or the launch otherwise. */
dp_status dp_nccl_precheck_gpus(const int *gpus, int n);
/* Whether the NCCL loaded moves host memory: only its test double does (tests/nccl_double/,
 * loaded with LD_PRELOAD), and then `--device cpu` takes NCCL's collectives, so that CI runs
 * the backend with several ranks without a GPU. */
int dp_nccl_moves_host_memory(void);

/* Whether the NCCL in this process is the test double (tests/nccl_double/): no proxy thread, and
 * its GPUs may be stand-ins, so the placement checks (launch_affinity.h) are not run. */
int dp_nccl_is_double(void);
/* How many GPUs the test double says this machine has (DP_NCCL_DOUBLE_GPUS, default 8); -1 with
 * the real NCCL. */
int dp_nccl_double_gpus(void);

#endif
