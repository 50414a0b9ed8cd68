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

/* its one stream: the calling thread */
static dp_status cpu_s_alloc(const dp_dev_stream *s, float **p, size_t n, const char *what) {
    (void)s;
    return dp_alloc_floats(p, n, what);
}
static dp_status cpu_s_copy(const dp_dev_stream *s, void *dst, const void *src, size_t bytes) {
    return cpu_copy(s->dev, dst, src, bytes);
}
static dp_status cpu_s_wait(const dp_dev_stream *s) {
    (void)s;
    return DP_OK;
}

static const dp_wait_policy cpu_waits = {0}; /* its waits are free */
static dp_dev cpu_dev = {
    .name = "cpu", .caps = DP_CAP_HOST_MEMORY, .k = &dp_cpu_kernels, .desc = "cpu",
    .main = {.dev = &cpu_dev, .kc = {.nthreads = 1}, .alloc = cpu_s_alloc, .upload = cpu_s_copy, .copy = cpu_s_copy,
             .wait = cpu_s_wait},
    .alloc = cpu_alloc, .free = cpu_free, .host_alloc = cpu_host_alloc, .host_free = cpu_free, .upload = cpu_copy,
    .copy = cpu_copy, .zero = cpu_zero, .download = cpu_copy, .wait = cpu_wait, .waits = &cpu_waits, .close = cpu_close,
};

dp_dev *dp_dev_cpu(void) { return &cpu_dev; }

static dp_status cpu_open(int ordinal, int tf32, const dp_wait_policy *waits, dp_dev **out) {
    (void)ordinal, (void)waits;
    if (tf32) return dp_fail(DP_ERR_USAGE, "--tf32 is for --device cuda (the CPU computes in fp32 only)");
    /* the parallelism is the caller's (over samples or over replicas): each matrix product runs on
       the thread that calls it, never on OpenBLAS's own threads as well */
    openblas_set_num_threads(1);
    *out = &cpu_dev;
    return DP_OK;
}

const dp_dev_kind dp_cpu_device = {.name = "cpu", .open = cpu_open};
