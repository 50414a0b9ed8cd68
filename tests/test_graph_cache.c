/* The step-graph cache (src/train/graph.c) on a fake device that counts what it is asked to do:
 * a key seen once runs eagerly, the second time it is recorded (and run once), later it is
 * replayed and the backend's statistics grow as if it had run; keys seen once are evicted before
 * recorded graphs; a failure while recording ends the recording and records nothing. */
#include "testutil.h"

#include <string.h>

#include "exec/graph.h"

static int capturing, captured_runs, eager_runs, replays, freed, graphs_made;
static int graph_ids[64];

static dp_status begin(const dp_dev *d) {
    (void)d;
    capturing = 1;
    return DP_OK;
}
static dp_status end(const dp_dev *d, void **g) {
    (void)d;
    capturing = 0;
    *g = &graph_ids[graphs_made++ % 64];
    return DP_OK;
}
static dp_status replay(const dp_dev *d, void *g) {
    (void)d, (void)g;
    replays++;
    return DP_OK;
}
static void gfree(const dp_dev *d, void *g) {
    (void)d;
    if (g) freed++;
}

static int fail_next;
static dp_status work(void *arg) {
    dp_backend_t b = arg;
    if (fail_next) return fail_next = 0, dp_fail(DP_ERR_BACKEND, "planted");
    if (capturing) captured_runs++;
    else eager_runs++;
    b->stats.calls[DP_COLL_ALLREDUCE] += 2; /* what a run adds */
    return DP_OK;
}

static void reset(void) { capturing = captured_runs = eager_runs = replays = freed = graphs_made = fail_next = 0; }

static void test_cache(void **state) {
    (void)state;
    reset();
    dp_dev d = {.name = "fake", .capture_begin = begin, .capture_end = end, .replay = replay, .graph_free = gfree};
    struct dp_backend b;
    memset(&b, 0, sizeof b);
    dp_graph_cache c;
    memset(&c, 0, sizeof c);
    /* first sight: eager; second: recorded (+ replayed once); third: replayed */
    for (int i = 0; i < 3; i++) assert_int_equal(dp_graph_run(&c, &d, &b, 1, 42, work, &b), DP_OK);
    assert_int_equal(eager_runs, 1);
    assert_int_equal(captured_runs, 1);
    assert_int_equal(replays, 2);
    assert_int_equal(b.stats.calls[DP_COLL_ALLREDUCE], 6); /* three runs' worth */
    /* disabled: always the function */
    assert_int_equal(dp_graph_run(&c, &d, &b, 0, 42, work, &b), DP_OK);
    assert_int_equal(eager_runs, 2);
    /* many keys seen once (a learning rate that changes every step) do not evict the recorded graph */
    for (int k = 0; k < 3 * DP_GRAPH_SLOTS; k++) assert_int_equal(dp_graph_run(&c, &d, &b, 1, 1000 + k, work, &b), DP_OK);
    const int before = replays;
    assert_int_equal(dp_graph_run(&c, &d, &b, 1, 42, work, &b), DP_OK);
    assert_int_equal(replays, before + 1);
    /* a failure while recording: the error comes back, nothing is kept, the next sight records */
    assert_int_equal(dp_graph_run(&c, &d, &b, 1, 7, work, &b), DP_OK); /* first sight */
    fail_next = 1;
    assert_int_equal(dp_graph_run(&c, &d, &b, 1, 7, work, &b), DP_ERR_BACKEND);
    assert_int_equal(capturing, 0);
    const int made = graphs_made;
    assert_int_equal(dp_graph_run(&c, &d, &b, 1, 7, work, &b), DP_OK);
    assert_int_equal(graphs_made, made + 1);
    dp_graph_cache_free(&c, &d);
    assert_true(freed >= 2);
}

/* A device that cannot record (the CPU) just runs the function. */
static void test_no_capture(void **state) {
    (void)state;
    reset();
    dp_dev d = {.name = "cpu"};
    struct dp_backend b;
    memset(&b, 0, sizeof b);
    dp_graph_cache c;
    memset(&c, 0, sizeof c);
    for (int i = 0; i < 3; i++) assert_int_equal(dp_graph_run(&c, &d, &b, 1, 5, work, &b), DP_OK);
    assert_int_equal(eager_runs, 3);
    assert_int_equal(replays, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cache), cmocka_unit_test(test_no_capture)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
