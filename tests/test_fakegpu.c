/* The fake GPU (tests/fakegpu/) behaves as the CUDA device does where it matters to code written
 * for a GPU: host access to device memory faults; work is queued and runs later, per stream, so a
 * missing wait, join or stream ordering gives wrong results (shown here over repeated tries with
 * random delays) while the right ordering always gives right ones; the calls CUDA makes blocking
 * block; graph capture records without running, rejects what CUDA rejects, and replays bitwise. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec/executor.h"
#include "fakegpu_util.h"

enum { TRIES = 40, N = 256 };

/* ---- children that must die */

/* Runs fn in a child with its stderr captured into err (n bytes); returns its wait status. */
static int in_child(void (*fn)(void), char *err, size_t n) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        fn();
        _exit(0); /* it did not die: the parent fails */
    }
    close(fds[1]);
    size_t k = 0;
    char sink[256];
    for (;;) {
        ssize_t r = k + 1 < n ? read(fds[0], err + k, n - 1 - k) : read(fds[0], sink, sizeof sink);
        if (r <= 0) break;
        if (k + 1 < n) k += (size_t)r;
    }
    err[k] = 0;
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

/* In a child (no cmocka there): a device and one block, or exit 3. */
static float *child_block(dp_dev **d) {
    setenv("DP_FAKEGPU_DELAY_US", "0", 1);
    float *p = NULL;
    if (dp_fakegpu_register() != DP_OK || dp_dev_open("fakegpu", 0, 0, NULL, d) != DP_OK ||
        (*d)->alloc(*d, &p, N, "probe") != DP_OK || (*d)->wait(*d) != DP_OK)
        _exit(3);
    return p;
}

static void child_reads(void) {
    dp_dev *d;
    const float *p = child_block(&d);
    signal(SIGSEGV, SIG_DFL); /* the kernel's verdict, not a sanitizer's handler, where allowed */
    volatile float v = *(volatile const float *)p;
    (void)v;
}

static void child_writes(void) {
    dp_dev *d;
    float *p = child_block(&d);
    signal(SIGSEGV, SIG_DFL);
    *(volatile float *)(p + 5) = 1.0f;
}

/* Died of SIGSEGV (a sanitizer's SEGV handler, where it keeps the signal, reports and exits). */
static void expect_segv(int status, const char *err, const char *what) {
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) return;
#ifdef DP_TEST_SANITIZED
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 3 && tu_contains(err, "SEGV")) return;
#endif
    fail_msg("%s: the child was not killed by SIGSEGV (status %#x): %s", what, status, err);
}

static void test_host_access_faults(void **state) {
    (void)state;
    char err[4096];
    int st = in_child(child_reads, err, sizeof err);
    expect_segv(st, err, "a host read of device memory");
    st = in_child(child_writes, err, sizeof err);
    expect_segv(st, err, "a host write to device memory");
}

static void child_host_pointer_to_kernel(void) {
    dp_dev *d;
    float *p = child_block(&d);
    static float host[N];
    d->k->relu_forward(&d->main.kc, N, host, p);
}

static void child_overrun(void) {
    dp_dev *d;
    float *p = child_block(&d);
    d->k->add(&d->main.kc, N / 2 + 1, p, p, p + N / 2); /* one float past the end */
}

static void child_freed(void) {
    dp_dev *d;
    float *p = child_block(&d), *q = NULL;
    if (d->alloc(d, &q, N, "other") != DP_OK) _exit(3);
    d->free(d, p);
    d->copy(d, q, p, 16);
}

static void expect_abort(void (*fn)(void), const char *needle) {
    char err[4096];
    const int st = in_child(fn, err, sizeof err);
    if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT)) fail_msg("no abort (status %#x): %s", st, err);
    if (!tu_contains(err, needle)) fail_msg("the message does not name '%s': %s", needle, err);
}

static void test_bad_pointers_abort(void **state) {
    (void)state;
    expect_abort(child_host_pointer_to_kernel, "relu_forward: x");
    expect_abort(child_overrun, "add: y touches bytes [512, 1028) of the allocation for 'probe', which has 1024");
    expect_abort(child_freed, "copy: src");
}

/* ---- the device as a whole */

