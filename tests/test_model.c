/* Models: parameter counts and names as PyTorch's, shapes that adapt to the input, and the
 * graph plumbing checked end to end: the analytic gradient of the whole model (loss included)
 * against a central difference along a random direction, in double. Layer-by-layer gradient
 * checks live in test_kernels_grad.c. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/loss.h"
#include "nn/fuse.h"
#include "kernels_ref.h"
#include "nn/model.h"

static void test_lenet_layout(void **state) {
    (void)state;
    dp_model m;
    assert_int_equal(dp_model_build("lenet", (dp_shape){1, 28, 28}, 10, &m), DP_OK);
    size_t total = 0;
    for (int i = 0; i < m.params.n_tensors; i++) total += m.params.tensors[i].s.count;
    assert_int_equal(total, 44426); /* torch: sum(p.numel() for p in LeNet().parameters()) */
    assert_int_equal(m.params.n_tensors, 10);
    assert_string_equal(m.params.tensors[0].name, "conv1.weight");
    assert_string_equal(m.params.tensors[9].name, "fc3.bias");
    assert_int_equal(m.params.tensors[4].s.count, 256 * 120);
    assert_int_equal(m.buffers.n, 0);
    dp_model_free(&m);
    /* CIFAR-10 input: fc1 takes 400 */
    assert_int_equal(dp_model_build("lenet", (dp_shape){3, 32, 32}, 10, &m), DP_OK);
    assert_int_equal(m.params.tensors[4].s.count, 400 * 120);
    dp_model_free(&m);
    assert_int_equal(dp_model_build("lenet-bn", (dp_shape){3, 32, 32}, 10, &m), DP_OK);
    assert_string_equal(m.params.tensors[2].name, "bn1.weight");
    size_t nbuf = 0;
    for (int i = 0; i < m.buffers.n_tensors; i++) nbuf += m.buffers.tensors[i].s.count;
    assert_int_equal(nbuf, 2 * (6 + 16 + 120 + 84));
    dp_model_free(&m);
}

static void test_resnet18_layout(void **state) {
    (void)state;
    dp_model m;
    assert_int_equal(dp_model_build("resnet18", (dp_shape){3, 224, 224}, 1000, &m), DP_OK);
    size_t total = 0;
    for (int i = 0; i < m.params.n_tensors; i++) total += m.params.tensors[i].s.count;
    assert_int_equal(total, 11689512); /* torchvision.models.resnet18() */
    assert_int_equal(m.nodes[m.output].out.c, 1000);
    dp_model_free(&m);
}

static void test_bad_models(void **state) {
    (void)state;
    dp_model m;
    assert_int_equal(dp_model_build("alexnet", (dp_shape){1, 28, 28}, 10, &m), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "alexnet"));
    assert_int_equal(dp_model_build("lenet", (dp_shape){1, 8, 8}, 10, &m), DP_ERR_FORMAT);
    assert_true(tu_contains(dp_last_error(), "too small"));
}

/* Loss of the model on (x, y) in training mode; also leaves the gradient in grads. */
static double loss_and_grad(const dp_model *m, dp_acts *a, float *params, float *grads, float *buffers,
                            const float *x, const int32_t *y, int batch) {
    memset(grads, 0, m->params.n * sizeof(float));
    dp_exec e = {.batch = batch, .stat_batch = batch, .training = 1, .update_stats = 1, .kc.nthreads = 2, .params = params,
                 .grads = grads, .buffers = buffers};
    assert_int_equal(dp_model_forward(m, a, &e, x), DP_OK);
    double l = softmax_xent_cpu(batch, m->n_classes, a->out[m->output], y, 1.0f / batch, a->dout[m->output], NULL);
    assert_int_equal(dp_model_backward(m, a, &e, x), DP_OK);
    return l / batch;
}

/* A small residual network: the add and a node with two consumers exercise the DAG paths. */
static int tiny_resnet(dp_model *m) {
    int x = dp_model_conv2d(m, "stem", DP_INPUT, 4, 3, 1, 1, 0);
    x = dp_model_relu(m, dp_model_batchnorm(m, "bn0", x));
    int y = dp_model_conv2d(m, "c1", x, 4, 3, 1, 1, 0);
    y = dp_model_relu(m, dp_model_batchnorm(m, "bn1", y));
    y = dp_model_conv2d(m, "c2", y, 4, 3, 1, 1, 0);
    x = dp_model_relu(m, dp_model_add(m, y, x));
    int s = dp_model_conv2d(m, "down", x, 6, 1, 2, 0, 0);
    x = dp_model_conv2d(m, "c3", x, 6, 3, 2, 1, 0);
    x = dp_model_add(m, x, s);
    x = dp_model_flatten(m, dp_model_global_avgpool(m, x));
    return dp_model_linear(m, "fc", x, m->n_classes, 1);
}

