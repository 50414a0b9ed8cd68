/* Every entry of the fake GPU's kernel table (tests/fakegpu/kernels.c) against the CPU table
 * called directly with the same arguments (nthreads 1): bitwise equal, with the calls queued on
 * the device's streams behind random delays. The arguments a launch copies are changed right
 * after each call (the conv dims, tree_sum's vector array), which must not matter. lanes() runs
 * the recorded calls of several lanes (kernels/kcall.h) as one launch, bitwise the CPU's calls one
 * by one. The CPU's, the recorder's and the fake GPU's tables fill every entry of kernels.def. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/rng.h"
#include "fakegpu_util.h"
#include "kernel_tables.h"
#include "kernels/kcall.h"
#include "kernels/kernels.h"

static const dp_kernels *const C = &dp_cpu_kernels;
static const dp_kctx cc = {.nthreads = 1};
static dp_rng rng;

/* A host array and its device twin, equal when made. */
typedef struct {
    float *h, *d;
    size_t n;
} pair;

static pair mk(dp_dev *D, size_t n, float scale) {
    pair p = {malloc((n ? n : 1) * sizeof(float)), NULL, n};
    for (size_t i = 0; i < n; i++) p.h[i] = scale ? (dp_rng_uniform(&rng) * 2.0f - 1.0f) * scale : 0.0f;
    p.d = fgt_put(D, p.h, n * sizeof(float));
    return p;
}

/* int32 values in [0, below) */
static pair mk_int(dp_dev *D, size_t n, uint32_t below) {
    pair p = {malloc((n ? n : 1) * sizeof(int32_t)), NULL, n};
    int32_t *v = (int32_t *)(void *)p.h;
    for (size_t i = 0; i < n; i++) v[i] = (int32_t)dp_rng_below(&rng, below);
    p.d = fgt_put(D, p.h, n * sizeof(int32_t));
    return p;
}

static void same(dp_dev *D, const char *what, pair p) {
    float *h = malloc((p.n ? p.n : 1) * sizeof(float));
    fgt_get(D, h, p.d, p.n * sizeof(float));
    if (memcmp(h, p.h, p.n * sizeof(float)) != 0) fail_msg("%s: the fake GPU's result differs from the CPU's", what);
    free(h);
}

static void drop(dp_dev *D, pair p) {
    D->free(D, p.d);
    free(p.h);
}

static int32_t *ih(pair p) { return (int32_t *)(void *)p.h; }
static int32_t *id(pair p) { return (int32_t *)(void *)p.d; }

