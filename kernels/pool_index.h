/* pool_index.h: which max-pool outputs can hold an input element as their argmax, so that the
 * GPU's backward pass gathers (one thread per input element, no atomics) instead of scattering.
 * Along one axis, output o's window covers inputs [o s - p, o s - p + k); input a is covered by
 * the outputs lo..hi below (empty when lo > hi). Shared by kernels/cuda/pool.cu and its host test
 * (tests/test_pool_index.c), so the index math is checked in CI without a GPU. */
#ifndef DP_POOL_INDEX_H
#define DP_POOL_INDEX_H

#ifdef __CUDACC__
#define DP_HOST_DEVICE __host__ __device__
#else
#define DP_HOST_DEVICE
#endif

static inline DP_HOST_DEVICE void dp_pool_covering(int a, int k, int s, int p, int n_out, int *lo, int *hi) {
    const int first = a + p - k + 1; /* o s >= a + p - k + 1 */
    int l = first <= 0 ? 0 : (first + s - 1) / s;
    int h = (a + p) / s; /* o s <= a + p; a + p >= 0 */
    if (h > n_out - 1) h = n_out - 1;
    *lo = l, *hi = h;
}

/* The gradient of input element (a, b) of one plane: the covering outputs' gradients whose argmax
 * is that element, added in increasing output index, as the CPU's scatter adds them (so the bits
 * match it). */
static inline DP_HOST_DEVICE float dp_pool_gather(int a, int b, int w, int k, int s, int p, int oh, int ow,
                                                  const float *gp, const int *ap) {
    int i0, i1, j0, j1;
    dp_pool_covering(a, k, s, p, oh, &i0, &i1);
    dp_pool_covering(b, k, s, p, ow, &j0, &j1);
    const int e = a * w + b;
    float acc = 0.0f;
    for (int i = i0; i <= i1; i++)
        for (int j = j0; j <= j1; j++)
            if (ap[i * ow + j] == e) acc += gp[i * ow + j];
    return acc;
}

#endif