static void test_open_and_describe(void **state) {
    (void)state;
    dp_dev *d = fgt_open(NULL);
    FGT_OK(dp_fakegpu_register()); /* again: nothing changes */
    assert_string_equal(d->name, "fakegpu");
    assert_int_equal(d->caps, DP_CAP_ASYNC | DP_CAP_LANES | DP_CAP_GRAPHS | DP_CAP_EVENTS | DP_CAP_COLL_STREAM);
    assert_int_equal(d->n_lanes, DP_DEV_LANES);
    /* its streams, each with its own kernel context, all of this device */
    assert_ptr_equal(d->main.dev, d);
    assert_ptr_equal(d->coll.dev, d);
    assert_ptr_equal(dp_dev_coll(d), &d->coll);
    assert_non_null(d->coll.wait_for);
    assert_ptr_not_equal(d->coll.kc.stream, d->main.kc.stream);
    for (int i = 0; i < DP_DEV_LANES; i++) {
        assert_ptr_equal(d->lanes[i].dev, d);
        assert_ptr_not_equal(d->lanes[i].kc.stream, d->main.kc.stream);
        assert_ptr_not_equal(d->lanes[i].kc.stream, d->coll.kc.stream);
    }
    assert_ptr_equal(d->waits, &fgt_waits);
    assert_true(tu_contains(d->desc, "fakegpu:0"));
    unsigned long long free0, total, free1;
    FGT_OK(d->mem_info(d, &free0, &total));
    assert_true(total == 16ull << 30 && free0 <= total);
    float *p = fgt_put(d, NULL, (size_t)1 << 20);
    FGT_OK(d->mem_info(d, &free1, &total));
    assert_true(free1 + ((size_t)1 << 20) <= free0);
    float h[4] = {1, 1, 1, 1};
    fgt_get(d, h, p, sizeof h); /* zeroed, in stream order */
    assert_true(h[0] == 0 && h[3] == 0);
    d->free(d, p);
    fgt_close(d);
    dp_dev *x = NULL;
    assert_int_equal(dp_dev_open("fakegpu", 8, 0, NULL, &x), DP_ERR_USAGE);
    assert_int_equal(dp_dev_open("fakegpu", 0, 1, NULL, &x), DP_ERR_USAGE);
}

/* An upload from host_alloc memory reads it when it runs: refilling the staging buffer before a
 * wait is a race, which the next wait reports (sometimes: when the upload ran after the refill);
 * after a wait, never. */
static void test_pinned_upload_is_async(void **state) {
    (void)state;
    dp_dev *d = fgt_open("200");
    float *stage = NULL, *x = fgt_put(d, NULL, N * sizeof(float)), back[N];
    FGT_OK(d->host_alloc(d, (void **)&stage, N * sizeof(float), "staging"));
    int raced = 0;
    for (int t = 0; t < TRIES; t++) {
        for (int i = 0; i < N; i++) stage[i] = 1.0f;
        FGT_OK(d->upload(d, x, stage, sizeof back));
        for (int i = 0; i < N; i++) stage[i] = 2.0f; /* too early */
        if (d->download(d, back, x, sizeof back) == DP_OK) continue;
        if (!tu_contains(dp_last_error(), "the host wrote to pinned memory"))
            fail_msg("try %d: %s (expected the race named)", t, dp_last_error());
        raced++;
    }
    if (!raced) fail_msg("no upload of %d was reported reading a refilled staging buffer: the upload was not "
                         "asynchronous, or the race went unnoticed", TRIES);
    for (int t = 0; t < TRIES; t++) {
        for (int i = 0; i < N; i++) stage[i] = (float)t;
        FGT_OK(d->upload(d, x, stage, sizeof back));
        FGT_OK(d->wait(d));
        for (int i = 0; i < N; i++) stage[i] = -1.0f;
        fgt_get(d, back, x, sizeof back);
        for (int i = 0; i < N; i++)
            if (back[i] != (float)t) fail_msg("try %d: element %d is %g after a wait", t, i, back[i]);
    }
    d->host_free(d, stage);
    d->free(d, x);
    fgt_close(d);
}

