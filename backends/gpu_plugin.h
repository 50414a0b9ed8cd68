/* gpu_plugin.h: the parts of a CUDA build that link the GPU libraries -- the CUDA device and its
 * kernels (kernels/cuda/) and the NCCL backend (backends/nccl.c, nccl_coll.c, nccl_precheck.c,
 * nccl_plugin.c) --
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
#include "backends/backend_kind.h"
#include "core/status.h"
#include "kernels/device.h"

/* The file the plugin is built as. */
#define DP_GPU_PLUGIN_FILE "dptrain_cuda.so"

/* A backend whose work is in the plugin: its row of the backend table (backend_kind.h) is in the
 * core, named like this one, and reaches it through dp_gpu_plugin_backend. */
typedef struct {
    const char *name; /* its backend kind's name */
    dp_status (*create)(const dp_backend_config *cfg, dp_backend_t *out);
    /* the row's devices_ok (backend_kind.h), where it needs the GPU libraries to answer */
    dp_status (*devices_ok)(const dp_device_request *r, int *ordinals, int *n);
} dp_gpu_backend;

/* What the plugin offers, in one table (the one symbol looked up in it: dp_gpu_plugin_table): the
 * devices and backends CMake lists as in the plugin (DP_PLUGIN_DEVICE_KINDS, DP_PLUGIN_BACKEND_KINDS). */
typedef struct {
    const char *version; /* DP_VERSION of the build it came from: the executable's own, or refused */
    unsigned abi;        /* DP_GPU_PLUGIN_ABI: this table's and the core's structs as the plugin knows them */
    const dp_dev_kind *const *devices;      /* NULL-terminated */
    const dp_gpu_backend *const *backends;  /* NULL-terminated */
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
/* The plugin's device kind or backend named name, loading the plugin as dp_gpu_plugin_get does
 * ("--device name", "--backend name"); DP_ERR_UNSUPPORTED when the plugin has none of that name. */
dp_status dp_gpu_plugin_device(const char *name, const dp_dev_kind **out);
dp_status dp_gpu_plugin_backend(const char *name, const dp_gpu_backend **out);

#endif
