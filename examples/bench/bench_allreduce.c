/* bench_allreduce: how fast the sim backend's ring all-reduce moves data over N replicas'
 * buffers, next to this machine's memory bandwidth measured in the same run (a STREAM-style
 * copy and add), so the two can be compared. Not a test: it prints figures.
 *
 *   build/bench_allreduce [--replicas N] [--floats N] [--threads T] [--reps R]
 *
 * An in-memory ring all-reduce of n floats over N replicas reads and writes, per replica,
 * (N-1)/N * n floats in the reduce-scatter (load 2, store 1 each) and (N-1)/N * n in the
 * all-gather (load 1, store 1): memory traffic = N * (N-1)/N * n * 4 * (3 + 2) bytes. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "core/arena.h"
#include "core/timer.h"

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[n / 2];
}

int main(int argc, char **argv) {
    int nrep = 4, threads = omp_get_num_procs(), reps = 30;
    size_t n = 44426; /* LeNet's gradients */
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--replicas")) nrep = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--floats")) n = (size_t)atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [--replicas N] [--floats N] [--threads T] [--reps R]\n", argv[0]);
            return 2;
        }
    }
    if (nrep < 2 || n < 1 || threads < 1 || reps < 1) {
        fprintf(stderr, "bench_allreduce: need --replicas >= 2 and positive sizes\n");
        return 2;
    }
    dp_backend_config cfg = {.name = "sim", .replicas = nrep, .nthreads = threads, .algorithm = "ring"};
    dp_backend_t b;
    if (dp_backend_create(&cfg, &b) != DP_OK) {
        fprintf(stderr, "bench_allreduce: %s\n", dp_last_error());
        return 1;
    }
    float **bufs = calloc((size_t)nrep, sizeof *bufs);
    for (int r = 0; r < nrep; r++) {
        if (dp_alloc_floats(&bufs[r], n, "buffer") != DP_OK) {
            fprintf(stderr, "bench_allreduce: %s\n", dp_last_error());
            return 1;
        }
        for (size_t i = 0; i < n; i++) bufs[r][i] = (float)(i % 13) * 1e-3f;
    }
    double *t = calloc((size_t)reps, sizeof *t);
    for (int k = 0; k < reps; k++) {
        double t0 = dp_now();
        dp_allreduce(b, bufs, n, DP_SUM);
        t[k] = dp_now() - t0;
        for (int r = 0; r < nrep; r++) bufs[r][0] = 0; /* keep values bounded */
    }
    double ar = median(t, reps);
    double traffic = (double)nrep * (nrep - 1) / nrep * (double)n * 4 * 5;

    /* memory bandwidth in the same run: c = a + b over the same total footprint, same threads */
    size_t m = n * (size_t)nrep;
    float *a, *bb, *c;
    if (dp_alloc_floats(&a, m, "a") || dp_alloc_floats(&bb, m, "b") || dp_alloc_floats(&c, m, "c")) return 1;
    for (size_t i = 0; i < m; i++) a[i] = 1, bb[i] = 2;
    for (int k = 0; k < reps; k++) {
        double t0 = dp_now();
#pragma omp parallel for num_threads(threads) schedule(static)
        for (size_t i = 0; i < m; i++) c[i] = a[i] + bb[i];
        t[k] = dp_now() - t0;
    }
    double add = median(t, reps), add_bw = (double)m * 12 / add;
    double ar_bw = traffic / ar;
    printf("sim ring all-reduce: %d replicas x %zu floats, %d threads\n", nrep, n, threads);
    printf("  all-reduce       %10.1f us  %6.2f GB/s of memory traffic  (algbw %.2f GB/s, busbw %.2f GB/s)\n",
           ar * 1e6, ar_bw / 1e9, (double)n * 4 / ar / 1e9, (double)n * 4 * 2 * (nrep - 1) / nrep / ar / 1e9);
    printf("  stream add c=a+b %10.1f us  %6.2f GB/s over %zu floats\n", add * 1e6, add_bw / 1e9, m);
    printf("  ratio memory bandwidth / all-reduce rate: %.2f\n", add_bw / ar_bw);
    for (int r = 0; r < nrep; r++) dp_free(bufs[r]);
    free(bufs), free(t);
    dp_free(a), dp_free(bb), dp_free(c);
    dp_backend_destroy(b);
    return 0;
}
