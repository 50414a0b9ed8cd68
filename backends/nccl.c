/* nccl.c: the start of the NCCL backend (issue #8): how a job was launched (one process for all
 * visible GPUs, or one per GPU under torchrun or mpirun: backends/rendezvous.h) and whether the
 * GPU it names exists, each refused in one line naming the rank and the device. The collectives
 * need the CUDA executor (issue #7), which is not in this version: a run that gets past the
 * checks says so instead of training. */
#include "dp_config.h"

#if DP_HAVE_NCCL

#include <cuda_runtime_api.h>
#include <stdlib.h>

#include "backends/backend.h"
#include "backends/rendezvous.h"

dp_status dp_nccl_backend_create(const dp_backend_config *cfg, dp_backend_t *out) {
    (void)cfg;
    *out = NULL;
    dp_launch l;
    DP_TRY(dp_launch_from_env(&l));
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    if (e != cudaSuccess || n < 1)
        return dp_fail(DP_ERR_BACKEND, "--backend nccl: rank %d: no usable CUDA device (%s; CUDA_VISIBLE_DEVICES %s%s)",
                       l.rank, e != cudaSuccess ? cudaGetErrorString(e) : "0 devices", visible ? "=" : "unset",
                       visible ? visible : "");
    const int dev = l.kind == DP_LAUNCH_SINGLE ? 0 : l.local_rank;
    if (dev >= n)
        return dp_fail(DP_ERR_BACKEND, "--backend nccl: rank %d: LOCAL_RANK %d names GPU %d, but this node has %d (more "
                       "ranks than GPUs on a node?)", l.rank, l.local_rank, dev, n);
    struct cudaDeviceProp p;
    e = cudaGetDeviceProperties(&p, dev);
    if (e != cudaSuccess)
        return dp_fail(DP_ERR_BACKEND, "--backend nccl: rank %d: GPU %d: %s", l.rank, dev, cudaGetErrorString(e));
    return dp_fail(DP_ERR_UNSUPPORTED, "--backend nccl: rank %d found GPU %d (%s), but the CUDA executor the nccl "
                   "backend runs on is not in this version yet; use --backend sim or mpi", l.rank, dev, p.name);
}

#endif
