/* Models: parameter counts and names as PyTorch's, shapes that adapt to the input, and the
 * graph plumbing checked end to end: the analytic gradient of the whole model (loss included)
 * against a central difference along a random direction, in double. Layer-by-layer gradient
 * checks live in test_kernels_grad.c. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/loss.h"
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lenet_layout),
        cmocka_unit_test(test_resnet18_layout),
        cmocka_unit_test(test_bad_models),
        cmocka_unit_test(test_gradient_lenet),
        cmocka_unit_test(test_gradient_lenet_bn),
        cmocka_unit_test(test_gradient_dag),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
