/* sgd.c: the SGD update, refused for a gradient that is not finite. */
#include "optim/sgd.h"

#include <stdint.h>
#include <string.h>

/* A float is NaN or Inf iff its exponent bits are all ones: |bits| >= 0x7f800000. An unsigned max
 * reduction vectorises without -ffast-math (a float sum would not) and cannot overflow. */
int dp_all_finite(const float *x, size_t n) {
    uint32_t worst = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &x[i], sizeof b);
        b &= 0x7fffffffu;
        worst = b > worst ? b : worst;
    }
    return worst < 0x7f800000u;
}

void dp_sgd_step(const dp_sgd *o, const dp_layout *L, float *params, const float *grads, float *momentum_buf,
                 float lr) {
    const float mom = o->momentum;
    if (!dp_all_finite(grads, L->n)) {
        if (o->nonfinite) atomic_store(o->nonfinite, 1);
        return;
    }
    for (int t = 0; t < L->n_tensors; t++) {
        const dp_tensor_info *ti = &L->tensors[t];
        const float wd = (ti->flags & DP_TENSOR_NO_DECAY) ? 0.0f : o->weight_decay;
        float *restrict p = params + ti->s.offset;
        const float *restrict g = grads + ti->s.offset;
        const size_t n = ti->s.count;
        if (mom == 0.0f) {
            for (size_t i = 0; i < n; i++) p[i] -= lr * (g[i] + wd * p[i]);
            continue;
        }
        float *restrict b = momentum_buf + ti->s.offset;
        if (o->nesterov) {
            for (size_t i = 0; i < n; i++) {
                float d = g[i] + wd * p[i];
                b[i] = mom * b[i] + d;
                p[i] -= lr * (d + mom * b[i]);
            }
        } else {
            for (size_t i = 0; i < n; i++) {
                float d = g[i] + wd * p[i];
                b[i] = mom * b[i] + d;
                p[i] -= lr * b[i];
            }
        }
    }
}
