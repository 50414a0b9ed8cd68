/* test_nccl_fakegpu.c: `--backend nccl --gpus` inside this process over fake GPUs (tests/fakegpu/):
 * one replica per fake GPU, each device with its own streams, workers and random delays, so the
 * executor's per-replica devices (kernels, lanes, staging, tree sums, downloads, and every
 * device's collective stream ordered around each collective) are checked the way a missing wait
 * would show on real GPUs, bitwise against the CPU sim. The NCCL test double is preloaded into
 * this test (tests/CMakeLists.txt) and told how to reach the fake GPUs' memory and streams
 * (dp_nccl_double_set_hooks): it starts a group's operations once their stream's earlier work is
 * done and lands what it received as writes queued on that stream, as NCCL's kernels would; the
 * fake GPUs' waits poll the backend's watch, as CUDA's do. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/nccl_memory.h"
#include "dp_config.h"
#include "fakegpu_util.h"
#include "trainrun.h"

#if DP_HAVE_NCCL

/* The hooks, or a skip where the double is not preloaded (a run outside ctest). */
static void hooks_or_skip(void) {
    void (*set)(void *(*)(const void *), void (*)(const void *), void (*)(const void *, void *, const void *, size_t)) =
        NULL;
    *(void **)&set = dlsym(RTLD_DEFAULT, "dp_nccl_double_set_hooks");
    if (!set) {
        fprintf(stderr, "the NCCL test double is not preloaded (LD_PRELOAD=.../libdp_nccl_double.so)\n");
        skip();
    }
    set(dp_fakegpu_host_address, dp_fakegpu_stream_sync, dp_fakegpu_stream_write);
    FGT_OK(dp_fakegpu_register());
}

/* n fake GPUs in this process against the CPU sim's n replicas, the same flags: bitwise, and
 * every replica holding the same parameters. */
static void gpus_equal_sim(const char *model, int n, dp_mode mode, int sync_bn, int accumulate) {
    hooks_or_skip();
    dp_config sim, gpus;
    tr_base_config(&sim, model);
    sim.device = "cpu", sim.replicas = n;
    sim.mode = mode, sim.sync_bn = sync_bn, sim.accumulate = accumulate, sim.max_steps = 8;
    gpus = sim;
    gpus.backend = "nccl", gpus.device = "fakegpu", gpus.replicas = 1, gpus.n_gpus = n;
    for (int i = 0; i < n; i++) gpus.gpus[i] = i;
    char what[160];
    snprintf(what, sizeof what, "%s, %d fake GPUs, %s%s%s", model, n, mode == DP_MODE_DP ? "dp" : "ddp",
             sync_bn ? ", --sync-bn" : "", accumulate > 1 ? ", --accumulate 2" : "");
    tr_result a = tr_run(&sim), b = tr_run(&gpus);
    tr_assert_same(&b, &a, what);
    if (!b.all_equal) fail_msg("%s: the replicas' parameters differ", what);
    tr_free(&a), tr_free(&b);
}

static void test_ddp_on_2_and_4_fake_gpus(void **state) {
    (void)state;
    gpus_equal_sim("lenet", 2, DP_MODE_DDP, 0, 1);
    gpus_equal_sim("lenet", 4, DP_MODE_DDP, 0, 2);
}

static void test_dp_on_2_and_4_fake_gpus(void **state) {
    (void)state;
    gpus_equal_sim("lenet", 2, DP_MODE_DP, 0, 1);
    gpus_equal_sim("lenet-bn", 4, DP_MODE_DP, 0, 1);
}

static void test_sync_bn_on_2_and_4_fake_gpus(void **state) {
    (void)state;
    gpus_equal_sim("lenet-bn", 2, DP_MODE_DDP, 1, 1);
    gpus_equal_sim("lenet-bn", 4, DP_MODE_DDP, 1, 1);
}

/* `--gpus 0,1,2`: each GPU's backward kernels and optimizer step are queued by a host thread of its
 * own (a thread per GPU), no thread queues them on two GPUs, and the run stays bitwise the sim's
 * (the tests above). With one host thread driving every GPU, each kernel kind came from that one
 * thread on all three. Evaluation's forward passes stay on the calling thread: only kernels that
 * evaluation does not launch are checked. */
