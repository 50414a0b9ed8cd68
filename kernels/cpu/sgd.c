#include "kernels/cpu/variant.h" /* first: renames this variant's functions */
#include "kernels/cpu/sgd.h"

#include <stdint.h>
#include <string.h>

/* A float is NaN or Inf iff its exponent bits are all ones: |bits| >= 0x7f800000. An unsigned max
 * reduction vectorises without -ffast-math (a float sum would not) and cannot overflow; baseline
 * x86-64 (SSE2) has no unsigned 32-bit max, the v3 and v4 variants do (8x faster). */
int all_finite_cpu(const float *x, size_t n) {
    uint32_t worst = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &x[i], sizeof b);
        b &= 0x7fffffffu;
        worst = b > worst ? b : worst;
    }
    return worst < 0x7f800000u;
}

void sgd_step_cpu(size_t n, float *restrict p, const float *restrict g, float *restrict buf, float lr, float momentum,
                  float wd, int nesterov) {
    if (momentum == 0.0f) {
        for (size_t i = 0; i < n; i++) p[i] -= lr * (g[i] + wd * p[i]);
    } else if (nesterov) {
        for (size_t i = 0; i < n; i++) {
            float d = g[i] + wd * p[i];
            buf[i] = momentum * buf[i] + d;
            p[i] -= lr * (d + momentum * buf[i]);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            float d = g[i] + wd * p[i];
            buf[i] = momentum * buf[i] + d;
            p[i] -= lr * buf[i];
        }
    }
}
