/* The collectives in the style of nccl-tests: one conformance checker (collcheck.h), a table of
 * backends, each run at 1..8 ranks (as many as it takes), at counts of 0 and 1, counts that do not
 * divide the ranks and counts large enough for the threaded paths, every element of every rank checked
 * bitwise against the canonical order (core/ordered.h). The table: the sim's ring and tree (orders of
 * their own: checked with small integers, which any order sums exactly), the sim's ordered all-reduce,
 * the same on one fake GPU (sim/ring_device.c), the ordered sum's send/receive plan (core/ordered.h)
 * run over host buffers, the plan MPI and NCCL follow, and, with NCCL, the NCCL backend through its
 * test double over host (CPU) devices and over fake GPUs (the double preloaded into this test:
 * tests/CMakeLists.txt). MPI runs the same checker in test_mpi_backend.c. Then the all-gather, bucket
 * cuts, and bad backend names. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "testutil.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "collcheck.h"
#include "core/arena.h"
#include "core/ordered.h"
#include "core/treesum.h"
#include "dp_config.h"
#include "fakegpu.h"
#include "kernels/device.h"

/* One backend under test: the w ranks' inputs on the host, results back on the host. */
typedef struct cc_backend {
    const char *name;
    const char *algorithm; /* the sim's --allreduce */
    int threads;
    int exact;             /* its all-reduce adds in an order of its own: integer inputs */
    int max_w;
    int no_avg;            /* sums only (the NCCL backend: the executor scales) */
    const char *device;    /* the NCCL rows' devices ("cpu" or "fakegpu"), or the one device of the sim's replicas */
} cc_backend;

/* The NCCL rows: one device per rank; a sim row with a device holds every replica on that one device. */
static int is_nccl(const cc_backend *be) { return be->device && !be->algorithm; }

typedef struct {
    const cc_backend *be;
    int w;
    dp_backend_t b;        /* NULL: the plan on the host */
    dp_dev *devs[8];       /* the devices opened: w (NCCL), 1 (the sim on a device) or none */
    dp_wait_policy waits;  /* theirs (the opener's) */
    int n_devs;
    float *dbuf[8];        /* rank i's device buffer, on dev(r, i) */
} cc_run;

static float **alloc_bufs(int n, size_t count) {
    float **b = calloc((size_t)n, sizeof *b);
    assert_non_null(b);
    for (int r = 0; r < n; r++) {
        b[r] = malloc((count ? count : 1) * sizeof(float));
        assert_non_null(b[r]);
    }
    return b;
}

static void free_bufs(float **b, int n) {
    for (int r = 0; r < n; r++) free(b[r]);
    free(b);
}

static dp_backend_t make_sim(int n, const char *algo, int threads) {
    dp_backend_config cfg = {.name = "sim", .replicas = n, .nthreads = threads, .algorithm = algo};
    dp_backend_t b;
    assert_int_equal(dp_backend_create(&cfg, &b), DP_OK);
    assert_int_equal(dp_backend_world(b), n);
    assert_int_equal(dp_backend_n_local(b), n);
    return b;
}

/* The ordered sum's plan (core/ordered.h) carried out over host buffers, each rank in turn, with a
 * check that what a rank sends is what its peer expects to receive. */
static void plan_sum(float *const *bufs, int w, size_t n, int avg, int root) {
    const size_t slot = n / (size_t)w + 1;
    float *recv[8];
    for (int me = 0; me < w; me++) {
        recv[me] = malloc(slot * (size_t)w * sizeof(float));
        assert_non_null(recv[me]);
        for (int p = 0; p < w; p++) { /* p sends me its piece of shard me */
            const dp_ordered_xfer out = dp_ordered_scatter(n, w, p, me, slot), in = dp_ordered_scatter(n, w, me, p, slot);
            assert_int_equal(out.send_len, in.recv_len);
            memcpy(recv[me] + in.recv_lo, bufs[p] + out.send_lo, in.recv_len * sizeof(float));
        }
    }
    for (int me = 0; me < w; me++) {
        size_t lo, len;
        dp_shard(n, w, me, &lo, &len);
        float *v[8];
        for (int p = 0; p < w; p++) v[p] = recv[me] + slot * (size_t)p;
        dp_tree_sum(v, w, 0, len, 0);
        for (size_t i = 0; avg && i < len; i++) v[0][i] *= 1.0f / (float)w;
        memcpy(bufs[me] + lo, v[0], len * sizeof(float));
    }
    for (int me = 0; me < w; me++) {
        for (int p = 0; p < w; p++) { /* p sends me its finished shard */
            if (p == me) continue;
            const dp_ordered_xfer out = dp_ordered_gather(n, w, p, me, root), in = dp_ordered_gather(n, w, me, p, root);
            assert_int_equal(out.send_len, in.recv_len);
            memcpy(bufs[me] + in.recv_lo, bufs[p] + out.send_lo, in.recv_len * sizeof(float));
        }
        free(recv[me]);
    }
}