static void test_elementwise_sgd_tree(void **state) {
    (void)state;
    dp_dev *D = fgt_open(NULL);
    const dp_kernels *G = D->k;
    const size_t n = 10007;
    pair x = mk(D, n, 3), y = mk(D, n, 3), g = mk(D, n, 1), out = mk(D, n, 0);
    C->relu_forward(&cc, n, x.h, out.h), G->relu_forward(&D->main.kc, n, x.d, out.d);
    same(D, "relu_forward", out);
    FGT_OK(D->fork(D, 4)); /* a lane runs after the main stream's uploads only if forked */
    C->relu_backward(&cc, n, y.h, g.h, out.h), G->relu_backward(&D->lanes[3].kc, n, y.d, g.d, out.d);
    FGT_OK(D->join(D, 4));
    same(D, "relu_backward (lane stream)", out);
    FGT_OK(D->coll.wait_for(&D->coll, &D->main));
    C->add(&cc, n, x.h, y.h, out.h), G->add(&D->coll.kc, n, x.d, y.d, out.d);
    FGT_OK(D->main.wait_for(&D->main, &D->coll));
    same(D, "add (collective stream)", out);
    C->copy(&cc, n - 1, x.h + 1, out.h), G->copy(&D->main.kc, n - 1, x.d + 1, out.d); /* slices of device pointers */
    same(D, "copy", out);
    pair p = mk(D, n, 1), buf = mk(D, n, 0);
    for (int s = 0; s < 3; s++) { /* queued back to back: stream order carries the state */
        C->sgd(&cc, n, p.h, g.h, buf.h, 0.05f, 0.9f, 1e-4f, s & 1);
        G->sgd(&D->main.kc, n, p.d, g.d, buf.d, 0.05f, 0.9f, 1e-4f, s & 1);
    }
    same(D, "sgd", p), same(D, "sgd momentum", buf);
    C->sgd(&cc, n, p.h, g.h, NULL, 0.1f, 0.0f, 0.0f, 0), G->sgd(&D->main.kc, n, p.d, g.d, NULL, 0.1f, 0.0f, 0.0f, 0);
    same(D, "sgd without momentum", p);
    enum { V = 5 };
    pair v[V];
    float *hv[V], *dv[V];
    for (int i = 0; i < V; i++) v[i] = mk(D, n, 100), hv[i] = v[i].h, dv[i] = v[i].d;
    C->tree_sum(&cc, hv, V, 7, n - 7, 1);
    G->tree_sum(&D->main.kc, dv, V, 7, n - 7, 1);
    for (int i = 0; i < V; i++) dv[i] = NULL; /* the caller's array may change once the call returns */
    for (int i = 0; i < V; i++) same(D, "tree_sum", v[i]), drop(D, v[i]);
    enum { NL = 7 }; /* a replica's lanes' metrics: the tree over their losses (partial sums left) and the hits */
    pair ll = mk(D, NL, 100), hits = mk_int(D, NL, 300), lm = mk(D, 2, 0);
    C->lane_metrics(&cc, NL, ll.h, ih(hits), lm.h), G->lane_metrics(&D->main.kc, NL, ll.d, id(hits), lm.d);
    same(D, "lane_metrics", lm), same(D, "lane_metrics' partial sums", ll);
    drop(D, ll), drop(D, hits), drop(D, lm);
    /* the gradients' check: a NaN, +Inf or -Inf anywhere (the last element too) sets the flag, a large
       finite value does not, and a set flag stays set */
    const float poison[] = {NAN, INFINITY, -INFINITY, 3e38f};
    const size_t at[] = {0, 4097, n - 1, 17};
    for (int k = 0; k < 4; k++) {
        pair f = mk(D, 1, 0);
        const float was = g.h[at[k]];
        g.h[at[k]] = poison[k];
        FGT_OK(D->upload(D, g.d + at[k], g.h + at[k], sizeof(float)));
        C->nonfinite(&cc, n, g.h, f.h), G->nonfinite(&D->main.kc, n, g.d, f.d);
        same(D, "nonfinite", f);
        if (f.h[0] != (k < 3 ? 1.0f : 0.0f)) fail_msg("nonfinite: case %d gives %g", k, f.h[0]);
        g.h[at[k]] = was;
        FGT_OK(D->upload(D, g.d + at[k], g.h + at[k], sizeof(float)));
        drop(D, f);
    }
    pair set = mk(D, 1, 0);
    set.h[0] = 1.0f;
    FGT_OK(D->upload(D, set.d, set.h, sizeof(float)));
    C->nonfinite(&cc, n, g.h, set.h), G->nonfinite(&D->main.kc, n, g.d, set.d);
    same(D, "nonfinite over finite values (the flag stays)", set);
    drop(D, set);
    drop(D, x), drop(D, y), drop(D, g), drop(D, out), drop(D, p), drop(D, buf);
    fgt_close(D);
}

