/* bf16.h: what the convolution and linear layers do under --precision bf16, as PyTorch's autocast
 * does for them: the input, the weight and the bias are rounded to bf16 copies (the fp32 masters
 * stay as they are), the kernel multiplies them and sums the products in fp32 in its own fixed
 * order (a product of two bf16 values is exact in fp32), and the output is rounded to bf16. In
 * backward the output gradient is rounded to bf16, the input gradient is rounded to bf16, and the
 * weight and bias gradients stay fp32 sums into the fp32 gradients of the masters.
 *
 * The copies live at the start of the layer's scratch (x->ws), the kernel's own workspace after
 * them: their offsets depend only on the call's sizes, never on the device's workspace size. */
#ifndef DP_NN_LAYERS_BF16_H
#define DP_NN_LAYERS_BF16_H

#include "nn/layer.h"

static inline size_t dp_bf16_r16(size_t n) { return (n + 15) / 16 * 16; }

/* The copies: the input (x_n), the weight (w_n), and the output gradient (y_n floats), which
 * holds the bias copy (at most y_n floats) in forward. */
typedef struct {
    float *x, *w, *dy, *rest; /* rest: the kernel's workspace */
} dp_bf16_scratch;

static inline size_t dp_bf16_ws_floats(const dp_layer *l, int batch, size_t w_n) {
    if (!l->bf16) return 0;
    return dp_bf16_r16((size_t)batch * dp_shape_size(l->in_shape[0])) + dp_bf16_r16(w_n) +
           dp_bf16_r16((size_t)batch * dp_shape_size(l->out));
}

static inline dp_bf16_scratch dp_bf16_carve(const dp_layer *l, const dp_exec *x, size_t w_n) {
    dp_bf16_scratch s;
    s.x = x->ws;
    s.w = s.x + dp_bf16_r16((size_t)x->batch * dp_shape_size(l->in_shape[0]));
    s.dy = s.w + dp_bf16_r16(w_n);
    s.rest = s.dy + dp_bf16_r16((size_t)x->batch * dp_shape_size(l->out));
    return s;
}

#endif
