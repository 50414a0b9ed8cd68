/* test_pytorch_interop.c: dptrain's checkpoints are PyTorch state_dicts and back
 * (examples/pytorch/interop.py, safetensors read with json + numpy):
 *   - PyTorch load_state_dict(strict=True)s a checkpoint of LeNet-BN and ResNet-18 into its own twin and
 *     computes the same eval-mode logits as dptrain (within 1e-4);
 *   - LeNet trained by dptrain on Fashion-MNIST: PyTorch's test accuracy equals `dptrain eval`'s;
 *   - PyTorch's initialised LeNet, `dptrain train --init-from` it, 5 SGD steps on the same batches as
 *     PyTorch's 5 steps: the parameters agree within float rounding;
 *   - LeNet-BN with --mode dp on 2 and 4 replicas agrees with nn.DataParallel's scatter (emulated on the CPU).
 * Exits 77 (skip) without a python3 that imports torch and numpy. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "nn/model.h"
#include "testutil.h"

static char python[64];
static char script[1024];
#define FASHION "/usr/share/datasets/fashion-mnist"

static const char *bin(void) {
    const char *b = getenv("DPTRAIN");
    return b ? b : "./dptrain";
}

/* Logits of `name` with random weights and BN statistics, from dptrain and from PyTorch. */
static void logits_match(const char *name, dp_shape in, int batch) {
    dp_model m;
    assert_int_equal(dp_model_build(name, in, 10, &m), DP_OK);
    float *params, *buffers;
    assert_int_equal(dp_alloc_floats(&params, m.params.n, "p"), DP_OK);
    assert_int_equal(dp_alloc_floats(&buffers, m.buffers.n ? m.buffers.n : 1, "b"), DP_OK);
    dp_rng rng;
    dp_rng_seed(&rng, 7, 1);
    dp_model_init_params(&m, params, buffers, &rng);
    /* non-trivial running statistics and BN affine parameters, so eval mode is really tested */
    for (int i = 0; i < m.buffers.n_tensors; i++) {
        const dp_tensor_info *t = &m.buffers.tensors[i];
        int var = strstr(t->name, "running_var") != NULL;
        for (size_t k = 0; k < t->s.count; k++)
            buffers[t->s.offset + k] = var ? 0.5f + dp_rng_uniform(&rng) : 0.2f * (dp_rng_uniform(&rng) - 0.5f);
    }
    for (int i = 0; i < m.params.n_tensors; i++)
        if (m.params.tensors[i].flags & DP_TENSOR_BN)
            for (size_t k = 0; k < m.params.tensors[i].s.count; k++)
                params[m.params.tensors[i].s.offset + k] += 0.1f * (dp_rng_uniform(&rng) - 0.5f);
    const char *ck = tu_path("interop.safetensors"), *inp = tu_path("interop.in"), *outp = tu_path("interop.out");
    dp_train_pos pos = {.epoch = 1, .bn_batches = 3};
    assert_int_equal(dp_checkpoint_save("test", ck, &m, params, buffers, params, &pos, NULL, 0), DP_OK);
    size_t nin = (size_t)batch * dp_shape_size(in);
    float *x = malloc(nin * sizeof *x);
    for (size_t i = 0; i < nin; i++) x[i] = 2.0f * dp_rng_uniform(&rng) - 1.0f;
    tu_write_file(inp, x, nin * sizeof *x);
    dp_acts a;
    assert_int_equal(dp_acts_create(&m, batch, 1, &a), DP_OK);
    dp_exec e = {.batch = batch, .stat_batch = batch, .training = 0, .kc.nthreads = 1, .params = params, .buffers = buffers};
    assert_int_equal(dp_model_forward(&m, &a, &e, x), DP_OK);
    char *o;
    int rc = tu_sh(&o, "%s %s logits --model %s --ckpt %s --shape %dx%dx%d --classes 10 --input %s --batch %d --out %s",
                   python, script, name, ck, in.c, in.h, in.w, inp, batch, outp);
    if (rc) fail_msg("%s (momentum tensors present: the loader must drop optimizer.*):\n%s", name, o);
    free(o);
    float *theirs = malloc((size_t)batch * 10 * sizeof *theirs);
    FILE *f = fopen(outp, "rb");
    assert_non_null(f);
    assert_int_equal(fread(theirs, sizeof *theirs, (size_t)batch * 10, f), (size_t)batch * 10);
    fclose(f);
    const float *ours = a.out[m.output];
    double maxd = 0, maxv = 1;
    for (int i = 0; i < batch * 10; i++) {
        maxd = fmax(maxd, fabs((double)ours[i] - theirs[i]));
        maxv = fmax(maxv, fabs((double)theirs[i]));
    }
    print_message("%s: max |logit difference| %.3g (largest logit %.3g)\n", name, maxd, maxv);
    if (maxd > 1e-4 * maxv) fail_msg("%s: logits differ by %g", name, maxd);
    free(theirs), free(x);
    dp_acts_free(&a);
    dp_free(params), dp_free(buffers);
    dp_model_free(&m);
}