static void test_pooling(void **state) {
    (void)state;
    dp_dev *D = fgt_open(NULL);
    const dp_kernels *G = D->k;
    const int B = 3, ch = 5, cfg[][5] = {{28, 28, 2, 2, 0}, {14, 13, 3, 2, 1}};
    for (int k = 0; k < 2; k++) {
        const int h = cfg[k][0], w = cfg[k][1], ks = cfg[k][2], s = cfg[k][3], p = cfg[k][4];
        const int oh = (h + 2 * p - ks) / s + 1, ow = (w + 2 * p - ks) / s + 1;
        const size_t ni = (size_t)B * ch * h * w, no = (size_t)B * ch * oh * ow;
        pair x = mk(D, ni, 2), y = mk(D, no, 0), g = mk(D, no, 1), dx = mk(D, ni, 0), am = mk_int(D, no, 1);
        C->maxpool_forward(&cc, B, ch, h, w, ks, s, p, x.h, y.h, ih(am));
        G->maxpool_forward(&D->main.kc, B, ch, h, w, ks, s, p, x.d, y.d, id(am));
        same(D, "maxpool_forward", y), same(D, "maxpool_forward argmax", am);
        C->maxpool_backward(&cc, B, ch, h, w, ks, s, p, oh, ow, g.h, ih(am), dx.h);
        G->maxpool_backward(&D->main.kc, B, ch, h, w, ks, s, p, oh, ow, g.d, id(am), dx.d);
        same(D, "maxpool_backward", dx);
        C->avgpool_forward(&cc, B, ch, h * w, x.h, y.h), G->avgpool_forward(&D->main.kc, B, ch, h * w, x.d, y.d);
        y.n = (size_t)B * ch;
        same(D, "avgpool_forward", y);
        C->avgpool_backward(&cc, B, ch, h * w, g.h, dx.h), G->avgpool_backward(&D->main.kc, B, ch, h * w, g.d, dx.d);
        same(D, "avgpool_backward", dx);
        drop(D, x), drop(D, y), drop(D, g), drop(D, dx), drop(D, am);
    }
    fgt_close(D);
}

static void test_batchnorm(void **state) {
    (void)state;
    dp_dev *D = fgt_open(NULL);
    const dp_kernels *G = D->k;
    const int B = 6, ch = 7, hws[] = {1, 49};
    for (int t = 0; t < 2; t++) {
        const int hw = hws[t];
        const size_t n = (size_t)B * ch * hw, nws = C->bn_workspace_floats(B, ch, hw);
        assert_int_equal(G->bn_workspace_floats(B, ch, hw), nws);
        pair x = mk(D, n, 2), g = mk(D, n, 1), gamma = mk(D, ch, 1), beta = mk(D, ch, 1), ws = mk(D, nws, 0);
        pair sums = mk(D, 2 * ch, 0), mean = mk(D, ch, 0), inv = mk(D, ch, 0), rm = mk(D, ch, 0.1f), rv = mk(D, ch, 0);
        pair out = mk(D, n, 0), local = mk(D, 2 * ch, 0), pg = mk(D, 2 * ch, 0.5f);
        const double count = (double)B * hw;
        C->bn_sums(&cc, B, ch, hw, x.h, sums.h, ws.h), G->bn_sums(&D->main.kc, B, ch, hw, x.d, sums.d, ws.d);
        same(D, "bn_sums", sums);
        C->bn_stats(&cc, ch, 1, sums.h, count, 1e-5f, 0.1f, 1, mean.h, inv.h, rm.h, rv.h);
        G->bn_stats(&D->main.kc, ch, 1, sums.d, count, 1e-5f, 0.1f, 1, mean.d, inv.d, rm.d, rv.d);
        same(D, "bn_stats mean", mean), same(D, "bn_stats invstd", inv), same(D, "bn_stats running mean", rm);
        same(D, "bn_stats running var", rv);
        C->bn_apply(&cc, B, ch, hw, x.h, mean.h, inv.h, gamma.h, beta.h, out.h);
        G->bn_apply(&D->main.kc, B, ch, hw, x.d, mean.d, inv.d, gamma.d, beta.d, out.d);
        same(D, "bn_apply", out);
        C->bn_backward_sums(&cc, B, ch, hw, x.h, g.h, mean.h, inv.h, local.h, ws.h);
        G->bn_backward_sums(&D->main.kc, B, ch, hw, x.d, g.d, mean.d, inv.d, local.d, ws.d);
        same(D, "bn_backward_sums", local);
        C->bn_backward(&cc, B, ch, hw, x.h, g.h, mean.h, inv.h, gamma.h, local.h, local.h, count, out.h, pg.h + ch,
                       pg.h, ws.h);
        G->bn_backward(&D->main.kc, B, ch, hw, x.d, g.d, mean.d, inv.d, gamma.d, local.d, local.d, count, out.d, pg.d + ch,
                       pg.d, ws.d);
        same(D, "bn_backward dx", out), same(D, "bn_backward dgamma, dbeta", pg);
        pair all[] = {x, g, gamma, beta, ws, sums, mean, inv, rm, rv, out, local, pg};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) drop(D, all[i]);
    }
    fgt_close(D);
}