static void check_directional(const char *name, dp_shape in, int batch) {
    dp_model m;
    if (strcmp(name, "tiny-resnet") == 0) {
        dp_model_init(&m, name, in, 5);
        assert_int_equal(dp_model_finish(&m, tiny_resnet(&m)), DP_OK);
    } else {
        assert_int_equal(dp_model_build(name, in, 10, &m), DP_OK);
    }
    dp_acts a;
    assert_int_equal(dp_acts_create(&m, batch, 2, &a), DP_OK);
    float *p, *g, *b, *b0, *pp;
    assert_int_equal(dp_alloc_floats(&p, m.params.n, "p"), DP_OK);
    assert_int_equal(dp_alloc_floats(&pp, m.params.n, "pp"), DP_OK);
    assert_int_equal(dp_alloc_floats(&g, m.params.n, "g"), DP_OK);
    assert_int_equal(dp_alloc_floats(&b, m.buffers.n, "b"), DP_OK);
    assert_int_equal(dp_alloc_floats(&b0, m.buffers.n, "b0"), DP_OK);
    dp_rng rng;
    dp_rng_seed(&rng, 42, 1);
    dp_model_init_params(&m, p, b0, &rng);
    size_t nx = (size_t)batch * dp_shape_size(in);
    float *x = malloc(nx * sizeof *x);
    int32_t *y = malloc((size_t)batch * sizeof *y);
    for (size_t i = 0; i < nx; i++) x[i] = 2 * dp_rng_uniform(&rng) - 1;
    for (int i = 0; i < batch; i++) y[i] = (int32_t)dp_rng_below(&rng, (uint32_t)m.n_classes);
    memcpy(b, b0, m.buffers.n * sizeof(float));
    loss_and_grad(&m, &a, p, g, b, x, y, batch);
    /* direction v: the gradient plus a random part (the gradient alone maximises the signal over
     * float rounding; the random part catches a gradient of the right size in a wrong
     * direction); compare <g, v> with (L(p+hv) - L(p-hv)) / 2h */
    double *v = calloc(m.params.n, sizeof *v), gv = 0, vnorm = 0, gnorm = 0;
    for (size_t i = 0; i < m.params.n; i++) gnorm += (double)g[i] * g[i];
    gnorm = sqrt(gnorm / (double)m.params.n);
    for (size_t i = 0; i < m.params.n; i++)
        v[i] = g[i] + gnorm * (2 * dp_rng_uniform_double(&rng) - 1), vnorm += v[i] * v[i];
    vnorm = sqrt(vnorm);
    for (size_t i = 0; i < m.params.n; i++) v[i] /= vnorm, gv += g[i] * v[i];
    float *gtmp;
    assert_int_equal(dp_alloc_floats(&gtmp, m.params.n, "g2"), DP_OK);
    const double h = 1e-3; /* truncation error O(h^2) dominates above this (BN is curved) */
    double lp, lm;
    for (size_t i = 0; i < m.params.n; i++) pp[i] = (float)(p[i] + h * v[i]);
    memcpy(b, b0, m.buffers.n * sizeof(float));
    lp = loss_and_grad(&m, &a, pp, gtmp, b, x, y, batch);
    for (size_t i = 0; i < m.params.n; i++) pp[i] = (float)(p[i] - h * v[i]);
    memcpy(b, b0, m.buffers.n * sizeof(float));
    lm = loss_and_grad(&m, &a, pp, gtmp, b, x, y, batch);
    double fd = (lp - lm) / (2 * h);
    double rel = fabs(fd - gv) / fmax(fabs(gv), 1e-3);
    if (rel > 2e-2) fail_msg("%s: directional derivative %.6g, finite difference %.6g (rel %.3g)", name, gv, fd, rel);
    dp_free(p), dp_free(pp), dp_free(g), dp_free(gtmp), dp_free(b), dp_free(b0);
    free(x), free(y), free(v);
    dp_acts_free(&a);
    dp_model_free(&m);
}

