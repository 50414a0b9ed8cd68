/* kernels.h: the kernel table, one per device: every computation a layer, the loss and the
 * optimizer run, as plain functions with explicit shapes. Layers reach it through dp_exec
 * (x->k), so src/nn/ names no device. kernels.def lists the entries once; kernels/cpu/table.c
 * fills the CPU table, and a CUDA table (kernels/cuda/) fills the same entries with the same
 * meaning, tested against the CPU twins, which stay the reference. Pointers are on the table's device. Kernels accumulate
 * weight gradients (+=, as PyTorch's .grad) and overwrite everything else; every sum over
 * samples is taken in sample order within one call (data/chunks.h relies on that). */
#ifndef DP_KERNELS_H
#define DP_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kdef.h"
#include "kernels/shapes.h"

/* What a kernel call runs on: the CPU's thread count, or a device's stream. The fields beyond
 * nthreads mean what the device's table makes of them (kernels/cuda/: a cudaStream_t, a
 * cublasHandle_t, TF32, the GPU ordinal). */
typedef struct {
    int nthreads;   /* CPU: OpenMP threads the call may use */
    void *stream;   /* a device stream to enqueue on (NULL: the device's default stream) */
    void *handle;   /* a math library handle bound to that stream (NULL: the table's own) */
    int fast_math;  /* matrix products and convolutions may trade precision for speed (CUDA: TF32) */
    int ordinal;    /* which device of its kind the stream is on, made current before each call (one
                       process may drive several: nccl --gpus) */
} dp_kctx;

struct dp_kcall; /* kernels/kcall.h */

/* The entries, one per line of kernels.def (their meaning is written there). */
typedef struct dp_kernels {
    const char *device; /* "cpu", "cuda" */
#define DP_KERNEL_SIZE(name, params, args) size_t(*name) params;
#define DP_KERNEL_LAYER(name, KIND, items) void (*name)(const dp_kctx *c DP_KDEF_PROTO(items));
#define DP_KERNEL_CALL(name, KIND, items) void (*name)(const dp_kctx *c DP_KDEF_PROTO(items));
#define DP_KERNEL_OWN(name, params) void(*name) params;
#include "kernels/kernels.def"
} dp_kernels;

extern const dp_kernels dp_cpu_kernels;
/* Which compiled variant of the CPU kernels this process runs (kernels/cpu/variant.h): "x86-64-v4
 * (AVX-512; chosen at run time)", "x86-64-v3 (AVX2, FMA; chosen at run time)", "x86-64 baseline (SSE2;
 * chosen at run time)" or the -march=native build's line, for --version and the log. */
const char *dp_cpu_kernel_variant(void);

#endif