static void test_a_host_thread_per_gpu(void **state) {
    (void)state;
    hooks_or_skip();
    enum { NG = 3 };
    dp_config c;
    tr_base_config(&c, "lenet");
    c.backend = "nccl", c.device = "fakegpu", c.replicas = 1, c.n_gpus = NG, c.max_steps = 4;
    for (int i = 0; i < NG; i++) c.gpus[i] = i;
    c.log_path = tu_path("threads.jsonl");
    dp_trainer *t = NULL;
    FGT_OK(dp_trainer_create(&c, &t));
    FGT_OK(dp_trainer_train(t));
    static const char *const kernels[] = {"conv2d_backward", "linear_backward", "sgd"};
    for (int k = 0; k < 3; k++) {
        pthread_t ids[NG][8];
        int n[NG];
        for (int g = 0; g < NG; g++) {
            n[g] = dp_fakegpu_launch_threads(t->devs[g], kernels[k], ids[g], 8);
            print_message("%s on GPU %d: queued by %d host thread%s\n", kernels[k], g, n[g], n[g] == 1 ? "" : "s");
            if (n[g] < 1 || n[g] > 8) fail_msg("%s on GPU %d: %d launching threads", kernels[k], g, n[g]);
        }
        for (int g = 0; g < NG; g++)
            for (int h = g + 1; h < NG; h++)
                for (int i = 0; i < n[g]; i++)
                    for (int j = 0; j < n[h]; j++)
                        if (pthread_equal(ids[g][i], ids[h][j]))
                            fail_msg("%s: one host thread queued it on GPU %d and on GPU %d (a thread per GPU "
                                     "expected)", kernels[k], g, h);
    }
    FGT_OK(dp_trainer_close(t, DP_OK));
    dp_trainer_destroy(t);
}

/* The fake GPUs' blocking calls (waits, downloads, frees: dp_fakegpu_host_waits) during a run of
 * `steps` DDP steps at n fake GPUs. */
static unsigned long host_waits_of(int n, int accumulate, int steps) {
    dp_config c;
    tr_base_config(&c, "lenet");
    c.backend = "nccl", c.device = "fakegpu", c.replicas = 1, c.n_gpus = n, c.max_steps = steps;
    c.accumulate = accumulate;
    for (int i = 0; i < n; i++) c.gpus[i] = i;
    const unsigned long before = dp_fakegpu_host_waits();
    tr_result r = tr_run(&c);
    tr_free(&r);
    return dp_fakegpu_host_waits() - before;
}

/* At most one host round trip a step (the step metrics' download, which also carries the stop
 * flags), with two micro-steps a step too (two copies of the upload staging): a run of 12 steps
 * against one of 4, so that start-up, the evaluation and the test's own reads cancel out.
 * Downloading the lanes' losses before the metrics' all-reduce made 5 at 2 GPUs. */
static void test_one_host_round_trip_a_step(void **state) {
    (void)state;
    hooks_or_skip();
    static const int cases[][2] = {{2, 1}, {4, 1}, {4, 2}}; /* fake GPUs, --accumulate */
    for (int i = 0; i < 3; i++) {
        const int n = cases[i][0], acc = cases[i][1];
        const unsigned long few = host_waits_of(n, acc, 4), more = host_waits_of(n, acc, 12);
        const double per_step = ((double)more - (double)few) / 8.0;
        print_message("%d fake GPUs, --accumulate %d: %.2f host round trips a step (%lu over 4 steps, %lu over "
                      "12)\n", n, acc, per_step, few, more);
        if (more < few || per_step > 1.0)
            fail_msg("%d fake GPUs, --accumulate %d: %.2f host round trips a step, more than 1 (%lu over 4 steps, "
                     "%lu over 12)", n, acc, per_step, few, more);
    }
}

/* lenet-bn with --sync-bn and buckets of a few hundred floats at 2 fake GPUs: every kind of sum
 * the NCCL backend runs on device buffers (buckets, BN sums, the step metrics). */
static void sums_config(dp_config *c, int steps) {
    tr_base_config(c, "lenet-bn");
    c->backend = "nccl", c->device = "fakegpu", c->replicas = 1, c->n_gpus = 2, c->max_steps = steps;
    c->gpus[0] = 0, c->gpus[1] = 1;
    c->sync_bn = 1, c->bucket_mb = 0.001;
}

static unsigned long allocs_during(int steps) {
    dp_config c;
    sums_config(&c, steps);
    const unsigned long before = dp_fakegpu_allocs();
    tr_result r = tr_run(&c);
    tr_free(&r);
    return dp_fakegpu_allocs() - before;
}

/* The NCCL scratch is reserved at set-up for the run's largest sum and never grows: no device
 * allocation after set-up (a run of 10 steps allocates as much as one of 2), and a reserve sized
 * wrongly (the trainer's test hook) is an internal error naming the collective, not a growth. */
