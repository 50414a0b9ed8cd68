/* The overhead model's mechanics on synthetic inputs with answers worked out by hand: the
 * collective formulas, DDP's bucket overlap (order, waiting for the previous bucket, exposure),
 * DP's serial chain, topology and profile files, the alpha-beta fit, gather/scatter, the timing
 * run on a device that is not the host (events), and the predict command's log lines and plots. No
 * timing is asserted. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "kernels/device.h"
#include "core/timer.h"
#include "dp_config.h"
#include "nn/model.h"
#include "sim/calibrate.h"
#include "sim/model.h"
#include "sim/framework.h"
#include "sim/profile_run.h"

#define EPS 1e-12

static dp_topology topo(double alpha, double bw) {
    dp_topology t = {0};
    snprintf(t.name, sizeof t.name, "synthetic");
    t.devices = 8, t.latency_s = alpha, t.bus_bw = bw, t.host_bw = bw / 2, t.host_latency_s = 2 * alpha, t.p2p = 1;
    return t;
}

static void test_collective_formulas(void **state) {
    (void)state;
    dp_topology t = topo(1e-6, 1e9);
    const double S = 1e6;
    assert_float_equal(dp_coll_seconds(&t, DP_COLL_ALLREDUCE, S, 1), 0, EPS);
    /* ring: 2(N-1) alpha + 2(N-1)/N S/B */
    assert_float_equal(dp_coll_seconds(&t, DP_COLL_ALLREDUCE, S, 4), 6e-6 + 1.5e-3, EPS);
    assert_float_equal(dp_coll_seconds(&t, DP_COLL_BROADCAST, S, 4), 3e-6 + 1e-3, EPS);
    assert_float_equal(dp_coll_seconds(&t, DP_COLL_REDUCE, S, 8), 7e-6 + 1e-3, EPS);
    assert_float_equal(dp_coll_seconds(&t, DP_COLL_GATHER, S, 4), 3 * (1e-6 + 1e-3), EPS);
    /* no P2P: every share crosses the host link twice */
    t.p2p = 0;
    assert_float_equal(dp_coll_seconds(&t, DP_COLL_SCATTER, S, 4), 3 * 2 * (2e-6 + 2e-3), EPS);
    /* input from host memory: N copies, N-1 when the devices share the host's memory */
    assert_float_equal(dp_host_scatter_seconds(&t, S, 4), 4 * (2e-6 + 2e-3), EPS);
    t.shared_memory_bus = 1;
    assert_float_equal(dp_host_scatter_seconds(&t, S, 4), 3 * (2e-6 + 2e-3), EPS);
    /* tree: 2 log2(N) alpha + 2 S/B */
    t.algorithm = DP_ALGO_TREE;
    assert_float_equal(dp_coll_seconds(&t, DP_COLL_ALLREDUCE, S, 8), 6e-6 + 2e-3, EPS);
    assert_float_equal(dp_coll_seconds(&t, DP_COLL_ALLREDUCE, S, 5), 6e-6 + 2e-3, EPS);
}

static void test_ddp_overlap(void **state) {
    (void)state;
    /* backward runs node 3, 2, 1, 0 for 1 s each; bucket 0 ready after node 3 (t=1), bucket 1
     * after node 1 (t=3) */
    const double bwd[4] = {1, 1, 1, 1};
    const int ready[2] = {3, 1};
    double exposed;
    /* short first bucket: 1..1.5; the second starts when ready, 3..5: 1 s past backward's 4 */
    double end = dp_ddp_overlap(bwd, 4, ready, (const double[]){0.5, 2}, 2, &exposed);
    assert_float_equal(end, 5, EPS);
    assert_float_equal(exposed, 1, EPS);
    /* long first bucket 1..4: the second waits for it (one stream), 4..6 */
    end = dp_ddp_overlap(bwd, 4, ready, (const double[]){3, 2}, 2, &exposed);
    assert_float_equal(end, 6, EPS);
    assert_float_equal(exposed, 2, EPS);
    /* everything hidden */
    end = dp_ddp_overlap(bwd, 4, ready, (const double[]){0.5, 0.5}, 2, &exposed);
    assert_float_equal(end, 3.5, EPS);
    assert_float_equal(exposed, 0, EPS);
    /* a bucket ready only at the end (node 0) is fully exposed */
    end = dp_ddp_overlap(bwd, 4, (const int[]){0}, (const double[]){0.25}, 1, &exposed);
    assert_float_equal(exposed, 0.25, EPS);
}

/* Two nodes: forward 1 + 2 ms, backward 3 + 4 ms at 8 samples per worker, linear in batch. */
static dp_profile *synthetic_profile(void) {
    dp_profile *p = calloc(1, sizeof *p);
    assert_non_null(p);
    snprintf(p->model, sizeof p->model, "toy");
    p->n_nodes = 2;
    p->input_chw[0] = 1, p->input_chw[1] = 10, p->input_chw[2] = 10;
    p->input_floats = 100, p->n_classes = 10, p->param_floats = 1000000, p->buffer_floats = 0;
    p->n_buckets = 2;
    p->bucket_floats[0] = 250000, p->bucket_node[0] = 1; /* ready after node 1's backward (first) */
    p->bucket_floats[1] = 750000, p->bucket_node[1] = 0;
    dp_profile_row *r = dp_profile_row_for(p, 8, 1);
    r->fwd_s[0] = 1e-3, r->fwd_s[1] = 2e-3, r->bwd_s[0] = 3e-3, r->bwd_s[1] = 4e-3;
    r->loss_s = 0.5e-3, r->opt_s = 1e-3;
    return p;
}

static void test_profile_interpolation(void **state) {
    (void)state;
    dp_profile *p = synthetic_profile();
    double f, b;
    dp_profile_node(p, 1, 16, 1, &f, &b); /* one row: proportional */
    assert_float_equal(f, 4e-3, EPS);
    assert_float_equal(b, 8e-3, EPS);
    dp_profile_row *r = dp_profile_row_for(p, 16, 1);
    r->fwd_s[1] = 3e-3, r->bwd_s[1] = 5e-3;
    dp_profile_node(p, 1, 12, 1, &f, &b); /* between rows: linear */
    assert_float_equal(f, 2.5e-3, EPS);
    assert_float_equal(b, 4.5e-3, EPS);
    /* save and read back (the numerics too) */
    const char *path = tu_path("toy.profile");
    p->bf16 = 1, p->tf32 = 1;
    assert_int_equal(dp_profile_save("test", path, p), DP_OK);
    dp_profile *q = calloc(1, sizeof *q);
    assert_int_equal(dp_profile_load(path, NULL, q), DP_OK);
    assert_string_equal(q->model, "toy");
    assert_int_equal(q->bf16, 1);
    assert_int_equal(q->tf32, 1);
    assert_int_equal(q->n_rows, 2);
    assert_int_equal(q->bucket_node[0], 1);
    assert_int_equal((int)q->bucket_floats[1], 750000);
    dp_profile_node(q, 1, 12, 1, &f, &b);
    assert_float_equal(f, 2.5e-3, 1e-9);
    free(p), free(q);
}

static void test_ddp_prediction(void **state) {
    (void)state;
    dp_profile *p = synthetic_profile();
    dp_topology t = topo(0, 1e9); /* no latency: times are bytes / bandwidth */
    dp_predict_query q = {.mode = DP_PREDICT_DDP, .devices = 2, .global_batch = 16, .steps_per_epoch = 10, .lanes = 1};
    dp_prediction o;
    assert_int_equal(dp_predict(p, &t, &q, &o), DP_OK);
    /* 8 samples per device: compute 1+2 + 0.5 + 3+4 + opt 1 = 11.5 ms. Backward: node 1 (4 ms)
     * then node 0 (3 ms). Bucket 0 (1 MB): ready at 4, ring 2(N-1)/N = 1 -> 1 ms, ends 5;
     * bucket 1 (3 MB) ready at 7, ends 10: 3 ms past backward; the metrics all-reduce 12 B. */
    assert_float_equal(o.compute_s, 11.5e-3, 1e-12);
    assert_float_equal(o.exposed_comm_s, 3e-3 + 12e-9, 1e-12);
    assert_float_equal(o.step_s, 11.5e-3 + 3e-3 + 12e-9, 1e-12);
    assert_float_equal(o.epoch_s, 10 * o.step_s, 1e-12);
    assert_int_equal(o.collectives, 3);
    /* one device: no communication */
    q.devices = 1;
    assert_int_equal(dp_predict(p, &t, &q, &o), DP_OK);
    assert_float_equal(o.step_s, 2 * (3e-3 + 7e-3 + 0.5e-3) + 1e-3, 1e-12);
    assert_float_equal(o.exposed_comm_s, 0, EPS);
    free(p);
}

