/* shapes.c: output sizes of convolution and pooling (shapes.h). */
#include "kernels/shapes.h"

#include <limits.h>

int dp_conv2d_dims_init(dp_conv2d_dims *d) {
    if (!d) return -1;
    d->out_h = d->out_w = 0;
    if (d->in_c < 1 || d->in_h < 1 || d->in_w < 1 || d->out_c < 1 || d->k < 1 || d->stride < 1 || d->pad < 0)
        return -1;
    /* in 64 bits: no int can overflow them (a replayed record's fields come from outside) */
    const long long eh = (long long)d->in_h + 2LL * d->pad - d->k, ew = (long long)d->in_w + 2LL * d->pad - d->k;
    if (eh < 0 || ew < 0 || eh / d->stride + 1 > INT_MAX || ew / d->stride + 1 > INT_MAX) return -1;
    d->out_h = (int)(eh / d->stride + 1);
    d->out_w = (int)(ew / d->stride + 1);
    return 0;
}

int dp_pool_out_size(int in, int k, int stride, int pad) {
    if (k < 1 || stride < 1 || pad < 0) return 0;
    const long long e = (long long)in + 2LL * pad - k; /* in 64 bits, as above */
    return e < 0 || e / stride + 1 > INT_MAX ? 0 : (int)(e / stride + 1);
}
