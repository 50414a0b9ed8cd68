/* devices.h: the registry of the devices --device can name (devices.c): the ones the build linked in,
 * the ones in the GPU plugin, loaded when first named (backends/gpu_plugin.h), and the ones it left
 * out, with how to get them (all three from the generated dp_devices.h: one X(name, ...) per device
 * folder, whose kind is dp_<name>_device), and the ones tests register. It sits above the backends
 * because the plugin also carries one; the device seam itself is kernels/device.h. */
#ifndef DP_EXEC_DEVICES_H
#define DP_EXEC_DEVICES_H

#include <stddef.h>

#include "core/status.h"
#include "kernels/device.h"

/* Every device --device can name, built into this build or not (opening one it left out says how
 * to get it), NULL-terminated: --device's choices. Devices tests register are not offered. */
extern const char *const dp_device_names[];

/* Opens the device named `name` from the registry. An unknown name, or a device this build
 * left out, fails with a message that lists what there is and how to get the missing one. waits:
 * how its waits end (the caller's, valid until it closes the device; a backend may set its watch:
 * dp_backend_config.waits); NULL: they block. */
dp_status dp_dev_open(const char *name, int ordinal, int tf32, const dp_wait_policy *waits, dp_dev **out);
void dp_dev_close(dp_dev *d);
/* Adds a device kind (tests: a device that is not offered to users); fails when the name is
 * taken or the registry is full. */
dp_status dp_dev_register(const dp_dev_kind *kind);
/* --version's line, from what was compiled (nothing here loads the GPU plugin):
 * "cpu (OpenMP), cuda (cuBLAS, cuDNN; --device cuda; loaded on use)", a device left out
 * "cuda (not built)". */
void dp_dev_describe(char *buf, size_t n);
/* 1 if host code may read and write d's memory directly (what a backend is told: dp_backend_config). */
int dp_dev_host_memory(const dp_dev *d);

#endif
