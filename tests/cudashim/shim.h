// shim.h: what the CUDA stand-in's parts share (runtime.cc, fibers.cc, cublas.cc, cudnn.cc).
#ifndef DP_CUDASHIM_SHIM_H
#define DP_CUDASHIM_SHIM_H

#include <atomic>
#include <functional>
#include <stdint.h>

#include "cuda_runtime.h"

namespace dpshim {

// Queues fn on stream s (0: the current device's legacy stream) after what is queued there, or
// appends it to the graph s is capturing. Runs later, on the stream's worker thread.
cudaError_t enqueue(cudaStream_t s, std::function<void()> fn);
// Blocks the host until everything queued on s so far has run (a host wait, counted).
cudaError_t sync_stream(cudaStream_t s);
// Whether s is being captured into a graph.
bool capturing(cudaStream_t s);
// Records e as the calling thread's last error (cudaGetLastError), and returns it.
cudaError_t fail(cudaError_t e);

// Runs body once per thread of a grid, on the calling thread: each block's threads as fibers
// that meet at __syncthreads (fibers.cc).
void run_grid(dim3 grid, dim3 block, const std::function<void()> &body);

struct counters {
    std::atomic<uint64_t> launches{0}, blas_calls{0}, dnn_calls{0}, host_waits{0}, copies{0}, graph_launches{0};
};
extern counters counts;

} // namespace dpshim

#endif
