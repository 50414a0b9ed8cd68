#include "optim/sgd.h"

void dp_sgd_step(const dp_sgd *o, const dp_layout *L, float *params, const float *grads, float *momentum_buf,
                 float lr) {
    const float mom = o->momentum;
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