static void test_lenet_bn_logits(void **state) { (void)state; logits_match("lenet-bn", (dp_shape){1, 28, 28}, 4); }
static void test_resnet18_logits(void **state) { (void)state; logits_match("resnet18", (dp_shape){3, 32, 32}, 2); }

static int have_fashion(void) { return access(FASHION "/train-labels-idx1-ubyte.gz", R_OK) == 0 ||
                                       access(FASHION "/train-labels-idx1-ubyte", R_OK) == 0; }

static void test_lenet_accuracy(void **state) {
    (void)state;
    if (!have_fashion()) {
        print_message("no Fashion-MNIST in " FASHION ": skipped\n");
        return;
    }
    const char *ck = tu_path("fm.safetensors");
    char *o, *p;
    int rc = tu_sh(&o, "%s train --max-steps 60 --epochs 1 --threads 2 --quiet --no-progress --save %s", bin(), ck);
    if (rc) fail_msg("%s", o);
    free(o);
    rc = tu_sh(&o, "%s eval --load %s --no-progress", bin(), ck);
    assert_int_equal(rc, 0);
    rc = tu_sh(&p, "%s %s eval --model lenet --ckpt %s", python, script, ck);
    if (rc) fail_msg("%s", p);
    double ours = -1, theirs = -2;
    const char *a = strstr(o, "test accuracy "), *b = strstr(p, "test accuracy ");
    assert_non_null(a);
    assert_non_null(b);
    ours = atof(a + 14), theirs = atof(b + 14);
    print_message("test accuracy: dptrain %.4f, PyTorch %.4f\n", ours, theirs);
    assert_true(fabs(ours - theirs) < 1e-9);
    free(o), free(p);
}

static void test_init_from_pytorch(void **state) {
    (void)state;
    if (!have_fashion()) {
        print_message("no Fashion-MNIST in " FASHION ": skipped\n");
        return;
    }
    const char *p0 = tu_path("p0.safetensors"), *d5 = tu_path("d5.safetensors"), *t5 = tu_path("t5.safetensors");
    char *o;
    int rc = tu_sh(&o, "%s %s init --model lenet --seed 1 --out %s && %s train --init-from %s --no-shuffle "
                   "--max-steps 5 --epochs 1 --threads 1 --workers 0 --quiet --save %s && %s %s train --init %s "
                   "--steps 5 --out %s", python, script, p0, bin(), p0, d5, python, script, p0, t5);
    if (rc) fail_msg("%s", o);
    free(o);
    dp_st_file a, b, z;
    assert_int_equal(dp_st_read(d5, &a), DP_OK);
    assert_int_equal(dp_st_read(t5, &b), DP_OK);
    assert_int_equal(dp_st_read(p0, &z), DP_OK);
    for (int i = 0; i < b.n; i++) {
        const dp_st_tensor *x = dp_st_find(&a, b.tensors[i].name), *s = dp_st_find(&z, b.tensors[i].name);
        assert_non_null(x);
        assert_int_equal(x->nbytes, b.tensors[i].nbytes);
        size_t n = x->nbytes / 4;
        double rel = tu_rel_diff(x->data, b.tensors[i].data, n), moved = tu_rel_diff(s->data, b.tensors[i].data, n);
        print_message("%-14s dptrain vs PyTorch %.2g (moved %.2g from the init)\n", b.tensors[i].name, rel, moved);
        if (!(rel < 1e-5) || !(moved > 1e-4)) fail_msg("%s: relative difference %g, moved %g", b.tensors[i].name, rel, moved);
    }
    dp_st_free(&a), dp_st_free(&b), dp_st_free(&z);
    /* a BN model PyTorch wrote (num_batches_tracked: int64 scalars) initialises dptrain's */
    const char *bn = tu_path("pbn.safetensors");
    rc = tu_sh(&o, "%s %s init --model lenet-bn --seed 2 --out %s && %s train --model lenet-bn --init-from %s --dataset "
               "synthetic --shape 1x28x28 --samples 64 --max-steps 2 --epochs 1 --quiet", python, script, bn, bin(), bn);
    if (rc) fail_msg("%s", o);
    free(o);
}