static void test_gradient_lenet(void **state) { (void)state; check_directional("lenet", (dp_shape){1, 28, 28}, 5); }
static void test_gradient_lenet_bn(void **state) { (void)state; check_directional("lenet-bn", (dp_shape){3, 32, 32}, 6); }
static void test_gradient_dag(void **state) { (void)state; check_directional("tiny-resnet", (dp_shape){3, 9, 9}, 4); }

/* Conv -> relu -> overlapping max pool (ResNet's 3x3 stride 2 pad 1), a conv -> relu without a pool,
 * and a relu whose output two nodes read: the fusion's other paths. */
static int fuse_mix(dp_model *m) {
    int x = dp_model_conv2d(m, "c0", DP_INPUT, 4, 3, 1, 1, 1);
    x = dp_model_maxpool(m, dp_model_relu(m, x), 3, 2, 1);
    int y = dp_model_relu(m, dp_model_conv2d(m, "c1", x, 4, 3, 1, 1, 0));
    x = dp_model_add(m, y, dp_model_relu(m, dp_model_batchnorm(m, "bn", y)));
    x = dp_model_flatten(m, dp_model_global_avgpool(m, x));
    return dp_model_linear(m, "fc", x, m->n_classes, 1);
}

/* One training step's forward and backward, then an evaluation forward, with kernel table k into
 * zeroed activations; grads and buffers from zero and b0. */
static void step_with(const dp_model *m, const dp_kernels *k, dp_acts *a, const float *p, float *g, float *b,
                      const float *b0, const float *x, const int32_t *y, int batch, float *eval_out) {
    memset(a->mem, 0, dp_acts_floats(m, batch, 2) * sizeof(float));
    memset(g, 0, m->params.n * sizeof(float));
    memcpy(b, b0, m->buffers.n * sizeof(float));
    dp_exec e = {.batch = batch, .stat_batch = batch, .training = 1, .update_stats = 1, .kc.nthreads = 2, .k = k,
                 .params = p, .grads = g, .buffers = b};
    assert_int_equal(dp_model_forward(m, a, &e, x), DP_OK);
    softmax_xent_cpu(batch, m->n_classes, a->out[m->output], y, 1.0f / batch, a->dout[m->output], NULL);
    assert_int_equal(dp_model_backward(m, a, &e, x), DP_OK);
    dp_acts ev;
    assert_int_equal(dp_acts_create(m, batch, 2, &ev), DP_OK);
    e.training = 0, e.update_stats = 0;
    assert_int_equal(dp_model_forward(m, &ev, &e, x), DP_OK);
    memcpy(eval_out, ev.out[m->output], (size_t)batch * m->n_classes * sizeof(float));
    dp_acts_free(&ev);
}

/* The fused calls (nn/fuse.h) against the layers one by one (the CPU table without its fused
 * entries): every node's output, gradient and saved context, the parameter gradients, the running
 * statistics and the evaluation's logits, bit for bit. */
