/* nccl.h: what the trainer asks the NCCL backend (backends/nccl.c) before it opens the GPU:
 * the launch (backends/rendezvous.h) and the GPU this rank drives (LOCAL_RANK under torchrun or
 * mpirun, 0 for one process), refused in one line naming the rank and the device. */
#ifndef DP_NCCL_H
#define DP_NCCL_H

#include "backends/backend.h"
#include "core/status.h"

dp_status dp_nccl_precheck(int *gpu);
/* --gpus: every listed GPU is one this machine has (under the test double: one it says it has),
 * and the launch is one process per node (several processes there would drive the same GPUs);
 * DP_ERR_USAGE naming the GPU or the launch otherwise. */
dp_status dp_nccl_precheck_gpus(const int *gpus, int n);
/* Which NCCL this process loaded: the real one, or its test double (tests/nccl_double/, loaded
 * with LD_PRELOAD). Looked up once per process (dp_nccl_loaded); the backend keeps the answer
 * (nccl_impl.h: loaded). */
typedef struct {
    int is_double;   /* the test double: no proxy thread, and its GPUs may be stand-ins, so the
                        placement checks (launch_affinity.h) are not run */
    int host_memory; /* it moves host memory (only the double does): then `--device cpu` takes NCCL's
                        collectives, so that CI runs the backend with several ranks without a GPU */
    int gpus;        /* how many GPUs the double says this machine has (DP_NCCL_DOUBLE_GPUS, default
                        8); -1 with the real NCCL */
} dp_nccl_which;
const dp_nccl_which *dp_nccl_loaded(void);
/* The backend (nccl.c): what its row's create calls, through the GPU plugin's table (gpu_plugin.h). */
dp_status dp_nccl_backend_create(const dp_backend_config *cfg, dp_backend_t *out);

#endif