/* --mode dp scatters as nn.DataParallel does: LeNet-BN on N replicas normalises each contiguous piece
 * of the batch by its own statistics; 3 steps agree with PyTorch's emulation within rounding (the
 * residue split drifted 0.34-1.08 apart in 10 steps). */
static void test_dp_matches_dataparallel(void **state) {
    (void)state;
    if (!have_fashion()) {
        print_message("no Fashion-MNIST in " FASHION ": skipped\n");
        return;
    }
    const char *p0 = tu_path("dp0.safetensors"), *d = tu_path("dpd.safetensors"), *t = tu_path("dpt.safetensors");
    char *o;
    int rc = tu_sh(&o, "%s %s init --model lenet-bn --seed 3 --out %s", python, script, p0);
    if (rc) fail_msg("%s", o);
    free(o);
    for (int n = 2; n <= 4; n *= 2) {
        rc = tu_sh(&o, "%s train --model lenet-bn --mode dp --replicas %d --init-from %s --no-shuffle --max-steps 3 "
                   "--epochs 1 --threads 1 --workers 0 --quiet --save %s && %s %s train-dp --model lenet-bn --init %s "
                   "--replicas %d --steps 3 --out %s", bin(), n, p0, d, python, script, p0, n, t);
        if (rc) fail_msg("%s", o);
        free(o);
        dp_st_file a, b;
        assert_int_equal(dp_st_read(d, &a), DP_OK);
        assert_int_equal(dp_st_read(t, &b), DP_OK);
        double worst = 0;
        for (int i = 0; i < b.n; i++) {
            const dp_st_tensor *x = dp_st_find(&a, b.tensors[i].name);
            assert_non_null(x);
            assert_int_equal(x->nbytes, b.tensors[i].nbytes);
            if (x->dtype == DP_ST_I64) {
                assert_memory_equal(x->data, b.tensors[i].data, 8); /* num_batches_tracked: 3 */
                continue;
            }
            double rel = tu_rel_diff(x->data, b.tensors[i].data, x->nbytes / 4);
            if (rel > worst) worst = rel;
            if (!(rel < 1e-4)) fail_msg("N=%d: %s: relative difference %g from DataParallel", n, b.tensors[i].name, rel);
        }
        print_message("N=%d: dptrain --mode dp vs nn.DataParallel's scatter: worst tensor %.2g relative\n", n, worst);
        dp_st_free(&a), dp_st_free(&b);
    }
}

int main(void) {
    const char *candidates[] = {"python3", "/usr/bin/python3"};
    for (size_t i = 0; i < 2 && !python[0]; i++)
        if (tu_sh(NULL, "%s -c 'import torch, numpy' 2>/dev/null", candidates[i]) == 0)
            snprintf(python, sizeof python, "%s", candidates[i]);
    if (!python[0]) {
        printf("no python3 with torch and numpy: skipped\n");
        return 77;
    }
    snprintf(script, sizeof script, "%s/../examples/pytorch/interop.py", DP_SOURCE_DIR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lenet_bn_logits),
        cmocka_unit_test(test_resnet18_logits),
        cmocka_unit_test(test_lenet_accuracy),
        cmocka_unit_test(test_init_from_pytorch),
        cmocka_unit_test(test_dp_matches_dataparallel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
