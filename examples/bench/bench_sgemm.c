/* bench_sgemm: what this machine's BLAS can do, and what a model's training step asks of it.
 *
 * 1. OpenBLAS's sgemm (the library dptrain links) on T threads at 1024^3 and at the GEMM shapes of
 *    one batch-64 LeNet step: each shape is run in windows of --window seconds, again and again for
 *    --seconds in all, and the best window's rate (GFLOP/s, 2 M N K per call) is printed: a rate the
 *    machine sustained for a whole window, not one lucky call. The best over the shapes is "the
 *    limit" (the 1024^3 product on every machine tried so far).
 * 2. The arithmetic of one training sample of --model, counted from the model dptrain builds
 *    (src/nn): for every convolution and linear layer the forward multiply-adds, as many for the
 *    weight gradient, and as many again for the input gradient except where the layer reads the
 *    model's input (nothing needs that gradient). FLOPs = 2 x multiply-adds.
 *
 *   build/bench_sgemm [--threads T] [--seconds S] [--window W] [--model NAME] [--shape CxHxW]
 *                     [--classes K] [--samples N] [--flops-only]
 *
 * Output: one "key value" line per figure (the benchmark scripts read them), e.g.
 *   sgemm 1024x1024x1024 threads 2 gflops 197.3 (best window of 0.25 s, 8 windows)
 *   limit_gflops 197.3
 *   model lenet flops_per_sample 1517040 forward_macs 281640 wgrad_macs 281640 igrad_macs 195240
 *   epoch_flops 9.1022e+10 samples 60000
 * Not a test: it prints figures. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nn/model.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *fbuf(size_t n) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    if (!p) {
        fprintf(stderr, "bench_sgemm: out of memory (%zu floats)\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    return p;
}

typedef struct {
    const char *what;
    int transa, transb; /* 1: that operand is stored transposed (as the kernels call it) */
    int M, N, K;
} gemm_shape;

/* Best sustained GFLOP/s of C (M, N) = op(A) op(B) over windows of `window` seconds for about
 * `total` seconds (at least 3 windows). */
static double time_shape(const gemm_shape *s, double total, double window, int *nwin) {
    const float *A = fbuf((size_t)s->M * s->K), *B = fbuf((size_t)s->K * s->N);
    float *C = fbuf((size_t)s->M * s->N);
    const int lda = s->transa ? s->M : s->K, ldb = s->transb ? s->K : s->N;
    const double flop = 2.0 * s->M * s->N * s->K;
    /* calls per window from a first estimate */
    double t0 = now();
    int calls = 0;
    do {
        cblas_sgemm(CblasRowMajor, s->transa ? CblasTrans : CblasNoTrans, s->transb ? CblasTrans : CblasNoTrans,
                    s->M, s->N, s->K, 1.0f, A, lda, B, ldb, 0.0f, C, s->N);
        calls++;
    } while (now() - t0 < 0.05);
    int per = (int)(calls * window / (now() - t0));
    if (per < 1) per = 1;
    double best = 0.0;
    const double end = now() + total;
    int w = 0;
    while (w < 3 || now() < end) {
        const double a = now();
        for (int i = 0; i < per; i++)
            cblas_sgemm(CblasRowMajor, s->transa ? CblasTrans : CblasNoTrans, s->transb ? CblasTrans : CblasNoTrans,
                        s->M, s->N, s->K, 1.0f, A, lda, B, ldb, 0.0f, C, s->N);
        const double r = flop * per / (now() - a) / 1e9;
        if (r > best) best = r;
        w++;
    }
    *nwin = w;
    free((void *)A), free((void *)B), free(C);
    return best;
}

typedef struct {
    long long fwd, wgrad, igrad; /* multiply-adds per sample */
} model_macs;

