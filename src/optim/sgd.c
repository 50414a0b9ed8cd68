/* sgd.c: the SGD update through the device's kernel table, refused for a gradient that is not finite. */
#include "optim/sgd.h"

#include "kernels/kernels.h"

/* The CPU table's check (kernels/cpu/sgd.c's, in the variant this CPU runs). */
int dp_all_finite(const float *x, size_t n) {
    const dp_kctx c = {.nthreads = 1};
    float flag = 0;
    dp_cpu_kernels.nonfinite(&c, n, x, &flag);
    return flag == 0;
}

void dp_sgd_step(const dp_sgd *o, const dp_layout *L, float *params, const float *grads, float *momentum_buf,
                 float lr) {
    const dp_kernels *k = o->k ? o->k : &dp_cpu_kernels;
    const dp_kctx *c = &o->kc;
    /* host memory: checked here; a device's gradients were checked where they are, in the step's
       metrics (train/strategy.h), and its step is not called with NaN/Inf ones */
    if (!o->device_memory && !dp_all_finite(grads, L->n)) {
        if (o->nonfinite) atomic_store(o->nonfinite, 1);
        return;
    }
    /* every tensor with the same weight decay (the default: torch decays all): one pass over the
       arena, the same arithmetic per element (the padding between tensors holds zeros and stays so) */
    int uniform = 1;
    for (int t = 0; t < L->n_tensors; t++)
        if ((L->tensors[t].flags & DP_TENSOR_NO_DECAY) && o->weight_decay != 0.0f) uniform = 0;
    if (uniform) {
        k->sgd(c, L->n, params, grads, o->momentum != 0.0f ? momentum_buf : NULL, lr, o->momentum, o->weight_decay,
               o->nesterov);
        return;
    }
    for (int t = 0; t < L->n_tensors; t++) {
        const dp_tensor_info *ti = &L->tensors[t];
        const float wd = (ti->flags & DP_TENSOR_NO_DECAY) ? 0.0f : o->weight_decay;
        const size_t off = ti->s.offset;
        k->sgd(c, ti->s.count, params + off, grads + off, o->momentum != 0.0f ? momentum_buf + off : NULL, lr,
               o->momentum, wd, o->nesterov);
    }
}
