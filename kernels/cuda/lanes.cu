// lanes.cu: the CUDA table's lanes() (kernels/kernels.h): the same call of n lanes as one launch,
// the lane a grid dimension, for the kinds that have such a kernel (element-wise: elementwise.cu;
// max pool: pool.cu; the loss: loss.cu; bf16 rounding: bf16.cu), in groups of DP_CUDA_LANES lanes; the other kinds
// (convolution, linear, batch norm, average pool) still launch once a lane, in lane order, on the
// call's stream.
// Each lane's elements are computed as its one-lane kernel computes them: the same bits.
#include "kernels/cuda/common.cuh"

extern "C" {
#include "kernels/kcall.h"
int dp_cuda_lanes_elementwise(const dp_kctx *c, int n, const dp_kcall *const *calls);
int dp_cuda_lanes_pool(const dp_kctx *c, int n, const dp_kcall *const *calls);
int dp_cuda_lanes_loss(const dp_kctx *c, int n, const dp_kcall *const *calls);
int dp_cuda_lanes_bf16(const dp_kctx *c, int n, const dp_kcall *const *calls);

void dp_cuda_lanes(const dp_kctx *c, int n, const dp_kcall *const *calls) {
    for (int l0 = 0; l0 < n; l0 += DP_CUDA_LANES) {
        const int m = n - l0 < DP_CUDA_LANES ? n - l0 : DP_CUDA_LANES;
        if (!dp_cuda_lanes_elementwise(c, m, calls + l0) && !dp_cuda_lanes_pool(c, m, calls + l0) &&
            !dp_cuda_lanes_loss(c, m, calls + l0) && !dp_cuda_lanes_bf16(c, m, calls + l0))
            dp_kcall_lanes_in_order(&dp_cuda_kernels, c, m, calls + l0);
    }
}
}