static void test_linear_and_loss(void **state) {
    (void)state;
    dp_dev *D = fgt_open(NULL);
    const dp_kernels *G = D->k;
    const int B = 9, I = 400, O = 120, K = 10;
    pair x = mk(D, (size_t)B * I, 1), w = mk(D, (size_t)O * I, 0.05f), b = mk(D, O, 0.1f), dy = mk(D, (size_t)B * O, 0.1f);
    pair y = mk(D, (size_t)B * O, 0), dx = mk(D, (size_t)B * I, 0), dw = mk(D, (size_t)O * I, 0.01f), db = mk(D, O, 0);
    FGT_OK(D->fork(D, 1));
    C->linear_forward(&cc, B, I, O, x.h, w.h, b.h, y.h), G->linear_forward(&D->lanes[0].kc, B, I, O, x.d, w.d, b.d, y.d);
    FGT_OK(D->join(D, 1));
    same(D, "linear_forward", y);
    C->linear_backward(&cc, B, I, O, x.h, w.h, dy.h, dx.h, dw.h, db.h);
    G->linear_backward(&D->main.kc, B, I, O, x.d, w.d, dy.d, dx.d, dw.d, db.d);
    same(D, "linear_backward dx", dx), same(D, "linear_backward dw", dw), same(D, "linear_backward db", db);
    pair z = mk(D, (size_t)B * K, 4), dz = mk(D, (size_t)B * K, 0), lab = mk_int(D, B, K), loss = mk(D, 1, 0);
    pair cor = mk_int(D, 1, 1);
    int32_t correct = 0;
    C->softmax_xent(&cc, B, K, z.h, ih(lab), 1.0f / B, dz.h, loss.h, &correct);
    G->softmax_xent(&D->main.kc, B, K, z.d, id(lab), 1.0f / B, dz.d, loss.d, id(cor));
    ih(cor)[0] = correct;
    same(D, "softmax_xent dlogits", dz), same(D, "softmax_xent loss", loss), same(D, "softmax_xent correct", cor);
    C->softmax_xent(&cc, B, K, z.h, ih(lab), 1.0f, NULL, loss.h, &correct); /* evaluation: no gradient */
    G->softmax_xent(&D->main.kc, B, K, z.d, id(lab), 1.0f, NULL, loss.d, id(cor));
    ih(cor)[0] = correct;
    same(D, "softmax_xent loss (no gradient)", loss), same(D, "softmax_xent correct (no gradient)", cor);
    pair all[] = {x, w, b, dy, y, dx, dw, db, z, dz, lab, loss, cor};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) drop(D, all[i]);
    fgt_close(D);
}

/* LeNet's and ResNet-18's shapes; the dims struct is reused for the next shape at once. */
static void test_conv2d(void **state) {
    (void)state;
    dp_dev *D = fgt_open(NULL);
    const dp_kernels *G = D->k;
    const dp_conv2d_dims shapes[] = {{1, 28, 28, 6, 5, 1, 0, 0, 0}, {3, 32, 32, 8, 7, 2, 3, 0, 0},
                                     {8, 10, 10, 16, 1, 2, 0, 0, 0}};
    const int B = 3;
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        dp_conv2d_dims d = shapes[k];
        assert_int_equal(dp_conv2d_dims_init(&d), 0);
        const dp_conv2d_dims keep = d;
        const size_t nx = (size_t)B * d.in_c * d.in_h * d.in_w, nw = (size_t)d.out_c * d.in_c * d.k * d.k,
                     ny = (size_t)B * d.out_c * d.out_h * d.out_w;
        const size_t nws = G->conv2d_workspace_floats(&d, B, 1);
        assert_int_equal(nws, C->conv2d_workspace_floats(&d, B, 1));
        pair x = mk(D, nx, 1), w = mk(D, nw, 0.2f), b = mk(D, d.out_c, 0.1f), g = mk(D, ny, 0.1f), y = mk(D, ny, 0);
        pair dx = mk(D, nx, 0), dw = mk(D, nw, 0.01f), db = mk(D, d.out_c, 0.01f), ws = mk(D, nws, 0);
        C->conv2d_forward(&cc, &d, B, x.h, w.h, b.h, y.h, ws.h);
        G->conv2d_forward(&D->main.kc, &d, B, x.d, w.d, b.d, y.d, ws.d);
        memset(&d, 0, sizeof d); /* a launch copied them */
        same(D, "conv2d_forward", y);
        d = keep;
        C->conv2d_backward(&cc, &d, B, x.h, w.h, g.h, dx.h, dw.h, db.h, ws.h);
        G->conv2d_backward(&D->main.kc, &d, B, x.d, w.d, g.d, dx.d, dw.d, db.d, ws.d);
        d.k = 99;
        same(D, "conv2d_backward dx", dx), same(D, "conv2d_backward dw", dw), same(D, "conv2d_backward db", db);
        d = keep; /* the first layer: no input gradient */
        C->conv2d_backward(&cc, &d, B, x.h, w.h, g.h, NULL, dw.h, db.h, ws.h);
        G->conv2d_backward(&D->main.kc, &d, B, x.d, w.d, g.d, NULL, dw.d, db.d, ws.d);
        same(D, "conv2d_backward dw (no dx)", dw);
        pair all[] = {x, w, b, g, y, dx, dw, db, ws};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) drop(D, all[i]);
    }
    fgt_close(D);
}

