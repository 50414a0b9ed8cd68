/* Every entry of the CUDA kernel table against its CPU twin (kernels/kernels.h) on seeded random
 * inputs, with the tolerance stated per kernel: bitwise where the arithmetic is element-wise and
 * unfused (ReLU, add, copy, SGD, the tree sum, the non-finite check, max pooling, the average pool), 1e-5 relative
 * where a sum runs in another order (batch norm sums, cuBLAS GEMMs, the loss), 1e-4 for the
 * convolution (im2col GEMM or cuDNN against the CPU's direct kernels).
 *
 * The convolutions, the linear layer and the loss run in every call context a kernel meets: the
 * table's own cuBLAS handle on the legacy stream, and an opened CUDA device's main stream and two
 * of its lane streams (non-blocking streams, each with its own handle and the same workspace).
 * Each context's second run is bitwise its first (dx, dw, db: the weight gradients start from
 * zero both times), and every context computes the bits of the first ("the same workspace, the
 * same algorithm", which DDP's lanes against DP's main stream rely on). The convolution shapes
 * include ResNet-18-sized ones above cuDNN's threshold (conv_cudnn.cu: 1M multiply-adds per
 * sample), so cuDNN's plans and its im2col fallbacks run; the loss runs a batch of 300 (two of
 * its tiles). A failed library call is reported by the device's wait and does not outlive the
 * device. lanes() (several lanes' recorded calls in one launch, in groups of 16) computes each lane's
 * bits as that lane's call alone does. Exits 77 (skipped) without a CUDA device. */
#include "testutil.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/devices.h"
#include "kernels/device.h"
#include "core/rng.h"
#include "dp_config.h"
#include "kernel_tables.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/kcall.h"
#include "kernels/kernels.h"

static const dp_kernels *G = &dp_cuda_kernels, *C = &dp_cpu_kernels;
static const dp_kctx cc = {.nthreads = 1}, gc = {.nthreads = 1};
static dp_rng rng;
static dp_dev *D; /* an opened CUDA device (main) */

/* The call contexts the layers' kernels run in: the table's own handle on the legacy stream, the
 * device's main stream, two of its lanes. */
