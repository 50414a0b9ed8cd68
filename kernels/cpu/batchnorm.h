/* batchnorm.h: batch normalisation on the CPU, split into the phases that SyncBatchNorm needs
 * (local sums -> all-reduce -> normalise; local gradient sums -> all-reduce -> input gradient).
 * x is (batch, c, hw): hw = h*w for BatchNorm2d, 1 for BatchNorm1d. Sums are in double, so the
 * statistics do not depend on how the batch is split. */
#ifndef DP_KERNEL_BATCHNORM_H
#define DP_KERNEL_BATCHNORM_H

/* sum[c] = sum of x, sumsq[c] = sum of x^2 over batch and hw (overwrite). */
void batchnorm_stats_cpu(int batch, int c, int hw, const float *x, double *sum, double *sumsq, int nthreads);
/* y = (x - mean[c]) * invstd[c] * gamma[c] + beta[c]. Used for training (batch statistics)
 * and eval (running statistics, invstd = 1/sqrt(running_var + eps)). */
void batchnorm_apply_cpu(int batch, int c, int hw, const float *x, const float *mean, const float *invstd,
                         const float *gamma, const float *beta, float *y, int nthreads);
/* sum_dy[c] = sum dy, sum_dy_xhat[c] = sum dy * (x - mean) * invstd (overwrite). */
void batchnorm_backward_reduce_cpu(int batch, int c, int hw, const float *x, const float *dy, const float *mean,
                                   const float *invstd, double *sum_dy, double *sum_dy_xhat, int nthreads);
/* dx = gamma * invstd * (dy - sum_dy/count - xhat * sum_dy_xhat/count), count = the number
 * of values the statistics were taken over (global batch * hw for SyncBN). Overwrites dx. */
void batchnorm_backward_input_cpu(int batch, int c, int hw, const float *x, const float *dy, const float *mean,
                                  const float *invstd, const float *gamma, const double *sum_dy,
                                  const double *sum_dy_xhat, double count, float *dx, int nthreads);

/* The phases as the kernel table (kernels/kernels.h) names them, with float sums: */
void batchnorm_sums_cpu(int batch, int c, int hw, const float *x, float *sums, double *ws, int nthreads);
void batchnorm_finalize_cpu(int c, int training, const float *sums, double count, float eps, float momentum, int update,
                            float *mean, float *invstd, float *run_mean, float *run_var);
void batchnorm_backward_sums_cpu(int batch, int c, int hw, const float *x, const float *dy, const float *mean,
                                 const float *invstd, float *sums, double *ws, int nthreads);
void batchnorm_backward_cpu(int batch, int c, int hw, const float *x, const float *dy, const float *mean,
                            const float *invstd, const float *gamma, const float *local, const float *sums,
                            double count, float *dx, float *dgamma, float *dbeta, double *ws, int nthreads);

#endif
