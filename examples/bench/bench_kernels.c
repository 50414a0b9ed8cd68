/* bench_kernels: times the CPU kernels on one LeNet training step (forward, loss, backward; batch
 * 64, 1x28x28 as Fashion-MNIST; --bn: LeNet-BN on 3x32x32) for 1 and 2 threads. Prints the
 * median and the minimum over many steps of each kernel call and of the whole step (the machine
 * may be shared: the minimum shows what the code can do, the median what it did). Not a test: it
 * prints figures. BENCH_CPUTIME=1 times with the calling thread's CPU clock (1 thread only).
 *
 *   gcc -std=c11 -D_GNU_SOURCE -O3 -march=native -fopenmp -I. -Isrc
 *       -I/usr/include/x86_64-linux-gnu/openblas-pthread/ examples/bench/bench_kernels.c
 *       kernels/cpu/[a-z]*.c -lopenblas -lm -o bench_kernels      (one line)
 *   ./bench_kernels [--reps N] [--batch N] [--threads T] [--bn] [--conv-path 0|1|2] [--variant V]
 * (--conv-path: 0 the kernel's choice, 1 its own SIMD GEMM, 2 OpenBLAS; --variant base, v3 or
 * v4: that compiled variant of the portable build instead of the one the CPU dispatches to).
 *
 * OpenBLAS runs single-threaded; the kernels use their own OpenMP threads. */
#include <cblas.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/batchnorm.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/cpu_common.h" /* dp_conv2d_force_path */
#include "kernels/cpu/linear.h"
#include "kernels/cpu/loss.h"
#include "kernels/cpu/pool.h"
#include "kernels/kernels.h"

static clockid_t bench_clock = CLOCK_MONOTONIC;

