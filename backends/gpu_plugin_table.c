/* gpu_plugin_table.c: the GPU plugin's table (gpu_plugin.h): what dptrain_cuda.so offers the core, which
 * loads it on first use. Compiled only into the plugin (and into the test programs that link its
 * objects directly). */
#include "backends/gpu_plugin.h"
#include "dp_config.h"

#if DP_HAVE_NCCL
#include "backends/nccl.h"
dp_status dp_nccl_backend_create(const dp_backend_config *cfg, dp_backend_t *out);
#endif

extern const dp_dev_kind dp_cuda_device; /* kernels/cuda/device.cu */

const dp_gpu_plugin dp_gpu_plugin_table = {
    .version = DP_VERSION,
    .abi = DP_GPU_PLUGIN_ABI,
    .cuda = &dp_cuda_device,
#if DP_HAVE_NCCL
    .nccl_create = dp_nccl_backend_create,
    .nccl_precheck = dp_nccl_precheck,
    .nccl_precheck_gpus = dp_nccl_precheck_gpus,
    .nccl_moves_host_memory = dp_nccl_moves_host_memory,
#endif
};