/* From pageable memory CUDA stages the bytes before returning: reuse at once is safe. */
static void test_pageable_upload_is_staged(void **state) {
    (void)state;
    dp_dev *d = fgt_open("200");
    float *x = fgt_put(d, NULL, N * sizeof(float)), src[N], back[N];
    for (int t = 0; t < TRIES; t++) {
        for (int i = 0; i < N; i++) src[i] = (float)t;
        FGT_OK(d->upload(d, x, src, sizeof src));
        memset(src, 0xff, sizeof src);
        fgt_get(d, back, x, sizeof back);
        for (int i = 0; i < N; i++)
            if (back[i] != (float)t) fail_msg("try %d: element %d is %g", t, i, back[i]);
    }
    d->free(d, x);
    fgt_close(d);
}

/* Lane l copies its own value into part[l]; the main stream sums the parts. Returns 1 if the
 * sum is right. Without the join, the main stream may sum before the lanes have written. */
static int lanes_once(dp_dev *d, float *const *src, float *const *part, int lanes, int join) {
    for (int l = 0; l < lanes; l++) FGT_OK(d->zero(d, part[l], N * sizeof(float)));
    FGT_OK(d->fork(d, lanes));
    for (int l = 0; l < lanes; l++) d->k->copy(&d->lanes[l].kc, N, src[l], part[l]);
    if (join) FGT_OK(d->join(d, lanes));
    d->k->tree_sum(&d->main.kc, part, lanes, 0, N, 0);
    float back[N];
    fgt_get(d, back, part[0], sizeof back);
    if (!join) { /* settle before the next try */
        FGT_OK(d->join(d, lanes));
        FGT_OK(d->wait(d));
    }
    const float want = (float)(lanes * (lanes + 1) / 2);
    for (int i = 0; i < N; i++)
        if (back[i] != want) return 0;
    return 1;
}

static void test_lanes_need_join(void **state) {
    (void)state;
    dp_dev *d = fgt_open("200");
    enum { L = DP_DEV_LANES };
    float *src[L], *part[L], ones[N];
    for (int l = 0; l < L; l++) {
        for (int i = 0; i < N; i++) ones[i] = (float)(l + 1);
        src[l] = fgt_put(d, ones, sizeof ones), part[l] = fgt_put(d, NULL, sizeof ones);
    }
    int wrong = 0;
    for (int t = 0; t < TRIES; t++) wrong += !lanes_once(d, src, part, L, 0);
    if (!wrong) fail_msg("the main stream never read the lanes' results early without a join (%d tries)", TRIES);
    for (int t = 0; t < TRIES; t++)
        if (!lanes_once(d, src, part, L, 1)) fail_msg("try %d: wrong sum with the join", t);
    for (int l = 0; l < L; l++) d->free(d, src[l]), d->free(d, part[l]);
    fgt_close(d);
}

/* The main stream writes x = t, the collective stream copies x to y, the main stream copies y to
 * out: right (out = t) only if both orderings were asked for. */
static int coll_once(dp_dev *d, float *x, float *y, float *out, int t, int cwm, int mwc) {
    float v[N];
    for (int i = 0; i < N; i++) v[i] = (float)t;
    FGT_OK(d->upload(d, x, v, sizeof v));
    if (cwm) FGT_OK(d->coll.wait_for(&d->coll, &d->main));
    d->k->copy(&d->coll.kc, N, x, y);
    if (mwc) FGT_OK(d->main.wait_for(&d->main, &d->coll));
    d->k->copy(&d->main.kc, N, y, out);
    fgt_get(d, v, out, sizeof v);
    FGT_OK(d->coll.wait(&d->coll)); /* settle before the next try */
    FGT_OK(d->coll.wait_for(&d->coll, &d->main));
    FGT_OK(d->coll.wait(&d->coll));
    for (int i = 0; i < N; i++)
        if (v[i] != (float)t) return 0;
    return 1;
}

static void test_collective_stream_ordering(void **state) {
    (void)state;
    dp_dev *d = fgt_open("200");
    float *x = fgt_put(d, NULL, N * 4), *y = fgt_put(d, NULL, N * 4), *out = fgt_put(d, NULL, N * 4);
    int t = 1, early_read = 0, late_result = 0;
    for (int k = 0; k < TRIES; k++, t++) early_read += !coll_once(d, x, y, out, t, 0, 1);
    for (int k = 0; k < TRIES; k++, t++) late_result += !coll_once(d, x, y, out, t, 1, 0);
    if (!early_read) fail_msg("without coll.wait_for(main) the collective stream never read early (%d tries)", TRIES);
    if (!late_result) fail_msg("without main.wait_for(coll) the main stream never read early (%d tries)", TRIES);
    for (int k = 0; k < TRIES; k++, t++)
        if (!coll_once(d, x, y, out, t, 1, 1)) fail_msg("try %d: wrong with both orderings", k);
    d->free(d, x), d->free(d, y), d->free(d, out);
    fgt_close(d);
}

