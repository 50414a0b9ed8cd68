/* cuda_kernels.h: what the CUDA kernel table (kernels/kernels.h: dp_cuda_kernels) adds for its
 * callers, in C. */
#ifndef DP_CUDA_KERNELS_H
#define DP_CUDA_KERNELS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The first launch or library failure since the last call (0 if none): its message into buf.
 * Clears it. */
int dp_cuda_kernels_error(char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
