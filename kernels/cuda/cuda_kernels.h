/* cuda_kernels.h: what the CUDA kernel table (kernels/kernels.h: dp_cuda_kernels) adds for its
 * callers, in C. */
#ifndef DP_CUDA_KERNELS_H
#define DP_CUDA_KERNELS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The first launch or library failure on device dev since the last call (0 if none; failures are
 * recorded for the device current when they happen): its message into buf. Clears it. */
int dp_cuda_device_error(int dev, char *buf, size_t n);
/* The same for the calling thread's current device. */
int dp_cuda_kernels_error(char *buf, size_t n);
/* Drops device dev's record: at the GPU's first open and last close (device.cu), so that a failure
 * noted during one trainer's teardown is not reported by the next trainer in the same process. */
void dp_cuda_forget_errors(int dev);

#ifdef __cplusplus
}
#endif

#endif
