// table.cu: the CUDA kernel table (kernels/kernels.h), over the kernels of kernels/cuda/: entry
// <name> of kernels.def is dp_cuda_<name> (one missing does not link).
#include "kernels/cuda/common.cuh"

extern "C" {
#define DP_KERNEL_SIZE(name, params, args) size_t dp_cuda_##name params;
#define DP_KERNEL_LAYER(name, KIND, items) void dp_cuda_##name(const dp_kctx *c DP_KDEF_PROTO(items));
#define DP_KERNEL_CALL(name, KIND, items) void dp_cuda_##name(const dp_kctx *c DP_KDEF_PROTO(items));
#define DP_KERNEL_OWN(name, params) void dp_cuda_##name params;
#include "kernels/kernels.def"

const dp_kernels dp_cuda_kernels = {
    "cuda",
#define DP_KDEF_PREFIX dp_cuda_
#include "kernels/kdef_table.h"
};
}
