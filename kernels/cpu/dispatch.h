/* dispatch.h: which compiled variant of the CPU kernels this process runs (see variant.h). */
#ifndef DP_KERNEL_CPU_DISPATCH_H
#define DP_KERNEL_CPU_DISPATCH_H

/* "x86-64-v3 (AVX2, FMA; chosen at run time)", "x86-64 baseline (chosen at run time)" or
 * "-march=native build" for --version and the log. */
const char *dp_cpu_kernel_variant(void);

#endif
