/* gpu_plugin_table.c: the GPU plugin's table (gpu_plugin.h): what dptrain_cuda.so offers the core, which
 * loads it on first use: the devices and backends CMake lists as in the plugin. Compiled only into the
 * plugin (and into the test programs that link its objects directly). */
#include "backends/gpu_plugin.h"
#include "dp_backends.h"
#include "dp_config.h"
#include "dp_devices.h"

#define X(n, what) extern const dp_dev_kind dp_##n##_device;
DP_PLUGIN_DEVICE_KINDS
#undef X
#define X(n) extern const dp_gpu_backend dp_##n##_plugin_backend;
DP_PLUGIN_BACKEND_KINDS
#undef X

#define X(n, what) &dp_##n##_device,
static const dp_dev_kind *const devices[] = {DP_PLUGIN_DEVICE_KINDS NULL};
#undef X
#define X(n) &dp_##n##_plugin_backend,
static const dp_gpu_backend *const backends[] = {DP_PLUGIN_BACKEND_KINDS NULL};
#undef X

const dp_gpu_plugin dp_gpu_plugin_table = {
    .version = DP_VERSION,
    .abi = DP_GPU_PLUGIN_ABI,
    .devices = devices,
    .backends = backends,
};