static double now(void) {
    struct timespec ts;
    clock_gettime(bench_clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* splitmix64 -> [-1, 1) */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)((double)(z >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static float *buf(size_t n, float scale) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) p[i] = scale * frand();
    return p;
}

/* Timed kernel calls of one step, in call order. */
#define MAXK 48
static const char *knames[MAXK];
static double *ktimes[MAXK];
static int nk, reps;

#define TIME(name, call)                                         \
    do {                                                         \
        double t0_ = now();                                      \
        call;                                                    \
        double t1_ = now();                                      \
        if (rep >= 0) {                                          \
            knames[ki] = (name);                                 \
            ktimes[ki][rep] = t1_ - t0_;                         \
        }                                                        \
        ki++;                                                    \
    } while (0)

typedef struct {
    const char *name;
    int in_c, in_h, out_c, k;
    dp_conv2d_dims d;
} conv_layer;

/* The kernels this program calls: the public (dispatched) ones, or with --variant those of one
 * compiled variant of the portable build (kernels/cpu/dispatch.c). */
#define KERNELS(X)                                                                                   \
    X(conv2d_workspace_floats) X(conv2d_forward_cpu) X(conv2d_backward_cpu) X(batchnorm_stats_cpu)   \
    X(batchnorm_apply_cpu) X(relu_forward_cpu) X(relu_backward_cpu) X(maxpool2d_forward_cpu)         \
    X(maxpool2d_backward_cpu) X(linear_forward_cpu) X(linear_backward_cpu) X(softmax_xent_cpu)       \
    X(batchnorm_backward_reduce_cpu) X(batchnorm_backward_input_cpu)
#define WEAK(f) extern __typeof__(f) f##_base __attribute__((weak)), f##_v3 __attribute__((weak)), \
    f##_v4 __attribute__((weak));
KERNELS(WEAK)
#define FIELD(f) __typeof__(f) *f;
static struct { KERNELS(FIELD) } K;

/* 0 when the variant is not in this build (a -march=native build has only its own). */
static int pick_kernels(const char *variant) {
    int ok = 1;
#define PICK(f)                                                                                    \
    K.f = !variant ? f : !strcmp(variant, "base") ? f##_base : !strcmp(variant, "v3") ? f##_v3     \
                     : !strcmp(variant, "v4") ? f##_v4 : NULL;                                     \
    ok &= K.f != NULL;
    KERNELS(PICK)
#undef PICK
    return ok;
}

int main(int argc, char **argv) {
    int batch = 64, only_threads = 0, bn = 0;
    const char *variant = NULL;
    reps = 400;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) only_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bn")) bn = 1;
        else if (!strcmp(argv[i], "--conv-path") && i + 1 < argc) dp_conv2d_force_path = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--variant") && i + 1 < argc) variant = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--reps N] [--batch N] [--threads T] [--bn] [--conv-path 0|1|2] "
                    "[--variant base|v3|v4]\n", argv[0]);
            return 2;
        }
    }
    if (!pick_kernels(variant)) {
        fprintf(stderr, "%s: --variant %s: not in this build (%s); the portable build has base, v3 and v4\n",
                argv[0], variant, dp_cpu_kernel_variant());
        return 2;
    }
    if (reps < 1 || batch < 1) return 2;
    if (getenv("BENCH_CPUTIME")) bench_clock = CLOCK_THREAD_CPUTIME_ID;
    openblas_set_num_threads(1);
    for (int i = 0; i < MAXK; i++) ktimes[i] = calloc((size_t)reps, sizeof(double));
    double *steps = calloc((size_t)reps, sizeof(double));

    const int B = batch, C0 = bn ? 3 : 1, S0 = bn ? 32 : 28, NCLS = 10;
    dp_conv2d_dims d1 = {C0, S0, S0, 6, 5, 1, 0, 0, 0};
    dp_conv2d_dims_init(&d1);
    const int p1 = d1.out_h / 2;
    dp_conv2d_dims d2 = {6, p1, p1, 16, 5, 1, 0, 0, 0};
    dp_conv2d_dims_init(&d2);
    const int p2 = d2.out_h / 2, F1 = 16 * p2 * p2;
    const size_t a1 = (size_t)B * 6 * d1.out_h * d1.out_w, a1p = (size_t)B * 6 * p1 * p1;
    const size_t a2 = (size_t)B * 16 * d2.out_h * d2.out_w, a2p = (size_t)B * F1;

    float *x = buf((size_t)B * C0 * S0 * S0, 1.0f);
    int32_t *labels = malloc(sizeof(int32_t) * B);
    for (int i = 0; i < B; i++) labels[i] = (int32_t)(i * 7 % NCLS);
    float *w1 = buf(6 * 25 * C0, 0.2f), *b1 = buf(6, 0.1f), *w2 = buf(16 * 150, 0.08f), *b2 = buf(16, 0.1f);
    float *wf1 = buf((size_t)120 * F1, 0.06f), *bf1 = buf(120, 0.05f), *wf2 = buf(84 * 120, 0.09f),
          *bf2 = buf(84, 0.05f), *wf3 = buf(10 * 84, 0.1f), *bf3 = buf(10, 0.05f);
    float *gw1 = buf(6 * 25 * C0, 0), *gb1 = buf(6, 0), *gw2 = buf(16 * 150, 0), *gb2 = buf(16, 0);
    float *gwf1 = buf((size_t)120 * F1, 0), *gbf1 = buf(120, 0), *gwf2 = buf(84 * 120, 0), *gbf2 = buf(84, 0),
          *gwf3 = buf(10 * 84, 0), *gbf3 = buf(10, 0);
    /* activations: conv out, (bn out), relu out, pool out (and gradients of each) */
    float *c1 = buf(a1, 0), *n1 = buf(a1, 0), *r1 = buf(a1, 0), *q1 = buf(a1p, 0);
    float *c2 = buf(a2, 0), *n2 = buf(a2, 0), *r2 = buf(a2, 0), *q2 = buf(a2p, 0);
    float *f1 = buf((size_t)B * 120, 0), *rf1 = buf((size_t)B * 120, 0), *f2 = buf((size_t)B * 84, 0),
          *rf2 = buf((size_t)B * 84, 0), *f3 = buf((size_t)B * NCLS, 0);
    float *g_f3 = buf((size_t)B * NCLS, 0), *g_rf2 = buf((size_t)B * 84, 0), *g_f2 = buf((size_t)B * 84, 0),
          *g_rf1 = buf((size_t)B * 120, 0), *g_f1 = buf((size_t)B * 120, 0), *g_q2 = buf(a2p, 0), *g_r2 = buf(a2, 0),
          *g_n2 = buf(a2, 0), *g_c2 = buf(a2, 0), *g_q1 = buf(a1p, 0), *g_r1 = buf(a1, 0), *g_n1 = buf(a1, 0),
          *g_c1 = buf(a1, 0);
    int32_t *am1 = malloc(sizeof(int32_t) * a1p), *am2 = malloc(sizeof(int32_t) * a2p);
    float *nf1 = buf((size_t)B * 120, 0), *nf2 = buf((size_t)B * 84, 0), *g_nf1 = buf((size_t)B * 120, 0),
          *g_nf2 = buf((size_t)B * 84, 0);
    float *gam = buf(128, 0), *bet = buf(128, 0), *mean = buf(128, 0), *invstd = buf(128, 0);
    for (int i = 0; i < 128; i++) gam[i] = 1.0f, invstd[i] = 1.0f;
    double s[128], s2[128];

    printf("LeNet%s step, batch %d, %dx%dx%d input; median of %d steps (microseconds); kernels: %s\n",
           bn ? "-BN" : "", B, C0, S0, S0, reps, variant ? variant : dp_cpu_kernel_variant());
    double total_1t = 0.0;
    for (int nt = 1; nt <= 2; nt++) {
        if (only_threads && nt != only_threads) continue;
        size_t wsn = K.conv2d_workspace_floats(&d1, B, nt), wsn2 = K.conv2d_workspace_floats(&d2, B, nt);
        float *ws = buf(wsn > wsn2 ? wsn : wsn2, 0);
        for (int rep = -20; rep < reps; rep++) { /* 20 warm-up steps */
            int ki = 0;
            const double t0 = now();
            /* the optimizer zeroes the gradients once per step */
            TIME("zero grads", {
                memset(gw1, 0, sizeof(float) * 6 * 25 * C0);
                memset(gb1, 0, sizeof(float) * 6);
                memset(gw2, 0, sizeof(float) * 16 * 150);
                memset(gb2, 0, sizeof(float) * 16);
                memset(gwf1, 0, sizeof(float) * 120 * F1);
                memset(gbf1, 0, sizeof(float) * 120);
                memset(gwf2, 0, sizeof(float) * 84 * 120);
                memset(gbf2, 0, sizeof(float) * 84);
                memset(gwf3, 0, sizeof(float) * 10 * 84);
                memset(gbf3, 0, sizeof(float) * 10);
            });
            TIME("conv1 fwd", K.conv2d_forward_cpu(&d1, B, x, w1, b1, c1, ws, nt));
            const float *t1 = c1;
            if (bn) {
                TIME("bn1 stats", K.batchnorm_stats_cpu(B, 6, d1.out_h * d1.out_w, c1, s, s2, nt));
                TIME("bn1 apply", K.batchnorm_apply_cpu(B, 6, d1.out_h * d1.out_w, c1, mean, invstd, gam, bet, n1, nt));
                t1 = n1;
            }
            TIME("relu1 fwd", K.relu_forward_cpu(a1, t1, r1, nt));
            TIME("pool1 fwd", K.maxpool2d_forward_cpu(B, 6, d1.out_h, d1.out_w, 2, 2, 0, r1, q1, am1, nt));
            TIME("conv2 fwd", K.conv2d_forward_cpu(&d2, B, q1, w2, b2, c2, ws, nt));
            const float *t2 = c2;
            if (bn) {
                TIME("bn2 stats", K.batchnorm_stats_cpu(B, 16, d2.out_h * d2.out_w, c2, s, s2, nt));
                TIME("bn2 apply", K.batchnorm_apply_cpu(B, 16, d2.out_h * d2.out_w, c2, mean, invstd, gam, bet, n2, nt));
                t2 = n2;
            }
            TIME("relu2 fwd", K.relu_forward_cpu(a2, t2, r2, nt));
            TIME("pool2 fwd", K.maxpool2d_forward_cpu(B, 16, d2.out_h, d2.out_w, 2, 2, 0, r2, q2, am2, nt));
            TIME("fc1 fwd", K.linear_forward_cpu(B, F1, 120, q2, wf1, bf1, f1, nt));
            const float *t3 = f1, *t4 = f2;
            if (bn) {
                TIME("bn3 stats", K.batchnorm_stats_cpu(B, 120, 1, f1, s, s2, nt));
                TIME("bn3 apply", K.batchnorm_apply_cpu(B, 120, 1, f1, mean, invstd, gam, bet, nf1, nt));
                t3 = nf1;
            }
            TIME("relu fwd", K.relu_forward_cpu((size_t)B * 120, t3, rf1, nt));
            TIME("fc2 fwd", K.linear_forward_cpu(B, 120, 84, rf1, wf2, bf2, f2, nt));
            if (bn) {
                TIME("bn4 stats", K.batchnorm_stats_cpu(B, 84, 1, f2, s, s2, nt));
                TIME("bn4 apply", K.batchnorm_apply_cpu(B, 84, 1, f2, mean, invstd, gam, bet, nf2, nt));
                t4 = nf2;
            }
            TIME("relu fwd", K.relu_forward_cpu((size_t)B * 84, t4, rf2, nt));
            TIME("fc3 fwd", K.linear_forward_cpu(B, 84, NCLS, rf2, wf3, bf3, f3, nt));
            int correct;
            TIME("softmax xent", K.softmax_xent_cpu(B, NCLS, f3, labels, 1.0f / B, g_f3, &correct));
            TIME("fc3 bwd", K.linear_backward_cpu(B, 84, NCLS, rf2, wf3, g_f3, g_rf2, gwf3, gbf3, nt));
            TIME("relu bwd", K.relu_backward_cpu((size_t)B * 84, rf2, g_rf2, bn ? g_nf2 : g_f2, nt));
            if (bn) {
                TIME("bn4 bwd reduce", K.batchnorm_backward_reduce_cpu(B, 84, 1, f2, g_nf2, mean, invstd, s, s2, nt));
                TIME("bn4 bwd input", K.batchnorm_backward_input_cpu(B, 84, 1, f2, g_nf2, mean, invstd, gam, s, s2,
                                                                   (double)B, g_f2, nt));
            }
            TIME("fc2 bwd", K.linear_backward_cpu(B, 120, 84, rf1, wf2, g_f2, g_rf1, gwf2, gbf2, nt));
            TIME("relu bwd", K.relu_backward_cpu((size_t)B * 120, rf1, g_rf1, bn ? g_nf1 : g_f1, nt));
            if (bn) {
                TIME("bn3 bwd reduce", K.batchnorm_backward_reduce_cpu(B, 120, 1, f1, g_nf1, mean, invstd, s, s2, nt));
                TIME("bn3 bwd input", K.batchnorm_backward_input_cpu(B, 120, 1, f1, g_nf1, mean, invstd, gam, s, s2,
                                                                   (double)B, g_f1, nt));
            }
            TIME("fc1 bwd", K.linear_backward_cpu(B, F1, 120, q2, wf1, g_f1, g_q2, gwf1, gbf1, nt));
            TIME("pool2 bwd", K.maxpool2d_backward_cpu(B, 16, d2.out_h, d2.out_w, p2, p2, g_q2, am2, g_r2, nt));
            TIME("relu2 bwd", K.relu_backward_cpu(a2, r2, g_r2, g_n2, nt));
            float *gc2 = g_n2;
            if (bn) {
                const int hw = d2.out_h * d2.out_w;
                TIME("bn2 bwd reduce", K.batchnorm_backward_reduce_cpu(B, 16, hw, c2, g_n2, mean, invstd, s, s2, nt));
                TIME("bn2 bwd input", K.batchnorm_backward_input_cpu(B, 16, hw, c2, g_n2, mean, invstd, gam, s, s2,
                                                                   (double)B * hw, g_c2, nt));
                gc2 = g_c2;
            }
            TIME("conv2 bwd", K.conv2d_backward_cpu(&d2, B, q1, w2, gc2, g_q1, gw2, gb2, ws, nt));
            TIME("pool1 bwd", K.maxpool2d_backward_cpu(B, 6, d1.out_h, d1.out_w, p1, p1, g_q1, am1, g_r1, nt));
            TIME("relu1 bwd", K.relu_backward_cpu(a1, r1, g_r1, g_n1, nt));
            float *gc1 = g_n1;
            if (bn) {
                const int hw = d1.out_h * d1.out_w;
                TIME("bn1 bwd reduce", K.batchnorm_backward_reduce_cpu(B, 6, hw, c1, g_n1, mean, invstd, s, s2, nt));
                TIME("bn1 bwd input", K.batchnorm_backward_input_cpu(B, 6, hw, c1, g_n1, mean, invstd, gam, s, s2,
                                                                   (double)B * hw, g_c1, nt));
                gc1 = g_c1;
            }
            TIME("conv1 bwd", K.conv2d_backward_cpu(&d1, B, x, w1, gc1, NULL, gw1, gb1, ws, nt));
            const double t1s = now();
            if (rep >= 0) steps[rep] = t1s - t0;
            nk = ki;
        }
        printf("\n%d thread%s                 median       min\n", nt, nt > 1 ? "s" : " ");
        double sum = 0.0, sum_min = 0.0;
        for (int k = 0; k < nk; k++) {
            const double m = median(ktimes[k], reps);
            sum += m, sum_min += ktimes[k][0];
            printf("  %-16s %9.1f %9.1f\n", knames[k], m * 1e6, ktimes[k][0] * 1e6);
        }
        const double st = median(steps, reps);
        printf("  %-16s %9.1f %9.1f\n  %-16s %9.1f %9.1f\n", "sum", sum * 1e6, sum_min * 1e6, "whole step", st * 1e6,
               steps[0] * 1e6);
        if (nt == 1) total_1t = st;
        else if (total_1t > 0) printf("  speed-up over 1 thread: %.2fx\n", total_1t / st);
        free(ws);
    }
    return 0;
}