static void check_fusion(const char *name, dp_shape in, int batch, int want_fwd, int want_bwd) {
    dp_model m;
    if (strcmp(name, "fuse-mix") == 0) {
        dp_model_init(&m, name, in, 5);
        assert_int_equal(dp_model_finish(&m, fuse_mix(&m)), DP_OK);
    } else if (strcmp(name, "tiny-resnet") == 0) {
        dp_model_init(&m, name, in, 5);
        assert_int_equal(dp_model_finish(&m, tiny_resnet(&m)), DP_OK);
    } else {
        assert_int_equal(dp_model_build(name, in, 10, &m), DP_OK);
    }
    int heads_fwd = 0, heads_bwd = 0;
    for (int i = 0; i < m.n_nodes; i++)
        heads_fwd += m.fuse[i].fwd != DP_FUSE_NONE && m.fuse[i].fwd != DP_FUSE_TAIL,
            heads_bwd += m.fuse[i].bwd == DP_FUSE_POOL_RELU;
    assert_int_equal(heads_fwd, want_fwd);
    assert_int_equal(heads_bwd, want_bwd);
    dp_kernels unfused = dp_cpu_kernels;
    unfused.conv2d_relu_forward = NULL, unfused.bn_apply_relu = NULL, unfused.maxpool_relu_backward = NULL;
    dp_acts a[2];
    float *p, *g[2], *b[2], *b0, *ev[2];
    assert_int_equal(dp_alloc_floats(&p, m.params.n, "p"), DP_OK);
    assert_int_equal(dp_alloc_floats(&b0, m.buffers.n + 1, "b0"), DP_OK);
    for (int t = 0; t < 2; t++) {
        assert_int_equal(dp_acts_create(&m, batch, 2, &a[t]), DP_OK);
        assert_int_equal(dp_alloc_floats(&g[t], m.params.n, "g"), DP_OK);
        assert_int_equal(dp_alloc_floats(&b[t], m.buffers.n + 1, "b"), DP_OK);
        ev[t] = malloc((size_t)batch * m.n_classes * sizeof(float));
    }
    dp_rng rng;
    dp_rng_seed(&rng, 7, 1);
    dp_model_init_params(&m, p, b0, &rng);
    const size_t nx = (size_t)batch * dp_shape_size(in);
    float *x = malloc(nx * sizeof *x);
    int32_t *y = malloc((size_t)batch * sizeof *y);
    for (size_t i = 0; i < nx; i++) x[i] = 2 * dp_rng_uniform(&rng) - 1;
    for (int i = 0; i < batch; i++) y[i] = (int32_t)dp_rng_below(&rng, (uint32_t)m.n_classes);
    step_with(&m, &dp_cpu_kernels, &a[0], p, g[0], b[0], b0, x, y, batch, ev[0]);
    step_with(&m, &unfused, &a[1], p, g[1], b[1], b0, x, y, batch, ev[1]);
    assert_memory_equal(a[0].mem, a[1].mem, dp_acts_floats(&m, batch, 2) * sizeof(float));
    assert_memory_equal(g[0], g[1], m.params.n * sizeof(float));
    assert_memory_equal(b[0], b[1], m.buffers.n * sizeof(float));
    assert_memory_equal(ev[0], ev[1], (size_t)batch * m.n_classes * sizeof(float));
    for (int t = 0; t < 2; t++) dp_acts_free(&a[t]), dp_free(g[t]), dp_free(b[t]), free(ev[t]);
    dp_free(p), dp_free(b0), free(x), free(y);
    dp_model_free(&m);
}

static void test_fusion_bitwise(void **state) {
    (void)state;
    check_fusion("lenet", (dp_shape){1, 28, 28}, 5, 2, 2);
    check_fusion("lenet-bn", (dp_shape){3, 32, 32}, 6, 4, 2);
    check_fusion("tiny-resnet", (dp_shape){3, 9, 9}, 4, 2, 0);
    check_fusion("fuse-mix", (dp_shape){3, 9, 9}, 4, 3, 1);
}

/* --precision bf16 on a convolution and a linear layer, forward and backward, against a reference
 * built outside the layers: the operands rounded by kr_bf16 (kernels_ref.h, arithmetic, not the
 * bit trick the kernels use), the CPU's fp32 kernels on them, the outputs and input gradients
 * rounded again: the layers must give exactly those bits; the weight gradients stay fp32 sums.
 * The fp32 model on the same data gives other outputs (the rounding is not a no-op) within bf16's
 * relative precision of them. */
static void bf16_ref(const float *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = (float)kr_bf16((double)x[i]);
}