/* ---- graphs */

enum { B = 4, I = 24, O = 16, LN = 4 };

typedef struct {
    float *x, *w, *b, *z[LN], *y[LN], *acc, *p, *mom;
} net;

static net net_make(dp_dev *d) {
    float xs[LN * B * I], ws[O * I], bs[O], ps[B * O];
    for (int i = 0; i < LN * B * I; i++) xs[i] = (float)((i * 37) % 11) - 5.0f;
    for (int i = 0; i < O * I; i++) ws[i] = 0.01f * (float)((i * 13) % 7 - 3);
    for (int i = 0; i < O; i++) bs[i] = 0.1f * (float)(i % 3);
    for (int i = 0; i < B * O; i++) ps[i] = 1.0f / (float)(i + 1);
    net n = {.x = fgt_put(d, xs, sizeof xs), .w = fgt_put(d, ws, sizeof ws), .b = fgt_put(d, bs, sizeof bs)};
    for (int l = 0; l < LN; l++) n.z[l] = fgt_put(d, NULL, B * O * 4), n.y[l] = fgt_put(d, NULL, B * O * 4);
    n.acc = fgt_put(d, NULL, B * O * 4), n.p = fgt_put(d, ps, sizeof ps), n.mom = fgt_put(d, NULL, B * O * 4);
    return n;
}

static void net_free(dp_dev *d, net *n) {
    float *all[] = {n->x, n->w, n->b, n->acc, n->p, n->mom};
    for (int i = 0; i < 6; i++) d->free(d, all[i]);
    for (int l = 0; l < LN; l++) d->free(d, n->z[l]), d->free(d, n->y[l]);
}

/* One step over every kind of stream: lanes (forward of a slice each), the main stream (their
 * sum), the collective stream (a running total), the main stream again (an optimizer step). */
static void net_step(dp_dev *d, net *n) {
    FGT_OK(d->fork(d, LN));
    for (int l = 0; l < LN; l++) {
        d->k->linear_forward(&d->lanes[l].kc, B, I, O, n->x + l * B * I, n->w, n->b, n->z[l]);
        d->k->relu_forward(&d->lanes[l].kc, B * O, n->z[l], n->y[l]);
    }
    FGT_OK(d->join(d, LN));
    d->k->tree_sum(&d->main.kc, n->y, LN, 0, B * O, 0);
    FGT_OK(d->coll.wait_for(&d->coll, &d->main));
    d->k->add(&d->coll.kc, B * O, n->acc, n->y[0], n->acc);
    FGT_OK(d->main.wait_for(&d->main, &d->coll));
    d->k->sgd(&d->main.kc, B * O, n->p, n->acc, n->mom, 0.1f, 0.9f, 1e-4f, 1);
}

static void net_result(dp_dev *d, const net *n, float *out) {
    fgt_get(d, out, n->p, B * O * 4);
    fgt_get(d, out + B * O, n->mom, B * O * 4);
    fgt_get(d, out + 2 * B * O, n->acc, B * O * 4);
}

static void test_capture_replays_bitwise(void **state) {
    (void)state;
    dp_dev *d = fgt_open("50");
    net eager = net_make(d), rec = net_make(d);
    float a[3 * B * O], r[3 * B * O], before[3 * B * O];
    net_result(d, &rec, before);
    for (int s = 0; s < 3; s++) net_step(d, &eager);
    net_result(d, &eager, a);
    FGT_OK(d->capture_begin(d));
    net_step(d, &rec);
    void *g = NULL;
    FGT_OK(d->capture_end(d, &g));
    assert_non_null(g);
    net_result(d, &rec, r);
    assert_memory_equal(r, before, sizeof r); /* recording ran nothing */
    for (int s = 0; s < 3; s++) FGT_OK(d->replay(d, g)); /* queued back to back */
    net_result(d, &rec, r);
    assert_memory_equal(r, a, sizeof r);
    d->graph_free(d, g);
    net_free(d, &eager), net_free(d, &rec);
    fgt_close(d);
}

