/* test_pool_index.c: the index math of the GPU's max-pool backward (kernels/pool_index.h), on the
 * host: which outputs cover an input element, against brute force; and the gather it drives,
 * bitwise against the CPU twin's scatter, for LeNet's and ResNet-18's pools (overlapping windows,
 * padding, odd sizes). The CUDA kernel only calls these functions per element. */
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/pool_index.h"
#include "testutil.h"

extern const dp_kernels dp_cpu_kernels;

static int out_size(int n, int k, int s, int p) { return (n + 2 * p - k) / s + 1; }

static void test_covering_matches_brute_force(void **state) {
    (void)state;
    for (int k = 1; k <= 7; k++)
        for (int s = 1; s <= 4; s++)
            for (int p = 0; p <= k / 2; p++)
                for (int n = k; n <= 23; n++) {
                    const int no = out_size(n, k, s, p);
                    for (int a = 0; a < n; a++) {
                        int lo, hi, blo = no, bhi = -1;
                        dp_pool_covering(a, k, s, p, no, &lo, &hi);
                        for (int o = 0; o < no; o++)
                            if (o * s - p <= a && a < o * s - p + k) blo = o < blo ? o : blo, bhi = o;
                        if (bhi < 0) {
                            assert_true(lo > hi); /* no window covers it (a stride past the kernel) */
                        } else {
                            if (lo != blo || hi != bhi)
                                fail_msg("k %d s %d p %d n %d a %d: %d..%d, brute force %d..%d", k, s, p, n, a, lo,
                                         hi, blo, bhi);
                        }
                    }
                }
}

static float frand(unsigned *seed) {
    *seed = *seed * 1103515245u + 12345u;
    return (float)((*seed >> 8) & 0xffff) / 65536.0f - 0.5f;
}

static void test_gather_equals_the_cpu_scatter(void **state) {
    (void)state;
    const dp_kernels *C = &dp_cpu_kernels;
    const dp_kctx cc = {.nthreads = 1};
    /* h, w, k, s, p: LeNet's 2x2, ResNet-18's stem 3x3/2 pad 1, odd sizes, stride 1 */
    const int cfg[][5] = {{28, 28, 2, 2, 0}, {112, 112, 3, 2, 1}, {14, 13, 3, 2, 1}, {7, 7, 3, 1, 1}, {9, 11, 5, 3, 2}};
    const int B = 2, ch = 3;
    unsigned seed = 7;
    for (size_t t = 0; t < sizeof cfg / sizeof *cfg; t++) {
        const int h = cfg[t][0], w = cfg[t][1], k = cfg[t][2], s = cfg[t][3], p = cfg[t][4];
        const int oh = out_size(h, k, s, p), ow = out_size(w, k, s, p);
        const size_t ni = (size_t)B * ch * h * w, no = (size_t)B * ch * oh * ow;
        float *x = malloc(ni * 4), *y = malloc(no * 4), *g = malloc(no * 4), *dx = malloc(ni * 4), *gx = malloc(ni * 4);
        int32_t *am = malloc(no * 4);
        assert_true(x && y && g && dx && gx && am);
        /* few distinct values: ties, so the argmax rule and overlapping windows both matter */
        for (size_t i = 0; i < ni; i++) x[i] = (float)((int)(frand(&seed) * 8));
        for (size_t i = 0; i < no; i++) g[i] = frand(&seed);
        C->maxpool_forward(&cc, B, ch, h, w, k, s, p, x, y, am);
        C->maxpool_backward(&cc, B, ch, h, w, k, s, p, oh, ow, g, am, dx);
        for (int pl = 0; pl < B * ch; pl++)
            for (int a = 0; a < h; a++)
                for (int b = 0; b < w; b++)
                    gx[(size_t)pl * h * w + (size_t)a * w + b] =
                        dp_pool_gather(a, b, w, k, s, p, oh, ow, g + (size_t)pl * oh * ow, am + (size_t)pl * oh * ow);
        if (memcmp(dx, gx, ni * 4) != 0) fail_msg("pool %dx%d k %d s %d p %d: the gather differs from the CPU", h, w, k, s, p);
        free(x), free(y), free(g), free(dx), free(gx), free(am);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_covering_matches_brute_force),
        cmocka_unit_test(test_gather_equals_the_cpu_scatter),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