static void test_bf16_layers(void **state) {
    (void)state;
    enum { B = 3, C = 2, H = 5, W = 5, O = 3, K = 3, F = O * H * W, CLS = 4 };
    dp_model m;
    dp_model_init(&m, "bf16-pair", (dp_shape){C, H, W}, CLS);
    const int conv = dp_model_conv2d(&m, "conv", DP_INPUT, O, K, 1, 1, 1);
    const int fc = dp_model_linear(&m, "fc", dp_model_flatten(&m, conv), CLS, 1);
    assert_int_equal(dp_model_finish(&m, fc), DP_OK);
    float *p, *g, *g32;
    assert_int_equal(dp_alloc_floats(&p, m.params.n, "p"), DP_OK);
    assert_int_equal(dp_alloc_floats(&g, m.params.n, "g"), DP_OK);
    assert_int_equal(dp_alloc_floats(&g32, m.params.n, "g32"), DP_OK);
    kr_rng r = {2026};
    kr_fill(&r, p, m.params.n, -0.5, 0.5);
    float x[B * C * H * W], dlog[B * CLS], y32[B * CLS];
    kr_fill(&r, x, B * C * H * W, -2, 2);
    kr_fill(&r, dlog, B * CLS, -1, 1);
    const float *w1 = p + m.nodes[conv].poff[0], *b1 = p + m.nodes[conv].poff[1];
    const float *w2 = p + m.nodes[fc].poff[0], *b2 = p + m.nodes[fc].poff[1];
    for (int bf = 0; bf <= 1; bf++) {
        dp_model_set_precision(&m, bf);
        dp_acts a;
        assert_int_equal(dp_acts_create(&m, B, 2, &a), DP_OK);
        float *grads = bf ? g : g32;
        memset(grads, 0, m.params.n * sizeof(float));
        dp_exec e = {.batch = B, .stat_batch = B, .training = 1, .update_stats = 1, .kc.nthreads = 2, .params = p,
                     .grads = grads};
        assert_int_equal(dp_model_forward(&m, &a, &e, x), DP_OK);
        memcpy(a.dout[m.output], dlog, sizeof dlog);
        assert_int_equal(dp_model_backward(&m, &a, &e, x), DP_OK);
        if (!bf) {
            memcpy(y32, a.out[fc], sizeof y32);
            dp_acts_free(&a);
            continue;
        }
        /* the reference, step by step */
        const dp_kctx c = {.nthreads = 2};
        dp_conv2d_dims d = {C, H, W, O, K, 1, 1, 0, 0};
        dp_conv2d_dims_init(&d);
        float xr[B * C * H * W], w1r[O * C * K * K], b1r[O], y1[B * F], w2r[CLS * F], b2r[CLS], y2[B * CLS];
        bf16_ref(x, xr, B * C * H * W), bf16_ref(w1, w1r, O * C * K * K), bf16_ref(b1, b1r, O);
        bf16_ref(w2, w2r, CLS * F), bf16_ref(b2, b2r, CLS);
        float *ws = kr_floats(dp_cpu_kernels.conv2d_workspace_floats(&d, B, 2));
        dp_cpu_kernels.conv2d_forward(&c, &d, B, xr, w1r, b1r, y1, ws);
        bf16_ref(y1, y1, B * F);
        assert_memory_equal(a.out[conv], y1, sizeof y1);
        dp_cpu_kernels.linear_forward(&c, B, F, CLS, y1, w2r, b2r, y2);
        bf16_ref(y2, y2, B * CLS);
        assert_memory_equal(a.out[fc], y2, sizeof y2);
        /* not the fp32 outputs, but within bf16's precision of them */
        double most = 0, diff = 0;
        for (int i = 0; i < B * CLS; i++) most = fmax(most, fabs(y32[i])), diff = fmax(diff, fabs(y2[i] - y32[i]));
        assert_true(diff > 0 && diff < 0.05 * most);
        /* backward */
        float dyr[B * CLS], dx2[B * F], dw2[CLS * F] = {0}, db2[CLS] = {0}, dw1[O * C * K * K] = {0}, db1[O] = {0};
        bf16_ref(dlog, dyr, B * CLS);
        dp_cpu_kernels.linear_backward(&c, B, F, CLS, y1, w2r, dyr, dx2, dw2, db2);
        bf16_ref(dx2, dx2, B * F);
        dp_cpu_kernels.conv2d_backward(&c, &d, B, xr, w1r, dx2, NULL, dw1, db1, ws);
        assert_memory_equal(g + m.nodes[fc].poff[0], dw2, sizeof dw2);
        assert_memory_equal(g + m.nodes[fc].poff[1], db2, sizeof db2);
        assert_memory_equal(g + m.nodes[conv].poff[0], dw1, sizeof dw1);
        assert_memory_equal(g + m.nodes[conv].poff[1], db1, sizeof db1);
        /* fp32 gradients: not bf16 values */
        int low_bits = 0;
        for (size_t i = 0; i < m.params.n; i++) {
            uint32_t u;
            memcpy(&u, &g[i], sizeof u);
            low_bits |= (u & 0xffffu) != 0;
        }
        assert_true(low_bits);
        free(ws);
        dp_acts_free(&a);
    }
    dp_free(p), dp_free(g), dp_free(g32);
    dp_model_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lenet_layout),
        cmocka_unit_test(test_resnet18_layout),
        cmocka_unit_test(test_bad_models),
        cmocka_unit_test(test_gradient_lenet),
        cmocka_unit_test(test_gradient_lenet_bn),
        cmocka_unit_test(test_gradient_dag),
        cmocka_unit_test(test_fusion_bitwise),
        cmocka_unit_test(test_bf16_layers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
