/* Every entry of the CUDA kernel table against its CPU twin (kernels/kernels.h) on seeded random
 * inputs, with the tolerance stated per kernel: bitwise where the arithmetic is element-wise and
 * unfused (ReLU, add, copy, SGD, the tree sum, max pooling, the average pool), 1e-5 relative
 * where a sum runs in another order (batch norm sums, cuBLAS GEMMs, the loss), 1e-4 for the
 * convolution (im2col GEMM against the CPU's direct kernels). Runs twice to check the GPU's own
 * results are bitwise repeatable. Exits 77 (skipped) without a CUDA device. */
#include "testutil.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/kernels.h"

static const dp_kernels *G = &dp_cuda_kernels, *C = &dp_cpu_kernels;
static const dp_kctx cc = {.nthreads = 1}, gc = {.nthreads = 1};
static dp_rng rng;

static float *host_rand(size_t n, float scale) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = (dp_rng_uniform(&rng) * 2.0f - 1.0f) * scale;
    return p;
}
static void *dev(const void *h, size_t bytes) {
    void *d = NULL;
    assert_int_equal(cudaMalloc(&d, bytes ? bytes : 4), cudaSuccess);
    if (h) assert_int_equal(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    else assert_int_equal(cudaMemset(d, 0, bytes ? bytes : 4), cudaSuccess);
    return d;
}
static float *back(const void *d, size_t n) {
    float *h = malloc((n ? n : 1) * sizeof *h);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    char msg[512];
    if (dp_cuda_kernels_error(msg, sizeof msg)) fail_msg("%s", msg);
    assert_int_equal(cudaMemcpy(h, d, n * sizeof *h, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
}
static void expect(const char *what, const float *cpu, const float *gpu, size_t n, double tol) {
    if (tol == 0) {
        if (memcmp(cpu, gpu, n * sizeof *cpu) != 0) fail_msg("%s: not bitwise equal to the CPU", what);
        return;
    }
    const double rel = tu_rel_diff(gpu, cpu, n);
    if (!(rel <= tol)) fail_msg("%s: %.3g relative to the CPU (tolerance %g)", what, rel, tol);
}

static void test_elementwise(void **state) {
    (void)state;
    const size_t n = 100003;
    float *x = host_rand(n, 3), *y = host_rand(n, 3), *g = host_rand(n, 1), *out = malloc(n * sizeof *out);
    float *dx = dev(x, n * 4), *dy = dev(y, n * 4), *dg = dev(g, n * 4), *dout = dev(NULL, n * 4);
    C->relu_forward(&cc, n, x, out), G->relu_forward(&gc, n, dx, dout);
    float *h = back(dout, n);
    expect("relu forward", out, h, n, 0), free(h);
    C->relu_backward(&cc, n, y, g, out), G->relu_backward(&gc, n, dy, dg, dout);
    h = back(dout, n), expect("relu backward", out, h, n, 0), free(h);
    C->add(&cc, n, x, y, out), G->add(&gc, n, dx, dy, dout);
    h = back(dout, n), expect("add", out, h, n, 0), free(h);
    G->copy(&gc, n, dx, dout);
    h = back(dout, n), expect("copy", x, h, n, 0), free(h);
    /* SGD with nesterov and weight decay, three steps */
    float *p = host_rand(n, 1), *buf = calloc(n, sizeof *buf), *dp = dev(p, n * 4), *dbuf = dev(NULL, n * 4);
    for (int s = 0; s < 3; s++) {
        C->sgd(&cc, n, p, g, buf, 0.05f, 0.9f, 1e-4f, 1);
        G->sgd(&gc, n, dp, dg, dbuf, 0.05f, 0.9f, 1e-4f, 1);
    }
    h = back(dp, n), expect("sgd", p, h, n, 0), free(h);
    /* the tree over 5 vectors, clearing */
    enum { V = 5 };
    float *hv[V], *dv[V];
    for (int i = 0; i < V; i++) hv[i] = host_rand(n, 100), dv[i] = dev(hv[i], n * 4);
    C->tree_sum(&cc, hv, V, 7, n - 7, 1), G->tree_sum(&gc, dv, V, 7, n - 7, 1);
    for (int i = 0; i < V; i++) {
        h = back(dv[i], n), expect("tree sum", hv[i], h, n, 0), free(h);
        cudaFree(dv[i]), free(hv[i]);
    }
    cudaFree(dx), cudaFree(dy), cudaFree(dg), cudaFree(dout), cudaFree(dp), cudaFree(dbuf);
    free(x), free(y), free(g), free(out), free(p), free(buf);
}

/* A batch gathered from a data set on the device: a table lookup per element, bitwise. */
static void test_gather_batch(void **state) {
    (void)state;
    enum { N = 300, CH = 3, HW = 32 * 32, B = 77 };
    uint8_t *px = malloc((size_t)N * CH * HW), lab[N];
    for (size_t i = 0; i < (size_t)N * CH * HW; i++) px[i] = (uint8_t)dp_rng_below(&rng, 256);
    for (int i = 0; i < N; i++) lab[i] = (uint8_t)dp_rng_below(&rng, 10);
    int32_t idx[B], y[B], *hy;
    for (int i = 0; i < B; i++) idx[i] = (int32_t)dp_rng_below(&rng, N);
    float *lut = host_rand(CH * 256, 2), *x = malloc((size_t)B * CH * HW * sizeof *x);
    void *dpx = dev(px, (size_t)N * CH * HW), *dlab = dev(lab, N), *didx = dev(idx, sizeof idx);
    float *dlut = dev(lut, CH * 256 * 4), *dx = dev(NULL, (size_t)B * CH * HW * 4);
    int32_t *dy = dev(NULL, sizeof y);
    C->gather_batch(&cc, B, CH, HW, px, lab, idx, lut, x, y);
    G->gather_batch(&gc, B, CH, HW, dpx, dlab, didx, dlut, dx, dy);
    float *h = back(dx, (size_t)B * CH * HW);
    expect("gather batch", x, h, (size_t)B * CH * HW, 0), free(h);
    hy = (int32_t *)back(dy, B);
    if (memcmp(hy, y, sizeof y) != 0) fail_msg("gather batch: labels differ from the CPU's");
    free(hy);
    cudaFree(dpx), cudaFree(dlab), cudaFree(didx), cudaFree(dlut), cudaFree(dx), cudaFree(dy);
    free(px), free(lut), free(x);
}

static void test_pooling(void **state) {
    (void)state;
    const int B = 3, ch = 5, cfg[][5] = {{28, 28, 2, 2, 0}, {14, 13, 3, 2, 1}, {7, 7, 3, 1, 1}};
    for (int k = 0; k < 3; k++) {
        const int h = cfg[k][0], w = cfg[k][1], ks = cfg[k][2], s = cfg[k][3], p = cfg[k][4];
        const int oh = (h + 2 * p - ks) / s + 1, ow = (w + 2 * p - ks) / s + 1;
        const size_t ni = (size_t)B * ch * h * w, no = (size_t)B * ch * oh * ow;
        float *x = host_rand(ni, 2), *y = malloc(no * 4), *g = host_rand(no, 1), *dxh = malloc(ni * 4);
        int32_t *am = malloc(no * 4);
        float *dx = dev(x, ni * 4), *dy = dev(NULL, no * 4), *dg = dev(g, no * 4), *ddx = dev(NULL, ni * 4);
        int32_t *dam = dev(NULL, no * 4);
        C->maxpool_forward(&cc, B, ch, h, w, ks, s, p, x, y, am);
        G->maxpool_forward(&gc, B, ch, h, w, ks, s, p, dx, dy, dam);
        float *hy = back(dy, no), *ham = back(dam, no);
        expect("max pool forward", y, hy, no, 0);
        assert_memory_equal(am, ham, no * 4);
        C->maxpool_backward(&cc, B, ch, h, w, ks, s, p, oh, ow, g, am, dxh);
        G->maxpool_backward(&gc, B, ch, h, w, ks, s, p, oh, ow, dg, dam, ddx);
        float *hdx = back(ddx, ni);
        expect("max pool backward", dxh, hdx, ni, 0);
        C->avgpool_forward(&cc, B, ch, h * w, x, y);
        G->avgpool_forward(&gc, B, ch, h * w, dx, dy);
        free(hy), hy = back(dy, (size_t)B * ch);
        expect("average pool forward", y, hy, (size_t)B * ch, 0);
        C->avgpool_backward(&cc, B, ch, h * w, g, dxh);
        G->avgpool_backward(&gc, B, ch, h * w, dg, ddx);
        free(hdx), hdx = back(ddx, ni);
        expect("average pool backward", dxh, hdx, ni, 0);
        free(x), free(y), free(g), free(dxh), free(am), free(hy), free(ham), free(hdx);
        cudaFree(dx), cudaFree(dy), cudaFree(dg), cudaFree(ddx), cudaFree(dam);
    }
}

static void test_batchnorm(void **state) {
    (void)state;
    /* hw 3000: the GPU's sums run over several slices of a channel (kernels/cuda/batchnorm.cu) */
    const int B = 6, ch = 7, hws[] = {1, 49, 3000};
    for (int t = 0; t < 3; t++) {
        const int hw = hws[t];
        const size_t n = (size_t)B * ch * hw;
        float *x = host_rand(n, 2), *g = host_rand(n, 1), *gamma = host_rand(ch, 1), *beta = host_rand(ch, 1);
        float sums[14], mean[7], invstd[7], rm[7] = {0}, rv[7] = {1, 1, 1, 1, 1, 1, 1};
        double wsd[2 * 7]; /* the CPU kernels' scratch: 2 ch doubles */
        float *ws = (float *)(void *)wsd;
        float *dx = dev(x, n * 4), *dg = dev(g, n * 4), *dgamma = dev(gamma, ch * 4), *dbeta = dev(beta, ch * 4);
        float *gws = dev(NULL, G->bn_workspace_floats(B, ch, hw) * 4);
        assert_true(C->bn_workspace_floats(B, ch, hw) * sizeof(float) <= sizeof wsd);
        float *dsums = dev(NULL, 14 * 4), *dmean = dev(NULL, ch * 4), *dinv = dev(NULL, ch * 4), *drm = dev(rm, ch * 4),
              *drv = dev(rv, ch * 4), *dout = dev(NULL, n * 4), *dlocal = dev(NULL, 14 * 4), *dpg = dev(NULL, 14 * 4);
        C->bn_sums(&cc, B, ch, hw, x, sums, ws), G->bn_sums(&gc, B, ch, hw, dx, dsums, gws);
        float *h = back(dsums, 14);
        expect("bn sums", sums, h, 14, 1e-6), free(h);
        const double count = (double)B * hw;
        C->bn_stats(&cc, ch, 1, sums, count, 1e-5f, 0.1f, 1, mean, invstd, rm, rv);
        /* the same sums on both sides from here, so each phase is compared on its own */
        assert_int_equal(cudaMemcpy(dsums, sums, sizeof sums, cudaMemcpyHostToDevice), cudaSuccess);
        G->bn_stats(&gc, ch, 1, dsums, count, 1e-5f, 0.1f, 1, dmean, dinv, drm, drv);
        h = back(dmean, ch), expect("bn mean", mean, h, ch, 0), free(h);
        h = back(dinv, ch), expect("bn invstd", invstd, h, ch, 0), free(h);
        h = back(drv, ch), expect("bn running var", rv, h, ch, 0), free(h);
        float *out = malloc(n * 4);
        C->bn_apply(&cc, B, ch, hw, x, mean, invstd, gamma, beta, out);
        G->bn_apply(&gc, B, ch, hw, dx, dmean, dinv, dgamma, dbeta, dout);
        h = back(dout, n), expect("bn apply", out, h, n, 0), free(h);
        float local[14], pg[14] = {0};
        C->bn_backward_sums(&cc, B, ch, hw, x, g, mean, invstd, local, ws);
        G->bn_backward_sums(&gc, B, ch, hw, dx, dg, dmean, dinv, dlocal, gws);
        h = back(dlocal, 14), expect("bn gradient sums", local, h, 14, 1e-5), free(h);
        assert_int_equal(cudaMemcpy(dlocal, local, sizeof local, cudaMemcpyHostToDevice), cudaSuccess);
        C->bn_backward(&cc, B, ch, hw, x, g, mean, invstd, gamma, local, local, count, out, pg + ch, pg, ws);
        G->bn_backward(&gc, B, ch, hw, dx, dg, dmean, dinv, dgamma, dlocal, dlocal, count, dout, dpg + ch, dpg, gws);
        h = back(dout, n), expect("bn input gradient", out, h, n, 0), free(h);
        h = back(dpg, 14), expect("bn parameter gradients", pg, h, 14, 0), free(h);
        free(x), free(g), free(gamma), free(beta), free(out);
        cudaFree(dx), cudaFree(dg), cudaFree(dgamma), cudaFree(dbeta), cudaFree(dsums), cudaFree(dmean);
        cudaFree(dinv), cudaFree(drm), cudaFree(drv), cudaFree(dout), cudaFree(dlocal), cudaFree(dpg), cudaFree(gws);
    }
}

static void test_linear_and_loss(void **state) {
    (void)state;
    const int B = 9, I = 400, O = 120, K = 10;
    float *x = host_rand((size_t)B * I, 1), *w = host_rand((size_t)O * I, 0.05f), *b = host_rand(O, 0.1f);
    float *dyh = host_rand((size_t)B * O, 0.1f), *y = malloc((size_t)B * O * 4), *dxh = malloc((size_t)B * I * 4);
    float *dw = calloc((size_t)O * I, 4), *db = calloc(O, 4);
    float *gx = dev(x, (size_t)B * I * 4), *gw = dev(w, (size_t)O * I * 4), *gb = dev(b, O * 4);
    float *gdy = dev(dyh, (size_t)B * O * 4), *gy = dev(NULL, (size_t)B * O * 4), *gdx = dev(NULL, (size_t)B * I * 4);
    float *gdw = dev(NULL, (size_t)O * I * 4), *gdb = dev(NULL, O * 4);
    C->linear_forward(&cc, B, I, O, x, w, b, y), G->linear_forward(&gc, B, I, O, gx, gw, gb, gy);
    float *h = back(gy, (size_t)B * O);
    expect("linear forward", y, h, (size_t)B * O, 1e-5), free(h);
    C->linear_backward(&cc, B, I, O, x, w, dyh, dxh, dw, db);
    G->linear_backward(&gc, B, I, O, gx, gw, gdy, gdx, gdw, gdb);
    h = back(gdx, (size_t)B * I), expect("linear dx", dxh, h, (size_t)B * I, 1e-5), free(h);
    h = back(gdw, (size_t)O * I), expect("linear dw", dw, h, (size_t)O * I, 1e-5), free(h);
    h = back(gdb, O), expect("linear db", db, h, O, 0), free(h);
    /* softmax cross-entropy on logits of the first K outputs' scale */
    float *z = host_rand((size_t)B * K, 4), *dz = malloc((size_t)B * K * 4), loss;
    int32_t lab[9] = {0, 1, 2, 3, 4, 5, 6, 7, 9}, correct;
    float *gz = dev(z, (size_t)B * K * 4), *gdz = dev(NULL, (size_t)B * K * 4), *gl = dev(NULL, 4);
    int32_t *glab = dev(lab, sizeof lab), *gcor = dev(NULL, 4);
    C->softmax_xent(&cc, B, K, z, lab, 1.0f / B, dz, &loss, &correct);
    G->softmax_xent(&gc, B, K, gz, glab, 1.0f / B, gdz, gl, gcor);
    h = back(gdz, (size_t)B * K), expect("softmax gradient", dz, h, (size_t)B * K, 1e-5), free(h);
    h = back(gl, 1), expect("softmax loss", &loss, h, 1, 1e-6);
    int32_t gcorrect;
    assert_int_equal(cudaMemcpy(&gcorrect, gcor, 4, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(gcorrect, correct);
    free(h), free(x), free(w), free(b), free(dyh), free(y), free(dxh), free(dw), free(db), free(z), free(dz);
    cudaFree(gx), cudaFree(gw), cudaFree(gb), cudaFree(gdy), cudaFree(gy), cudaFree(gdx), cudaFree(gdw);
    cudaFree(gdb), cudaFree(gz), cudaFree(gdz), cudaFree(gl), cudaFree(glab), cudaFree(gcor);
}

/* LeNet's and ResNet-18's shapes (a 7x7 stride-2 stem, 3x3 with padding, a 1x1 stride-2 shortcut). */
static void test_conv2d(void **state) {
    (void)state;
    const dp_conv2d_dims shapes[] = {{1, 28, 28, 6, 5, 1, 0, 0, 0}, {6, 12, 12, 16, 5, 1, 0, 0, 0},
                                     {3, 32, 32, 8, 7, 2, 3, 0, 0}, {8, 9, 9, 8, 3, 1, 1, 0, 0},
                                     {8, 10, 10, 16, 1, 2, 0, 0, 0}};
    const int B = 3;
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        dp_conv2d_dims d = shapes[k];
        assert_int_equal(conv2d_dims_init(&d), 0);
        const size_t nx = (size_t)B * d.in_c * d.in_h * d.in_w, nw = (size_t)d.out_c * d.in_c * d.k * d.k,
                     ny = (size_t)B * d.out_c * d.out_h * d.out_w;
        float *x = host_rand(nx, 1), *w = host_rand(nw, 0.2f), *b = host_rand(d.out_c, 0.1f), *g = host_rand(ny, 0.1f);
        float *y = malloc(ny * 4), *dxh = malloc(nx * 4), *dw = calloc(nw, 4), *db = calloc(d.out_c, 4);
        float *cws = malloc(C->conv2d_workspace_floats(&d, B, 1) * 4 + 64);
        float *gx = dev(x, nx * 4), *gw = dev(w, nw * 4), *gb = dev(b, d.out_c * 4), *gg = dev(g, ny * 4);
        float *gy = dev(NULL, ny * 4), *gdx = dev(NULL, nx * 4), *gdw = dev(NULL, nw * 4), *gdb = dev(NULL, d.out_c * 4);
        float *gws = dev(NULL, G->conv2d_workspace_floats(&d, B, 1) * 4);
        C->conv2d_forward(&cc, &d, B, x, w, b, y, cws), G->conv2d_forward(&gc, &d, B, gx, gw, gb, gy, gws);
        float *h = back(gy, ny);
        expect("conv2d forward", y, h, ny, 1e-4), free(h);
        C->conv2d_backward(&cc, &d, B, x, w, g, dxh, dw, db, cws);
        G->conv2d_backward(&gc, &d, B, gx, gw, gg, gdx, gdw, gdb, gws);
        h = back(gdx, nx), expect("conv2d dx", dxh, h, nx, 1e-4), free(h);
        h = back(gdw, nw), expect("conv2d dw", dw, h, nw, 1e-4), free(h);
        float *first = back(gdb, d.out_c);
        expect("conv2d db", db, first, d.out_c, 1e-5);
        /* the same call again gives the same bits (deterministic; db accumulates: compare twice the step) */
        G->conv2d_backward(&gc, &d, B, gx, gw, gg, gdx, gdw, gdb, gws);
        float *again = back(gdx, nx);
        h = back(gdx, nx);
        assert_memory_equal(again, h, nx * 4);
        free(first), free(again), free(h), free(x), free(w), free(b), free(g), free(y), free(dxh), free(dw), free(db);
        free(cws);
        cudaFree(gx), cudaFree(gw), cudaFree(gb), cudaFree(gg), cudaFree(gy), cudaFree(gdx), cudaFree(gdw);
        cudaFree(gdb), cudaFree(gws);
    }
}

int main(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        fprintf(stderr, "test_cuda_kernels: no CUDA device: skipped\n");
        return 77;
    }
    dp_rng_seed(&rng, 17, 17);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elementwise), cmocka_unit_test(test_pooling), cmocka_unit_test(test_batchnorm),
        cmocka_unit_test(test_linear_and_loss), cmocka_unit_test(test_conv2d), cmocka_unit_test(test_gather_batch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