static void test_dp_chain(void **state) {
    (void)state;
    dp_profile *p = synthetic_profile();
    dp_topology t = topo(0, 1e9);
    t.host_latency_s = 0;
    dp_predict_query q = {.mode = DP_PREDICT_DP, .devices = 2, .global_batch = 16, .steps_per_epoch = 1, .lanes = 1};
    dp_prediction o;
    assert_int_equal(dp_predict(p, &t, &q, &o), DP_OK);
    /* replicate 4 MB in one chunk: S/B = 4 ms; input scatter 2 x 3200 B / 0.5 GB/s = 12.8 us;
     * gather 8 x 11 x 4 B = 352 ns; scatter 320 ns; reduce 4 ms; metrics 12 ns */
    double serial = 4e-3 + 12.8e-6 + 352e-9 + 320e-9 + 4e-3 + 12e-9;
    assert_float_equal(o.serial_s, serial, 1e-12);
    /* compute: forward and backward at 8 samples, the loss on the master over all 16, the master's step */
    assert_float_equal(o.compute_s, 3e-3 + 7e-3 + 1e-3 + 1e-3, 1e-12);
    assert_float_equal(o.step_s, o.compute_s + serial, 1e-12);
    assert_float_equal(o.exposed_comm_s, 0, EPS); /* nothing overlaps: it is all serial */
    /* parameters above 10 MiB go in 10 MiB chunks: 3 chunks for 24 MiB */
    p->param_floats = 6 * 1024 * 1024;
    assert_int_equal(dp_predict(p, &t, &q, &o), DP_OK);
    assert_int_equal(o.collectives, 3 + 3 + 3 + 1);
    /* launches: one host thread launches for both devices */
    p->param_floats = 1000000;
    t.launch_s = 1e-3;
    p->kernels_fwd[0] = 2;
    assert_int_equal(dp_predict(p, &t, &q, &o), DP_OK);
    /* node 0's forward: 2 kernels x 2 devices x 1 ms = 4 ms of launching for 1 ms of work */
    assert_float_equal(o.host_s, 3e-3, 1e-12);
    assert_float_equal(o.compute_s, 3e-3 + 3e-3 + 7e-3 + 1e-3 + 1e-3, 1e-12);
    free(p);
}

static void test_sweep_speedup(void **state) {
    (void)state;
    dp_profile *p = synthetic_profile();
    dp_topology t = topo(0, 1e15); /* free links: DDP speedup is compute-bound */
    dp_predict_query q = {.mode = DP_PREDICT_DDP, .global_batch = 64, .steps_per_epoch = 1, .lanes = 1};
    const int devs[3] = {1, 2, 4};
    dp_prediction o[3];
    assert_int_equal(dp_predict_sweep(p, &t, &q, devs, 3, o), DP_OK);
    assert_float_equal(o[0].speedup, 1, 1e-12);
    /* compute scales 1/N except the optimizer step (1 ms of 1 + 10.5 x 8 ms) */
    double one = 1e-3 + 10.5e-3 * 8, four = 1e-3 + 10.5e-3 * 2;
    assert_float_equal(o[2].speedup, one / four, 1e-6);
    assert_float_equal(o[2].efficiency, one / four / 4, 1e-6);
    free(p);
}

/* CPU processes on a shared host: a device's lanes run over its threads, the lane tree adds
 * lanes - 1 gradient arenas, and the trainer's step overhead of that process shape is host time. */
static void test_cpu_lanes(void **state) {
    (void)state;
    dp_profile *p = synthetic_profile(); /* row (8 samples, 1 worker): compute 10.5 ms + opt 1 ms */
    p->rows[0].sum_s = 0.1e-3;
    dp_profile_row *r2 = dp_profile_row_for(p, 8, 2); /* with 2 workers busy: everything 2x slower */
    *r2 = p->rows[0];
    r2->concurrent = 2;
    for (int i = 0; i < 2; i++) r2->fwd_s[i] *= 2, r2->bwd_s[i] *= 2;
    r2->loss_s *= 2, r2->sum_s *= 2;
    assert_int_equal(dp_profile_set_overhead(p, 4, 1, 0.5e-3), DP_OK);
    assert_int_equal(dp_profile_set_overhead(p, 8, 2, 2e-3), DP_OK);
    dp_topology t = topo(0, 1e15);
    t.shared_memory_bus = 1, t.devices = 2;
    /* one device, 8 lanes of 8 samples on 2 threads: 4 rounds at concurrency 2 (2 x 10.5 ms
     * each), 7 lane sums (0.2 ms, split over the 2 threads as the arena x lanes is large), the step,
     * and the (8 lanes, 2 threads) overhead */
    dp_predict_query q = {.mode = DP_PREDICT_DDP, .devices = 1, .global_batch = 64, .steps_per_epoch = 1, .lanes = 8,
                          .workers = 2};
    dp_prediction o;
    assert_int_equal(dp_predict(p, &t, &q, &o), DP_OK);
    assert_float_equal(o.compute_s, 4 * 2 * 10.5e-3 + 7 * 0.2e-3 / 2 + 1e-3, 1e-12);
    assert_float_equal(o.host_s, 2e-3, 1e-12);
    /* two processes of one thread and 4 lanes each: 4 rounds at concurrency 2, 3 lane sums */
    q.devices = 2, q.lanes = 4, q.workers = 1;
    assert_int_equal(dp_predict(p, &t, &q, &o), DP_OK);
    assert_float_equal(o.compute_s, 4 * 2 * 10.5e-3 + 3 * 0.2e-3 + 1e-3, 1e-12);
    assert_float_equal(o.host_s, 0.5e-3, 1e-12);
    /* more workers than cores take turns: 4 devices x 1 thread on 2 cores, row of concurrency 2
     * (the nearest) times 4/2 */
    q.devices = 4, q.lanes = 2;
    assert_int_equal(dp_predict(p, &t, &q, &o), DP_OK);
    assert_float_equal(o.compute_s, 2 * (2 * 2 * 10.5e-3 + 0.2e-3) + 1e-3, 1e-12);
    /* GPUs: no CPU trainer overhead */
    t.shared_memory_bus = 0;
    q.devices = 2, q.lanes = 1, q.workers = 1;
    assert_int_equal(dp_predict(p, &t, &q, &o), DP_OK);
    assert_float_equal(o.host_s, 0, 1e-15);
    free(p);
}

