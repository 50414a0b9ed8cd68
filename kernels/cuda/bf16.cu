// bf16.cu: --precision bf16's rounding on the GPU (kernels/bf16.h, the function the CPU twin
// calls: the same bits), for one call and for the lanes of one call in one launch (lanes.cu).
#include "kernels/cuda/common.cuh"

extern "C" {
#include "kernels/bf16.h"
#include "kernels/kcall.h"
}

__global__ void round_bf16_k(size_t n, const float *x, float *y) {
    DP_FOR(i, n) y[i] = dp_bf16_round(x[i]);
}

struct bf16_lanes {
    size_t n[DP_CUDA_LANES];
    const float *x[DP_CUDA_LANES];
    float *y[DP_CUDA_LANES];
};
__global__ void round_bf16_lanes_k(bf16_lanes L) {
    const int l = blockIdx.y;
    DP_FOR(i, L.n[l]) L.y[l][i] = dp_bf16_round(L.x[l][i]);
}

extern "C" void dp_cuda_round_bf16(const dp_kctx *c, size_t n, const float *x, float *y) {
    if (!n) return;
    DP_LAUNCH(round_bf16_k, dp_blocks(n), DP_CUDA_THREADS, 0, dp_stream(c))(n, x, y);
    DP_LAUNCHED("round to bf16");
}

// n <= DP_CUDA_LANES lanes of round_bf16 (x, y) in one launch; 0 for another kind.
extern "C" int dp_cuda_lanes_bf16(const dp_kctx *c, int n, const dp_kcall *const *calls) {
    if (calls[0]->kind != DP_KC_ROUND_BF16) return 0;
    bf16_lanes L = {};
    size_t most = 0;
    for (int l = 0; l < n; l++) {
        L.n[l] = calls[l]->z, L.x[l] = (const float *)calls[l]->p[0], L.y[l] = (float *)calls[l]->p[1];
        most = calls[l]->z > most ? calls[l]->z : most;
    }
    if (!most) return 1;
    DP_LAUNCH(round_bf16_lanes_k, dim3(dp_blocks(most), (unsigned)n), DP_CUDA_THREADS, 0, dp_stream(c))(L);
    DP_LAUNCHED("round to bf16, lanes");
    return 1;
}
