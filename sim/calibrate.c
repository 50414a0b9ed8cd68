/* calibrate.c: measuring the backend's all-reduce and fitting the alpha-beta model to it. */
#include "sim/calibrate.h"

#include "core/sysmem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/arena.h"
#include "core/sysmem.h"
#include "core/timer.h"
#include "sim/model.h"

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

/* Weighted least squares t = a0 + a1 x, weights 1/t^2 (relative error). */
static int fit_line(const double *x, const double *t, int n, double *a0, double *a1) {
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    int used = 0;
    for (int i = 0; i < n; i++) {
        if (t[i] <= 0) continue;
        double w = 1 / (t[i] * t[i]);
        sw += w, sx += w * x[i], sy += w * t[i], sxx += w * x[i] * x[i], sxy += w * x[i] * t[i], used++;
    }
    double det = sw * sxx - sx * sx;
    if (used < 2 || det <= 0) return 0;
    *a0 = (sxx * sy - sx * sxy) / det, *a1 = (sw * sxy - sx * sy) / det;
    return 1;
}

dp_status dp_fit_kind(dp_coll_kind kind, const double *bytes, const double *seconds, int n, int world, double *alpha,
                      double *bw) {
    if (world < 2) return dp_fail(DP_ERR_USAGE, "calibrate: needs at least 2 replicas (or processes) to measure links");
    if (n > 32) n = 32;
    double x[32];
    /* the ring formulas of sim/model.c: broadcast and reduce (N-1) alpha + S/B; gather and
       scatter (N-1)(alpha + S/B) with S one share */
    const double vol = kind == DP_COLL_GATHER || kind == DP_COLL_SCATTER ? world - 1 : 1;
    for (int i = 0; i < n; i++) x[i] = vol * bytes[i];
    double a0, a1;
    if (!fit_line(x, seconds, n, &a0, &a1)) return dp_fail(DP_ERR_INTERNAL, "calibrate: too few distinct sizes to fit");
    if (a1 <= 0) return dp_fail(DP_ERR_BACKEND, "calibrate: time did not grow with message size (a noisy machine?)");
    *alpha = a0 > 0 ? a0 / (world - 1) : 0;
    *bw = 1 / a1;
    return DP_OK;
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One collective of `floats` per replica (gather and scatter: one share) on the local buffers;
 * `wide` holds world shares per local replica (the root's side of gather and scatter). */
static dp_status one_coll(dp_backend_t b, dp_coll_kind kind, float **bufs, float **wide, size_t floats) {
    switch (kind) {
    case DP_COLL_BROADCAST: return dp_broadcast(b, bufs, floats, 0);
    case DP_COLL_REDUCE: return dp_reduce(b, bufs, floats, DP_SUM, 0);
    case DP_COLL_GATHER: return dp_gather(b, (const float *const *)bufs, wide, floats, 0);
    case DP_COLL_SCATTER: return dp_scatter(b, (const float *const *)wide, bufs, floats, 0);
    default: return dp_allreduce(b, bufs, floats, DP_SUM);
    }
}

/* The median of `iters` back-to-back calls (each timed on its own), after 3 unmeasured ones. */
static dp_status median_call(dp_backend_t b, dp_coll_kind kind, float **bufs, float **wide, size_t floats, int iters,
                             double *out) {
    double *each = malloc((size_t)iters * sizeof *each);
    if (!each) return dp_fail(DP_ERR_NOMEM, "calibrate: out of memory");
    dp_status s = DP_OK;
    for (int w = 0; w < 3 && s == DP_OK; w++) s = one_coll(b, kind, bufs, wide, floats);
    if (s == DP_OK) s = dp_barrier(b);
    int k = 0;
    for (; k < iters && s == DP_OK; k++) {
        double t0 = dp_now();
        s = one_coll(b, kind, bufs, wide, floats);
        each[k] = dp_now() - t0;
    }
    qsort(each, (size_t)k, sizeof *each, cmp_dbl);
    *out = k ? each[k / 2] : 0;
    free(each);
    return s;
}

static const char *const kind_names[DP_COLL_KINDS] = {"allreduce", "broadcast", "reduce", "allgather", "gather",
                                                      "scatter", "barrier"};

/* DataParallel's collectives, each swept and fitted to its own ring formula (sim/model.c), so
 * that a broadcast (one message each way) is not priced with the all-reduce's fit. */
static dp_status sweep_kinds(dp_backend_t b, float **bufs, float **wide, dp_topology *t, FILE *out) {
    const int world = dp_backend_world(b), lead = dp_backend_rank(b, 0) == 0;
    static const dp_coll_kind kinds[4] = {DP_COLL_BROADCAST, DP_COLL_REDUCE, DP_COLL_GATHER, DP_COLL_SCATTER};
    if (lead && out) fprintf(out, "# DataParallel's collectives: median call (us) per size (bytes per replica or share)\n#%10s", "size (B)");
    if (lead && out)
        for (int k = 0; k < 4; k++) fprintf(out, " %12s", kind_names[kinds[k]]);
    if (lead && out) fprintf(out, "\n");
    enum { NS = 6 };
    double bytes[NS], secs[4][NS];
    int n = 0;
    static const size_t counts[NS] = {1, 16, 256, 4096, 65536, 262144}; /* 4 B .. 1 MiB, as the all-reduce's fit */
    for (; n < NS; n++) {
        const size_t floats = counts[n];
        bytes[n] = 4.0 * floats;
        int iters = (int)fmin(200, fmax(20, 2e6 / bytes[n]));
        for (int k = 0; k < 4; k++) DP_TRY(median_call(b, kinds[k], bufs, wide, floats, iters, &secs[k][n]));
        if (lead && out) {
            fprintf(out, " %10.0f", bytes[n]);
            for (int k = 0; k < 4; k++) fprintf(out, " %12.2f", 1e6 * secs[k][n]);
            fprintf(out, "\n");
        }
    }
    for (int k = 0; k < 4; k++) {
        double a = 0, bw = 0;
        if (dp_fit_kind(kinds[k], bytes, secs[k], n, world, &a, &bw) != DP_OK) continue; /* falls back to the all-reduce's */
        int i = dp_topology_kind_index(kinds[k]);
        t->kind_latency_s[i] = a, t->kind_bw[i] = bw;
        if (lead && out) fprintf(out, "# %s fit: alpha %.2f us, %.3f GB/s\n", kind_names[kinds[k]], a * 1e6, bw / 1e9);
    }
    return DP_OK;
}

/* A stand-in for a replica's backward: `reps` passes over w (in cache), then the gradients
 * written from it, as backward writes them just before their all-reduce. */
static void busy_work(float *w, size_t nw, float *g, size_t ng, int reps) {
    for (int r = 0; r < reps; r++)
        for (size_t i = 0; i < nw; i++) w[i] = w[i] * 0.9999f + 1e-4f;
    for (size_t i = 0; i < ng; i++) g[i] = w[i % nw] * 1e-3f;
}

/* One momentum-SGD pass over n gradients (what the optimizer does right after the all-reduce). */
static void sgd_pass(float *p, float *m, const float *g, size_t n) {
    for (size_t i = 0; i < n; i++) m[i] = 0.9f * m[i] + g[i], p[i] -= 1e-6f * m[i];
}

/* The training-like steps (one replica per process only). Every rank runs the same work, then
 * the collective, then the same collective again at once: the first call waits for the slowest
 * rank (the others' jitter), the second finds them all there, so first - second is the wait at
 * that synchronisation point, paired in the same conditions. The optimizer's pass over the data
 * is timed twice the same way (first touch after the collective, then in cache). DDP: work,
 * all-reduce, optimizer. DataParallel: the parameters broadcast, half the work, the outputs
 * gathered, scattered back, the other half, the gradients reduced, the master's optimizer. */
static dp_status sync_steps(dp_backend_t b, float **bufs, float **wide, dp_topology *t, FILE *out) {
    const int world = dp_backend_world(b), lead = dp_backend_rank(b, 0) == 0;
    enum { W = 16384, G = 65536, SMALL = 352, WARM = 20, STEPS = DP_CALIBRATE_STEPS, K = 8 };
    float *w = calloc(W, sizeof *w), *p = calloc(G, sizeof *p), *m = calloc(G, sizeof *m);
    double *rec = calloc((size_t)STEPS * K, sizeof *rec);
    dp_status s = DP_OK;
    if (!w || !p || !m || !rec) s = dp_fail(DP_ERR_NOMEM, "calibrate: out of memory");
    /* the work per step, the same on every rank: rank 0 times it, the others take its count */
    int reps = 1;
    if (s == DP_OK) {
        double t0 = dp_now();
        int k = 0;
        while (dp_now() - t0 < 0.02) busy_work(w, W, bufs[0], 0, 1), k++;
        reps = (int)fmax(2, DP_CALIBRATE_STEP_S / ((dp_now() - t0) / k));
        bufs[0][0] = (float)reps;
        s = dp_broadcast(b, bufs, 1, 0);
        reps = (int)bufs[0][0];
    }
    float *pp[1] = {p};
    double ddp[K] = {0}, dpm[K] = {0};
    for (int i = 0; i < WARM + STEPS && s == DP_OK; i++) {
        double c[6];
        c[0] = dp_now();
        busy_work(w, W, bufs[0], G, reps);
        c[1] = dp_now();
        s = dp_allreduce(b, bufs, G, DP_SUM);
        c[2] = dp_now();
        if (s == DP_OK) s = dp_allreduce(b, bufs, G, DP_SUM);
        c[3] = dp_now();
        sgd_pass(p, m, bufs[0], G);
        c[4] = dp_now();
        sgd_pass(p, m, bufs[0], G);
        c[5] = dp_now();
        for (int k = 0; k < 5 && i >= WARM; k++) ddp[k] += (c[k + 1] - c[k]) / STEPS;
        for (size_t q = 0; q < G; q++) bufs[0][q] = 0; /* keep the sums finite */
    }
    for (int i = 0; i < WARM + STEPS && s == DP_OK; i++) {
        double c[12];
        c[0] = dp_now();
        s = dp_broadcast(b, pp, G, 0);
        c[1] = dp_now();
        busy_work(w, W, bufs[0], 0, reps / 2);
        c[2] = dp_now();
        if (s == DP_OK) s = dp_gather(b, (const float *const *)bufs, wide, SMALL, 0);
        c[3] = dp_now();
        if (s == DP_OK) s = dp_gather(b, (const float *const *)bufs, wide, SMALL, 0);
        c[4] = dp_now();
        if (s == DP_OK) s = dp_scatter(b, (const float *const *)wide, bufs, SMALL, 0);
        busy_work(w, W, bufs[0], G, reps - reps / 2);
        c[5] = dp_now();
        if (s == DP_OK) s = dp_reduce(b, bufs, G, DP_SUM, 0);
        c[6] = dp_now();
        if (s == DP_OK) s = dp_reduce(b, bufs, G, DP_SUM, 0);
        c[7] = dp_now();
        if (lead) sgd_pass(p, m, bufs[0], G);
        c[8] = dp_now();
        if (lead) sgd_pass(p, m, bufs[0], G);
        c[9] = dp_now();
        if (i >= WARM) {
            dpm[0] += (c[3] - c[2]) / STEPS, dpm[1] += (c[4] - c[3]) / STEPS;
            dpm[2] += (c[6] - c[5]) / STEPS, dpm[3] += (c[7] - c[6]) / STEPS;
            dpm[4] += (c[8] - c[7]) / STEPS, dpm[5] += (c[9] - c[8]) / STEPS;
        }
        for (size_t q = 0; q < G; q++) bufs[0][q] = 0;
    }
    /* DDP's figures averaged over the ranks (each waits alike); DataParallel's are the master's,
       whose timeline is the step's */
    if (s == DP_OK) {
        for (int k = 0; k < 5; k++) bufs[0][k] = (float)ddp[k];
        s = dp_allreduce(b, bufs, 5, DP_SUM);
        for (int k = 0; k < 5; k++) ddp[k] = bufs[0][k] / world;
    }
    if (s == DP_OK && lead) {
        const double e = dp_expected_max_normal(world);
        const double w_ddp = fmax(0, ddp[1] - ddp[2]), w_ga = fmax(0, dpm[0] - dpm[1]), w_re = fmax(0, dpm[2] - dpm[3]);
        /* one sigma fitted to the three waits (each sigma x E[max of N normals]) */
        t->sync_jitter_s = e > 0 ? (w_ddp + w_ga + w_re) / 3 / e : 0;
        t->touch_allreduce_s_per_byte = fmax(0, ddp[3] - ddp[4]) / (4.0 * G);
        t->touch_broadcast_s_per_byte = fmax(0, dpm[4] - dpm[5]) / (4.0 * G);
        if (out) {
            fprintf(out, "# training-like steps (%d after %d; means): %.0f us of work per rank, then each collective "
                         "twice; first - second = the wait\n", STEPS, WARM, 1e6 * ddp[0]);
            fprintf(out, "# DDP all-reduce of %d floats: %.2f then %.2f us: wait %.2f us\n", G, 1e6 * ddp[1],
                    1e6 * ddp[2], 1e6 * w_ddp);
            fprintf(out, "# DP (the master): gather %.2f then %.2f us: wait %.2f us; reduce %.2f then %.2f us: wait %.2f us\n",
                    1e6 * dpm[0], 1e6 * dpm[1], 1e6 * w_ga, 1e6 * dpm[2], 1e6 * dpm[3], 1e6 * w_re);
            fprintf(out, "# sync_jitter_us %.2f: the three waits' mean / E[max of %d normals] (%.3f)\n",
                    1e6 * t->sync_jitter_s, world, e);
            fprintf(out, "# optimizer pass over %d floats after the all-reduce %.2f us, again %.2f us: %.1f us per MB\n", G,
                    1e6 * ddp[3], 1e6 * ddp[4], 1e12 * t->touch_allreduce_s_per_byte);
            fprintf(out, "# the master's optimizer pass over parameters the replicas just read (broadcast) %.2f us, "
                         "again %.2f us: %.1f us per MB\n", 1e6 * dpm[4], 1e6 * dpm[5],
                    1e12 * t->touch_broadcast_s_per_byte);
        }
    }
    free(w), free(p), free(m), free(rec);
    return s;
}

dp_status dp_calibrate(dp_backend_t b, const char *name, const char *path, FILE *out) {
    const int world = dp_backend_world(b), nl = dp_backend_n_local(b);
    const int lead = dp_backend_rank(b, 0) == 0;
    if (world < 2)
        return dp_fail(DP_ERR_USAGE, "calibrate: needs at least 2 replicas (--replicas N with sim; mpirun -np N with mpi)");
    /* what the sweep holds: 64 MiB over the local buffers, and for DataParallel's kinds each local
       replica's side of a gather, world shares of up to 1 MiB (with sim, replicas^2 MiB: 16 GiB at
       128): refused before it is allocated, because the OOM killer would end the run silently */
    const unsigned long long need = (64ull << 20) + (unsigned long long)nl * (unsigned long long)world * (1ull << 20);
    char what[96];
    snprintf(what, sizeof what, "calibrate over %d replicas (%d in this process)", world, nl);
    if (dp_memory_check(need, what) != DP_OK) {
        char msg[DP_ERROR_MAX];
        snprintf(msg, sizeof msg, "%s", dp_last_error());
        return dp_fail(DP_ERR_NOMEM, "%s; give fewer %s", msg, nl > 1 ? "--replicas" : "ranks");
    }
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
    DP_TRY(s);
    double alpha, bw;
    /* the fit covers messages up to DP_CALIBRATE_FIT_BYTES: on a CPU host larger ones leave the
       caches and run at DRAM speed, a different line (the table shows both) */
    int n_fit = 0;
    while (n_fit < n && sizes[n_fit] <= DP_CALIBRATE_FIT_BYTES) n_fit++;
    s = dp_fit_alpha_beta(sizes, secs, n_fit, world, &alpha, &bw);
    if (s == DP_OK && lead && out)
        fprintf(out, "# fit over 4 B..%.0f KiB: time = 2(N-1) x %.2f us + 2(N-1)/N x bytes / %.3f GB/s\n",
                DP_CALIBRATE_FIT_BYTES / 1024, alpha * 1e6, bw / 1e9);
    /* DataParallel's collectives and the training-like steps: the root's side of a gather or
       scatter holds world shares of up to 1 MiB */
    dp_topology t = {0};
    float *wide[nl];
    int n_wide = 0;
    while (n_wide < nl && s == DP_OK)
        if ((s = dp_alloc_floats(&wide[n_wide], (size_t)world * 262144, "calibration buffers")) == DP_OK) n_wide++;
    if (s == DP_OK) s = sweep_kinds(b, bufs, wide, &t, out);
    if (s == DP_OK && nl == 1) s = sync_steps(b, bufs, wide, &t, out);
    for (int r = 0; r < n_wide; r++) dp_free(wide[r]);
    for (int r = 0; r < nl; r++) dp_free(bufs[r]);
    DP_TRY(s);
    if (!lead || !path) return DP_OK;
    snprintf(t.name, sizeof t.name, "%s", name);
    snprintf(t.device, sizeof t.device, "%s", b->host_buffers ? "cpu-process" : "gpu");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    t.devices = cores > 0 ? (int)cores : world;
    t.algorithm = DP_ALGO_RING;
    t.bus_bw = bw, t.latency_s = alpha;
    t.host_bw = bw, t.host_latency_s = alpha; /* one shared memory: the "host link" is the same */
    t.p2p = 1;
    t.shared_memory_bus = b->host_buffers;
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
             "# host_call_us 0: the per-call cost is inside the measured latency. devices: this machine's cores.\n"
             "# broadcast/reduce/gather/scatter_*: each kind's sweep, 4 B..1 MiB, fitted to its ring formula.\n"
             "# sync_jitter_us, touch_*: %s\n",
             name, dp_backend_name(b), world, host, tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
             tm.tm_min, DP_CALIBRATE_FIT_BYTES / 1024,
             nl == 1 ? "training-like steps (docs/overhead-model.md: the wait for the slowest rank; first touch)"
                     : "0, not measured: the replicas share one process (measured with one replica per process)");
    return dp_topology_save("calibrate --out", path, &t, comment);
}