static void test_topology_files(void **state) {
    (void)state;
    static const char *const presets[] = {"pcie4", "pcie4-p2p", "nvlink3", "nvlink4", "ib", "host"};
    for (int i = 0; i < 6; i++) {
        dp_topology t;
        if (dp_topology_load(presets[i], &t) != DP_OK) fail_msg("preset %s: %s", presets[i], dp_last_error());
        assert_string_equal(t.name, presets[i]);
        assert_true(t.bus_bw > 0);
    }
    dp_topology t;
    assert_int_equal(dp_topology_load("nvlink4", &t), DP_OK);
    assert_float_equal(t.bus_bw, 370e9, 1);
    assert_int_equal(t.p2p, 1);
    const char *path = tu_path("my.topo");
    const char *text = "# mine\nname mine\nbus_bandwidth_GBps 10 # a source\nlatency_us 3\nalgorithm tree\n";
    tu_write_file(path, text, strlen(text));
    assert_int_equal(dp_topology_load(path, &t), DP_OK);
    assert_string_equal(t.name, "mine");
    assert_int_equal(t.algorithm, DP_ALGO_TREE);
    assert_float_equal(t.latency_s, 3e-6, 1e-15);
    assert_float_equal(t.host_bw, 10e9, 1); /* no separate host link: the same */
    /* round trip through the writer */
    const char *out = tu_path("mine2.topo");
    assert_int_equal(dp_topology_save("test", out, &t, "# test\n"), DP_OK);
    dp_topology u;
    assert_int_equal(dp_topology_load(out, &u), DP_OK);
    assert_float_equal(u.latency_s, t.latency_s, 1e-15);
    /* the calibrated keys: absent = 0 (the presets), read, written and read back */
    assert_float_equal(u.sync_jitter_s, 0, EPS);
    assert_float_equal(u.kind_bw[0], 0, EPS);
    const char *cal = "bus_bandwidth_GBps 4\nreduce_latency_us 2\nreduce_bandwidth_GBps 6\nsync_jitter_us 30\n"
                      "touch_allreduce_us_per_MB 5\ntouch_broadcast_us_per_MB 500\n";
    assert_int_equal(dp_topology_parse(cal, "cal", &u), DP_OK);
    const int ri = dp_topology_kind_index(DP_COLL_REDUCE);
    assert_float_equal(u.kind_latency_s[ri], 2e-6, 1e-15);
    assert_float_equal(u.kind_bw[ri], 6e9, 1);
    assert_float_equal(u.sync_jitter_s, 30e-6, 1e-15);
    assert_float_equal(u.touch_allreduce_s_per_byte, 5e-12, 1e-20);
    assert_float_equal(u.touch_broadcast_s_per_byte, 500e-12, 1e-20);
    assert_int_equal(dp_topology_save("test", out, &u, NULL), DP_OK);
    dp_topology v;
    assert_int_equal(dp_topology_load(out, &v), DP_OK);
    assert_float_equal(v.kind_bw[ri], 6e9, 1);
    assert_float_equal(v.kind_bw[dp_topology_kind_index(DP_COLL_GATHER)], 0, EPS);
    assert_float_equal(v.sync_jitter_s, 30e-6, 1e-15);
    assert_float_equal(v.touch_broadcast_s_per_byte, 500e-12, 1e-20);
    assert_int_equal(dp_topology_parse("bus_bandwidth_GBps 1\ngather_latency_us 3\n", "h", &u), DP_ERR_FORMAT);
    assert_true(tu_contains(dp_last_error(), "gather_latency_us without gather_bandwidth_GBps"));
    assert_int_equal(dp_topology_parse("bus_bandwidth_GBps 1\nspeed 3\n", "x", &u), DP_ERR_FORMAT);
    assert_true(tu_contains(dp_last_error(), "x:2: unknown key 'speed'"));
    assert_int_equal(dp_topology_parse("latency_us 3\n", "y", &u), DP_ERR_FORMAT);
    assert_true(tu_contains(dp_last_error(), "bus_bandwidth_GBps is missing"));
    assert_int_equal(dp_topology_parse("bus_bandwidth_GBps -1\n", "z", &u), DP_ERR_FORMAT);
    assert_int_equal(dp_topology_load("no-such-preset", &u), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "no preset of that name"));
}

/* The synchronisation wait: sigma x E[max of N standard normals] per point that follows the
 * ranks' own compute; DDP pays it per bucket (inside the overlap), DP at its gather (after
 * forward) and its reduce (after backward). */
static void test_sync_wait(void **state) {
    (void)state;
    assert_float_equal(dp_expected_max_normal(1), 0, EPS);
    assert_float_equal(dp_expected_max_normal(2), 1 / sqrt(M_PI), 1e-9); /* exact: 1/sqrt(pi) */
    assert_float_equal(dp_expected_max_normal(4), 1.029375, 1e-5);      /* tables of normal order statistics */
    assert_float_equal(dp_expected_max_normal(8), 1.423600, 1e-5);
    assert_float_equal(dp_expected_max_normal(16), 1.765991, 1e-5);
    dp_profile *p = synthetic_profile();
    dp_topology t = topo(0, 1e9);
    t.host_latency_s = 0;
    dp_prediction o0, o;
    /* DDP (test_ddp_prediction's case): bucket 0 ready at 4 ms ends at 5 + w, bucket 1 ready at
       7 ends at 10 + w: exposed grows by the one wait of the last bucket */
    dp_predict_query q = {.mode = DP_PREDICT_DDP, .devices = 4, .global_batch = 32, .steps_per_epoch = 1, .lanes = 1};
    assert_int_equal(dp_predict(p, &t, &q, &o0), DP_OK);
    t.sync_jitter_s = 1e-3;
    const double w = 1e-3 * dp_expected_max_normal(4);
    assert_float_equal(dp_sync_wait_seconds(&t, 4), w, EPS);
    assert_float_equal(dp_sync_wait_seconds(&t, 1), 0, EPS);
    assert_int_equal(dp_predict(p, &t, &q, &o), DP_OK);
    assert_float_equal((o.exposed_comm_s - o0.exposed_comm_s), w, 1e-12);
    assert_float_equal((o.comm_s - o0.comm_s), 2 * w, 1e-12); /* both buckets wait; one is hidden */
    assert_float_equal(o.compute_s, o0.compute_s, EPS);
    /* a bucket that finishes early: its wait is hidden behind backward when it fits */
    t.sync_jitter_s = 0;
    q.mode = DP_PREDICT_DP;
    assert_int_equal(dp_predict(p, &t, &q, &o0), DP_OK);
    t.sync_jitter_s = 1e-3;
    assert_int_equal(dp_predict(p, &t, &q, &o), DP_OK);
    assert_float_equal((o.serial_s - o0.serial_s), 2 * w, 1e-12);
    assert_float_equal((o.step_s - o0.step_s), 2 * w, 1e-12);
    /* one device: nothing to wait for */
    q.devices = 1;
    assert_int_equal(dp_predict(p, &t, &q, &o), DP_OK);
    assert_float_equal(o.serial_s, 0, EPS);
    free(p);
}