/* A call CUDA forbids while a stream captures fails with the message and spoils the recording. */
static void expect_spoiled(dp_dev *d, const char *call) {
    void *g = (void *)1;
    assert_int_equal(d->capture_end(d, &g), DP_ERR_INTERNAL);
    assert_null(g);
    char want[128];
    snprintf(want, sizeof want, "fakegpu: %s while a graph is being recorded", call);
    if (!tu_contains(dp_last_error(), want)) fail_msg("capture_end: '%s' lacks '%s'", dp_last_error(), want);
}

static void forbidden(dp_dev *d, dp_status st, const char *call) {
    assert_int_equal(st, DP_ERR_INTERNAL);
    char want[128];
    snprintf(want, sizeof want, "fakegpu: %s while a graph is being recorded", call);
    assert_string_equal(dp_last_error(), want);
    expect_spoiled(d, call);
}

static void test_capture_rules(void **state) {
    (void)state;
    dp_dev *d = fgt_open("0");
    float *x = fgt_put(d, NULL, N * 4), *y = NULL, h[N];
    void *v = NULL, *g = NULL;
    FGT_OK(d->capture_begin(d));
    forbidden(d, d->alloc(d, &y, N, "during capture"), "alloc");
    assert_null(y);
    FGT_OK(d->capture_begin(d));
    forbidden(d, d->wait(d), "wait");
    FGT_OK(d->capture_begin(d));
    forbidden(d, d->coll.wait(&d->coll), "wait");
    FGT_OK(d->capture_begin(d));
    forbidden(d, d->download(d, h, x, sizeof h), "download");
    FGT_OK(d->capture_begin(d));
    forbidden(d, d->host_alloc(d, &v, 64, "during capture"), "host_alloc");
    FGT_OK(d->capture_begin(d));
    forbidden(d, d->upload(d, x, h, sizeof h), "upload from pageable host memory");
    FGT_OK(d->capture_begin(d));
    d->free(d, x); /* void: the recording is spoiled, the block kept */
    expect_spoiled(d, "free");
    /* CUDA's capture rules: a lane that never waited for the main stream, work never joined */
    FGT_OK(d->capture_begin(d));
    d->k->relu_forward(&d->lanes[2].kc, N, x, x);
    assert_int_equal(d->capture_end(d, &g), DP_ERR_INTERNAL);
    assert_true(tu_contains(dp_last_error(), "relu_forward queued on lane stream 2, which never waited"));
    FGT_OK(d->capture_begin(d));
    FGT_OK(d->fork(d, 2));
    d->k->relu_forward(&d->lanes[1].kc, N, x, x);
    FGT_OK(d->join(d, 1));
    assert_int_equal(d->capture_end(d, &g), DP_ERR_INTERNAL);
    assert_true(tu_contains(dp_last_error(), "lane stream 1 has recorded work the main stream never waited for"));
    FGT_OK(d->capture_begin(d));
    FGT_OK(d->coll.wait_for(&d->coll, &d->main));
    d->k->relu_forward(&d->coll.kc, N, x, x);
    assert_int_equal(d->capture_end(d, &g), DP_ERR_INTERNAL);
    assert_true(tu_contains(dp_last_error(), "the collective stream has recorded work"));
    FGT_OK(d->capture_begin(d));
    assert_int_equal(d->capture_begin(d), DP_ERR_INTERNAL);
    FGT_OK(d->capture_end(d, &g)); /* an empty graph */
    FGT_OK(d->replay(d, g));
    d->graph_free(d, g);
    assert_int_equal(d->capture_end(d, &g), DP_ERR_INTERNAL);
    /* the device works on after all that */
    FGT_OK(d->host_alloc(d, &v, N * 4, "staging"));
    for (int i = 0; i < N; i++) ((float *)v)[i] = (float)i;
    FGT_OK(d->upload(d, x, v, N * 4));
    fgt_get(d, h, x, sizeof h);
    assert_memory_equal(h, v, sizeof h);
    d->host_free(d, v);
    d->free(d, x);
    fgt_close(d);
}

/* free synchronises the whole device: queued uploads have read their sources and every stream
 * has run what it was given, so reusing either is safe afterwards. */
