/* bench_model_allreduce: the overhead model's all-reduce over a topology, printed the way
 * nccl-tests' all_reduce_perf prints a measurement (size, time, algbw, busbw), so a preset can
 * be held against the published figures: for nvlink4 (8x H100 SXM) the published ring busbw
 * is about 370 GB/s at large sizes. Not a test: it prints figures.
 *
 *   build/bench_model_allreduce [--topology nvlink4] [--devices 8] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/model.h"

int main(int argc, char **argv) {
    const char *name = "nvlink4";
    int n = 8;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--topology") && i + 1 < argc) name = argv[++i];
        else if (!strcmp(argv[i], "--devices") && i + 1 < argc) n = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--topology T] [--devices N]\n", argv[0]);
            return 2;
        }
    }
    dp_topology t;
    if (dp_topology_load(name, &t) != DP_OK || n < 2) {
        fprintf(stderr, "bench_model_allreduce: %s\n", n < 2 ? "--devices must be at least 2" : dp_last_error());
        return 1;
    }
    printf("# model all-reduce on %s (%s), %d devices: 2(N-1) x %.2f us + 2(N-1)/N x S / %.0f GB/s\n", t.name,
           t.path, n, t.latency_s * 1e6, t.bus_bw / 1e9);
    printf("#%14s %12s %12s %12s\n", "size (B)", "time (us)", "algbw GB/s", "busbw GB/s");
    for (double s = 8; s <= 8.0 * (1u << 30); s *= 4) {
        double sec = dp_coll_seconds(&t, DP_COLL_ALLREDUCE, s, n);
        printf(" %14.0f %12.2f %12.2f %12.2f\n", s, sec * 1e6, s / sec / 1e9, s / sec / 1e9 * 2.0 * (n - 1) / n);
    }
    /* where half the bus bandwidth is reached: latency and bandwidth terms equal */
    double half = t.latency_s * t.bus_bw * n;
    printf("# half of the bus bandwidth at %.0f KB (latency term = bandwidth term)\n", half / 1e3);
    return 0;
}