static void test_scratch_reserved_at_start(void **state) {
    (void)state;
    hooks_or_skip();
    const unsigned long few = allocs_during(2), more = allocs_during(10);
    print_message("device allocations: %lu in a run of 2 steps, %lu in one of 10\n", few, more);
    if (more != few) fail_msg("%lu device allocations in 8 more steps (%lu over 2 steps, %lu over 10)", more - few, few, more);

    dp_config c;
    sums_config(&c, 4);
    c.test.reserve_floats = 8;
    c.log_path = tu_path("short_reserve.jsonl");
    dp_trainer *t = NULL;
    dp_status s = dp_trainer_create(&c, &t);
    const unsigned long before = dp_fakegpu_allocs();
    if (s == DP_OK) s = dp_trainer_run(t);
    const unsigned long grown = dp_fakegpu_allocs() - before;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", s == DP_OK ? "" : dp_last_error());
    dp_trainer_destroy(t);
    print_message("a reserve of 8 floats: %s\n", msg);
    if (s != DP_ERR_INTERNAL || !tu_contains(msg, "the all-reduce of") || !tu_contains(msg, "reserved at start"))
        fail_msg("a reserve of 8 floats: status %d, %lu device allocations during the run, '%s' (expected an internal "
                 "error naming the all-reduce)", (int)s, grown, msg);
}

/* `--backend nccl` at one rank on one fake GPU: no step calls NCCL, so the steps are recorded and
 * replayed as the sim's are (the backend says it is capturable at world 1), bitwise equal to the
 * CPU sim; before, every nccl step ran eagerly. */
static void test_world_1_records_and_replays_graphs(void **state) {
    (void)state;
    hooks_or_skip();
    dp_config sim, one;
    tr_base_config(&sim, "lenet");
    sim.device = "cpu", sim.replicas = 1;
    one = sim;
    one.backend = "nccl", one.device = "fakegpu", one.n_gpus = 1, one.gpus[0] = 0;
    tr_result a = tr_run(&sim);
    const unsigned long before = dp_fakegpu_replays();
    tr_result b = tr_run(&one);
    const unsigned long replays = dp_fakegpu_replays() - before;
    print_message("nccl at world 1 on a fake GPU: %lu graph replays in %ld steps\n", replays, one.max_steps);
    tr_assert_same(&b, &a, "nccl at world 1 on a fake GPU, graphs on");
    if (replays < (unsigned long)one.max_steps / 2)
        fail_msg("nccl at world 1: %lu graph replays in %ld steps (the steps ran eagerly)", replays, one.max_steps);
    tr_free(&a), tr_free(&b);
}

/* ---- world 2, one fake GPU a process, steps recorded with their collectives (DPTRAIN_NCCL_GRAPHS) */

/* What a rank of world2_run writes for the parent: its counts, then replica 0's parameters and
 * momentum. */
typedef struct {
    unsigned long host_waits, double_syncs, replays, aborts_in_capture;
    size_t n;
    int status;
    char msg[1024];
} w2_head;

/* The double's count of a hook (NULL where the double lacks it: 0). */
static unsigned long double_count(const char *name) {
    unsigned long (*f)(void) = NULL;
    *(void **)&f = dlsym(RTLD_DEFAULT, name);
    return f ? f() : 0;
}

/* A rank of world 2 launched torchrun-style by world2_run: lenet on fake GPU 0 of its own, the
 * double in device mode where DP_NCCL_DOUBLE_DEVICE=1; what it saw into `out`. */