static void test_free_synchronises(void **state) {
    (void)state;
    dp_dev *d = fgt_open("200");
    float *stage = NULL, *x = fgt_put(d, NULL, N * 4), *y = fgt_put(d, NULL, N * 4), back[N];
    FGT_OK(d->host_alloc(d, (void **)&stage, N * 4, "staging"));
    for (int t = 0; t < TRIES / 2; t++) {
        float *tmp = fgt_put(d, NULL, 16);
        for (int i = 0; i < N; i++) stage[i] = (float)t;
        FGT_OK(d->coll.wait_for(&d->coll, &d->main)); /* after the main stream's last read of x */
        FGT_OK(d->coll.upload(&d->coll, x, stage, N * 4)); /* on the collective stream */
        FGT_OK(d->fork(d, 3));
        d->k->copy(&d->lanes[2].kc, 2, tmp, tmp + 2); /* the lane and the freed block: still queued */
        d->free(d, tmp);
        for (int i = 0; i < N; i++) stage[i] = -1.0f;
        FGT_OK(d->join(d, 3));
        FGT_OK(d->main.wait_for(&d->main, &d->coll));
        d->k->copy(&d->main.kc, N, x, y);
        fgt_get(d, back, y, sizeof back);
        for (int i = 0; i < N; i++)
            if (back[i] != (float)t) fail_msg("try %d: element %d is %g: free did not wait for the upload", t, i, back[i]);
    }
    d->host_free(d, stage);
    d->free(d, x), d->free(d, y);
    fgt_close(d);
}

static void test_events(void **state) {
    (void)state;
    dp_dev *d = fgt_open("200");
    float *x = fgt_put(d, NULL, N * 4);
    void *ev = NULL, *g = NULL;
    double s = -1;
    FGT_OK(d->events_create(d, 4, &ev));
    int early = 0;
    for (int t = 0; t < TRIES / 4; t++) {
        FGT_OK(d->event_record(d, ev, 0));
        for (int k = 0; k < 5; k++) d->k->relu_forward(&d->main.kc, N, x, x);
        FGT_OK(d->event_record(d, ev, 1));
        FGT_OK(d->coll.record(&d->coll, ev, 2));
        if (d->event_elapsed(d, ev, 0, 1, &s) != DP_OK) /* no wait yet */
            early++, assert_true(tu_contains(dp_last_error(), "has not completed"));
        FGT_OK(d->wait(d));
        FGT_OK(d->coll.wait(&d->coll));
        FGT_OK(d->event_elapsed(d, ev, 0, 1, &s));
        assert_true(s >= 0);
        FGT_OK(d->event_elapsed(d, ev, 2, 2, &s));
        assert_true(s == 0);
    }
    assert_true(early > 0);
    assert_int_equal(d->event_elapsed(d, ev, 0, 3, &s), DP_ERR_BACKEND);
    assert_true(tu_contains(dp_last_error(), "event 3 was never recorded"));
    /* recorded in a graph: they complete when its replay does */
    FGT_OK(d->capture_begin(d));
    FGT_OK(d->event_record(d, ev, 3));
    d->k->relu_forward(&d->main.kc, N, x, x);
    FGT_OK(d->event_record(d, ev, 1));
    FGT_OK(d->capture_end(d, &g));
    FGT_OK(d->replay(d, g));
    FGT_OK(d->wait(d));
    FGT_OK(d->event_elapsed(d, ev, 3, 1, &s));
    assert_true(s >= 0);
    d->graph_free(d, g);
    d->events_free(d, ev, 4);
    d->free(d, x);
    fgt_close(d);
}

/* A wait under a policy with a watch (nccl sets one in its opener's policy) polls it, and its
 * failure ends the wait. */
static int watched;
static dp_status watch_fails(void *ctx, double waited_s) {
    (void)ctx, (void)waited_s;
    watched++;
    return dp_fail(DP_ERR_BACKEND, "a peer died");
}

static void test_watch_ends_a_wait(void **state) {
    (void)state;
    dp_dev *d = fgt_open("500");
    float *x = fgt_put(d, NULL, N * 4);
    FGT_OK(d->wait(d));
    for (int k = 0; k < 40; k++) d->k->relu_forward(&d->main.kc, N, x, x); /* ~10 ms of delays */
    fgt_waits.watch = watch_fails; /* the opener's policy: the device reads it, nobody writes the device */
    assert_int_equal(d->wait(d), DP_ERR_BACKEND);
    assert_string_equal(dp_last_error(), "a peer died");
    assert_true(watched > 0);
    fgt_waits.watch = NULL;
    FGT_OK(d->wait(d));
    d->free(d, x);
    fgt_close(d);
}

