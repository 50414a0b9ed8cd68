/* gpu_plugin.h: the parts of a CUDA build that link the GPU libraries -- the CUDA device and its
 * kernels (kernels/cuda/) and the NCCL backend (backends/nccl.c, nccl_coll.c, nccl_precheck.c) --
 * built as one plugin, dptrain_cuda.so, and loaded only when a run asks for them (--device cuda,
 * --backend nccl). Linked into the executable, the CUDA runtime, cuBLAS, cuDNN and NCCL were
 * mapped and relocated at every start: `dptrain --version` took ~230 MiB resident, and a CPU run
 * under a 96 MiB memory limit was killed before it checked anything. Now a CPU run never maps
 * them.
 *
 * The plugin is looked for next to the executable (the build tree) and where it is installed
 * (DP_PLUGIN_RELDIR from the executable's directory); it takes what it needs of the core from the
 * executable, which exports the dp_* symbols. Test programs link the plugin's objects instead:
 * then the table is found in the program and nothing is loaded. */
#ifndef DP_GPU_PLUGIN_H
#define DP_GPU_PLUGIN_H

#include "backends/backend.h"
#include "core/status.h"
#include "kernels/device.h"

/* The file the plugin is built as. */
#define DP_GPU_PLUGIN_FILE "dptrain_cuda.so"

/* What the plugin offers, in one table (the one symbol looked up in it: dp_gpu_plugin_table). */
typedef struct {
    const char *version; /* DP_VERSION of the build it came from: the executable's own, or refused */
    unsigned abi;        /* DP_GPU_PLUGIN_ABI: this table's and the core's structs as the plugin knows them */
    const dp_dev_kind *cuda;
    /* the NCCL backend (backends/nccl.h); NULL where the build had no NCCL */
    dp_status (*nccl_create)(const dp_backend_config *cfg, dp_backend_t *out);
    dp_status (*nccl_precheck)(int *gpu);
    dp_status (*nccl_precheck_gpus)(const int *gpus, int n);
    int (*nccl_moves_host_memory)(void);
} dp_gpu_plugin;

/* Changes whenever the table, dp_dev, dp_kernels or dp_backend change shape. */
#define DP_GPU_PLUGIN_ABI                                                                               \
    ((unsigned)(sizeof(dp_gpu_plugin) + 3u * sizeof(dp_dev) + 5u * sizeof(dp_kernels) +               \
                7u * sizeof(struct dp_backend) + 11u * sizeof(struct dp_backend_i) + 13u * sizeof(dp_backend_config)))

/* The plugin's table, loading the plugin on the first call. `what` names the flag that asked for
 * it ("--device cuda", "--backend nccl"); a plugin that cannot be found or loaded fails with
 * DP_ERR_UNSUPPORTED naming the file and the dynamic loader's reason (a missing libcudart.so.13,
 * say), and what to do. */
dp_status dp_gpu_plugin_get(const char *what, const dp_gpu_plugin **out);

#endif
