/* activation.c: element-wise kernels; threads only for large tensors. Each element is computed
 * alone, so the result does not depend on the thread count. */
#include "kernels/cpu/variant.h" /* first: renames this variant's functions */
#include "kernels/cpu/activation.h"

#include "kernels/bf16.h"
#include "kernels/cpu/cpu_common.h"

/* x < 0 ? 0 : x keeps NaN, as PyTorch's relu does. No restrict: in-place calls are allowed. */
static void relu_fwd_range(size_t lo, size_t hi, const float *x, float *y) {
    for (size_t i = lo; i < hi; i++) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

static void relu_bwd_range(size_t lo, size_t hi, const float *y, const float *dy, float *dx) {
    for (size_t i = lo; i < hi; i++) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

static void add_range(size_t lo, size_t hi, const float *a, const float *b, float *y) {
    for (size_t i = lo; i < hi; i++) y[i] = a[i] + b[i];
}

static void round_bf16_range(size_t lo, size_t hi, const float *x, float *y) {
    for (size_t i = lo; i < hi; i++) y[i] = dp_bf16_round(x[i]);
}

/* Thread t of nt gets [n*t/nt, n*(t+1)/nt), rounded to 16 floats (whole cache lines). */
static size_t split(size_t n, int nt, int t) {
    if (t >= nt) return n;
    size_t e = (size_t)((double)n * t / nt) & ~(size_t)15;
    return e > n ? n : e;
}

#define ELTWISE(n, nthreads, CALL)                                           \
    do {                                                                     \
        const int nt_ = dp_eltwise_threads((n), (nthreads));                 \
        if (nt_ == 1) {                                                      \
            size_t lo = 0, hi = (n);                                         \
            CALL;                                                            \
        } else {                                                             \
            _Pragma("omp parallel for num_threads(nt_) schedule(static)")    \
            for (int t_ = 0; t_ < nt_; t_++) {                               \
                size_t lo = split((n), nt_, t_), hi = split((n), nt_, t_ + 1); \
                CALL;                                                        \
            }                                                                \
        }                                                                    \
    } while (0)

void relu_forward_cpu(size_t n, const float *x, float *y, int nthreads) {
    ELTWISE(n, nthreads, relu_fwd_range(lo, hi, x, y));
}

void relu_backward_cpu(size_t n, const float *y, const float *dy, float *dx, int nthreads) {
    ELTWISE(n, nthreads, relu_bwd_range(lo, hi, y, dy, dx));
}

void add_forward_cpu(size_t n, const float *a, const float *b, float *y, int nthreads) {
    ELTWISE(n, nthreads, add_range(lo, hi, a, b, y));
}

void round_bf16_cpu(size_t n, const float *x, float *y, int nthreads) {
    ELTWISE(n, nthreads, round_bf16_range(lo, hi, x, y));
}