static int world2_child(const char *out) {
    void (*dev)(void (*)(const void *, void (*)(void *), const void *, size_t), int (*)(const void *)) = NULL;
    *(void **)&dev = dlsym(RTLD_DEFAULT, "dp_nccl_double_set_device_hooks");
    void (*set)(void *(*)(const void *), void (*)(const void *), void (*)(const void *, void *, const void *, size_t)) =
        NULL;
    *(void **)&set = dlsym(RTLD_DEFAULT, "dp_nccl_double_set_hooks");
    if (!set || !dev || dp_fakegpu_register() != DP_OK) return 3;
    set(dp_fakegpu_host_address, dp_fakegpu_stream_sync, dp_fakegpu_stream_write);
    dev(dp_fakegpu_stream_call, dp_fakegpu_stream_capturing);
    dp_config c;
    tr_base_config(&c, "lenet");
    c.backend = "nccl", c.device = "fakegpu", c.replicas = 1, c.n_gpus = 1, c.gpus[0] = 0;
    c.timeout_s = 20;
    char log[64];
    snprintf(log, sizeof log, "world2-%s.jsonl", getenv("RANK") ? getenv("RANK") : "x");
    c.log_path = tu_path(log);
    w2_head h;
    memset(&h, 0, sizeof h);
    const unsigned long w0 = dp_fakegpu_host_waits(), r0 = dp_fakegpu_replays(), s0 = double_count("dp_nccl_double_host_syncs");
    dp_trainer *t = NULL;
    dp_status s = dp_trainer_create(&c, &t);
    if (s == DP_OK) s = dp_trainer_train(t);
    if (t) s = dp_trainer_close(t, s);
    float *params = NULL, *mom = NULL;
    h.aborts_in_capture = double_count("dp_nccl_double_aborts_in_capture");
    if (s == DP_OK) {
        h.n = t->model.params.n;
        params = malloc(h.n * sizeof(float)), mom = malloc(h.n * sizeof(float));
        const dp_dev *d = dp_exec_replica(t->ex, 0)->dev;
        if (!params || !mom || d->download(d, params, dp_exec_replica(t->ex, 0)->params, h.n * sizeof(float)) != DP_OK ||
            d->download(d, mom, dp_exec_replica(t->ex, 0)->momentum, h.n * sizeof(float)) != DP_OK)
            s = DP_ERR_INTERNAL;
    }
    /* counted before the test's own downloads */
    h.host_waits = dp_fakegpu_host_waits() - w0 - (s == DP_OK ? 2 : 0), h.replays = dp_fakegpu_replays() - r0;
    h.double_syncs = double_count("dp_nccl_double_host_syncs") - s0;
    h.status = (int)s;
    if (s != DP_OK) snprintf(h.msg, sizeof h.msg, "%s", dp_last_error());
    FILE *f = fopen(out, "wb");
    if (!f || fwrite(&h, sizeof h, 1, f) != 1 ||
        (s == DP_OK && (fwrite(params, sizeof *params, h.n, f) != h.n || fwrite(mom, sizeof *mom, h.n, f) != h.n)) ||
        fclose(f))
        s = DP_ERR_IO;
    dp_trainer_destroy(t);
    free(params), free(mom);
    return s == DP_OK ? 0 : 1;
}

typedef struct {
    w2_head h[2];
    float *params[2], *mom[2];
    int rc;
} w2_result;

/* Two ranks of this program (world2_child) launched torchrun-style with the environment `env`. */
static w2_result world2_run(const char *env) {
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = '\0';
    const int port = 20000 + (int)(getpid() * 7919u % 9000u) + (int)(time(NULL) % 900);
    char *out = NULL;
    const char *f0 = tu_path("world2-0.bin"), *f1 = tu_path("world2-1.bin");
    char path0[4096], path1[4096];
    snprintf(path0, sizeof path0, "%s", f0), snprintf(path1, sizeof path1, "%s", f1);
    unlink(path0), unlink(path1);
    w2_result w;
    memset(&w, 0, sizeof w);
    const char *ranks = "WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1";
    w.rc = tu_sh(&out, "( %s %s RANK=0 LOCAL_RANK=0 CUDA_VISIBLE_DEVICES=0 MASTER_PORT=%d timeout -s KILL 900 '%s' "
                 "world2-child '%s' & p=$!; %s %s RANK=1 LOCAL_RANK=1 CUDA_VISIBLE_DEVICES=1 MASTER_PORT=%d timeout -s "
                 "KILL 900 '%s' world2-child '%s'; b=$?; wait $p; a=$?; exit $((a * 16 + b)) ) 2>&1",
                 ranks, env, port, self, path0, ranks, env, port, self, path1);
    const char *paths[2] = {path0, path1};
    for (int r = 0; r < 2; r++) {
        FILE *f = fopen(paths[r], "rb");
        if (!f || fread(&w.h[r], sizeof w.h[r], 1, f) != 1) {
            if (f) fclose(f);
            fail_msg("world 2 (%s): rank %d wrote no result (exit %d):\n%s", env, r, w.rc, out ? out : "");
        }
        if (w.h[r].status == 0) {
            w.params[r] = malloc(w.h[r].n * sizeof(float)), w.mom[r] = malloc(w.h[r].n * sizeof(float));
            assert_non_null(w.params[r]), assert_non_null(w.mom[r]);
            if (fread(w.params[r], sizeof(float), w.h[r].n, f) != w.h[r].n ||
                fread(w.mom[r], sizeof(float), w.h[r].n, f) != w.h[r].n)
                fail_msg("world 2 (%s): rank %d's result is short", env, r);
        }
        fclose(f);
    }
    if (w.rc != 0 && w.h[0].status == 0 && w.h[1].status == 0)
        fail_msg("world 2 (%s): exit %d:\n%s", env, w.rc, out ? out : "");
    free(out);
    return w;
}

static void w2_free(w2_result *w) {
    for (int r = 0; r < 2; r++) free(w->params[r]), free(w->mom[r]);
}