/* DataParallel's collectives with their own fits, and the first-touch terms. */
static void test_kind_fits_and_touch(void **state) {
    (void)state;
    dp_topology t = topo(1e-6, 1e9);
    const double S = 1e6;
    /* a kind with its own fit uses it, to the ring formula; the others keep the all-reduce's */
    t.kind_latency_s[dp_topology_kind_index(DP_COLL_BROADCAST)] = 5e-6;
    t.kind_bw[dp_topology_kind_index(DP_COLL_BROADCAST)] = 4e9;
    t.kind_latency_s[dp_topology_kind_index(DP_COLL_SCATTER)] = 2e-6;
    t.kind_bw[dp_topology_kind_index(DP_COLL_SCATTER)] = 2e9;
    assert_int_equal(dp_topology_kind_index(DP_COLL_ALLREDUCE), -1);
    assert_float_equal(dp_coll_seconds(&t, DP_COLL_BROADCAST, S, 4), 3 * 5e-6 + 0.25e-3, EPS);
    assert_float_equal(dp_coll_seconds(&t, DP_COLL_REDUCE, S, 4), 3e-6 + 1e-3, EPS);
    assert_float_equal(dp_coll_seconds(&t, DP_COLL_SCATTER, S, 4), 3 * (2e-6 + 0.5e-3), EPS);
    assert_float_equal(dp_coll_seconds(&t, DP_COLL_ALLREDUCE, S, 4), 6e-6 + 1.5e-3, EPS);
    /* processes sharing the host's memory scatter the input with the backend's scatter */
    t.shared_memory_bus = 1;
    assert_float_equal(dp_host_scatter_seconds(&t, S, 4), 3 * (2e-6 + 0.5e-3), EPS);
    /* the fits recover synthetic points exactly */
    double bytes[6], bc[6], ga[6], a, b;
    for (int i = 0; i < 6; i++) {
        bytes[i] = 4.0 * (1 << (3 * i));
        bc[i] = 3 * 2e-6 + bytes[i] / 5e9;
        ga[i] = 3 * (1e-6 + bytes[i] / 8e9);
    }
    assert_int_equal(dp_fit_kind(DP_COLL_BROADCAST, bytes, bc, 6, 4, &a, &b), DP_OK);
    assert_float_equal(a, 2e-6, 1e-12);
    assert_float_equal(b / 5e9, 1, 1e-9);
    assert_int_equal(dp_fit_kind(DP_COLL_GATHER, bytes, ga, 6, 4, &a, &b), DP_OK);
    assert_float_equal(a, 1e-6, 1e-12);
    assert_float_equal(b / 8e9, 1, 1e-9);
    assert_int_equal(dp_fit_kind(DP_COLL_GATHER, bytes, ga, 6, 1, &a, &b), DP_ERR_USAGE);
    /* first touch: DDP's optimizer after the all-reduce, DP's master after the broadcast, per byte
       of parameters (1e6 floats = 4 MB), on the optimizer, i.e. compute */
    dp_profile *p = synthetic_profile();
    dp_topology u = topo(0, 1e9);
    dp_prediction o0, o;
    dp_predict_query q = {.mode = DP_PREDICT_DDP, .devices = 2, .global_batch = 16, .steps_per_epoch = 1, .lanes = 1};
    assert_int_equal(dp_predict(p, &u, &q, &o0), DP_OK);
    u.touch_allreduce_s_per_byte = 1e-10, u.touch_broadcast_s_per_byte = 1e-9;
    assert_int_equal(dp_predict(p, &u, &q, &o), DP_OK);
    assert_float_equal((o.compute_s - o0.compute_s), 4e6 * 1e-10, 1e-12);
    q.mode = DP_PREDICT_DP;
    u.touch_allreduce_s_per_byte = 0, u.touch_broadcast_s_per_byte = 0;
    assert_int_equal(dp_predict(p, &u, &q, &o0), DP_OK);
    u.touch_broadcast_s_per_byte = 1e-9;
    assert_int_equal(dp_predict(p, &u, &q, &o), DP_OK);
    assert_float_equal((o.compute_s - o0.compute_s), 4e6 * 1e-9, 1e-12);
    q.devices = 1; /* one device: no collective, no touch */
    assert_int_equal(dp_predict(p, &u, &q, &o), DP_OK);
    u.touch_broadcast_s_per_byte = 0;
    assert_int_equal(dp_predict(p, &u, &q, &o0), DP_OK);
    assert_float_equal(o.step_s, o0.step_s, EPS);
    free(p);
}

static void test_alpha_beta_fit(void **state) {
    (void)state;
    double bytes[8], secs[8];
    const int N = 4;
    for (int i = 0; i < 8; i++) {
        bytes[i] = 4.0 * (1 << (3 * i));
        secs[i] = 2.0 * (N - 1) * 5e-6 + 2.0 * (N - 1) / N * bytes[i] / 3e9;
    }
    double a, b;
    assert_int_equal(dp_fit_alpha_beta(bytes, secs, 8, N, &a, &b), DP_OK);
    assert_float_equal(a, 5e-6, 1e-12);
    assert_float_equal(b / 3e9, 1, 1e-9);
    assert_int_equal(dp_fit_alpha_beta(bytes, secs, 8, 1, &a, &b), DP_ERR_USAGE);
}

static void test_gather_scatter(void **state) {
    (void)state;
    for (int n = 1; n <= 5; n++) {
        dp_backend_config cfg = {.name = "sim", .replicas = n, .nthreads = 2};
        dp_backend_t b;
        assert_int_equal(dp_backend_create(&cfg, &b), DP_OK);
        const size_t k = 7;
        float send[8][7], all[8 * 7], back[8][7];
        const float *sp[8];
        float *rp[8], *bp[8];
        for (int r = 0; r < n; r++) {
            for (size_t i = 0; i < k; i++) send[r][i] = (float)(100 * r + (int)i);
            sp[r] = send[r], rp[r] = r == n - 1 ? all : NULL, bp[r] = back[r];
        }
        const int root = n - 1;
        assert_int_equal(dp_gather(b, sp, rp, k, root), DP_OK);
        for (int r = 0; r < n; r++)
            for (size_t i = 0; i < k; i++) assert_float_equal(all[r * k + i], 100 * r + (int)i, 0);
        const float *from[8] = {0};
        from[root] = all;
        assert_int_equal(dp_scatter(b, from, bp, k, root), DP_OK);
        for (int r = 0; r < n; r++) assert_memory_equal(back[r], send[r], k * sizeof(float));
        assert_int_equal(b->stats.calls[DP_COLL_GATHER], 1);
        assert_int_equal(b->stats.calls[DP_COLL_SCATTER], 1);
        assert_float_equal(b->stats.link_bytes[DP_COLL_GATHER], 4.0 * k * (n - 1), 0);
        dp_backend_destroy(b);
    }
}

/* The timing run on a device that is not the host (the way a GPU is timed), on a fake one: the
 * CPU's memory and kernels without host-memory access, and timing events that read the clock when recorded
 * (a GPU's event completes when the work queued before it has; the CPU's kernels ran on the call).
 * Every piece of a step lies between two events: slots + 1 of them per step, every node, the loss,
 * the optimizer and the lane sum timed; two workers, or a device without events, are refused. */
static double ev_clock[64];
static int ev_created, ev_records, ev_freed;
static dp_status ev_create(const dp_dev *d, int n, void **ev) {
    (void)d;
    if (n > 64) return dp_fail(DP_ERR_INTERNAL, "test: %d events", n);
    ev_created = n, *ev = ev_clock;
    return DP_OK;
}
static dp_status ev_record(const dp_dev *d, void *ev, int i) {
    (void)d;
    ((double *)ev)[i] = dp_now(), ev_records++;
    return DP_OK;
}
static dp_status ev_elapsed(const dp_dev *d, void *ev, int i, int j, double *s) {
    (void)d;
    *s = ((double *)ev)[j] - ((double *)ev)[i];
    return DP_OK;
}
static void ev_free(const dp_dev *d, void *ev, int n) {
    (void)d, (void)ev, (void)n;
    ev_freed++;
}

static void test_profile_on_a_device(void **state) {
    (void)state;
    dp_model m;
    assert_int_equal(dp_model_build("lenet", (dp_shape){1, 28, 28}, 10, &m), DP_OK);
    dp_profile *p = calloc(1, sizeof *p);
    assert_non_null(p);
    assert_int_equal(dp_profile_describe(&m, NULL, p), DP_OK);
    dp_dev fake = *dp_dev_cpu();
    fake.name = "fake-gpu", fake.caps = DP_CAP_ASYNC | DP_CAP_EVENTS;
    assert_int_equal(dp_profile_measure(&m, &fake, 8, 1, 3, p), DP_ERR_UNSUPPORTED); /* no events */
    fake.events_create = ev_create, fake.event_record = ev_record, fake.event_elapsed = ev_elapsed;
    fake.events_free = ev_free;
    assert_int_equal(dp_profile_measure(&m, &fake, 8, 2, 3, p), DP_ERR_USAGE); /* one worker per device */
    assert_int_equal(dp_profile_measure(&m, &fake, 8, 1, 3, p), DP_OK);
    const int slots = 2 * m.n_nodes + 3;
    assert_int_equal(ev_created, slots + 1);
    assert_int_equal(ev_records, (2 + 3) * (slots + 1)); /* 2 warm-up steps and 3 timed */
    assert_int_equal(ev_freed, 1);
    const dp_profile_row *r = dp_profile_row_for(p, 8, 1);
    assert_non_null(r);
    double fwd = 0, bwd = 0;
    for (int i = 0; i < m.n_nodes; i++) {
        assert_true(r->fwd_s[i] >= 0 && r->bwd_s[i] >= 0);
        fwd += r->fwd_s[i], bwd += r->bwd_s[i];
    }
    /* each convolution is real work in both directions: a piece timed into the wrong slot would
       leave one of them 0 */
    assert_true(r->fwd_s[0] > 0 && r->bwd_s[0] > 0 && r->fwd_s[3] > 0 && r->bwd_s[3] > 0);
    assert_true(fwd > 0 && bwd > 0 && r->loss_s > 0 && r->opt_s > 0 && r->sum_s > 0);
    free(p);
    dp_model_free(&m);
}

