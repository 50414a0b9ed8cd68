/* shapes.c: output sizes of convolution and pooling (shapes.h). */
#include "kernels/shapes.h"

int dp_conv2d_dims_init(dp_conv2d_dims *d) {
    if (!d) return -1;
    d->out_h = d->out_w = 0;
    if (d->in_c < 1 || d->in_h < 1 || d->in_w < 1 || d->out_c < 1 || d->k < 1 || d->stride < 1 || d->pad < 0)
        return -1;
    const int eh = d->in_h + 2 * d->pad - d->k, ew = d->in_w + 2 * d->pad - d->k;
    if (eh < 0 || ew < 0) return -1;
    d->out_h = eh / d->stride + 1;
    d->out_w = ew / d->stride + 1;
    return 0;
}

int dp_pool_out_size(int in, int k, int stride, int pad) {
    if (k < 1 || stride < 1 || pad < 0) return 0;
    const int e = in + 2 * pad - k;
    return e < 0 ? 0 : e / stride + 1;
}
