/* treesum.c: the fixed pairwise tree (treesum.h). */
#include "core/treesum.h"

void dp_tree_sum(float *const *v, int n, size_t lo, size_t count, int clear) {
    for (int m = n; m > 1;) {
        const int h = (m + 1) / 2;
        for (int i = 0; i < m - h; i++) {
            float *restrict a = v[i] + lo;
            float *restrict b = v[i + h] + lo;
            if (clear)
                for (size_t k = 0; k < count; k++) a[k] += b[k], b[k] = 0.0f;
            else
                for (size_t k = 0; k < count; k++) a[k] += b[k];
        }
        m = h;
    }
}

float dp_tree_sum_scalars(float *x, int n, size_t stride) {
    if (n < 1) return 0.0f;
    for (int m = n; m > 1;) {
        const int h = (m + 1) / 2;
        for (int i = 0; i < m - h; i++) x[(size_t)i * stride] += x[(size_t)(i + h) * stride];
        m = h;
    }
    return x[0];
}