/* This run's description (dp_profile_describe) of a model built for this shape and class count. */
static dp_status describe_run(const char *model, dp_shape in, int classes, dp_profile *run) {
    dp_model m;
    memset(run, 0, sizeof *run);
    DP_TRY(dp_model_build(model, in, classes, &m));
    dp_status s = dp_profile_describe(&m, NULL, run);
    dp_model_free(&m);
    return s;
}

/* A --compute profile is of this run's model, input shape, classes and parameters, or refused
 * naming the file, the field and both values (it was matched by the model's name only: a 1x28x28
 * profile priced a 3x32x32 run, and 'params 1' changed DP's prediction). Every shipped profile
 * matches the model its own lines describe, so their 'input' lines are exact. */
static void test_profile_matches_run(void **state) {
    (void)state;
    dp_profile *p = calloc(1, sizeof *p), *run = calloc(1, sizeof *run);
    assert_non_null(p);
    assert_non_null(run);
    static const char *const presets[] = {"h100-lenet", "h100-lenet-bn", "h100-resnet18", "rtx3090-lenet",
                                          "rtx4090-lenet-bn", "rtx4090-resnet18", "t4-lenet"};
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s.profile", DP_SOURCE_PRESETS, presets[i]);
        if (dp_profile_load(path, NULL, p) != DP_OK) fail_msg("%s: %s", path, dp_last_error());
        assert_string_equal(p->path, path);
        dp_shape in = {p->input_chw[0], p->input_chw[1], p->input_chw[2]};
        assert_int_equal(describe_run(p->model, in, p->n_classes, run), DP_OK);
        if (dp_profile_match("--compute", p, run) != DP_OK) fail_msg("%s: %s", path, dp_last_error());
    }
    /* h100 for lenet: sim/presets/h100-lenet.profile, 1x28x28, 10 classes */
    assert_int_equal(dp_profile_load("h100", "lenet", p), DP_OK);
    assert_int_equal(describe_run("lenet", (dp_shape){3, 32, 32}, 10, run), DP_OK);
    assert_int_equal(dp_profile_match("--compute", p, run), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "--compute " DP_SOURCE_PRESETS "/h100-lenet.profile: input 1x28x28, but "
                                             "this run's is 3x32x32; "));
    assert_true(tu_contains(dp_last_error(), "the same command with --save-profile FILE in place of --compute"));
    assert_int_equal(describe_run("lenet", (dp_shape){1, 28, 28}, 5, run), DP_OK);
    assert_int_equal(dp_profile_match("--compute", p, run), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "h100-lenet.profile: classes 10, but this run's is 5; "));
    /* a profile has the run's precision and tf32: the presets (no such lines) are fp32, tf32 off */
    assert_int_equal(describe_run("lenet", (dp_shape){1, 28, 28}, 10, run), DP_OK);
    assert_int_equal(p->bf16 + p->tf32, 0);
    run->bf16 = 1;
    assert_int_equal(dp_profile_match("--compute", p, run), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "h100-lenet.profile: precision fp32, but this run's is bf16; "));
    run->bf16 = 0, run->tf32 = 1;
    assert_int_equal(dp_profile_match("--compute", p, run), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "h100-lenet.profile: tf32 0, but this run's is 1; "));
    /* this run's bucket plan (--bucket-mb) replaces the recorded one */
    assert_int_equal(describe_run("lenet", (dp_shape){1, 28, 28}, 10, run), DP_OK);
    run->n_buckets = 2, run->bucket_floats[0] = 850, run->bucket_floats[1] = 44480 - 850, run->bucket_node[0] = 11;
    assert_int_equal(dp_profile_match("--compute", p, run), DP_OK);
    assert_int_equal(p->n_buckets, 2);
    assert_int_equal(p->bucket_node[0], 11);
    /* a forged parameter count: against its own buckets, and (buckets forged too) against the run */
    char *text = NULL;
    assert_int_equal(dp_read_text_file(DP_SOURCE_PRESETS "/h100-lenet.profile", &text), DP_OK);
    char *forged = malloc(strlen(text) + 16);
    assert_non_null(forged);
    char *at = strstr(text, "params 44480\n");
    assert_non_null(at);
    snprintf(forged, strlen(text) + 16, "%.*sparams 1\n%s", (int)(at - text), text, at + strlen("params 44480\n"));
    assert_int_equal(dp_profile_parse(forged, "forged", p), DP_ERR_FORMAT);
    assert_true(tu_contains(dp_last_error(), "forged: params 1, but the buckets hold 44480 floats"));
    at = strstr(forged, "bucket 0 44480 0\n");
    assert_non_null(at);
    memcpy(at, "bucket 0 1     0\n", strlen("bucket 0 44480 0\n"));
    assert_int_equal(dp_profile_parse(forged, "forged", p), DP_OK);
    assert_int_equal(dp_profile_match("--compute", p, run), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "(profile): params 1, but this run's is 44480"));
    /* the numerics' lines: each once, a known value */
    static const char *const numerics[][2] = {{"precision fp16", "precision: expected fp32 or bf16, got 'fp16'"},
                                              {"tf32 2", "numerics:2"},
                                              {"precision bf16\nprecision bf16", "'precision' is given twice"}};
    for (size_t i = 0; i < sizeof numerics / sizeof *numerics; i++) {
        snprintf(forged, strlen(text) + 16, "model lenet\n%s\n", numerics[i][0]);
        assert_int_equal(dp_profile_parse(forged, "numerics", p), DP_ERR_FORMAT);
        if (!tu_contains(dp_last_error(), numerics[i][1])) fail_msg("'%s': %s", numerics[i][0], dp_last_error());
    }
    /* a profile of an older dptrain (no 'input' line): refused, saying what to add */
    at = strstr(text, "input 1x28x28\n");
    assert_non_null(at);
    memset(at, ' ', strlen("input 1x28x28"));
    assert_int_equal(dp_profile_parse(text, "old", p), DP_ERR_FORMAT);
    assert_true(tu_contains(dp_last_error(), "old: no 'input CxHxW' line"));
    free(forged), free(text), free(p), free(run);
    /* and from the command line, before any prediction */
    char *out = NULL;
    static const char *const runs[][2] = {
        {"--shape 3x32x32", "h100-lenet.profile: input 1x28x28, but this run's is 3x32x32"},
        {"--shape 1x28x28 --classes 5", "h100-lenet.profile: classes 10, but this run's is 5"},
        {"--shape 1x28x28 --precision bf16", "h100-lenet.profile: precision fp32, but this run's is bf16"},
        {"--shape 1x28x28 --tf32", "h100-lenet.profile: tf32 0, but this run's is 1"},
    };
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        int rc = tu_run_dptrain(&out, "predict --dataset synthetic %s --samples 640 --batch-size 64 --topology "
                                      "nvlink4 --compute h100", runs[i][0]);
        if (rc != 2 || !tu_contains(out, runs[i][1]) || tu_contains(out, "predicted on"))
            fail_msg("%s: rc %d:\n%s", runs[i][0], rc, out ? out : "");
        free(out);
    }
}

