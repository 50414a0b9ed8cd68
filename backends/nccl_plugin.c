/* nccl_plugin.c: the NCCL backend's part of the GPU plugin's table (gpu_plugin.h:
 * dp_nccl_plugin_backend), which its row in the core (nccl_kind.c) calls: the constructor (nccl.c)
 * and the device check, which asks the GPUs (nccl_precheck.c). */
#include "dp_config.h"

#if DP_HAVE_NCCL

#include <string.h>

#include "backends/gpu_plugin.h"
#include "backends/nccl.h"

/* The row's devices_ok (backend_kind.h): the GPUs a process drives, one (the launch says which) or
   the ones --gpus lists. */
static dp_status nccl_devices_ok(const dp_device_request *r, int *ordinals, int *n) {
    const int on_cpu = r->device_flag && strcmp(r->device_flag, "cpu") == 0;
    if (on_cpu && !dp_nccl_loaded()->host_memory)
        return dp_fail(DP_ERR_USAGE, "--device cpu: --backend nccl moves GPU memory (drop --device, or use --backend "
                       "sim or mpi for the CPU)");
    if (r->n_gpus > DP_MAX_LOCAL_DEVICES) return dp_fail(DP_ERR_USAGE, "--gpus: at most %d GPUs", DP_MAX_LOCAL_DEVICES);
    if (r->n_gpus) {
        DP_TRY(dp_nccl_precheck_gpus(r->gpus, r->n_gpus));
        for (int i = 0; i < r->n_gpus; i++) ordinals[i] = r->gpus[i];
        *n = r->n_gpus;
        return DP_OK;
    }
    ordinals[0] = r->gpu_flag; /* -1: not given, the launch decides */
    return dp_nccl_precheck(ordinals);
}

const dp_gpu_backend dp_nccl_plugin_backend = {
    .name = "nccl",
    .create = dp_nccl_backend_create,
    .devices_ok = nccl_devices_ok,
};

#endif