enum { N_CTX = 4 };
static const char *ctx_name[N_CTX] = {"the table's own handle", "the device's main stream", "lane 0", "lane 5"};
static const dp_kctx *ctx(int i) {
    return i == 0 ? &gc : i == 1 ? &D->main.kc : i == 2 ? &D->lanes[0].kc : &D->lanes[5].kc;
}

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
    /* the device's streams are non-blocking: they do not wait for the legacy stream's copy or
       memset (neither is synchronous with respect to the host in every case) */
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
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
static void zero(void *d, size_t bytes) {
    assert_int_equal(cudaMemset(d, 0, bytes), cudaSuccess);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
}
/* a GPU result against another GPU result: bitwise */
static void same(const char *what, const char *how, const float *a, const float *b, size_t n) {
    if (memcmp(a, b, n * sizeof *a) != 0) fail_msg("%s: %s is not bitwise equal", what, how);
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
    /* a replica's lanes' metrics: the tree over their losses (partial sums left) and the hits */
    enum { NL = 7 };
    float *ll = host_rand(NL, 100), lm[2];
    int32_t hits[NL];
    for (int i = 0; i < NL; i++) hits[i] = (int32_t)dp_rng_below(&rng, 300);
    float *dll = dev(ll, NL * 4), *dlm = dev(NULL, 2 * 4);
    int32_t *dhits = dev(hits, sizeof hits);
    C->lane_metrics(&cc, NL, ll, hits, lm), G->lane_metrics(&gc, NL, dll, dhits, dlm);
    h = back(dlm, 2), expect("lane metrics", lm, h, 2, 0), free(h);
    h = back(dll, NL), expect("lane metrics' partial sums", ll, h, NL, 0), free(h);
    cudaFree(dll), cudaFree(dlm), cudaFree(dhits), free(ll);
    /* the gradients' check: NaN, +Inf, -Inf at the first, a middle and the last element set the
       flag; a large finite value does not; a set flag stays set */
    const float poison[] = {NAN, INFINITY, -INFINITY, 3e38f};
    const size_t at[] = {0, 65537, n - 1, 17};
    float *dflag = dev(NULL, 4);
    for (int k = 0; k < 4; k++) {
        const float was = g[at[k]];
        g[at[k]] = poison[k];
        assert_int_equal(cudaMemcpy(dg + at[k], g + at[k], 4, cudaMemcpyHostToDevice), cudaSuccess);
        float flag = 0;
        zero(dflag, 4);
        C->nonfinite(&cc, n, g, &flag), G->nonfinite(&gc, n, dg, dflag);
        h = back(dflag, 1), expect("nonfinite", &flag, h, 1, 0), free(h);
        if (flag != (k < 3 ? 1.0f : 0.0f)) fail_msg("nonfinite: case %d gives %g", k, flag);
        g[at[k]] = was;
        assert_int_equal(cudaMemcpy(dg + at[k], g + at[k], 4, cudaMemcpyHostToDevice), cudaSuccess);
    }
    const float one = 1.0f;
    assert_int_equal(cudaMemcpy(dflag, &one, 4, cudaMemcpyHostToDevice), cudaSuccess);
    G->nonfinite(&gc, n, dg, dflag);
    h = back(dflag, 1), expect("nonfinite over finite values (the flag stays)", &one, h, 1, 0), free(h);
    cudaFree(dflag);
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
    { /* ResNet-18's global average pool: 3 x 512 planes of 7x7 (many blocks of 64 planes), and 3 x 70 planes
         of 33x33 (a plane read in several 32-column passes, a last block part full) */
        const int shapes[2][3] = {{3, 512, 49}, {3, 70, 33 * 33}};
        for (int t = 0; t < 2; t++) {
            const int B = shapes[t][0], ch = shapes[t][1], hw = shapes[t][2];
            const size_t n = (size_t)B * ch * hw, np = (size_t)B * ch;
            float *x = host_rand(n, 2), *y = malloc(np * 4);
            float *gx = dev(x, n * 4), *gy = dev(NULL, np * 4);
            C->avgpool_forward(&cc, B, ch, hw, x, y);
            for (int i = 0; i < N_CTX; i++) {
                zero(gy, np * 4);
                G->avgpool_forward(ctx(i), B, ch, hw, gx, gy);
                float *h = back(gy, np);
                expect("average pool forward (many planes)", y, h, np, 0), free(h);
            }
            free(x), free(y), cudaFree(gx), cudaFree(gy);
        }
    }
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

static void test_linear(void **state) {
    (void)state;
    const int B = 9, I = 400, O = 120;
    float *x = host_rand((size_t)B * I, 1), *w = host_rand((size_t)O * I, 0.05f), *b = host_rand(O, 0.1f);
    float *dyh = host_rand((size_t)B * O, 0.1f), *y = malloc((size_t)B * O * 4), *dxh = malloc((size_t)B * I * 4);
    float *dw = calloc((size_t)O * I, 4), *db = calloc(O, 4);
    float *gx = dev(x, (size_t)B * I * 4), *gw = dev(w, (size_t)O * I * 4), *gb = dev(b, O * 4);
    float *gdy = dev(dyh, (size_t)B * O * 4), *gy = dev(NULL, (size_t)B * O * 4), *gdx = dev(NULL, (size_t)B * I * 4);
    float *gdw = dev(NULL, (size_t)O * I * 4), *gdb = dev(NULL, O * 4);
    C->linear_forward(&cc, B, I, O, x, w, b, y);
    C->linear_backward(&cc, B, I, O, x, w, dyh, dxh, dw, db);
    float *first[4] = {0}; /* context 0's y, dx, dw, db */
    for (int i = 0; i < N_CTX; i++)
        for (int run = 0; run < 2; run++) {
            zero(gdw, (size_t)O * I * 4), zero(gdb, O * 4); /* the weight gradients accumulate: from zero each run */
            G->linear_forward(ctx(i), B, I, O, gx, gw, gb, gy);
            G->linear_backward(ctx(i), B, I, O, gx, gw, gdy, gdx, gdw, gdb);
            float *h[4] = {back(gy, (size_t)B * O), back(gdx, (size_t)B * I), back(gdw, (size_t)O * I), back(gdb, O)};
            const size_t n[4] = {(size_t)B * O, (size_t)B * I, (size_t)O * I, O};
            expect("linear forward", y, h[0], n[0], 1e-5);
            expect("linear dx", dxh, h[1], n[1], 1e-5);
            expect("linear dw", dw, h[2], n[2], 1e-5);
            expect("linear db", db, h[3], n[3], 0);
            for (int k = 0; k < 4; k++) {
                if (!first[k]) {
                    first[k] = h[k];
                    continue;
                }
                char how[128];
                snprintf(how, sizeof how, "%s, run %d, against the first context's first run", ctx_name[i], run + 1);
                same("linear", how, first[k], h[k], n[k]);
                free(h[k]);
            }
        }
    for (int k = 0; k < 4; k++) free(first[k]);
    free(x), free(w), free(b), free(dyh), free(y), free(dxh), free(dw), free(db);
    cudaFree(gx), cudaFree(gw), cudaFree(gb), cudaFree(gdy), cudaFree(gy), cudaFree(gdx), cudaFree(gdw), cudaFree(gdb);
}

/* Softmax cross-entropy: 9 samples, and 300 (more than one tile of 256: loss.cu's tile loop and
 * its sum across tiles); an out-of-range label gives NaN on both sides. */
static void test_loss(void **state) {
    (void)state;
    const int K = 10, batches[2] = {9, 300};
    for (int t = 0; t < 2; t++) {
        const int B = batches[t];
        float *z = host_rand((size_t)B * K, 4), *dz = malloc((size_t)B * K * 4), loss;
        int32_t *lab = malloc((size_t)B * 4), correct;
        for (int n = 0; n < B; n++) lab[n] = (int32_t)(dp_rng_uniform(&rng) * K) % K;
        float *gz = dev(z, (size_t)B * K * 4), *gdz = dev(NULL, (size_t)B * K * 4), *gl = dev(NULL, 4);
        int32_t *glab = dev(lab, (size_t)B * 4), *gcor = dev(NULL, 4);
        C->softmax_xent(&cc, B, K, z, lab, 1.0f / B, dz, &loss, &correct);
        float *first_dz = NULL, first_loss = 0;
        for (int i = 0; i < N_CTX; i++) {
            G->softmax_xent(ctx(i), B, K, gz, glab, 1.0f / B, gdz, gl, gcor);
            float *h = back(gdz, (size_t)B * K), *hl = back(gl, 1);
            expect("softmax gradient", dz, h, (size_t)B * K, 1e-5);
            expect("softmax loss", &loss, hl, 1, 1e-6);
            int32_t gcorrect;
            assert_int_equal(cudaMemcpy(&gcorrect, gcor, 4, cudaMemcpyDeviceToHost), cudaSuccess);
            assert_int_equal(gcorrect, correct);
            if (!first_dz) {
                first_dz = h, first_loss = *hl;
            } else {
                same("softmax gradient", ctx_name[i], first_dz, h, (size_t)B * K);
                same("softmax loss", ctx_name[i], &first_loss, hl, 1);
                free(h);
            }
            free(hl);
        }
        free(first_dz), free(z), free(dz), free(lab);
        cudaFree(gz), cudaFree(gdz), cudaFree(gl), cudaFree(glab), cudaFree(gcor);
    }
}

/* LeNet's shapes and small ResNet-18-like ones (a 7x7 stride-2 stem, 3x3 with padding, a 1x1
 * stride-2 shortcut), all below cuDNN's threshold (im2col + cuBLAS), then ResNet-18-sized ones from
 * 1M multiply-adds per sample, which cuDNN runs in a build with it (conv_cudnn.cu; for some 1x1
 * stride-2 shapes it has no deterministic fp32 weight-gradient algorithm, and that pass falls back to
 * im2col). In every call context; each context's second run against its first, and against the first
 * context's, bitwise. */
static void test_conv2d(void **state) {
    (void)state;
    const dp_conv2d_dims shapes[] = {
        {1, 28, 28, 6, 5, 1, 0, 0, 0},  {6, 12, 12, 16, 5, 1, 0, 0, 0},  {3, 32, 32, 8, 7, 2, 3, 0, 0},
        {8, 9, 9, 8, 3, 1, 1, 0, 0},    {8, 10, 10, 16, 1, 2, 0, 0, 0},
        /* from 1M multiply-adds per sample: cuDNN */
        {3, 64, 64, 64, 7, 2, 3, 0, 0},   /* the stem on a 64x64 image: 9.6M */
        {64, 14, 14, 64, 3, 1, 1, 0, 0},  /* a 3x3 of layer 1's width: 7.2M */
        {64, 14, 14, 128, 3, 2, 1, 0, 0}, /* a stride-2 3x3 into layer 2's width: 3.6M */
        {128, 28, 28, 256, 1, 2, 0, 0, 0}, /* a 1x1 stride-2 shortcut: 6.4M */
    };
    const int B = 3;
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        dp_conv2d_dims d = shapes[k];
        assert_int_equal(dp_conv2d_dims_init(&d), 0);
        const size_t nx = (size_t)B * d.in_c * d.in_h * d.in_w, nw = (size_t)d.out_c * d.in_c * d.k * d.k,
                     ny = (size_t)B * d.out_c * d.out_h * d.out_w, nb = (size_t)d.out_c;
        const double macs = (double)d.out_c * d.out_h * d.out_w * d.in_c * d.k * d.k;
        if (macs >= 1e6)
            fprintf(stderr, "conv %dx%dx%d -> %d k%d s%d: %.1fM multiply-adds per sample (%s)\n", d.in_c, d.in_h,
                    d.in_w, d.out_c, d.k, d.stride, macs / 1e6, DP_HAVE_CUDNN ? "cuDNN" : "no cuDNN in this build");
        float *x = host_rand(nx, 1), *w = host_rand(nw, 0.2f), *b = host_rand(nb, 0.1f), *g = host_rand(ny, 0.1f);
        float *y = malloc(ny * 4), *dxh = malloc(nx * 4), *dw = calloc(nw, 4), *db = calloc(nb, 4);
        float *cws = malloc(C->conv2d_workspace_floats(&d, B, 1) * 4 + 64);
        float *gx = dev(x, nx * 4), *gw = dev(w, nw * 4), *gb = dev(b, nb * 4), *gg = dev(g, ny * 4);
        float *gy = dev(NULL, ny * 4), *gdx = dev(NULL, nx * 4), *gdw = dev(NULL, nw * 4), *gdb = dev(NULL, nb * 4);
        /* one workspace per context: lanes run at once in the executor, each in its own slot */
        float *gws = dev(NULL, G->conv2d_workspace_floats(&d, B, 1) * 4);
        C->conv2d_forward(&cc, &d, B, x, w, b, y, cws);
        C->conv2d_backward(&cc, &d, B, x, w, g, dxh, dw, db, cws);
        const size_t n[4] = {ny, nx, nw, nb};
        float *first[4] = {0}; /* the first context's first run: y, dx, dw, db */
        for (int i = 0; i < N_CTX; i++)
            for (int run = 0; run < 2; run++) {
                zero(gy, ny * 4), zero(gdx, nx * 4), zero(gdw, nw * 4), zero(gdb, nb * 4);
                G->conv2d_forward(ctx(i), &d, B, gx, gw, gb, gy, gws);
                G->conv2d_backward(ctx(i), &d, B, gx, gw, gg, gdx, gdw, gdb, gws);
                float *h[4] = {back(gy, ny), back(gdx, nx), back(gdw, nw), back(gdb, nb)};
                expect("conv2d forward", y, h[0], ny, 1e-4);
                expect("conv2d dx", dxh, h[1], nx, 1e-4);
                expect("conv2d dw", dw, h[2], nw, 1e-4);
                expect("conv2d db", db, h[3], nb, 1e-5);
                for (int q = 0; q < 4; q++) {
                    if (!first[q]) {
                        first[q] = h[q];
                        continue;
                    }
                    char how[160];
                    snprintf(how, sizeof how, "shape %zu, %s, run %d, against the first context's first run (%s)", k,
                             ctx_name[i], run + 1, q == 0 ? "y" : q == 1 ? "dx" : q == 2 ? "dw" : "db");
                    same("conv2d", how, first[q], h[q], n[q]);
                    free(h[q]);
                }
            }
        for (int q = 0; q < 4; q++) free(first[q]);
        free(x), free(w), free(b), free(g), free(y), free(dxh), free(dw), free(db), free(cws);
        cudaFree(gx), cudaFree(gw), cudaFree(gb), cudaFree(gg), cudaFree(gy), cudaFree(gdx), cudaFree(gdw);
        cudaFree(gdb), cudaFree(gws);
    }
}

