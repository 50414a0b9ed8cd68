/* loss.h: softmax cross-entropy on the CPU (PyTorch CrossEntropyLoss on logits). */
#ifndef DP_KERNEL_LOSS_H
#define DP_KERNEL_LOSS_H

#include <stdint.h>

/* For each sample: loss_i = logsumexp(logits_i) - logits_i[label_i], computed stably.
 * Returns the sum of loss_i over the batch (double). dlogits = (softmax - onehot) * grad_scale
 * (grad_scale = 1/global_batch gives the gradient of the mean over the global batch); dlogits
 * may be NULL (evaluation). *correct (may be NULL) receives the number of samples whose
 * argmax (first on ties) equals the label. */
double softmax_xent_cpu(int batch, int classes, const float *logits, const int32_t *labels, float grad_scale,
                        float *dlogits, int *correct);

#endif