/* Both ranks bitwise equal to the CPU sim's two replicas: parameters and momentum. */
static void w2_assert_sim(const w2_result *w, const tr_result *sim, const char *what) {
    for (int r = 0; r < 2; r++) {
        if (w->h[r].status != 0) fail_msg("%s: rank %d failed: %s", what, r, w->h[r].msg);
        if (w->h[r].n != sim->n || memcmp(w->params[r], sim->params, sim->n * sizeof(float)) != 0 ||
            memcmp(w->mom[r], sim->momentum, sim->n * sizeof(float)) != 0)
            fail_msg("%s: rank %d's parameters or momentum differ from the sim's", what, r);
    }
}

/* World 2 at one fake GPU a process, the double in device mode (its groups run in stream order,
 * recorded into the step graphs): with DPTRAIN_NCCL_GRAPHS=on the steps are recorded and replayed
 * with their collectives, bitwise equal to the CPU sim's two replicas, and the host waits less a
 * step than eagerly (there, the double holds the host at each group until its stream is done). */
static void test_world_2_records_collectives(void **state) {
    (void)state;
    hooks_or_skip();
    dp_config sim;
    tr_base_config(&sim, "lenet");
    sim.device = "cpu", sim.replicas = 2;
    tr_result a = tr_run(&sim);
    w2_result eager = world2_run("DPTRAIN_NCCL_GRAPHS=off");
    w2_assert_sim(&eager, &a, "world 2, eager");
    w2_result graphs = world2_run("DPTRAIN_NCCL_GRAPHS=on DP_NCCL_DOUBLE_DEVICE=1");
    w2_assert_sim(&graphs, &a, "world 2, graphs on");
    const double steps = (double)sim.max_steps;
    for (int r = 0; r < 2; r++) {
        const double we = (double)(eager.h[r].host_waits + eager.h[r].double_syncs) / steps,
                     wg = (double)(graphs.h[r].host_waits + graphs.h[r].double_syncs) / steps;
        print_message("rank %d: eager %.2f host waits a step (%lu device, %lu in the double), %lu replays; graphs on "
                      "%.2f (%lu, %lu), %lu replays in %ld steps\n", r, we, eager.h[r].host_waits,
                      eager.h[r].double_syncs, eager.h[r].replays, wg, graphs.h[r].host_waits,
                      graphs.h[r].double_syncs, graphs.h[r].replays, sim.max_steps);
        if (graphs.h[r].replays < (unsigned long)sim.max_steps / 2)
            fail_msg("world 2, graphs on: rank %d replayed %lu graphs in %ld steps (the steps ran eagerly)", r,
                     graphs.h[r].replays, sim.max_steps);
        if (eager.h[r].replays != 0) fail_msg("world 2, eager: rank %d replayed %lu graphs", r, eager.h[r].replays);
        if (wg >= we) fail_msg("world 2: rank %d waits %.2f times a step with graphs, %.2f eagerly", r, wg, we);
    }
    w2_free(&eager), w2_free(&graphs), tr_free(&a);
}

/* An NCCL call that fails while its step is being recorded (the double's capture-error fault on
 * rank 1): the communicators are not aborted inside the open capture (ncclCommAbort's frees and
 * synchronisations would break it on CUDA) but after it, by the teardown; both ranks end with the
 * failure named. Aborting at once counted an abort inside the capture. */
static void test_abort_waits_for_the_capture_to_end(void **state) {
    (void)state;
    hooks_or_skip();
    w2_result w = world2_run("DPTRAIN_NCCL_GRAPHS=on DP_NCCL_DOUBLE_DEVICE=1 DP_NCCL_DOUBLE_FAULT=capture-error@1:2");
    for (int r = 0; r < 2; r++)
        print_message("rank %d: status %d, %lu aborts inside a capture: %s\n", r, w.h[r].status,
                      w.h[r].aborts_in_capture, w.h[r].msg);
    if (w.h[1].status == 0 || !tu_contains(w.h[1].msg, "injected fault") || w.h[0].status == 0)
        fail_msg("the injected fault during the capture did not end both ranks (statuses %d, %d): %s", w.h[0].status,
                 w.h[1].status, w.h[1].msg);
    if (w.h[0].aborts_in_capture || w.h[1].aborts_in_capture)
        fail_msg("ncclCommAbort ran while a capture was open (%lu on rank 0, %lu on rank 1)", w.h[0].aborts_in_capture,
                 w.h[1].aborts_in_capture);
    w2_free(&w);
}

/* DPTRAIN_NCCL_GRAPHS=on with NCCL_GRAPH_MIXING_SUPPORT=0 is refused at start (eager collectives run
 * between a graph's replays on the same communicator), as is a value that is neither on nor off. */