static void test_predict_command(void **state) {
    (void)state;
    const char *log = tu_path("predict.jsonl"), *svg = tu_path("predict.svg"), *prof = tu_path("lenet.profile");
    char *out = NULL;
    int rc = tu_run_dptrain(&out, "predict --dataset synthetic --shape 1x28x28 --samples 640 --batch-size 64 "
                                  "--replicas 3 --threads 2 --topology nvlink4,pcie4 --log %s --plot %s "
                                  "--save-profile %s", log, svg, prof);
    if (rc != 0) fail_msg("predict failed (%d): %s", rc, out ? out : "");
    assert_true(tu_contains(out, "predicted on nvlink4"));
    free(out);
    char *text = NULL;
    assert_int_equal(tu_sh(&text, "grep -c '\"event\":\"predict\"' %s", log), 0);
    assert_int_equal(atoi(text), 2 * 2 * 5); /* 2 topologies x 2 modes x N = 1, 2, 3, 4, 8 */
    free(text);
    assert_int_equal(tu_sh(&text, "grep '\"topology\":\"pcie4\",\"mode\":\"dp\",\"devices\":4' %s", log), 0);
    const char *fields[] = {"\"step_s\":", "\"epoch_s\":", "\"speedup\":", "\"compute_s\":", "\"exposed_comm_s\":",
                            "\"serial_s\":", "\"host_s\":"};
    for (int i = 0; i < 7; i++) assert_true(tu_contains(text, fields[i]));
    free(text);
    assert_int_equal(tu_sh(NULL, "grep -q '<svg' %s && grep -q 'nvlink4 DP' %s", svg, svg), 0);
    /* the saved profile predicts again without a timing run */
    rc = tu_run_dptrain(&out, "predict --dataset synthetic --shape 1x28x28 --samples 640 --batch-size 64 "
                              "--topology host --compute %s", prof);
    if (rc != 0) fail_msg("predict --compute failed (%d): %s", rc, out ? out : "");
    free(out);
    /* --compute DEVICE: a device's profile per model (fake-lenet.profile) is found before one for
       all models (fake.profile, which this one is not: it would be refused as another model's) */
    const char *presets = tu_path("presets");
    const char *bin = getenv("DPTRAIN") ? getenv("DPTRAIN") : "./dptrain";
    assert_int_equal(tu_sh(NULL, "mkdir -p %s && cp %s %s/fake-lenet.profile && sed 's/^model lenet/model resnet18/' "
                                 "%s > %s/fake.profile", presets, prof, presets, prof, presets), 0);
    rc = tu_sh(&out, "DPTRAIN_PRESETS=%s %s predict --dataset synthetic --shape 1x28x28 --samples 640 --batch-size 64 "
                     "--topology nvlink4 --compute fake", presets, bin);
    if (rc != 0) fail_msg("--compute fake (fake-lenet.profile) failed (%d): %s", rc, out ? out : "");
    free(out);
    rc = tu_sh(&out, "DPTRAIN_PRESETS=%s %s predict --dataset synthetic --topology nvlink4 --compute nosuch", presets, bin);
    assert_int_equal(rc, 2);
    assert_true(tu_contains(out, "nosuch-lenet.profile or nosuch.profile"));
    free(out);
    /* a PNG is the same drawing rasterized (with librsvg); a name that is neither is refused
       before any timing run */
    const char *png = tu_path("predict.png");
    rc = tu_run_dptrain(&out, "predict --dataset synthetic --shape 1x28x28 --samples 640 --batch-size 64 "
                              "--topology pcie4 --compute %s --plot %s", prof, png);
#if DP_HAVE_RSVG
    if (rc != 0) fail_msg("--plot F.png failed (%d): %s", rc, out ? out : "");
    /* the PNG signature, then IHDR's width and height: twice the SVG's 760 x 480 */
    assert_int_equal(tu_sh(NULL, "head -c 8 %s | od -An -tx1 | tr -d ' \\n' | grep -qx 89504e470d0a1a0a && "
                                 "[ \"$(od -An -tu1 -j16 -N8 %s | tr -s ' ')\" = ' 0 0 5 240 0 0 3 192' ]", png, png),
                     0);
#else
    assert_int_equal(rc, 2);
    assert_true(tu_contains(out, "librsvg2-dev"));
#endif
    free(out);
    rc = tu_run_dptrain(&out, "predict --dataset synthetic --topology pcie4 --plot %s.jpg", png);
    assert_int_equal(rc, 2);
    assert_true(tu_contains(out, "name an .svg or a .png file"));
    free(out);
    rc = tu_run_dptrain(&out, "predict --dataset synthetic --topology nosuch");
    assert_int_equal(rc, 2);
    assert_true(tu_contains(out, "topology 'nosuch'"));
    free(out);
    rc = tu_run_dptrain(&out, "predict --dataset synthetic");
    assert_int_equal(rc, 2);
    assert_true(tu_contains(out, "--topology"));
    free(out);
}

/* predict --compute builds what it predicts from (the model's shapes, parameters and buckets),
 * not a trainer: report 004's ResNet-18 rows (224x224, a global batch of 256) took 18 GB for the
 * activations and data of a run that never trains. Under a 2 GB address-space limit both rows
 * predict, and give what the profile's own numbers give. */
static void test_predict_memory(void **state) {
    (void)state;
    static const char *const rows[][2] = {{"nvlink4", "h100-resnet18"}, {"pcie4", "rtx4090-resnet18"}};
    const char *log = tu_path("resnet18.jsonl");
    for (int i = 0; i < 2; i++) {
        char *out = NULL;
        const char *bin = getenv("DPTRAIN") ? getenv("DPTRAIN") : "./dptrain";
        /* a sanitizer maps terabytes of shadow memory: the limit is for the plain build */
#ifdef DP_TEST_SANITIZED
        const char *limit = "true";
#else
        const char *limit = "ulimit -v 2097152";
#endif
        int rc = tu_sh(&out, "%s && %s predict --model resnet18 --dataset synthetic --shape 3x224x224 --samples 2560 "
                             "--batch-size 256 --topology %s --compute %s/%s.profile --log %s --quiet",
                       limit, bin, rows[i][0], DP_SOURCE_PRESETS, rows[i][1], log);
        if (rc != 0) fail_msg("%s: rc %d: %s", rows[i][0], rc, out ? out : "");
        free(out);
        char *text = NULL;
        assert_int_equal(tu_sh(&text, "grep -c '\"event\":\"predict\"' %s", log), 0);
        assert_int_equal(atoi(text), 2 * 4); /* DDP and DP on 1, 2, 4, 8 */
        free(text);
        assert_int_equal(tu_sh(&text, "grep '\"event\":\"config\"' %s", log), 0);
        assert_true(tu_contains(text, "\"params\":11181642"));
        assert_true(tu_contains(text, "\"steps_per_epoch\":10"));
        free(text);
    }
}

/* A measured single-device step, the model's split and the framework's costs, by hand
 * (framework.h): one device's model step 2 ms of which 1.5 ms compute; measured 6.5 ms, so the
 * framework's compute is 6 ms, and a device with a quarter of the samples computes 1.5 ms. */