/* The fused entries (kernels/cuda/fused.cu) against the CUDA entries they stand for, bitwise, and
 * against their CPU twins: the convolution within test_conv2d's tolerance, and what follows it
 * (ReLU, max pool, their gradients, batch norm's apply) bitwise from the same inputs. */
static void test_fused(void **state) {
    (void)state;
    /* LeNet's two layers with their 2x2 pools, an overlapping 3x3 stride 2 pad 1 pool, no pool */
    const struct { dp_conv2d_dims d; int pk, ps, pp; } cases[] = {
        {{1, 28, 28, 6, 5, 1, 0, 0, 0}, 2, 2, 0},
        {{6, 12, 12, 16, 5, 1, 0, 0, 0}, 2, 2, 0},
        {{8, 9, 9, 8, 3, 1, 1, 0, 0}, 3, 2, 1},
        {{3, 10, 10, 4, 3, 1, 1, 0, 0}, 0, 0, 0},
    };
    const int B = 3;
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        dp_conv2d_dims d = cases[k].d;
        assert_int_equal(dp_conv2d_dims_init(&d), 0);
        const int pk = cases[k].pk, ps = cases[k].ps, pp = cases[k].pp;
        const int oh = pk ? (d.out_h + 2 * pp - pk) / ps + 1 : 0, ow = pk ? (d.out_w + 2 * pp - pk) / ps + 1 : 0;
        const size_t nx = (size_t)B * d.in_c * d.in_h * d.in_w, nw = (size_t)d.out_c * d.in_c * d.k * d.k,
                     ny = (size_t)B * d.out_c * d.out_h * d.out_w, np = (size_t)B * d.out_c * oh * ow;
        /* g: np + 1 floats, since gg below is uploaded with one float more (np is 0 without a pool) */
        float *x = host_rand(nx, 1), *w = host_rand(nw, 0.2f), *b = host_rand(d.out_c, 0.1f), *g = host_rand(np + 1, 1);
        float *cws = malloc(C->conv2d_workspace_floats(&d, B, 1) * 4 + 64);
        float *y = malloc(ny * 4), *r = malloc(ny * 4), *pooled = malloc(np * 4 + 4), *dpool = malloc(ny * 4);
        float *dx = malloc(ny * 4);
        int32_t *am = malloc(np * 4 + 4);
        float *gx = dev(x, nx * 4), *gw = dev(w, nw * 4), *gb = dev(b, d.out_c * 4), *gg = dev(g, np * 4 + 4);
        float *gws = dev(NULL, G->conv2d_workspace_floats(&d, B, 1) * 4);
        float *gy[2], *gr[2], *gp[2], *gdp[2], *gdx[2];
        int32_t *gam[2];
        for (int t = 0; t < 2; t++) {
            gy[t] = dev(NULL, ny * 4), gr[t] = dev(NULL, ny * 4), gp[t] = dev(NULL, np * 4 + 4);
            gam[t] = dev(NULL, np * 4 + 4), gdp[t] = dev(NULL, ny * 4), gdx[t] = dev(NULL, ny * 4);
        }
        /* [0] fused, [1] the entries one by one */
        G->conv2d_relu_forward(&D->main.kc, &d, B, gx, gw, gb, gy[0], gws, gr[0], pk, ps, pp, gp[0], gam[0]);
        G->conv2d_forward(&D->main.kc, &d, B, gx, gw, gb, gy[1], gws);
        G->relu_forward(&D->main.kc, ny, gy[1], gr[1]);
        if (pk) {
            G->maxpool_forward(&D->main.kc, B, d.out_c, d.out_h, d.out_w, pk, ps, pp, gr[1], gp[1], gam[1]);
            G->maxpool_relu_backward(&D->main.kc, B, d.out_c, d.out_h, d.out_w, pk, ps, pp, oh, ow, gg, gam[0], gr[0],
                                     gdp[0], gdx[0]);
            G->maxpool_backward(&D->main.kc, B, d.out_c, d.out_h, d.out_w, pk, ps, pp, oh, ow, gg, gam[1], gdp[1]);
            G->relu_backward(&D->main.kc, ny, gr[1], gdp[1], gdx[1]);
        }
        float *h[2][6];
        for (int t = 0; t < 2; t++) {
            h[t][0] = back(gy[t], ny), h[t][1] = back(gr[t], ny), h[t][2] = back(gp[t], np);
            h[t][3] = back(gam[t], np), h[t][4] = back(gdp[t], ny), h[t][5] = back(gdx[t], ny);
        }
        const char *what[6] = {"conv2d_relu_forward y", "conv2d_relu_forward relu", "conv2d_relu_forward pooled",
                               "conv2d_relu_forward argmax", "maxpool_relu_backward dpool", "maxpool_relu_backward dx"};
        const size_t n[6] = {ny, ny, np, np, ny, ny};
        for (int q = 0; q < 6; q++)
            same(what[q], "the fused call against the entries one by one", h[0][q], h[1][q], n[q]);
        /* the CPU twin: the convolution within rounding, the rest bitwise from the GPU's y */
        C->conv2d_relu_forward(&cc, &d, B, x, w, b, y, cws, r, pk, ps, pp, pooled, am);
        expect("conv2d_relu_forward y", y, h[0][0], ny, 1e-4);
        C->relu_forward(&cc, ny, h[0][0], r);
        expect("conv2d_relu_forward relu", r, h[0][1], ny, 0);
        if (pk) {
            C->maxpool_forward(&cc, B, d.out_c, d.out_h, d.out_w, pk, ps, pp, r, pooled, am);
            expect("conv2d_relu_forward pooled", pooled, h[0][2], np, 0);
            assert_memory_equal(am, h[0][3], np * 4);
            C->maxpool_relu_backward(&cc, B, d.out_c, d.out_h, d.out_w, pk, ps, pp, oh, ow, g, am, r, dpool, dx);
            expect("maxpool_relu_backward dpool", dpool, h[0][4], ny, 0);
            expect("maxpool_relu_backward dx", dx, h[0][5], ny, 0);
        }
        for (int t = 0; t < 2; t++) {
            for (int q = 0; q < 6; q++) free(h[t][q]);
            cudaFree(gy[t]), cudaFree(gr[t]), cudaFree(gp[t]), cudaFree(gam[t]), cudaFree(gdp[t]), cudaFree(gdx[t]);
        }
        free(x), free(w), free(b), free(g), free(cws), free(y), free(r), free(pooled), free(dpool), free(dx), free(am);
        cudaFree(gx), cudaFree(gw), cudaFree(gb), cudaFree(gg), cudaFree(gws);
    }
    { /* batch norm's apply with its ReLU: LeNet-BN's bn1 and bn3 (hw 1) */
        const int shapes[2][3] = {{4, 6, 28 * 28}, {5, 120, 1}};
        for (int t = 0; t < 2; t++) {
            const int Bn = shapes[t][0], ch = shapes[t][1], hw = shapes[t][2];
            const size_t nn = (size_t)Bn * ch * hw;
            float *x = host_rand(nn, 2), *mean = host_rand(ch, 0.5f), *inv = host_rand(ch, 2), *ga = host_rand(ch, 1);
            float *be = host_rand(ch, 1), *y = malloc(nn * 4), *r = malloc(nn * 4);
            float *gx = dev(x, nn * 4), *gm = dev(mean, ch * 4), *gi = dev(inv, ch * 4), *gga = dev(ga, ch * 4);
            float *gbe = dev(be, ch * 4), *gy = dev(NULL, nn * 4), *gr = dev(NULL, nn * 4), *gy1 = dev(NULL, nn * 4);
            float *gr1 = dev(NULL, nn * 4);
            C->bn_apply_relu(&cc, Bn, ch, hw, x, mean, inv, ga, be, y, r);
            G->bn_apply_relu(&D->main.kc, Bn, ch, hw, gx, gm, gi, gga, gbe, gy, gr);
            G->bn_apply(&D->main.kc, Bn, ch, hw, gx, gm, gi, gga, gbe, gy1);
            G->relu_forward(&D->main.kc, nn, gy1, gr1);
            float *hy = back(gy, nn), *hr = back(gr, nn), *hy1 = back(gy1, nn), *hr1 = back(gr1, nn);
            same("bn_apply_relu y", "the fused call against the entries one by one", hy, hy1, nn);
            same("bn_apply_relu relu", "the fused call against the entries one by one", hr, hr1, nn);
            expect("bn_apply_relu y", y, hy, nn, 0);
            expect("bn_apply_relu relu", r, hr, nn, 0);
            free(x), free(mean), free(inv), free(ga), free(be), free(y), free(r);
            free(hy), free(hr), free(hy1), free(hr1);
            cudaFree(gx), cudaFree(gm), cudaFree(gi), cudaFree(gga), cudaFree(gbe), cudaFree(gy), cudaFree(gr);
            cudaFree(gy1), cudaFree(gr1);
        }
    }
}

