/* head.c: the models' heads (head.h). */
#include "nn/head.h"

static void xent_loss(const dp_kernels *k, const dp_kctx *c, int n, int width, const float *out,
                      const int32_t *labels, float scale, float *dout, float *loss, int32_t *hits) {
    k->softmax_xent(c, n, width, out, labels, scale, dout, loss, hits);
}

static int argmax(const float *z, int width) {
    int best = 0;
    for (int k = 1; k < width; k++)
        if (z[k] > z[best]) best = k;
    return best;
}

const dp_head_ops dp_head_softmax_xent = {"softmax_xent", xent_loss, argmax};
