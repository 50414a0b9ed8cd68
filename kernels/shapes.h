/* shapes.h: the shape descriptions kernels of every device take, and the output sizes they imply
 * (shapes.c: plain arithmetic, the same for every device, so layers in src/nn/ use it too). */
#ifndef DP_KERNEL_SHAPES_H
#define DP_KERNEL_SHAPES_H

/* 2-D convolution, NCHW, square kernel, zero padding (PyTorch Conv2d, groups = 1). */
typedef struct {
    int in_c, in_h, in_w;
    int out_c, k, stride, pad;
    int out_h, out_w;   /* (in + 2 pad - k) / stride + 1, filled by dp_conv2d_dims_init */
} dp_conv2d_dims;

/* Fills out_h/out_w; returns 0 if the shape is valid (output at least 1x1), -1 otherwise. */
int dp_conv2d_dims_init(dp_conv2d_dims *d);

/* Output size of a k x k pooling window with this stride and padding (PyTorch floor mode); 0 for an
 * invalid window. */
int dp_pool_out_size(int in, int k, int stride, int pad);

#endif