#if DP_HAVE_NCCL
/* The NCCL double preloaded (tests/CMakeLists.txt), told how to reach the fake GPUs; 0 if it is not
 * (a run outside ctest). */
static int nccl_double_ready(void) {
    void (*set)(void *(*)(const void *), void (*)(const void *), void (*)(const void *, void *, const void *, size_t)) =
        NULL;
    *(void **)&set = dlsym(RTLD_DEFAULT, "dp_nccl_double_set_hooks");
    if (!set) return 0;
    set(dp_fakegpu_host_address, dp_fakegpu_stream_sync, dp_fakegpu_stream_write);
    assert_int_equal(dp_fakegpu_register(), DP_OK);
    return 1;
}
#endif

static dp_dev *dev(const cc_run *r, int i) { return r->devs[r->n_devs > 1 ? i : 0]; }

static void cc_open(cc_run *r, const cc_backend *be, int w) {
    memset(r, 0, sizeof *r);
    r->be = be, r->w = w;
    if (!strcmp(be->name, "ordered plan")) return;
    if (!be->device) {
        r->b = make_sim(w, be->algorithm, be->threads);
        return;
    }
    int ordinals[8];
    r->n_devs = is_nccl(be) ? w : 1;
    for (int i = 0; i < r->n_devs; i++) {
        ordinals[i] = i;
        if (dp_dev_open(be->device, i, 0, &r->waits, &r->devs[i]) != DP_OK)
            fail_msg("%s: %s", be->name, dp_last_error());
    }
    const int host = !strcmp(be->device, "cpu");
    dp_backend_config cfg = {.name = "nccl", .nthreads = 1, .timeout_s = 60, .dev = r->devs[0], .host_memory = host,
                             .waits = &r->waits, .devs = r->devs, .ordinals = ordinals, .n_devs = w};
    if (!is_nccl(be)) cfg = (dp_backend_config){.name = "sim", .replicas = w, .nthreads = 1, .algorithm = be->algorithm,
                                                .dev = r->devs[0], .host_memory = host, .waits = &r->waits};
    /* a backend writes no device (only its opener does): nccl's watch goes into the opener's wait policy */
    dp_dev before[8];
    for (int i = 0; i < r->n_devs; i++) before[i] = *r->devs[i];
    if (dp_backend_create(&cfg, &r->b) != DP_OK) fail_msg("%s at %d ranks: %s", be->name, w, dp_last_error());
    for (int i = 0; i < r->n_devs; i++)
        if (memcmp(&before[i], r->devs[i], sizeof before[i]))
            fail_msg("%s at %d ranks: creating the backend wrote into device %d", be->name, w, i);
    if (is_nccl(be) && w > 1 && !r->waits.watch)
        fail_msg("%s at %d ranks: no watch in the devices' wait policy (a dead peer would hang a wait)", be->name, w);
    size_t most = cc_counts[cc_n_counts - 1];
    if (dp_backend_reserve(r->b, most) != DP_OK) fail_msg("%s: %s", be->name, dp_last_error());
    for (int i = 0; i < w; i++)
        if (dev(r, i)->alloc(dev(r, i), &r->dbuf[i], most, "test buffers") != DP_OK)
            fail_msg("%s: %s", be->name, dp_last_error());
}

static void cc_close(cc_run *r) {
    if (r->b) dp_backend_destroy(r->b);
    if (r->waits.watch) fail_msg("%s: the backend left its watch in the devices' wait policy", r->be->name);
    for (int i = 0; i < r->w && r->n_devs; i++) dev(r, i)->free(dev(r, i), r->dbuf[i]);
    for (int i = 0; i < r->n_devs; i++) dp_dev_close(r->devs[i]);
}

