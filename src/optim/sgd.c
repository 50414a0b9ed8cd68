#include "optim/sgd.h"

#include "kernels/kernels.h"

void dp_sgd_step(const dp_sgd *o, const dp_layout *L, float *params, const float *grads, float *momentum_buf,
                 float lr) {
    const dp_kernels *k = o->k ? o->k : &dp_cpu_kernels;
    const dp_kctx c = {.nthreads = 1, .stream = o->stream};
    for (int t = 0; t < L->n_tensors; t++) {
        const dp_tensor_info *ti = &L->tensors[t];
        const float wd = (ti->flags & DP_TENSOR_NO_DECAY) ? 0.0f : o->weight_decay;
        const size_t off = ti->s.offset;
        k->sgd(&c, ti->s.count, params + off, grads + off, o->momentum != 0.0f ? momentum_buf + off : NULL, lr,
               o->momentum, wd, o->nesterov);
    }
}