/* A batch gathered from a data set on the device, indices anywhere in it. */
static void test_gather_batch(void **state) {
    (void)state;
    dp_dev *D = fgt_open(NULL);
    enum { N = 200, CH = 3, HW = 64, B = 37 };
    uint8_t px[N * CH * HW], lab[N];
    for (size_t i = 0; i < sizeof px; i++) px[i] = (uint8_t)dp_rng_below(&rng, 256);
    for (int i = 0; i < N; i++) lab[i] = (uint8_t)dp_rng_below(&rng, 10);
    pair idx = mk_int(D, B, N), lut = mk(D, CH * 256, 2), x = mk(D, (size_t)B * CH * HW, 0), y = mk_int(D, B, 1);
    void *dpx = fgt_put(D, px, sizeof px), *dlab = fgt_put(D, lab, sizeof lab);
    C->gather_batch(&cc, B, CH, HW, px, lab, ih(idx), lut.h, x.h, ih(y));
    D->k->gather_batch(&D->main.kc, B, CH, HW, dpx, dlab, id(idx), lut.d, x.d, id(y));
    same(D, "gather_batch", x), same(D, "gather_batch labels", y);
    D->free(D, dpx), D->free(D, dlab);
    drop(D, idx), drop(D, lut), drop(D, x), drop(D, y);
    fgt_close(D);
}

/* lanes(): 5 lanes of uneven sizes (the last with no samples) recorded with the recording table,
 * one call of each kind the layers make between a pool and a linear layer, each lanes() call one
 * launch that computes each lane's call as the CPU does. */