/* One collective on the host buffers bufs (through the devices where the backend has them). */
static void cc_do(void *ctx, cc_op op, float *const *bufs, size_t n, int root) {
    cc_run *r = ctx;
    const int w = r->w;
    if (!r->b) {
        plan_sum(bufs, w, n, op == CC_AVG, op == CC_REDUCE ? root : -1);
        return;
    }
    float *const *on = bufs;
    if (r->be->device) {
        for (int i = 0; i < w; i++)
            if (n && dev(r, i)->upload(dev(r, i), r->dbuf[i], bufs[i], n * sizeof(float)) != DP_OK)
                fail_msg("%s: %s", r->be->name, dp_last_error());
        on = r->dbuf;
        /* the backend queues on each device's collective stream: after the uploads, as the executor orders it */
        for (int i = 0; i < r->n_devs; i++)
            if (r->devs[i]->coll.wait_for && r->devs[i]->coll.wait_for(&r->devs[i]->coll, &r->devs[i]->main) != DP_OK)
                fail_msg("%s: %s", r->be->name, dp_last_error());
    }
    dp_status s = op == CC_SUM ? dp_allreduce(r->b, on, n, DP_SUM)
                : op == CC_AVG ? dp_allreduce(r->b, on, n, DP_AVG)
                : op == CC_REDUCE ? dp_reduce(r->b, on, n, DP_SUM, root)
                : dp_broadcast(r->b, on, n, root);
    if (s != DP_OK) fail_msg("%s: %s", r->be->name, dp_last_error());
    if (!r->be->device) return;
    for (int i = 0; i < r->n_devs; i++)
        if (r->devs[i]->coll.wait_for && r->devs[i]->main.wait_for(&r->devs[i]->main, &r->devs[i]->coll) != DP_OK)
            fail_msg("%s: %s", r->be->name, dp_last_error());
    for (int i = 0; i < w; i++)
        if (n && dev(r, i)->download(dev(r, i), bufs[i], r->dbuf[i], n * sizeof(float)) != DP_OK)
            fail_msg("%s: %s", r->be->name, dp_last_error());
}

/* The backend at 1..max_w ranks, through the one conformance run (collcheck.h). */
static void conformance(const cc_backend *be) {
    const unsigned flags = (be->exact ? CC_EXACT : 0) | (be->no_avg ? CC_NO_AVG : 0) |
                           (!strcmp(be->name, "ordered plan") ? CC_SUMS_ONLY : 0); /* the plan sums */
    for (int w = 1; w <= be->max_w; w++) {
        cc_run run;
        cc_open(&run, be, w);
        cc_conformance(be->name, w, 0, w, flags, cc_do, &run);
        cc_close(&run);
    }
}

static const cc_backend backends[] = {
    {.name = "sim ring", .algorithm = "ring", .threads = 1, .exact = 1, .max_w = 8},
    {.name = "sim ring, 3 threads", .algorithm = "ring", .threads = 3, .exact = 1, .max_w = 8},
    {.name = "sim tree", .algorithm = "tree", .threads = 2, .exact = 1, .max_w = 8},
    {.name = "sim ordered", .algorithm = "ordered", .threads = 1, .max_w = 8},
    {.name = "sim ordered, 3 threads", .algorithm = "ordered", .threads = 3, .max_w = 8},
    {.name = "ordered plan", .max_w = 8},
    {.name = "sim ordered over fakegpu", .algorithm = "ordered", .device = "fakegpu", .no_avg = 1, .max_w = 8},
    {.name = "nccl double", .device = "cpu", .no_avg = 1, .max_w = 8},
    {.name = "nccl double over fakegpu", .device = "fakegpu", .no_avg = 1, .max_w = 8},
};

static void test_conformance(void **state) {
    const cc_backend *be = *state;
    if (is_nccl(be)) {
#if DP_HAVE_NCCL
        if (!nccl_double_ready()) {
            fprintf(stderr, "%s: the NCCL test double is not preloaded (LD_PRELOAD=.../libdp_nccl_double.so)\n",
                    be->name);
            skip();
        }
#else
        fprintf(stderr, "%s: this build has no NCCL\n", be->name);
        skip();
#endif
    }
    if (be->device && !strcmp(be->device, "fakegpu")) assert_int_equal(dp_fakegpu_register(), DP_OK);
    conformance(be);
}

/* The statistics: a call counted per all-reduce; the same sums at 1 and 3 threads. */
static void test_sim_counts_calls(void **state) {
    (void)state;
    dp_backend_t b = make_sim(3, "ring", 1);
    float **bufs = alloc_bufs(3, 100);
    for (int k = 0; k < 5; k++) assert_int_equal(dp_allreduce(b, bufs, 100, DP_SUM), DP_OK);
    assert_int_equal(b->stats.calls[DP_COLL_ALLREDUCE], 5);
    free_bufs(bufs, 3);
    dp_backend_destroy(b);
}

