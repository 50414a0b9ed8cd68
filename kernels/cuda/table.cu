// table.cu: the CUDA kernel table (kernels/kernels.h), over the kernels of kernels/cuda/.
#include "kernels/cuda/common.cuh"

extern "C" {
size_t dp_cuda_conv2d_workspace_floats(const dp_conv2d_dims *d, int batch, int nthreads);
void dp_cuda_conv2d_forward(const dp_kctx *, const dp_conv2d_dims *, int, const float *, const float *, const float *,
                            float *, float *);
void dp_cuda_conv2d_backward(const dp_kctx *, const dp_conv2d_dims *, int, const float *, const float *, const float *,
                             float *, float *, float *, float *);
void dp_cuda_linear_forward(const dp_kctx *, int, int, int, const float *, const float *, const float *, float *);
void dp_cuda_linear_backward(const dp_kctx *, int, int, int, const float *, const float *, const float *, float *,
                             float *, float *);
void dp_cuda_relu_forward(const dp_kctx *, size_t, const float *, float *);
void dp_cuda_relu_backward(const dp_kctx *, size_t, const float *, const float *, float *);
void dp_cuda_add(const dp_kctx *, size_t, const float *, const float *, float *);
void dp_cuda_copy(const dp_kctx *, size_t, const float *, float *);
void dp_cuda_round_bf16(const dp_kctx *, size_t, const float *, float *);
void dp_cuda_maxpool_forward(const dp_kctx *, int, int, int, int, int, int, int, const float *, float *, int32_t *);
void dp_cuda_maxpool_backward(const dp_kctx *, int, int, int, int, int, int, int, int, int, const float *,
                              const int32_t *, float *);
void dp_cuda_avgpool_forward(const dp_kctx *, int, int, int, const float *, float *);
void dp_cuda_avgpool_backward(const dp_kctx *, int, int, int, const float *, float *);
size_t dp_cuda_bn_workspace_floats(int, int, int);
void dp_cuda_bn_sums(const dp_kctx *, int, int, int, const float *, float *, float *);
void dp_cuda_bn_stats(const dp_kctx *, int, int, const float *, double, float, float, int, float *, float *, float *,
                      float *);
void dp_cuda_bn_apply(const dp_kctx *, int, int, int, const float *, const float *, const float *, const float *,
                      const float *, float *);
void dp_cuda_bn_backward_sums(const dp_kctx *, int, int, int, const float *, const float *, const float *,
                              const float *, float *, float *);
void dp_cuda_bn_backward(const dp_kctx *, int, int, int, const float *, const float *, const float *, const float *,
                         const float *, const float *, const float *, double, float *, float *, float *, float *);
void dp_cuda_softmax_xent(const dp_kctx *, int, int, const float *, const int32_t *, float, float *, float *,
                          int32_t *);
void dp_cuda_sgd(const dp_kctx *, size_t, float *, const float *, float *, float, float, float, int);
void dp_cuda_tree_sum(const dp_kctx *, float *const *, int, size_t, size_t, int);
void dp_cuda_lane_metrics(const dp_kctx *, int, float *, const int32_t *, float *);
void dp_cuda_nonfinite(const dp_kctx *, size_t, const float *, float *);
void dp_cuda_gather_batch(const dp_kctx *, int, int, int, const uint8_t *, const uint8_t *, const int32_t *,
                          const float *, float *, int32_t *);
void dp_cuda_lanes(const dp_kctx *, int, const struct dp_kcall *const *);

const dp_kernels dp_cuda_kernels = {
    "cuda",
    dp_cuda_conv2d_workspace_floats,
    dp_cuda_conv2d_forward,
    dp_cuda_conv2d_backward,
    dp_cuda_linear_forward,
    dp_cuda_linear_backward,
    dp_cuda_relu_forward,
    dp_cuda_relu_backward,
    dp_cuda_add,
    dp_cuda_copy,
    dp_cuda_round_bf16,
    dp_cuda_maxpool_forward,
    dp_cuda_maxpool_backward,
    dp_cuda_avgpool_forward,
    dp_cuda_avgpool_backward,
    dp_cuda_bn_workspace_floats,
    dp_cuda_bn_sums,
    dp_cuda_bn_stats,
    dp_cuda_bn_apply,
    dp_cuda_bn_backward_sums,
    dp_cuda_bn_backward,
    dp_cuda_softmax_xent,
    dp_cuda_sgd,
    dp_cuda_tree_sum,
    dp_cuda_lane_metrics,
    dp_cuda_nonfinite,
    dp_cuda_gather_batch,
    dp_cuda_lanes,
};
}