static void test_framework_step(void **state) {
    (void)state;
    const dp_framework f = {.ddp_step_s = 100e-6, .ddp_bucket_s = 20e-6, .dp_step_s = 500e-6, .dp_device_s = 50e-6,
                            .dp_tensor_s = 2e-6};
    const dp_framework_shape sh = {.tensors = 10, .buckets = 3};
    const dp_prediction one = {.step_s = 2e-3, .compute_s = 1.5e-3, .host_s = 0.1e-3};
    const dp_prediction four = {.step_s = 0.8e-3, .compute_s = 0.5e-3, .host_s = 0.01e-3, .exposed_comm_s = 0.29e-3};
    dp_prediction o;
    /* one device: the measured step itself, nothing added */
    assert_int_equal(dp_framework_step(&f, &sh, DP_PREDICT_DDP, 1, 1.0, 6.5e-3, &one, &one, 100, &o), DP_OK);
    assert_float_equal(o.step_s, 6.5e-3, 1e-12);
    assert_float_equal(o.epoch_s, 0.65, 1e-9);
    /* DDP on 4, a quarter each: 6 / 4 + 0.3 + (100 + 3 x 20) us = 1.96 ms */
    assert_int_equal(dp_framework_step(&f, &sh, DP_PREDICT_DDP, 4, 0.25, 6.5e-3, &one, &four, 100, &o), DP_OK);
    assert_float_equal(o.compute_s, 1.5e-3, 1e-12);
    assert_float_equal(o.step_s, 1.96e-3, 1e-12);
    assert_float_equal(o.host_s, 0.17e-3, 1e-12);
    assert_float_equal(o.exposed_comm_s, 0.29e-3, 1e-15);
    assert_float_equal(o.epoch_s, 0.196, 1e-9);
    /* DDP on 4 with the measured batch each (4 times the global batch): 6 + 0.3 + 0.16 ms */
    assert_int_equal(dp_framework_step(&f, &sh, DP_PREDICT_DDP, 4, 1.0, 6.5e-3, &one, &four, 100, &o), DP_OK);
    assert_float_equal(o.step_s, 6.46e-3, 1e-12);
    /* DataParallel on 4: 1.5 + 0.3 + (500 + 4 x (50 + 10 x 2)) us = 2.58 ms */
    assert_int_equal(dp_framework_step(&f, &sh, DP_PREDICT_DP, 4, 0.25, 6.5e-3, &one, &four, 100, &o), DP_OK);
    assert_float_equal(o.step_s, 2.58e-3, 1e-12);
    /* a measured step below what the model puts outside compute cannot be this run's */
    assert_int_equal(dp_framework_step(&f, &sh, DP_PREDICT_DDP, 4, 0.25, 0.4e-3, &one, &four, 100, &o), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "is shorter than the model's own time per step on one device"));
    /* nor below the host's time (launches inside compute) plus the loss and the optimizer: 0.8 + 0.3 ms */
    const dp_prediction gpu = {.step_s = 2e-3, .compute_s = 2e-3, .host_s = 0.8e-3, .loss_opt_s = 0.3e-3};
    assert_int_equal(dp_framework_step(&f, &sh, DP_PREDICT_DDP, 4, 0.25, 1.0e-3, &gpu, &four, 100, &o), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "the measured step, 0.001 s, is shorter than the model's own time per step "
                                             "on one device outside the forward and backward, 0.0011 s (host 0.0008 s, "
                                             "loss and optimizer 0.0003 s)"));
    assert_int_equal(dp_framework_step(&f, &sh, DP_PREDICT_DDP, 4, 0.25, 1.1e-3, &gpu, &four, 100, &o), DP_OK);
}

/* A .framework file: every cost required, each a finite number >= 0, each once; NAME finds
 * NAME.framework next to the presets (the shipped pytorch-cpu). */
static void test_framework_file(void **state) {
    (void)state;
    dp_framework f;
    const char *good = "name t\nddp_step_us 100 # c\nddp_bucket_us 20\ndp_step_us 500\ndp_device_us 50\n"
                       "dp_tensor_us 2\n";
    assert_int_equal(dp_framework_parse(good, "g", &f), DP_OK);
    assert_string_equal(f.name, "t");
    assert_float_equal(f.ddp_step_s, 100e-6, 1e-15);
    assert_float_equal(f.dp_tensor_s, 2e-6, 1e-15);
    static const char *const bad[][2] = {
        {"name t\nddp_step_us 100\nddp_bucket_us 20\ndp_step_us 500\ndp_device_us 50\n", "b: no 'dp_tensor_us' line"},
        {"ddp_step_us 100\nddp_bucket_us 20\ndp_step_us 500\ndp_device_us 50\ndp_tensor_us 2\n", "b: no 'name' line"},
        {"name t\nddp_step_us -1\n", "b:2"},
        {"name t\nddp_step_us nan\n", "b:2"},
        {"name t\nddp_step_us inf\n", "b:2"},
        {"name t\nddp_step_us 1\nddp_step_us 2\n", "b:3"},
        {"name t\nddp_steps_us 1\n", "unknown key 'ddp_steps_us'"},
        {"name t\nddp_step_us\n", "expected 'key value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (dp_framework_parse(bad[i][0], "b", &f) != DP_ERR_FORMAT) fail_msg("case %zu accepted", i);
        if (!tu_contains(dp_last_error(), bad[i][1])) fail_msg("case %zu: %s", i, dp_last_error());
    }
    assert_int_equal(dp_framework_load("pytorch-cpu", &f), DP_OK);
    assert_string_equal(f.name, "pytorch-cpu");
    assert_int_equal(dp_framework_load("nosuch", &f), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "no nosuch.framework in"));
}

/* A --framework or --compute path of more than 511 bytes is the file read, not its first 511
 * bytes (they were cut into a 512-byte buffer, and a file of that prefix was read in its place). */
static void test_long_paths(void **state) {
    (void)state;
    const char *root = tu_fresh_dir("longpath");
    char d1[201], d2[256], rel[700], full[1024], prefix[512];
    memset(d1, 'd', 200), d1[200] = '\0';
    /* the prefix file is root/d1/d2/ and 30 x's: 511 bytes; the full name is 600 */
    const int n2 = 511 - 30 - (int)strlen(root) - 1 - 200 - 1 - 1;
    assert_true(n2 > 0 && n2 < 256);
    memset(d2, 'e', (size_t)n2), d2[n2] = '\0';
    snprintf(rel, sizeof rel, "%s/%s/%0*d", d1, d2, 600 - 511 + 30, 0);
    for (char *c = strrchr(rel, '/') + 1; *c; c++) *c = 'x';
    snprintf(full, sizeof full, "%s/%s", root, rel);
    assert_int_equal((int)strlen(full), 600);
    memcpy(prefix, full, 511), prefix[511] = '\0'; /* what the old 512-byte copy named */
    tu_put(root, rel, "name full\nddp_step_us 1\nddp_bucket_us 1\ndp_step_us 1\ndp_device_us 1\ndp_tensor_us 1\n");
    tu_write_file(prefix, "name prefix\nddp_step_us 2\nddp_bucket_us 2\ndp_step_us 2\ndp_device_us 2\ndp_tensor_us 2\n",
                  strlen("name prefix\nddp_step_us 2\nddp_bucket_us 2\ndp_step_us 2\ndp_device_us 2\ndp_tensor_us 2\n"));
    dp_framework f;
    if (dp_framework_load(full, &f) != DP_OK) fail_msg("%s", dp_last_error());
    assert_string_equal(f.name, "full");
    assert_string_equal(f.path, full);
    /* the same for a compute profile: its device names the file read */
    dp_profile *p = synthetic_profile(), *q = calloc(1, sizeof *q);
    assert_non_null(q);
    snprintf(p->device, sizeof p->device, "full");
    assert_int_equal(dp_profile_save("test", full, p), DP_OK);
    snprintf(p->device, sizeof p->device, "prefix");
    assert_int_equal(dp_profile_save("test", prefix, p), DP_OK);
    if (dp_profile_load(full, NULL, q) != DP_OK) fail_msg("%s", dp_last_error());
    assert_string_equal(q->device, "full");
    assert_string_equal(q->path, full);
    free(p), free(q);
}

/* predict --measured-epoch: the one-device row is the measured epoch, each refusal is one line
 * naming the flag, exit 2, before any data is read. */