static void test_allgather(void **state) {
    (void)state;
    for (int n = 1; n <= 8; n++) {
        dp_backend_t b = make_sim(n, "ring", 2);
        for (int c = 0; c < 6; c++) {
            const size_t cnt = cc_counts[c];
            float **send = alloc_bufs(n, cnt);
            for (int r = 0; r < n; r++) cc_input(send[r], r, cnt, 1, 1);
            float **recv = calloc((size_t)n, sizeof *recv);
            for (int r = 0; r < n; r++) recv[r] = calloc((size_t)n * cnt + 1, sizeof(float));
            assert_int_equal(dp_allgather(b, (const float *const *)send, recv, cnt), DP_OK);
            for (int r = 0; r < n; r++)
                for (int src = 0; src < n; src++)
                    assert_memory_equal(recv[r] + (size_t)src * cnt, send[src], cnt * sizeof(float));
            free_bufs(send, n);
            free_bufs(recv, n);
        }
        dp_backend_destroy(b);
    }
}

/* Random floats (so the order of additions shows): the all-reduce of a whole arena equals,
 * bitwise, the all-reduces of its pieces cut anywhere -- results do not depend on --bucket-mb;
 * and the reduce to a root gives the all-reduce's sums bitwise (DP equals DDP). For the ring
 * and for the ordered all-reduce. */
static void test_order_independent_of_cuts(void **state) {
    (void)state;
    const size_t n = 5000;
    for (int a = 0; a < 2; a++)
    for (int nr = 3; nr <= 8; nr++) {
        dp_backend_t b = make_sim(nr, a ? "ordered" : "ring", 2);
        float *whole[8], *cut[8], *red[8];
        for (int r = 0; r < nr; r++) {
            assert_int_equal(dp_alloc_floats(&whole[r], n, "t"), DP_OK);
            assert_int_equal(dp_alloc_floats(&cut[r], n, "t"), DP_OK);
            assert_int_equal(dp_alloc_floats(&red[r], n, "t"), DP_OK);
            uint64_t x = 12345 + (uint64_t)r;
            for (size_t i = 0; i < n; i++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                whole[r][i] = cut[r][i] = red[r][i] = (float)((double)(x >> 11) / 9007199254740992.0 - 0.5) * 3.7f;
            }
        }
        assert_int_equal(dp_allreduce(b, whole, n, DP_SUM), DP_OK);
        const size_t cuts[] = {0, 1, 17, 64, 1000, 1001, 3333, 5000};
        for (size_t k = 0; k + 1 < sizeof cuts / sizeof *cuts; k++) {
            float *piece[8];
            for (int r = 0; r < nr; r++) piece[r] = cut[r] + cuts[k];
            assert_int_equal(dp_allreduce(b, piece, cuts[k + 1] - cuts[k], DP_SUM), DP_OK);
        }
        assert_int_equal(dp_reduce(b, red, n, DP_SUM, 0), DP_OK);
        for (int r = 0; r < nr; r++) assert_memory_equal(cut[r], whole[0], n * sizeof(float));
        assert_memory_equal(red[0], whole[0], n * sizeof(float));
        for (int r = 0; r < nr; r++) dp_free(whole[r]), dp_free(cut[r]), dp_free(red[r]);
        dp_backend_destroy(b);
    }
}

static void test_bad_backend_names(void **state) {
    (void)state;
    dp_backend_t b;
    dp_backend_config cfg = {.name = "gloo", .replicas = 1};
    assert_int_equal(dp_backend_create(&cfg, &b), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "gloo"));
    cfg.name = "sim";
    cfg.replicas = 0;
    assert_int_equal(dp_backend_create(&cfg, &b), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "--replicas"));
    cfg.replicas = 2;
    cfg.algorithm = "butterfly";
    assert_int_equal(dp_backend_create(&cfg, &b), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "butterfly"));
    cfg.name = "nccl";
    cfg.algorithm = NULL;
    /* not built, no usable GPU, or (on a GPU machine) no CUDA executor yet: refused, naming it */
    const dp_status s = dp_backend_create(&cfg, &b);
    assert_true(s == DP_ERR_UNSUPPORTED || s == DP_ERR_BACKEND);
    assert_true(tu_contains(dp_last_error(), "nccl"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define ROW(i) {backends[i].name, test_conformance, NULL, NULL, (void *)&backends[i]}
        ROW(0), ROW(1), ROW(2), ROW(3), ROW(4), ROW(5), ROW(6), ROW(7), ROW(8),
        cmocka_unit_test(test_sim_counts_calls),
        cmocka_unit_test(test_allgather),
        cmocka_unit_test(test_order_independent_of_cuts),
        cmocka_unit_test(test_bad_backend_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
