/* linear.h: fully connected layer on the CPU (PyTorch Linear: y = x W^T + b, W is (out, in)). */
#ifndef DP_KERNEL_LINEAR_H
#define DP_KERNEL_LINEAR_H

/* y (batch, out_f) = x (batch, in_f) W^T + b. b may be NULL. */
void linear_forward_cpu(int batch, int in_f, int out_f, const float *x, const float *w, const float *b, float *y,
                        int nthreads);
/* dw += dy^T x, db += sum_batch dy (accumulate); dx = dy W (overwrite; NULL: skip). */
void linear_backward_cpu(int batch, int in_f, int out_f, const float *x, const float *w, const float *dy, float *dx,
                         float *dw, float *db, int nthreads);

#endif
