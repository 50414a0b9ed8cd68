/* register.c: makes --device cuda the stand-in's CUDA device (kernels/cuda/device.cu built against
 * tests/cudashim/) in a test program linked with it, before main: the registry finds a registered
 * kind before it would load the GPU plugin (src/exec/devices.c). */
#include "exec/devices.h"

extern const dp_dev_kind dp_cuda_device;

__attribute__((constructor)) static void register_cuda(void) { (void)dp_dev_register(&dp_cuda_device); }