/* A failed library call (cuBLAS refuses a negative inner dimension) is reported by the device's
 * next wait, naming the call; one noted and never read is dropped when the device closes, so the
 * next device opened in the process starts clean. Every device operation makes its GPU current. */
static void test_errors_stay_with_their_device(void **state) {
    (void)state;
    float *gx = dev(NULL, 64), *gw = dev(NULL, 64), *gy = dev(NULL, 64);
    G->linear_forward(&D->main.kc, 2, -1, 3, gx, gw, NULL, gy);
    assert_int_equal(D->wait(D), DP_ERR_BACKEND);
    if (!tu_contains(dp_last_error(), "cublasSgemm") || !tu_contains(dp_last_error(), "CUDA device 0"))
        fail_msg("%s", dp_last_error());
    assert_int_equal(D->wait(D), DP_OK); /* read once */
    G->linear_forward(&D->main.kc, 2, -1, 3, gx, gw, NULL, gy); /* noted, never read */
    dp_dev_close(D);
    D = NULL;
    char msg[512];
    assert_int_equal(dp_cuda_kernels_error(msg, sizeof msg), 0);
    assert_int_equal(dp_dev_open("cuda", 0, 0, NULL, &D), DP_OK);
    assert_int_equal(D->wait(D), DP_OK);
    int n = 0, cur = -1;
    assert_int_equal(cudaGetDeviceCount(&n), cudaSuccess);
    if (n > 1) assert_int_equal(cudaSetDevice(n - 1), cudaSuccess); /* another GPU current: the next op switches back */
    float *p = NULL;
    assert_int_equal(D->alloc(D, &p, 16, "a test buffer"), DP_OK);
    assert_int_equal(cudaGetDevice(&cur), cudaSuccess);
    assert_int_equal(cur, 0);
    D->free(D, p);
    cudaFree(gx), cudaFree(gw), cudaFree(gy);
}

