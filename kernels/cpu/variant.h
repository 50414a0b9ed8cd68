/* variant.h: renames the CPU kernels' public functions for one compiled variant. The portable
 * build compiles every file of kernels/cpu three times, for baseline x86-64 (DP_KSUFFIX=_base),
 * x86-64-v3, AVX2 + FMA (_v3) and x86-64-v4, AVX-512 (_v4); dispatch.c defines the public
 * names, resolved once at load time to the variant the CPU runs (table.c, the kernel table, is
 * compiled once and points at those public names). Included first by every kernel file, before its
 * own header, so the header declares the renamed function. Without DP_KSUFFIX (-march=native
 * builds) nothing is renamed. */
#ifndef DP_KERNEL_CPU_VARIANT_H
#define DP_KERNEL_CPU_VARIANT_H

#ifdef DP_KSUFFIX
#define DP_KCAT_(a, b) a##b
#define DP_KCAT(a, b) DP_KCAT_(a, b)
/* a function-like rename keeps `name` from expanding again inside its own replacement */
#define relu_forward_cpu DP_KCAT(relu_forward_cpu, DP_KSUFFIX)
#define relu_backward_cpu DP_KCAT(relu_backward_cpu, DP_KSUFFIX)
#define add_forward_cpu DP_KCAT(add_forward_cpu, DP_KSUFFIX)
#define round_bf16_cpu DP_KCAT(round_bf16_cpu, DP_KSUFFIX)
#define batchnorm_stats_cpu DP_KCAT(batchnorm_stats_cpu, DP_KSUFFIX)
#define batchnorm_apply_cpu DP_KCAT(batchnorm_apply_cpu, DP_KSUFFIX)
#define batchnorm_backward_reduce_cpu DP_KCAT(batchnorm_backward_reduce_cpu, DP_KSUFFIX)
#define batchnorm_backward_input_cpu DP_KCAT(batchnorm_backward_input_cpu, DP_KSUFFIX)
#define batchnorm_sums_cpu DP_KCAT(batchnorm_sums_cpu, DP_KSUFFIX)
#define batchnorm_finalize_cpu DP_KCAT(batchnorm_finalize_cpu, DP_KSUFFIX)
#define batchnorm_backward_sums_cpu DP_KCAT(batchnorm_backward_sums_cpu, DP_KSUFFIX)
#define batchnorm_backward_cpu DP_KCAT(batchnorm_backward_cpu, DP_KSUFFIX)
#define conv2d_workspace_floats DP_KCAT(conv2d_workspace_floats, DP_KSUFFIX)
#define conv2d_forward_cpu DP_KCAT(conv2d_forward_cpu, DP_KSUFFIX)
#define conv2d_backward_cpu DP_KCAT(conv2d_backward_cpu, DP_KSUFFIX)
#define linear_forward_cpu DP_KCAT(linear_forward_cpu, DP_KSUFFIX)
#define linear_backward_cpu DP_KCAT(linear_backward_cpu, DP_KSUFFIX)
#define softmax_xent_cpu DP_KCAT(softmax_xent_cpu, DP_KSUFFIX)
#define maxpool2d_forward_cpu DP_KCAT(maxpool2d_forward_cpu, DP_KSUFFIX)
#define maxpool2d_backward_cpu DP_KCAT(maxpool2d_backward_cpu, DP_KSUFFIX)
#define global_avgpool_forward_cpu DP_KCAT(global_avgpool_forward_cpu, DP_KSUFFIX)
#define global_avgpool_backward_cpu DP_KCAT(global_avgpool_backward_cpu, DP_KSUFFIX)
#define sgd_step_cpu DP_KCAT(sgd_step_cpu, DP_KSUFFIX)
#define all_finite_cpu DP_KCAT(all_finite_cpu, DP_KSUFFIX)
#endif

#endif
