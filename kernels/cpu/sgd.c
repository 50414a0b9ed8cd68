#include "kernels/cpu/variant.h" /* first: renames this variant's functions */
#include "kernels/cpu/sgd.h"

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