/* --precision bf16 on the GPU: the rounding kernel, alone and through lanes(), gives the CPU's bits
 * for every fp32 bit pattern; on a device opened with TF32 (what bf16 runs open, trainer.c), linear
 * layers and convolutions on bf16 values agree with the CPU reference as closely as fp32 does
 * (TF32 holds a bf16 value exactly: the products are exact, only the order of the sums differs),
 * where the same device on arbitrary fp32 values is TF32's 2^-11 away (printed, as a control). */
static void test_bf16(void **state) {
    (void)state;
    const size_t n = 1 << 16;
    float *x = malloc(n * 4), *ref = malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        const uint32_t u = dp_rng_below(&rng, 65536) << 16 | dp_rng_below(&rng, 65536);
        memcpy(&x[i], &u, 4);
    }
    C->round_bf16(&cc, n, x, ref);
    float *gx = dev(x, n * 4), *gy = dev(NULL, n * 4);
    G->round_bf16(&gc, n, gx, gy);
    float *h = back(gy, n);
    expect("round_bf16", ref, h, n, 0), free(h);
    /* lanes: the two halves as two lanes of one launch, in place */
    dp_kcall_rec rec[2];
    memset(rec, 0, sizeof rec);
    for (int l = 0; l < 2; l++) {
        const dp_kctx rk = {.stream = &rec[l], .ordinal = D->main.kc.ordinal};
        dp_kcall_recorder.round_bf16(&rk, n / 2, gx + l * (n / 2), gx + l * (n / 2));
    }
    const dp_kcall *calls[2] = {&rec[0].calls[0], &rec[1].calls[0]};
    G->lanes(&D->main.kc, 2, calls);
    h = back(gx, n);
    expect("round_bf16 through lanes()", ref, h, n, 0), free(h);
    dp_kcall_rec_free(&rec[0]), dp_kcall_rec_free(&rec[1]);
    cudaFree(gx), cudaFree(gy), free(x), free(ref);

    dp_dev *T = NULL;
    assert_int_equal(dp_dev_open("cuda", D->main.kc.ordinal, 1, NULL, &T), DP_OK);
    const int B = 9, I = 400, O = 120;
    for (int bf = 1; bf >= 0; bf--) {
        float *lx = host_rand((size_t)B * I, 1), *w = host_rand((size_t)O * I, 0.05f);
        float *dyh = host_rand((size_t)B * O, 0.1f);
        if (bf) C->round_bf16(&cc, (size_t)B * I, lx, lx), C->round_bf16(&cc, (size_t)O * I, w, w),
                C->round_bf16(&cc, (size_t)B * O, dyh, dyh);
        float *y = malloc((size_t)B * O * 4), *dxh = malloc((size_t)B * I * 4), *dw = calloc((size_t)O * I, 4);
        C->linear_forward(&cc, B, I, O, lx, w, NULL, y);
        C->linear_backward(&cc, B, I, O, lx, w, dyh, dxh, dw, NULL);
        float *glx = dev(lx, (size_t)B * I * 4), *gw = dev(w, (size_t)O * I * 4), *gdy = dev(dyh, (size_t)B * O * 4);
        float *gly = dev(NULL, (size_t)B * O * 4), *gdx = dev(NULL, (size_t)B * I * 4);
        float *gdw = dev(NULL, (size_t)O * I * 4);
        G->linear_forward(&T->main.kc, B, I, O, glx, gw, NULL, gly);
        G->linear_backward(&T->main.kc, B, I, O, glx, gw, gdy, gdx, gdw, NULL);
        float *hy = back(gly, (size_t)B * O), *hdx = back(gdx, (size_t)B * I), *hdw = back(gdw, (size_t)O * I);
        if (bf) {
            expect("bf16 linear forward on TF32", y, hy, (size_t)B * O, 1e-5);
            expect("bf16 linear dx on TF32", dxh, hdx, (size_t)B * I, 1e-5);
            expect("bf16 linear dw on TF32", dw, hdw, (size_t)O * I, 1e-5);
        } else {
            fprintf(stderr, "control: fp32 values on TF32: linear forward %.3g relative to the CPU\n",
                    tu_rel_diff(hy, y, (size_t)B * O));
        }
        free(lx), free(w), free(dyh), free(y), free(dxh), free(dw), free(hy), free(hdx), free(hdw);
        cudaFree(glx), cudaFree(gw), cudaFree(gdy), cudaFree(gly), cudaFree(gdx), cudaFree(gdw);
    }
    /* a convolution big enough for cuDNN */
    dp_conv2d_dims d = {64, 14, 14, 64, 3, 1, 1, 0, 0};
    assert_int_equal(dp_conv2d_dims_init(&d), 0);
    const size_t nx = (size_t)3 * d.in_c * d.in_h * d.in_w, nw = (size_t)d.out_c * d.in_c * d.k * d.k,
                 ny = (size_t)3 * d.out_c * d.out_h * d.out_w;
    float *cx = host_rand(nx, 1), *cw = host_rand(nw, 0.2f), *cy = malloc(ny * 4);
    C->round_bf16(&cc, nx, cx, cx), C->round_bf16(&cc, nw, cw, cw);
    float *cws = malloc(C->conv2d_workspace_floats(&d, 3, 1) * 4 + 64);
    C->conv2d_forward(&cc, &d, 3, cx, cw, NULL, cy, cws);
    float *gcx = dev(cx, nx * 4), *gcw = dev(cw, nw * 4), *gcy = dev(NULL, ny * 4);
    float *gws = dev(NULL, G->conv2d_workspace_floats(&d, 3, 1) * 4);
    G->conv2d_forward(&T->main.kc, &d, 3, gcx, gcw, NULL, gcy, gws);
    h = back(gcy, ny);
    expect("bf16 conv2d forward on TF32", cy, h, ny, 1e-4);
    free(h), free(cx), free(cw), free(cy), free(cws);
    cudaFree(gcx), cudaFree(gcw), cudaFree(gcy), cudaFree(gws);
    dp_dev_close(T);
}