static void test_graphs_setting_checked(void **state) {
    (void)state;
    hooks_or_skip();
    static const char *const cases[][3] = {{"on", "0", "NCCL_GRAPH_MIXING_SUPPORT=0: with DPTRAIN_NCCL_GRAPHS=on"},
                                           {"maybe", NULL, "DPTRAIN_NCCL_GRAPHS: 'maybe' is neither on nor off"}};
    for (int i = 0; i < 2; i++) {
        setenv("DPTRAIN_NCCL_GRAPHS", cases[i][0], 1);
        if (cases[i][1]) setenv("NCCL_GRAPH_MIXING_SUPPORT", cases[i][1], 1);
        dp_config c;
        tr_base_config(&c, "lenet");
        c.backend = "nccl", c.device = "fakegpu", c.replicas = 1, c.n_gpus = 1, c.gpus[0] = 0;
        c.log_path = tu_path("graphs_setting.jsonl");
        dp_trainer *t = NULL;
        const dp_status s = dp_trainer_create(&c, &t);
        char msg[DP_ERROR_MAX];
        snprintf(msg, sizeof msg, "%s", s == DP_OK ? "" : dp_last_error());
        dp_trainer_destroy(t);
        unsetenv("DPTRAIN_NCCL_GRAPHS"), unsetenv("NCCL_GRAPH_MIXING_SUPPORT");
        print_message("DPTRAIN_NCCL_GRAPHS=%s: %s\n", cases[i][0], msg);
        if (s != DP_ERR_USAGE || !tu_contains(msg, cases[i][2]))
            fail_msg("DPTRAIN_NCCL_GRAPHS=%s: status %d, '%s' (expected a usage error: %s)", cases[i][0], (int)s, msg,
                     cases[i][2]);
    }
}

/* The config line's value of "key":number (-1: absent). */
static double config_value(const char *config, const char *key) {
    char pat[96];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *at = strstr(config, pat);
    return at ? strtod(at + strlen(pat), NULL) : -1;
}

/* NCCL's memory measured at start: the double takes DP_NCCL_DOUBLE_PEER_MIB of the fake GPU's
 * memory at each communicator's first transfer with a peer (as NCCL's lazily connected buffers
 * do), the warm-up connects every peer, and the config line reports what the fake GPUs' mem_info
 * lost meanwhile (a peer's worth at 2 GPUs, three at 4) and that again plus the margin as reserved. */
static void test_warmup_measures_nccl_memory(void **state) {
    (void)state;
    hooks_or_skip();
    void (*set_mem)(void (*)(const void *, long long)) = NULL;
    *(void **)&set_mem = dlsym(RTLD_DEFAULT, "dp_nccl_double_set_memory_hook");
    assert_non_null(set_mem);
    set_mem(dp_fakegpu_stream_charge);
    setenv("DP_NCCL_DOUBLE_PEER_MIB", "24", 1);
    for (int n = 2; n <= 4; n += 2) {
        dp_config c;
        tr_base_config(&c, "lenet");
        c.backend = "nccl", c.device = "fakegpu", c.replicas = 1, c.n_gpus = n, c.max_steps = 2;
        for (int i = 0; i < n; i++) c.gpus[i] = i;
        tr_result r = tr_run(&c);
        const double init = config_value(r.config, "nccl_memory_init_mib"),
                     warm = config_value(r.config, "nccl_memory_warmup_mib"),
                     kept = config_value(r.config, "nccl_memory_reserved_mib"), expect = 24.0 * (n - 1);
        tr_free(&r);
        print_message("%d fake GPUs: init %.1f MiB, warm-up %.1f MiB, reserved %.1f MiB\n", n, init, warm, kept);
        if (init != 0 || warm != expect || kept != expect + (double)DP_NCCL_MARGIN_MIB)
            fail_msg("%d fake GPUs: the log says init %.1f, warm-up %.1f, reserved %.1f MiB; the double took %.1f MiB "
                     "a GPU (expected %.1f reserved)", n, init, warm, kept, expect, expect + (double)DP_NCCL_MARGIN_MIB);
    }
    unsetenv("DP_NCCL_DOUBLE_PEER_MIB");
    set_mem(NULL);
}

/* The training set goes to the device only where it fits with the device's reserve to spare (its
 * workspaces and NCCL's connections still to come), not a fixed 512 MiB: at one rank on a fake GPU
 * of 16 GiB, a reserve set to leave 100 MiB beside the run (DPTRAIN_NCCL_RESERVE_MIB) passes the
 * memory check, but a training set of 125 MB no longer fits beside it; with a small reserve it is
 * placed on the device. */