/* ---- the executor's staging on two devices, with a collective that bypasses one of them */

/* A backend of two local replicas whose step-metrics "all-reduce" leaves every buffer as it is: a
 * collective in which replica 0's sums need nothing from replica 1's device (as a broadcast from
 * rank 0 would), so the step's one wait, on replica 0's device, says nothing of replica 1's
 * uploads. Only what the executor calls here is provided. */
static const char *byp_name(dp_backend_t b) { return (void)b, "bypass"; }
static int byp_two(dp_backend_t b) { return (void)b, 2; }
static int byp_rank(dp_backend_t b, int local) { return (void)b, local; }
static dp_status byp_allreduce(dp_backend_t b, float *const *bufs, size_t n, dp_redop op) {
    return (void)b, (void)bufs, (void)n, (void)op, DP_OK;
}
static void byp_destroy(dp_backend_t b) { (void)b; }
static const struct dp_backend_i bypass_iface = {
    .name = byp_name, .world_size = byp_two, .n_local = byp_two, .rank = byp_rank,
    .allreduce = byp_allreduce, .destroy = byp_destroy,
};

/* Steps of staging and step metrics on two fake GPUs, GPU 1 behind a long kernel each step: the
 * host must not refill GPU 1's staging (batch copies, metrics) while its uploads from them are
 * queued. Without the staging events the step's wait (GPU 0's download) let the next step's
 * memcpy race GPU 1's pending uploads, which the fake GPU reports. */
static void test_staging_waits_for_each_device(void **state) {
    (void)state;
    dp_dev *d0 = fgt_open("50"), *d1 = NULL;
    FGT_OK(dp_dev_open("fakegpu", 1, 0, NULL, &d1));
    dp_model m;
    FGT_OK(dp_model_build("lenet", (dp_shape){1, 28, 28}, 10, &m));
    struct dp_backend be = {.iface = &bypass_iface};
    dp_dev *const devs[2] = {d0, d1};
    enum { SB = 4 };
    const dp_exec_config xc = {.dev = d0, .devs = devs, .backend = &be, .model = &m, .threads = 1, .n_lanes = 1,
                               .n_slots = 1, .lane_batch = SB, .max_local = SB};
    dp_executor *ex = NULL;
    FGT_OK(dp_exec_create(&ex, &xc));
    static float x[2][SB * 28 * 28];
    int32_t y[2][SB] = {{0}};
    float m0[2] = {0}, m1[2] = {0}, *bufs[2] = {m0, m1};
    for (int step = 0; step < 8; step++) {
        dp_fakegpu_stream_pause(d1, 20000); /* GPU 1 is slow: its uploads stay queued */
        for (int r = 0; r < 2; r++)
            for (int i = 0; i < SB * 28 * 28; i++) x[r][i] = (float)(step * 7 + r + i % 5);
        const dp_batch b[2] = {{.n = SB, .x = x[0], .y = y[0]}, {.n = SB, .x = x[1], .y = y[1]}};
        const dp_batch *db = NULL;
        FGT_OK(dp_exec_stage(ex, b, &db));
        FGT_OK(dp_exec_step_metrics(ex, bufs, 2, 1, NULL, 0));
    }
    const dp_status s = d1->wait(d1);
    const char *msg = s == DP_OK ? "" : dp_last_error();
    if (s != DP_OK) fail_msg("GPU 1: %s", msg);
    dp_exec_free(ex);
    dp_model_free(&m);
    fgt_close(d1);
    fgt_close(d0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_access_faults),      cmocka_unit_test(test_bad_pointers_abort),
        cmocka_unit_test(test_open_and_describe),       cmocka_unit_test(test_pinned_upload_is_async),
        cmocka_unit_test(test_pageable_upload_is_staged), cmocka_unit_test(test_lanes_need_join),
        cmocka_unit_test(test_collective_stream_ordering), cmocka_unit_test(test_capture_replays_bitwise),
        cmocka_unit_test(test_capture_rules),           cmocka_unit_test(test_free_synchronises),
        cmocka_unit_test(test_events),                  cmocka_unit_test(test_watch_ends_a_wait),
        cmocka_unit_test(test_staging_waits_for_each_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