static int open_device(void **state) {
    (void)state;
    return dp_dev_open("cuda", 0, 0, NULL, &D) == DP_OK ? 0 : -1;
}
static int close_device(void **state) {
    (void)state;
    if (D) dp_dev_close(D);
    D = NULL;
    return 0;
}

/* lanes(): 20 lanes (two launches of 16 and 4) of uneven sizes, the last empty, recorded with the
 * recording table: relu, max pool, add, linear (no one-launch kernel: lane by lane), the loss, relu
 * backward, max pool backward and copy, against the same calls made lane by lane on the same stream:
 * bitwise. */
static void test_lanes(void **state) {
    (void)state;
    enum { L = 20, CH = 3, H = 9, W = 8, OH = 4, OW = 4, OUT = 7, NB = 2 };
    const size_t fi = (size_t)CH * OH * OW;
    float *w = host_rand((size_t)OUT * fi, 1), *b = host_rand(OUT, 1);
    float *dw = dev(w, (size_t)OUT * fi * 4), *db = dev(b, OUT * 4);
    float *x[NB][L], *y[NB][L], *g[NB][L], *dx[NB][L], *lo[NB][L], *dlo[NB][L], *loss[NB][L];
    int32_t *am[NB][L], *hits[NB][L], *lab[L];
    int batch[L];
    dp_kcall_rec rec[L];
    memset(rec, 0, sizeof rec);
    for (int l = 0; l < L; l++) {
        batch[l] = l == L - 1 ? 0 : 1 + l % 5;
        const size_t ni = (size_t)batch[l] * CH * H * W, no = (size_t)batch[l] * CH * OH * OW;
        float *hx = host_rand(ni, 2), *hg = host_rand(no, 1);
        for (int k = 0; k < NB; k++) { /* k = 0: lane by lane, 1: lanes() */
            x[k][l] = dev(hx, ni * 4), g[k][l] = dev(hg, no * 4), y[k][l] = dev(NULL, no * 4);
            dx[k][l] = dev(NULL, ni * 4), lo[k][l] = dev(NULL, (size_t)batch[l] * OUT * 4);
            am[k][l] = dev(NULL, no * 4);
            dlo[k][l] = dev(NULL, (size_t)batch[l] * OUT * 4), loss[k][l] = dev(NULL, 4), hits[k][l] = dev(NULL, 4);
        }
        int32_t hl[8];
        for (int i = 0; i < batch[l]; i++) hl[i] = (int32_t)dp_rng_below(&rng, OUT);
        lab[l] = dev(hl, (size_t)batch[l] * 4);
        free(hx), free(hg);
        for (int k = 0; k < NB; k++) {
            const dp_kctx rk = {.stream = &rec[l], .ordinal = D->main.kc.ordinal};
            const dp_kctx *R = k ? &rk : &D->main.kc;
            const dp_kernels *K = k ? &dp_kcall_recorder : G;
            K->relu_forward(R, ni, x[k][l], x[k][l]);
            K->maxpool_forward(R, batch[l], CH, H, W, 2, 2, 0, x[k][l], y[k][l], am[k][l]);
            K->add(R, no, y[k][l], g[k][l], y[k][l]);
            K->linear_forward(R, batch[l], (int)fi, OUT, y[k][l], dw, db, lo[k][l]);
            K->softmax_xent(R, batch[l], OUT, lo[k][l], lab[l], 0.25f, dlo[k][l], loss[k][l], hits[k][l]);
            K->relu_backward(R, no, y[k][l], g[k][l], g[k][l]);
            K->maxpool_backward(R, batch[l], CH, H, W, 2, 2, 0, OH, OW, g[k][l], am[k][l], dx[k][l]);
            K->copy(R, ni, dx[k][l], x[k][l]);
        }
        assert_int_equal(rec[l].n, 8);
    }
    for (int j = 0; j < 8; j++) {
        const dp_kcall *calls[L];
        for (int l = 0; l < L; l++) calls[l] = &rec[l].calls[j];
        G->lanes(&D->main.kc, L, calls);
    }
    for (int l = 0; l < L; l++) {
        const size_t ni = (size_t)batch[l] * CH * H * W, no = (size_t)batch[l] * CH * OH * OW;
        const struct {
            const char *what;
            void *const *p;
            size_t n;
        } out[] = {{"x", (void *const *)x, ni}, {"y", (void *const *)y, no}, {"g", (void *const *)g, no},
                   {"dx", (void *const *)dx, ni}, {"argmax", (void *const *)am, no},
                   {"linear", (void *const *)lo, (size_t)batch[l] * OUT},
                   {"loss gradient", (void *const *)dlo, (size_t)batch[l] * OUT}, {"loss", (void *const *)loss, 1},
                   {"hits", (void *const *)hits, 1}};
        for (size_t o = 0; o < sizeof out / sizeof out[0]; o++) {
            float *a = back(out[o].p[l], out[o].n), *c = back(out[o].p[L + l], out[o].n);
            char what[64];
            snprintf(what, sizeof what, "lanes: lane %d's %s", l, out[o].what);
            same(what, "lanes() against the lane's own calls", a, c, out[o].n);
            free(a), free(c);
        }
        for (int k = 0; k < NB; k++)
            cudaFree(x[k][l]), cudaFree(y[k][l]), cudaFree(g[k][l]), cudaFree(dx[k][l]), cudaFree(lo[k][l]),
                cudaFree(am[k][l]), cudaFree(dlo[k][l]), cudaFree(loss[k][l]), cudaFree(hits[k][l]);
        cudaFree(lab[l]);
        dp_kcall_rec_free(&rec[l]);
    }
    free(w), free(b), cudaFree(dw), cudaFree(db);
}

int main(void) {
    if (kernel_table_missing(&dp_cuda_kernels)) return 1; /* needs no device */
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        fprintf(stderr, "test_cuda_kernels: no CUDA device: skipped\n");
        return 77;
    }
    dp_rng_seed(&rng, 17, 17);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elementwise), cmocka_unit_test(test_pooling), cmocka_unit_test(test_batchnorm),
        cmocka_unit_test(test_linear), cmocka_unit_test(test_loss), cmocka_unit_test(test_conv2d),
        cmocka_unit_test(test_gather_batch), cmocka_unit_test(test_errors_stay_with_their_device),
        cmocka_unit_test(test_lanes), cmocka_unit_test(test_fused),
        cmocka_unit_test(test_lanes), cmocka_unit_test(test_bf16),
    };
    return cmocka_run_group_tests(tests, open_device, close_device);
}