static void test_predict_measured(void **state) {
    (void)state;
    const char *log = tu_path("measured.jsonl"), *fw = tu_path("half.framework");
    const char *run = "predict --model lenet-bn --dataset synthetic --shape 3x32x32 --samples 50000 --topology pcie4 "
                      "--compute " DP_SOURCE_PRESETS "/rtx4090-lenet-bn.profile";
    char *out = NULL, *text = NULL;
    int rc = tu_run_dptrain(&out, "%s --batch-size 64 --measured-epoch 3.29 --framework pytorch-cpu --log %s --quiet",
                            run, log);
    if (rc != 0) fail_msg("rc %d: %s", rc, out ? out : "");
    free(out);
    assert_int_equal(tu_sh(&text, "grep '\"mode\":\"ddp\",\"devices\":1,' %s", log), 0);
    assert_true(tu_contains(text, "\"epoch_s\":3.29,") && tu_contains(text, "\"speedup\":1,"));
    free(text);
    /* --measured-step at the same batch: 782 steps of 3.29 / 782 s */
    rc = tu_run_dptrain(&out, "%s --batch-size 256 --measured-step 0.0042071611 --measured-batch 64 --framework "
                              "pytorch-cpu --log %s --quiet", run, log);
    if (rc != 0) fail_msg("rc %d: %s", rc, out ? out : "");
    free(out);
    assert_int_equal(tu_sh(&text, "grep -c '\"event\":\"predict\"' %s", log), 0);
    assert_int_equal(atoi(text), 8);
    free(text);
    tu_write_file(fw, "name half\nddp_step_us 1\n", strlen("name half\nddp_step_us 1\n"));
    const char *const refused[][2] = {
        {"--measured-epoch -1 --framework pytorch-cpu", "--measured-epoch"},
        {"--measured-epoch 0 --framework pytorch-cpu", "--measured-epoch"},
        {"--measured-epoch nan --framework pytorch-cpu", "--measured-epoch"},
        {"--measured-epoch inf --framework pytorch-cpu", "--measured-epoch"},
        {"--measured-step -0.5 --framework pytorch-cpu", "--measured-step"},
        /* below the model's own host, loss and optimizer time on one device (0 was the floor on a GPU) */
        {"--measured-step 1e-300 --framework pytorch-cpu", "--measured-step: the measured step, 1e-300 s, is shorter"},
        {"--measured-epoch 1e-9 --framework pytorch-cpu", "--measured-epoch: the measured step, 1.27877e-12 s, is shorter"},
        {"--measured-epoch 3.29", "--measured-epoch needs --framework"},
        {"--framework pytorch-cpu", "--framework needs --measured-epoch"},
        {"--measured-batch 64", "--measured-batch needs --measured-epoch"},
        {"--measured-epoch 3 --measured-step 0.1 --framework pytorch-cpu", "not both"},
        {"--measured-epoch 3.29 --framework nosuch", "--framework nosuch: no nosuch.framework"},
        {"--measured-epoch 3.29 --measured-batch 0 --framework pytorch-cpu", "--measured-batch"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        rc = tu_run_dptrain(&out, "%s --batch-size 64 %s", run, refused[i][0]);
        if (rc != 2 || !tu_contains(out, refused[i][1])) fail_msg("'%s': rc %d: %s", refused[i][0], rc, out ? out : "");
        free(out);
    }
    /* a profile missing its costs, and named before a data set that is not there */
    rc = tu_run_dptrain(&out, "predict --dataset mnist --data /nonexistent/dptrain-data --topology pcie4 --compute h100 "
                              "--measured-epoch 3 --framework %s", fw);
    if (rc != 2 || !tu_contains(out, "no 'ddp_bucket_us' line") || tu_contains(out, "dptrain-data"))
        fail_msg("half a framework file: rc %d: %s", rc, out ? out : "");
    free(out);
}

/* A sim run with --predict records its collectives (the last step's go into the log) and predicts
 * from a profile it measures. */
static void test_run_records(void **state) {
    (void)state;
    const char *log = tu_path("run.jsonl"), *prof = tu_path("run.profile");
    char *out = NULL;
    int rc = tu_run_dptrain(&out, "train --dataset synthetic --shape 1x28x28 --samples 256 --batch-size 64 "
                                  "--replicas 2 --threads 2 --epochs 1 --mode dp --predict host --quiet --log %s "
                                  "--save-profile %s", log, prof);
    if (rc != 0) fail_msg("train --predict failed (%d): %s", rc, out ? out : "");
    free(out);
    char *text = NULL;
    assert_int_equal(tu_sh(&text, "grep '\"event\":\"collective\"' %s", log), 0);
    /* DataParallel's moves: replicate, input scatter, gather to the master, scatter back, reduce */
    assert_true(tu_contains(text, "\"index\":0,\"kind\":\"broadcast\",\"bytes\":177920"));
    assert_true(tu_contains(text, "\"index\":1,\"kind\":\"scatter\",\"bytes\":100352"));
    assert_true(tu_contains(text, "\"index\":2,\"kind\":\"gather\""));
    assert_true(tu_contains(text, "\"index\":3,\"kind\":\"scatter\""));
    assert_true(tu_contains(text, "\"index\":4,\"kind\":\"reduce\",\"bytes\":177920"));
    assert_false(tu_contains(text, "allgather"));
    assert_true(tu_contains(text, "\"algorithm\":\"ordered\""));
    free(text);
    assert_int_equal(tu_sh(NULL, "grep -q '\"event\":\"predict\",\"topology\":\"host\",\"mode\":\"dp\",\"devices\":2' %s",
                           log), 0);
    /* the row of the run's own lanes (8 samples, 2 threads) holds the run's per-node times: 4 steps */
    assert_int_equal(tu_sh(NULL, "grep -q '^device cpu-run' %s && grep -q '^row 8 2 4 ' %s", prof, prof), 0);
}

/* DDP buckets record the backward node after which they were ready. */
static void test_bucket_ready_node(void **state) {
    (void)state;
    const char *log = tu_path("ddp.jsonl");
    char *out = NULL;
    /* 1 KB buckets: LeNet's fc3 (850 floats) alone is ready first, after the last node's backward */
    int rc = tu_run_dptrain(&out, "train --dataset synthetic --shape 1x28x28 --samples 128 --batch-size 64 "
                                  "--replicas 2 --threads 2 --epochs 1 --bucket-mb 0.001 --predict host --quiet --log %s",
                            log);
    if (rc != 0) fail_msg("train failed (%d): %s", rc, out ? out : "");
    free(out);
    char *text = NULL;
    assert_int_equal(tu_sh(&text, "grep '\"kind\":\"allreduce\"' %s | head -1", log), 0);
    assert_true(tu_contains(text, "\"ready_node\":11"));
    free(text);
    assert_int_equal(tu_sh(&text, "grep '\"kind\":\"allreduce\"' %s | tail -1", log), 0);
    assert_true(tu_contains(text, "\"ready_node\":0"));
    free(text);
}

/* --no-overlap: the buckets are all-reduced after the last node (ready_node 0); every other collective of
 * the step, the BN buffers' broadcast that starts the next step's forward included, is -1. */
static void test_no_overlap_ready_node(void **state) {
    (void)state;
    const char *log = tu_path("no_overlap.jsonl");
    char *out = NULL;
    int rc = tu_run_dptrain(&out, "train --dataset synthetic --shape 1x28x28 --samples 128 --batch-size 64 "
                                  "--model lenet-bn --replicas 2 --threads 2 --epochs 1 --no-overlap --predict host "
                                  "--quiet --log %s",
                            log);
    if (rc != 0) fail_msg("train failed (%d): %s", rc, out ? out : "");
    free(out);
    char *text = NULL;
    assert_int_equal(tu_sh(&text, "grep '\"kind\":\"broadcast\"' %s | head -1", log), 0);
    assert_true(tu_contains(text, "\"ready_node\":-1"));
    free(text);
    assert_int_equal(tu_sh(&text, "grep '\"kind\":\"allreduce\"' %s | head -1", log), 0);
    assert_true(tu_contains(text, "\"ready_node\":0"));
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_collective_formulas),
        cmocka_unit_test(test_ddp_overlap),
        cmocka_unit_test(test_profile_interpolation),
        cmocka_unit_test(test_ddp_prediction),
        cmocka_unit_test(test_predict_memory),
        cmocka_unit_test(test_framework_step),
        cmocka_unit_test(test_framework_file),
        cmocka_unit_test(test_long_paths),
        cmocka_unit_test(test_predict_measured),
        cmocka_unit_test(test_dp_chain),
        cmocka_unit_test(test_sweep_speedup),
        cmocka_unit_test(test_cpu_lanes),
        cmocka_unit_test(test_topology_files),
        cmocka_unit_test(test_alpha_beta_fit),
        cmocka_unit_test(test_sync_wait),
        cmocka_unit_test(test_kind_fits_and_touch),
        cmocka_unit_test(test_gather_scatter),
        cmocka_unit_test(test_profile_on_a_device),
        cmocka_unit_test(test_profile_matches_run),
        cmocka_unit_test(test_predict_command),
        cmocka_unit_test(test_run_records),
        cmocka_unit_test(test_bucket_ready_node),
        cmocka_unit_test(test_no_overlap_ready_node),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