/* Multiply-adds of one sample through the model's convolutions and linear layers. */
static model_macs count_macs(const dp_model *m) {
    model_macs r = {0, 0, 0};
    for (int i = 0; i < m->n_nodes; i++) {
        const dp_layer *l = &m->nodes[i];
        long long macs;
        if (!strcmp(l->ops->kind, "conv")) {
            const int k = l->cfg.conv.k;
            macs = (long long)l->out.c * l->out.h * l->out.w * l->in_shape[0].c * k * k;
        } else if (!strcmp(l->ops->kind, "fc")) {
            macs = (long long)dp_shape_size(l->in_shape[0]) * l->out.c;
        } else {
            continue;
        }
        r.fwd += macs;
        r.wgrad += macs;
        if (l->in[0] != DP_INPUT) r.igrad += macs; /* the model's input needs no gradient */
    }
    return r;
}

static void usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s [--threads T] [--seconds S] [--window W] [--model NAME] [--shape CxHxW] [--classes K]\n"
            "          [--samples N] [--flops-only]\n"
            "  defaults: --threads 2 --seconds 1 (per shape) --window 0.1 --model lenet --shape 1x28x28 --classes 10\n"
            "  --samples 60000 (for epoch_flops)\n",
            argv0);
}

int main(int argc, char **argv) {
    int threads = 2, flops_only = 0, classes = 10;
    long long samples = 60000;
    double seconds = 1.0, window = 0.1;
    const char *model = "lenet";
    dp_shape in = {1, 28, 28};
    for (int i = 1; i < argc; i++) {
        const int more = i + 1 < argc;
        if (!strcmp(argv[i], "--threads") && more) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && more) seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--window") && more) window = atof(argv[++i]);
        else if (!strcmp(argv[i], "--model") && more) model = argv[++i];
        else if (!strcmp(argv[i], "--classes") && more) classes = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--samples") && more) samples = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--shape") && more) {
            if (sscanf(argv[++i], "%dx%dx%d", &in.c, &in.h, &in.w) != 3) {
                usage(argv[0]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--flops-only")) flops_only = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(argv[0]);
            return 0;
        } else {
            usage(argv[0]);
            return 2;
        }
    }
    if (threads < 1 || seconds <= 0 || window <= 0 || classes < 1 || samples < 1) {
        usage(argv[0]);
        return 2;
    }

    dp_model m;
    if (dp_model_build(model, in, classes, &m) != DP_OK) {
        fprintf(stderr, "bench_sgemm: cannot build model %s for %dx%dx%d: %s\n", model, in.c, in.h, in.w,
                dp_last_error());
        return 2;
    }
    const model_macs mm = count_macs(&m);
    const long long per_sample = 2 * (mm.fwd + mm.wgrad + mm.igrad);
    dp_model_free(&m);

    if (!flops_only) {
        openblas_set_num_threads(threads);
        /* one batch-64 LeNet step's products, as the kernels (or im2col + GEMM) would call them */
        const gemm_shape shapes[] = {
            {"1024^3", 0, 0, 1024, 1024, 1024},
            {"conv1 forward (6 x 64*576 x 25)", 0, 0, 6, 64 * 576, 25},
            {"conv2 forward (16 x 64*64 x 150)", 0, 0, 16, 64 * 64, 150},
            {"conv2 weight gradient (16 x 150 x 64*64)", 0, 1, 16, 150, 64 * 64},
            {"conv2 input gradient (150 x 64*64 x 16)", 1, 0, 150, 64 * 64, 16},
            {"fc1 forward (64 x 120 x 256)", 0, 1, 64, 120, 256},
            {"fc1 weight gradient (120 x 256 x 64)", 1, 0, 120, 256, 64},
        };
        double limit = 0.0;
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            const gemm_shape *s = &shapes[i];
            int nwin = 0;
            const double r = time_shape(s, seconds, window, &nwin);
            printf("sgemm %dx%dx%d threads %d gflops %.1f (%s; best window of %g s, %d windows)\n", s->M, s->N, s->K,
                   threads, r, s->what, window, nwin);
            fflush(stdout);
            if (r > limit) limit = r;
        }
        printf("limit_gflops %.1f\n", limit);
    }
    printf("model %s flops_per_sample %lld forward_macs %lld wgrad_macs %lld igrad_macs %lld\n", model, per_sample,
           mm.fwd, mm.wgrad, mm.igrad);
    printf("epoch_flops %.6g samples %lld\n", (double)per_sample * (double)samples, samples);
    return 0;
}