static void test_lanes(void **state) {
    (void)state;
    dp_dev *D = fgt_open(NULL);
    enum { L = 5, CH = 3, H = 9, W = 8, OH = 4, OW = 4, OUT = 7 };
    const int batch[L] = {4, 1, 3, 4, 0};
    pair x[L], y[L], am[L], g[L], dx[L], lo[L];
    pair lin_w = mk(D, (size_t)OUT * CH * OH * OW, 1), lin_b = mk(D, OUT, 1);
    dp_kcall_rec rec[L] = {0};
    for (int l = 0; l < L; l++) {
        const size_t ni = (size_t)batch[l] * CH * H * W, no = (size_t)batch[l] * CH * OH * OW;
        x[l] = mk(D, ni, 2), y[l] = mk(D, no, 0), am[l] = mk_int(D, no, 1), g[l] = mk(D, no, 1), dx[l] = mk(D, ni, 0);
        lo[l] = mk(D, (size_t)batch[l] * OUT, 0);
        const dp_kctx rk = {.stream = &rec[l], .ordinal = D->main.kc.ordinal}, *R = &rk;
        const dp_kernels *K = &dp_kcall_recorder;
        K->relu_forward(R, ni, x[l].d, x[l].d); /* in place, as a fused layer may */
        K->maxpool_forward(R, batch[l], CH, H, W, 2, 2, 0, x[l].d, y[l].d, id(am[l]));
        K->add(R, no, y[l].d, g[l].d, y[l].d);
        K->linear_forward(R, batch[l], CH * OH * OW, OUT, y[l].d, lin_w.d, lin_b.d, lo[l].d);
        K->relu_backward(R, no, y[l].d, g[l].d, g[l].d);
        K->maxpool_backward(R, batch[l], CH, H, W, 2, 2, 0, OH, OW, g[l].d, id(am[l]), dx[l].d);
        K->copy(R, ni, dx[l].d, x[l].d);
        C->relu_forward(&cc, ni, x[l].h, x[l].h);
        C->maxpool_forward(&cc, batch[l], CH, H, W, 2, 2, 0, x[l].h, y[l].h, ih(am[l]));
        C->add(&cc, no, y[l].h, g[l].h, y[l].h);
        C->linear_forward(&cc, batch[l], CH * OH * OW, OUT, y[l].h, lin_w.h, lin_b.h, lo[l].h);
        C->relu_backward(&cc, no, y[l].h, g[l].h, g[l].h);
        C->maxpool_backward(&cc, batch[l], CH, H, W, 2, 2, 0, OH, OW, g[l].h, ih(am[l]), dx[l].h);
        C->copy(&cc, ni, dx[l].h, x[l].h);
        assert_int_equal(rec[l].n, 7);
    }
    const dp_fakegpu_launch_counts before = dp_fakegpu_launches();
    for (int j = 0; j < rec[0].n; j++) {
        const dp_kcall *calls[L];
        for (int l = 0; l < L; l++) calls[l] = &rec[l].calls[j];
        for (int l = 1; l < L; l++)
            if (!dp_kcall_same(calls[0], calls[l])) fail_msg("call %d: lane %d's record is not lane 0's call", j, l);
        D->k->lanes(&D->main.kc, L, calls);
    }
    const unsigned long launched = dp_fakegpu_launches().kernels - before.kernels;
    print_message("7 calls of %d lanes: %lu launches\n", L, launched);
    assert_int_equal(launched, 7);
    for (int l = 0; l < L; l++) {
        same(D, "lanes: relu, pool, copy (x)", x[l]), same(D, "lanes: pool, add (y)", y[l]);
        same(D, "lanes: argmax", am[l]), same(D, "lanes: relu backward", g[l]), same(D, "lanes: pool backward", dx[l]);
        same(D, "lanes: linear", lo[l]);
        drop(D, x[l]), drop(D, y[l]), drop(D, am[l]), drop(D, g[l]), drop(D, dx[l]), drop(D, lo[l]);
        dp_kcall_rec_free(&rec[l]);
    }
    drop(D, lin_w), drop(D, lin_b);
    fgt_close(D);
}

/* Every table fills every entry of kernels.def, and each record kind has its entry's name. */
static void test_tables_complete(void **state) {
    (void)state;
    assert_int_equal(kernel_table_missing(&dp_cpu_kernels), 0);
    assert_int_equal(kernel_table_missing(&dp_kcall_recorder), 0);
    dp_dev *D = fgt_open(NULL);
    assert_int_equal(kernel_table_missing(D->k), 0);
    fgt_close(D);
    assert_int_equal(kernel_kind_names_wrong(), 0);
    assert_string_equal(dp_kcall_name(DP_KC_NONE), "an unknown kernel");
    assert_string_equal(dp_kcall_name(DP_KC_COUNT), "an unknown kernel");
    dp_kernels gap = dp_cpu_kernels; /* the check sees a missing entry */
    gap.bn_backward = NULL;
    assert_int_equal(kernel_table_missing(&gap), 1);
}

int main(void) {
    dp_rng_seed(&rng, 23, 23);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elementwise_sgd_tree), cmocka_unit_test(test_pooling), cmocka_unit_test(test_batchnorm),
        cmocka_unit_test(test_linear_and_loss), cmocka_unit_test(test_conv2d), cmocka_unit_test(test_gather_batch),
        cmocka_unit_test(test_lanes), cmocka_unit_test(test_tables_complete),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
