/* cudashim_counts.h: what the CUDA stand-in (tests/cudashim/) counts, for tests that measure what a
 * GPU would pay: kernel launches (each <<<>>> and each library call that launches work), cuBLAS and
 * cuDNN calls, host waits (every call that blocks the host on device work), graph launches. */
#ifndef DP_CUDASHIM_COUNTS_H
#define DP_CUDASHIM_COUNTS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint64_t launches;       /* kernels launched (DP_LAUNCH), including those a graph replays */
    uint64_t blas_calls;     /* cuBLAS GEMMs */
    uint64_t dnn_calls;      /* cuDNN convolution passes and bias additions */
    uint64_t host_waits;     /* synchronisations, synchronous copies, a pageable download */
    uint64_t copies;         /* memcpy and memset operations queued */
    uint64_t graph_launches; /* cudaGraphLaunch */
} dp_cudashim_counts;

/* The counts since the process began (or the last reset), summed over every device and thread. */
void dp_cudashim_counts_get(dp_cudashim_counts *out);
void dp_cudashim_counts_reset(void);

#ifdef __cplusplus
}
#endif

#endif
