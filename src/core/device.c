/* device.c: the CPU device (plain memory) and the choice between it and CUDA's. */
#include "core/device.h"

#include <string.h>

#include "core/arena.h"
#include "dp_config.h"

static dp_status cpu_alloc(const dp_dev *d, float **p, size_t n, const char *what) {
    (void)d;
    return dp_alloc_floats(p, n, what);
}
static void cpu_free(const dp_dev *d, void *p) {
    (void)d;
    dp_free(p);
}
static dp_status cpu_copy(const dp_dev *d, void *dst, const void *src, size_t bytes) {
    (void)d;
    if (bytes && dst != src) memmove(dst, src, bytes);
    return DP_OK;
}
static dp_status cpu_zero(const dp_dev *d, void *p, size_t bytes) {
    (void)d;
    if (bytes) memset(p, 0, bytes);
    return DP_OK;
}
static dp_status cpu_host_alloc(const dp_dev *d, void **p, size_t bytes, const char *what) {
    (void)d;
    float *f;
    DP_TRY(dp_alloc_floats(&f, (bytes + sizeof(float) - 1) / sizeof(float), what));
    *p = f;
    return DP_OK;
}
static dp_status cpu_wait(const dp_dev *d) {
    (void)d;
    return DP_OK;
}
static void cpu_close(dp_dev *d) { (void)d; }

static dp_dev cpu_dev = {
    .name = "cpu", .is_host = 1, .k = &dp_cpu_kernels, .kc = {.nthreads = 1}, .desc = "cpu",
    .alloc = cpu_alloc, .free = cpu_free, .host_alloc = cpu_host_alloc, .host_free = cpu_free, .upload = cpu_copy, .copy = cpu_copy, .zero = cpu_zero,
    .download = cpu_copy, .wait = cpu_wait, .close = cpu_close,
};

dp_dev *dp_dev_cpu(void) { return &cpu_dev; }

#if DP_HAVE_CUDA
dp_status dp_cuda_dev_open(int ordinal, int tf32, dp_dev **out); /* kernels/cuda/device.cu */
#endif

dp_status dp_dev_open(const char *name, int ordinal, int tf32, dp_dev **out) {
    *out = NULL;
    if (strcmp(name, "cpu") == 0) {
        if (tf32) return dp_fail(DP_ERR_USAGE, "--tf32 is for --device cuda (the CPU computes in fp32 only)");
        *out = &cpu_dev;
        return DP_OK;
    }
    if (strcmp(name, "cuda") != 0)
        return dp_fail(DP_ERR_USAGE, "--device: unknown device '%s' (expected cpu or cuda)", name);
#if DP_HAVE_CUDA
    return dp_cuda_dev_open(ordinal, tf32, out);
#else
    (void)ordinal;
    return dp_fail(DP_ERR_UNSUPPORTED, "--device cuda: this dptrain was built without CUDA (no nvcc was found); "
                   "rebuild with the CUDA toolkit: cmake -B build -DDP_WITH_CUDA=ON");
#endif
}

void dp_dev_close(dp_dev *d) {
    if (d && d != &cpu_dev) d->close(d);
}
