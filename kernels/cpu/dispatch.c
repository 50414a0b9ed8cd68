/* dispatch.c: the CPU kernels' public functions, each an ifunc resolved once at load time to
 * the variant compiled for what this CPU runs: x86-64-v4 (AVX-512, 16-float vectors),
 * x86-64-v3 (AVX2 + FMA, 8-float vectors) or baseline x86-64 (SSE2, 4-float vectors, no FMA).
 * A binary built anywhere then runs on any x86-64 (and under valgrind, whose CPU has no
 * AVX-512) at the speed of a -march=native build. The variants round differently (FMA fuses a
 * multiply-add; the vector width changes the order of sums), so results are bitwise equal between
 * machines of the same variant only. */
#include "kernels/kernels.h"

#include "kernels/cpu/activation.h"
#include "kernels/cpu/batchnorm.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/loss.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/sgd.h"

int dp_conv2d_force_path = 0; /* one copy, shared by the variants */

#if DP_KERNEL_DISPATCH

/* Resolvers run while the dynamic linker relocates, before the sanitizers' runtimes are set
 * up: nothing in them may be instrumented. */
#define DP_RESOLVER __attribute__((no_sanitize("address", "undefined"), unused))

DP_RESOLVER static int cpu_is_v3(void) {
    __builtin_cpu_init(); /* required before __builtin_cpu_supports in a resolver */
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
           __builtin_cpu_supports("bmi2");
}

/* x86-64-v4's AVX-512 subsets (libgcc also checks that the OS saves the 512-bit state) */
DP_RESOLVER static int cpu_is_v4(void) {
    return cpu_is_v3() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
}

/* 0 baseline, 3 x86-64-v3, 4 x86-64-v4: the best the CPU supports, at most DP_CPU_MAX_LEVEL (a
 * build that measures the AVX2 or baseline kernels on a newer CPU; the environment cannot be read
 * this early) */
#ifndef DP_CPU_MAX_LEVEL
#define DP_CPU_MAX_LEVEL 4
#endif
DP_RESOLVER static int cpu_level(void) {
    const int l = cpu_is_v4() ? 4 : cpu_is_v3() ? 3 : 0;
    return l < DP_CPU_MAX_LEVEL ? l : DP_CPU_MAX_LEVEL;
}

#define DP_DISPATCH(name)                                                                        \
    extern __typeof__(name) name##_base, name##_v3, name##_v4;                                  \
    DP_RESOLVER static __typeof__(name) *resolve_##name(void) {                                 \
        const int l = cpu_level();                                                               \
        return l == 4 ? name##_v4 : l == 3 ? name##_v3 : name##_base;                            \
    }                                                                                            \
    __typeof__(name) name __attribute__((ifunc("resolve_" #name)));

DP_DISPATCH(relu_forward_cpu)
DP_DISPATCH(relu_backward_cpu)
DP_DISPATCH(add_forward_cpu)
DP_DISPATCH(round_bf16_cpu)
DP_DISPATCH(batchnorm_stats_cpu)
DP_DISPATCH(batchnorm_apply_cpu)
DP_DISPATCH(batchnorm_backward_reduce_cpu)
DP_DISPATCH(batchnorm_backward_input_cpu)
DP_DISPATCH(batchnorm_sums_cpu)
DP_DISPATCH(batchnorm_finalize_cpu)
DP_DISPATCH(batchnorm_backward_sums_cpu)
DP_DISPATCH(batchnorm_backward_cpu)
DP_DISPATCH(conv2d_workspace_floats)
DP_DISPATCH(conv2d_forward_cpu)
DP_DISPATCH(conv2d_backward_cpu)
DP_DISPATCH(linear_forward_cpu)
DP_DISPATCH(linear_backward_cpu)
DP_DISPATCH(softmax_xent_cpu)
DP_DISPATCH(maxpool2d_forward_cpu)
DP_DISPATCH(maxpool2d_backward_cpu)
DP_DISPATCH(global_avgpool_forward_cpu)
DP_DISPATCH(global_avgpool_backward_cpu)
DP_DISPATCH(sgd_step_cpu)
DP_DISPATCH(all_finite_cpu)

const char *dp_cpu_kernel_variant(void) {
    const int capped = cpu_level() < (cpu_is_v4() ? 4 : cpu_is_v3() ? 3 : 0);
    switch (cpu_level()) {
    case 4: return "x86-64-v4 (AVX-512; chosen at run time)";
    case 3: return capped ? "x86-64-v3 (AVX2, FMA; capped by DP_CPU_MAX_LEVEL=3 at build time)"
                          : "x86-64-v3 (AVX2, FMA; chosen at run time)";
    default: return capped ? "x86-64 baseline (SSE2; capped by DP_CPU_MAX_LEVEL=0 at build time)"
                           : "x86-64 baseline (SSE2; chosen at run time)";
    }
}

#else

const char *dp_cpu_kernel_variant(void) { return "compiled for this build's -march (DP_NATIVE=ON or not x86-64)"; }

#endif
