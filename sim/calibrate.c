/* calibrate.c: measuring the backend's all-reduce and fitting the alpha-beta model to it. */
#include "sim/calibrate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/arena.h"
#include "core/timer.h"

dp_status dp_fit_alpha_beta(const double *bytes, const double *seconds, int n, int world, double *alpha,
                            double *bus_bw) {
    if (world < 2) return dp_fail(DP_ERR_USAGE, "calibrate: needs at least 2 replicas (or processes) to measure links");
    /* t = a0 + a1 x with x = (2(N-1)/N) bytes: weighted least squares, weights 1/t^2 */
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) {
        if (seconds[i] <= 0) continue;
        double w = 1 / (seconds[i] * seconds[i]), x = 2.0 * (world - 1) / world * bytes[i];
        sw += w, sx += w * x, sy += w * seconds[i], sxx += w * x * x, sxy += w * x * seconds[i];
    }
    double det = sw * sxx - sx * sx;
    if (n < 2 || det <= 0) return dp_fail(DP_ERR_INTERNAL, "calibrate: too few distinct sizes to fit");
    double a0 = (sxx * sy - sx * sxy) / det, a1 = (sw * sxy - sx * sy) / det;
    if (a1 <= 0) return dp_fail(DP_ERR_BACKEND, "calibrate: time did not grow with message size (a noisy machine?)");
    *alpha = a0 > 0 ? a0 / (2.0 * (world - 1)) : 0;
    *bus_bw = 1 / a1;
    return DP_OK;
}

dp_status dp_calibrate(dp_backend_t b, const char *name, const char *path, FILE *out) {
    const int world = dp_backend_world(b), nl = dp_backend_n_local(b);
    const int lead = dp_backend_rank(b, 0) == 0;
    if (world < 2)
        return dp_fail(DP_ERR_USAGE, "calibrate: needs at least 2 replicas (--replicas N with sim; mpirun -np N with mpi)");
    const size_t max_floats = ((size_t)64 << 20) / 4 / (size_t)nl; /* 64 MiB over the local buffers */
    float *bufs[nl];
    for (int r = 0; r < nl; r++) {
        dp_status s = dp_alloc_floats(&bufs[r], max_floats, "calibration buffers");
        if (s != DP_OK) {
            for (int q = 0; q < r; q++) dp_free(bufs[q]);
            return s;
        }
    }
    double sizes[16] = {0}, secs[16] = {0};
    int n = 0;
    if (lead && out)
        fprintf(out, "# all-reduce (sum, float) over %d replicas, %s backend\n#%12s %12s %12s %12s %12s\n", world,
                dp_backend_name(b), "size (B)", "count", "time (us)", "algbw GB/s", "busbw GB/s");
    dp_status s = DP_OK;
    /* the first calls set up connections and fault pages in: not part of any size's figure */
    for (int w = 0; w < 100 && s == DP_OK; w++) s = dp_allreduce(b, bufs, 1024, DP_SUM);
    for (size_t floats = 1; floats <= max_floats && n < 16 && s == DP_OK; floats *= 4) {
        double bytes = 4.0 * floats;
        /* the same iteration count on every rank: from the size alone */
        int iters = (int)fmin(200, fmax(3, 1e7 / bytes));
        for (int w = 0; w < 3 && s == DP_OK; w++) s = dp_allreduce(b, bufs, floats, DP_SUM);
        /* the median call: each call is timed on its own, so a shared machine's preemptions (a
           rank waiting for a descheduled partner) hit some calls, not the median */
        enum { TRIALS = 5 };
        double *each = malloc((size_t)TRIALS * (size_t)iters * sizeof *each);
        if (!each) {
            s = dp_fail(DP_ERR_NOMEM, "calibrate: out of memory");
            break;
        }
        int k = 0;
        for (int tr = 0; tr < TRIALS && s == DP_OK; tr++) {
            s = dp_barrier(b);
            for (int i = 0; i < iters && s == DP_OK; i++) {
                double t0 = dp_now();
                s = dp_allreduce(b, bufs, floats, DP_SUM);
                each[k++] = dp_now() - t0;
            }
        }
        for (int i = 1; i < k; i++) /* insertion sort: at most a few thousand */
            for (int j = i; j > 0 && each[j] < each[j - 1]; j--) {
                double x = each[j];
                each[j] = each[j - 1], each[j - 1] = x;
            }
        double t = k ? each[k / 2] : 0;
        free(each);
        for (int r = 0; r < nl; r++) memset(bufs[r], 0, floats * sizeof(float)); /* keep sums finite */
        sizes[n] = bytes, secs[n] = t, n++;
        if (lead && out)
            fprintf(out, " %12.0f %12zu %12.2f %12.3f %12.3f\n", bytes, floats, 1e6 * t, bytes / t / 1e9,
                    bytes / t / 1e9 * 2.0 * (world - 1) / world);
    }
    for (int r = 0; r < nl; r++) dp_free(bufs[r]);
    DP_TRY(s);
    double alpha, bw;
    /* the fit covers messages up to DP_CALIBRATE_FIT_BYTES: on a CPU host larger ones leave the
       caches and run at DRAM speed, a different line (the table shows both) */
    int n_fit = 0;
    while (n_fit < n && sizes[n_fit] <= DP_CALIBRATE_FIT_BYTES) n_fit++;
    DP_TRY(dp_fit_alpha_beta(sizes, secs, n_fit, world, &alpha, &bw));
    if (lead && out)
        fprintf(out, "# fit over 4 B..%.0f KiB: time = 2(N-1) x %.2f us + 2(N-1)/N x bytes / %.3f GB/s\n",
                DP_CALIBRATE_FIT_BYTES / 1024, alpha * 1e6, bw / 1e9);
    if (!lead || !path) return DP_OK;
    dp_topology t = {0};
    snprintf(t.name, sizeof t.name, "%s", name);
    snprintf(t.device, sizeof t.device, "%s", dp_backend_device(b) == DP_CPU ? "cpu-process" : "gpu");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    t.devices = cores > 0 ? (int)cores : world;
    t.algorithm = DP_ALGO_RING;
    t.bus_bw = bw, t.latency_s = alpha;
    t.host_bw = bw, t.host_latency_s = alpha; /* one shared memory: the "host link" is the same */
    t.p2p = 1;
    t.shared_memory_bus = dp_backend_device(b) == DP_CPU;
    char comment[1024];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    char host[128] = "";
    gethostname(host, sizeof host - 1);
    snprintf(comment, sizeof comment,
             "# %s: written by `dptrain calibrate --backend %s` (%d replicas) on %s, %04d-%02d-%02d %02d:%02d UTC.\n"
             "# latency_us and bus_bandwidth_GBps: weighted least-squares fit of the all-reduce sweep, 4 B..%.0f KiB\n"
             "# (larger messages leave the caches: see the sweep in the calibrate output);\n"
             "# host_call_us 0: the per-call cost is inside the measured latency. devices: this machine's cores.\n",
             name, dp_backend_name(b), world, host, tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
             tm.tm_min, DP_CALIBRATE_FIT_BYTES / 1024);
    return dp_topology_save(path, &t, comment);
}
