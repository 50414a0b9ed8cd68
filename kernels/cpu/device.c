/* device.c: the CPU device of kernels/device.h: plain memory, every copy a memcpy, every wait free;
 * its kernels run on the calling thread (the executor's threads run lanes side by side). */
#include "kernels/device.h"

#include <cblas.h>
#include <string.h>

#include "core/arena.h"

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
    .name = "cpu", .caps = DP_CAP_HOST_MEMORY, .k = &dp_cpu_kernels, .kc = {.nthreads = 1}, .desc = "cpu",
    .alloc = cpu_alloc, .free = cpu_free, .host_alloc = cpu_host_alloc, .host_free = cpu_free, .upload = cpu_copy,
    .copy = cpu_copy, .zero = cpu_zero, .download = cpu_copy, .wait = cpu_wait, .close = cpu_close,
};

dp_dev *dp_dev_cpu(void) { return &cpu_dev; }

static dp_status cpu_open(int ordinal, int tf32, dp_dev **out) {
    (void)ordinal;
    if (tf32) return dp_fail(DP_ERR_USAGE, "--tf32 is for --device cuda (the CPU computes in fp32 only)");
    /* the parallelism is the caller's (over samples or over replicas): each matrix product runs on
       the thread that calls it, never on OpenBLAS's own threads as well */
    openblas_set_num_threads(1);
    *out = &cpu_dev;
    return DP_OK;
}

const dp_dev_kind dp_cpu_device = {.name = "cpu", .open = cpu_open};
