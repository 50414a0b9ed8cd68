/* cuda_kernels.h: the CUDA kernel table (dp_cuda_kernels; its entries mean what kernels/kernels.h
 * says) and what it adds for its callers, in C. */
#ifndef DP_CUDA_KERNELS_H
#define DP_CUDA_KERNELS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/kernels.h"

/* The CUDA table, in builds with the CUDA toolkit; pointers are device memory, softmax_xent's loss
 * and correct included. Only the CUDA device (device.cu) registers it; tests compare it with the CPU's. */
extern const dp_kernels dp_cuda_kernels;

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
