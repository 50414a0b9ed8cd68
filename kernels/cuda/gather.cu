// gather.cu: a batch gathered from a training set held on the GPU (the executor uploads it once):
// each element is a table lookup, so it is the CPU twin's (kernels/cpu/table.c: gather) bit for bit.
#include "kernels/cuda/common.cuh"

// One thread per element of the batch (32-bit indices: a batch is far below 2^31 elements).
__global__ void gather_k(unsigned total, unsigned chw, unsigned hw, const uint8_t *pixels, const int32_t *idx,
                         const float *lut, float *x) {
    for (unsigned e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const unsigned i = e / chw, r = e - i * chw, ch = r / hw;
        x[e] = lut[ch * 256u + pixels[(size_t)idx[i] * chw + r]];
    }
}

__global__ void gather_labels_k(int n, const uint8_t *labels, const int32_t *idx, int32_t *y) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = labels[idx[i]];
}

extern "C" void dp_cuda_gather_batch(const dp_kctx *c, int n, int ch, int hw, const uint8_t *pixels,
                                     const uint8_t *labels, const int32_t *idx, const float *lut, float *x,
                                     int32_t *y) {
    if (n <= 0) return;
    const size_t chw = (size_t)ch * (size_t)hw, total = (size_t)n * chw;
    if (total >= (1u << 31)) { // the executor's batches never come close; say so rather than wrap
        dp_cuda_note("gather batch", "more elements than 32-bit indices hold");
        return;
    }
    DP_LAUNCH(gather_k, dp_blocks(total), DP_CUDA_THREADS, 0, dp_stream(c))((unsigned)total, (unsigned)chw, (unsigned)hw,
                                                                      pixels, idx, lut, x);
    DP_LAUNCHED("gather batch");
    DP_LAUNCH(gather_labels_k, dp_blocks((size_t)n), DP_CUDA_THREADS, 0, dp_stream(c))(n, labels, idx, y);
    DP_LAUNCHED("gather labels");
}