static void test_resident_data_leaves_the_reserve(void **state) {
    (void)state;
    hooks_or_skip();
    int placed[2];
    const char *reserve[2] = {"16", "16284"}; /* MiB: the fake GPU's 16 GiB less 100 MiB */
    for (int i = 0; i < 2; i++) {
        setenv("DPTRAIN_NCCL_RESERVE_MIB", reserve[i], 1);
        dp_config c;
        tr_base_config(&c, "lenet");
        c.backend = "nccl", c.device = "fakegpu", c.replicas = 1, c.n_gpus = 1, c.gpus[0] = 0, c.max_steps = 2;
        c.data.samples = 160000; /* 125 MB of pixels */
        tr_result r = tr_run(&c);
        placed[i] = r.data_on_device;
        tr_free(&r);
    }
    unsetenv("DPTRAIN_NCCL_RESERVE_MIB");
    print_message("training set on the device: %d with a reserve of 16 MiB, %d with 16284 MiB\n", placed[0], placed[1]);
    if (placed[0] != 1 || placed[1] != 0)
        fail_msg("training set on the device: %d with a reserve of 16 MiB (expected 1), %d with 16284 MiB of the 16 "
                 "GiB (expected 0: it would take what the reserve keeps free)", placed[0], placed[1]);
}

/* The child of test_teardown_hang_ends_within_the_grace (this binary, re-run): 2 fake GPUs under
 * the double with an injected NCCL error, then, after the failure, a kernel that never returns on
 * GPU 0 (as an aborted NCCL kernel may), then main's order: close, message, destroy. The destroy
 * must not return: the watchdog ends the process. */
#define TEARDOWN_TIMEOUT_S 2.0
/* each rank's NCCL calls in the warm-up at start at 2 ranks (backends/nccl_warmup.c): the sum's
   two groups of a send and a receive, a broadcast, an all-gather, the barrier's all-reduce */
#define WARMUP_OPS 7
static int teardown_child(void) {
    void (*set)(void *(*)(const void *), void (*)(const void *), void (*)(const void *, void *, const void *, size_t)) =
        NULL;
    *(void **)&set = dlsym(RTLD_DEFAULT, "dp_nccl_double_set_hooks");
    if (!set || dp_fakegpu_register() != DP_OK) return 3;
    set(dp_fakegpu_host_address, dp_fakegpu_stream_sync, dp_fakegpu_stream_write);
    dp_config c;
    tr_base_config(&c, "lenet");
    c.backend = "nccl", c.device = "fakegpu", c.replicas = 1, c.n_gpus = 2, c.max_steps = 8;
    c.gpus[0] = 0, c.gpus[1] = 1;
    c.timeout_s = TEARDOWN_TIMEOUT_S;
    c.log_path = tu_path("teardown.jsonl");
    dp_trainer *t = NULL;
    if (dp_trainer_create(&c, &t) != DP_OK) {
        fprintf(stderr, "create: %s\n", dp_last_error());
        return 3;
    }
    dp_status s = dp_trainer_train(t);
    if (s == DP_OK) {
        fprintf(stderr, "the injected NCCL error did not fail the run\n");
        return 4;
    }
    dp_fakegpu_stream_hang(t->devs[0]);
    s = dp_trainer_close(t, s);
    fprintf(stderr, "dptrain: %s\n", dp_last_error());
    fflush(stderr);
    dp_trainer_destroy(t);
    fprintf(stderr, "the teardown returned\n");
    return 5;
}

/* A rank whose GPU still runs a kernel that never returns after its collectives were aborted:
 * freeing device memory and closing the GPU wait for that kernel, so the watchdog must stay on
 * through them and end the process within the grace period (5 s + 0.1 --timeout), naming what
 * it waited for; with the watchdog stopped before the frees, the rank hung without a word. */
static void test_teardown_hang_ends_within_the_grace(void **state) {
    (void)state;
    hooks_or_skip();
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = '\0';
    const double grace = 5 + 0.1 * TEARDOWN_TIMEOUT_S;
    char *out = NULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const int rc = tu_sh(&out, "DP_NCCL_DOUBLE_FAULT=error@0:%d timeout -s KILL 45 '%s' teardown-child 2>&1", WARMUP_OPS + 3, self);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double took = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    print_message("exit %d after %.1f s (grace %.1f s):\n%s", rc, took, grace, out ? out : "");
    const int ok = rc == 1 && tu_contains(out, "injected fault") &&
                   tu_contains(out, "freeing the device memory and closing the GPUs after") &&
                   tu_contains(out, "has not returned after 5 s (a grace period); the watchdog ends this rank") &&
                   !tu_contains(out, "the teardown returned") && took < 30;
    if (!ok) fail_msg("the child exited %d after %.1f s, expected 1 from the watchdog within the grace:\n%s", rc, took,
                      out ? out : "");
    free(out);
}

/* A run of lenet on n fake GPUs under the double with the faults given; its status, and its
 * message in msg. */
