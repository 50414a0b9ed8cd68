/* dispatch.h: which compiled variant of the CPU kernels this process runs (see variant.h). */
#ifndef DP_KERNEL_CPU_DISPATCH_H
#define DP_KERNEL_CPU_DISPATCH_H

/* "x86-64-v4 (AVX-512; chosen at run time)", "x86-64-v3 (AVX2, FMA; chosen at run time)",
 * "x86-64 baseline (SSE2; chosen at run time)" or the -march=native build's line, for --version and
 * the log. */
const char *dp_cpu_kernel_variant(void);

#endif
