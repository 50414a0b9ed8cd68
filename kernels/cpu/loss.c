/* loss.c: softmax cross-entropy. Single-threaded: batch x classes is tiny next to the layers. */
#include "kernels/cpu/variant.h" /* first: renames this variant's functions */
#include "kernels/cpu/loss.h"

#include <math.h>
#include <stddef.h>

double softmax_xent_cpu(int batch, int classes, const float *logits, const int32_t *labels, float grad_scale,
                        float *dlogits, int *correct) {
    double total = 0.0;
    int ok = 0;
    for (int n = 0; n < batch && classes > 0; n++) {
        const float *z = logits + (size_t)n * classes;
        float *g = dlogits ? dlogits + (size_t)n * classes : NULL;
        float mx = z[0];
        int am = 0;
        for (int j = 1; j < classes; j++)
            if (z[j] > mx) mx = z[j], am = j; /* first maximum wins */
        /* exp(z - max) <= 1: no overflow; the largest term is 1, so the sum is >= 1 */
        float se = 0.0f;
        for (int j = 0; j < classes; j++) {
            const float e = expf(z[j] - mx);
            se += e;
            if (g) g[j] = e;
        }
        const int32_t lab = labels[n];
        const int valid = lab >= 0 && lab < classes;
        /* an out-of-range label gives a NaN loss (the trainer's numeric check reports it) */
        total += valid ? (double)mx + log((double)se) - (double)z[lab] : NAN;
        ok += valid && am == lab;
        if (g) {
            const float inv = grad_scale / se;
            for (int j = 0; j < classes; j++) g[j] *= inv;
            if (valid) g[lab] -= grad_scale;
        }
    }
    if (correct) *correct = ok;
    return total;
}