static dp_status faulty_run(int n, const char *faults, double timeout_s, char *msg, size_t cap) {
    setenv("DP_NCCL_DOUBLE_FAULT", faults, 1);
    dp_config c;
    tr_base_config(&c, "lenet");
    c.backend = "nccl", c.device = "fakegpu", c.replicas = 1, c.n_gpus = n, c.max_steps = 8;
    for (int i = 0; i < n; i++) c.gpus[i] = i;
    if (timeout_s > 0) c.timeout_s = timeout_s;
    c.log_path = tu_path("faulty.jsonl");
    dp_trainer *t = NULL;
    dp_status s = dp_trainer_create(&c, &t);
    if (s == DP_OK) s = dp_trainer_train(t);
    if (t) s = dp_trainer_close(t, s);
    snprintf(msg, cap, "%s", s == DP_OK ? "" : dp_last_error());
    dp_trainer_destroy(t);
    unsetenv("DP_NCCL_DOUBLE_FAULT");
    return s;
}

/* Rank 1's communicator fails while rank 0's holds an earlier warning (NCCL keeps a message of a
 * path it recovered from): the failure quotes the communicator whose result failed. Reporting the
 * first communicator with any message quoted rank 0's warning. */
static void test_last_error_names_the_failing_communicator(void **state) {
    (void)state;
    hooks_or_skip();
    char msg[DP_ERROR_MAX];
    const dp_status s = faulty_run(2, "warn@0:2,error@1:3", 0, msg, sizeof msg);
    print_message("%s\n", msg);
    if (s == DP_OK || !tu_contains(msg, "rank 1's communicator: nccl test double: rank 1: injected fault") ||
        tu_contains(msg, "injected warning"))
        fail_msg("status %d, '%s' (expected rank 1's communicator's own message)", (int)s, msg);
}

/* The child of test_slow_aborts_each_get_the_grace: 2 fake GPUs, an injected error, and each
 * communicator's abort taking 3 s, 6 s in all against a grace of 5.1 s. */
static int slow_abort_child(void) {
    hooks_or_skip();
    char msg[DP_ERROR_MAX];
    const dp_status s = faulty_run(2, "error@0:3,abort-slow@0:3000,abort-slow@1:3000", 1.0, msg, sizeof msg);
    fprintf(stderr, "the run ended: %s\n", msg);
    return s == DP_OK ? 4 : 0;
}

/* Aborting several communicators one after the other: each gets the grace period (and a message
 * naming it), so slow aborts that together outlast one grace do not make the watchdog end a rank
 * that is tearing down as it should. Under one grace for all, the child was killed after 5 s. */
static void test_slow_aborts_each_get_the_grace(void **state) {
    (void)state;
    hooks_or_skip();
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = '\0';
    char *out = NULL;
    const int rc = tu_sh(&out, "timeout -s KILL 60 '%s' slow-abort-child 2>&1", self);
    print_message("exit %d:\n%s", rc, out ? out : "");
    if (rc != 0 || !tu_contains(out, "the run ended: ") || !tu_contains(out, "injected fault") ||
        tu_contains(out, "the watchdog ends this rank"))
        fail_msg("the child exited %d, expected 0 after both slow aborts:\n%s", rc, out ? out : "");
    free(out);
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "teardown-child") == 0) return teardown_child();
    if (argc == 2 && strcmp(argv[1], "slow-abort-child") == 0) return slow_abort_child();
    if (argc == 3 && strcmp(argv[1], "world2-child") == 0) return world2_child(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_teardown_hang_ends_within_the_grace),
        cmocka_unit_test(test_scratch_reserved_at_start),
        cmocka_unit_test(test_world_1_records_and_replays_graphs),
        cmocka_unit_test(test_world_2_records_collectives),
        cmocka_unit_test(test_abort_waits_for_the_capture_to_end),
        cmocka_unit_test(test_graphs_setting_checked),
        cmocka_unit_test(test_warmup_measures_nccl_memory),
        cmocka_unit_test(test_resident_data_leaves_the_reserve),
        cmocka_unit_test(test_one_host_round_trip_a_step),
        cmocka_unit_test(test_a_host_thread_per_gpu),
        cmocka_unit_test(test_last_error_names_the_failing_communicator),
        cmocka_unit_test(test_slow_aborts_each_get_the_grace),
        cmocka_unit_test(test_ddp_on_2_and_4_fake_gpus),
        cmocka_unit_test(test_dp_on_2_and_4_fake_gpus),
        cmocka_unit_test(test_sync_bn_on_2_and_4_fake_gpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
int main(void) {
    fprintf(stderr, "test_nccl_fakegpu: this build has no NCCL headers (the double implements nccl.h)\n");
    return 77;
}
#endif
