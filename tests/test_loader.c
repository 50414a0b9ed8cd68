/* The loader: the same bytes in the same order for any number of workers; batches equal to
 * what the sampler and dp_batch_fill say; normalised values; abandoning an epoch midway;
 * augmentation keyed by (seed, epoch, position): identical across worker and replica counts,
 * different across epochs, and really changing the images. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data/loader.h"

typedef struct {
    float *x;      /* all delivered images, concatenated */
    int32_t *y;
    int *counts;   /* per batch and local replica */
    size_t nx, ny;
    int n_batches;
} epoch_data;

static void free_epoch(epoch_data *e) { free(e->x), free(e->y), free(e->counts); }

/* Runs epoch `epoch` of a loader with the given shape, returning everything it delivered. */
static void run_epoch(dp_loader *l, int epoch, int n_local, size_t chw, epoch_data *e) {
    memset(e, 0, sizeof *e);
    assert_int_equal(dp_loader_start_epoch(l, epoch), DP_OK);
    const dp_batch *b;
    double wait;
    dp_status s;
    while ((s = dp_loader_next(l, &b, &wait)) == DP_OK) {
        assert_true(wait >= 0);
        e->counts = realloc(e->counts, (size_t)(e->n_batches + 1) * n_local * sizeof *e->counts);
        assert_non_null(e->counts);
        for (int i = 0; i < n_local; i++) {
            e->counts[e->n_batches * n_local + i] = b[i].n;
            e->x = realloc(e->x, (e->nx + (size_t)b[i].n * chw) * sizeof *e->x + 1);
            e->y = realloc(e->y, (e->ny + (size_t)b[i].n) * sizeof *e->y + 1);
            assert_non_null(e->x);
            assert_non_null(e->y);
            memcpy(e->x + e->nx, b[i].x, (size_t)b[i].n * chw * sizeof *e->x);
            memcpy(e->y + e->ny, b[i].y, (size_t)b[i].n * sizeof *e->y);
            e->nx += (size_t)b[i].n * chw, e->ny += (size_t)b[i].n;
        }
        e->n_batches++;
    }
    assert_int_equal(s, DP_DONE);
    assert_int_equal(dp_loader_next(l, &b, &wait), DP_DONE); /* stays done */
}

static int fill_threads = 1; /* the synchronous loader's team in make_loader */

static dp_loader *make_loader(const dp_dataset *d, dp_sampler *s, int n_local, const int *ranks, int workers,
                              int prefetch, int augment, uint64_t aug_seed) {
    dp_loader_config c = {.data = d, .sampler = s, .n_local = n_local, .ranks = ranks, .workers = workers,
                          .prefetch = prefetch, .augment = {.enabled = augment, .seed = aug_seed},
                          .fill_threads = fill_threads};
    dp_loader *l;
    dp_status st = dp_loader_create(&l, &c);
    if (st != DP_OK) fail_msg("%s", dp_last_error());
    return l;
}

static void assert_same(const epoch_data *a, const epoch_data *b) {
    assert_int_equal(a->n_batches, b->n_batches);
    assert_int_equal(a->nx, b->nx);
    assert_int_equal(a->ny, b->ny);
    assert_memory_equal(a->x, b->x, a->nx * sizeof *a->x);
    assert_memory_equal(a->y, b->y, a->ny * sizeof *a->y);
}

/* What the loader must deliver: the sampler's shares filled by dp_batch_fill, batch by batch. */
static void expected_epoch(const dp_dataset *d, dp_sampler *s, int epoch, int n_local, const int *ranks,
                           const dp_augment *aug, epoch_data *e) {
    memset(e, 0, sizeof *e);
    dp_sampler_set_epoch(s, epoch);
    const size_t chw = (size_t)d->c * d->h * d->w;
    const int ml = dp_sampler_max_local(s);
    int *idx = malloc(ml * sizeof *idx), *pos = malloc(ml * sizeof *pos);
    e->x = malloc((size_t)s->total * chw * sizeof *e->x + 1);
    e->y = malloc((size_t)s->total * sizeof *e->y + 1);
    assert_non_null(idx);
    assert_non_null(pos);
    assert_non_null(e->x);
    assert_non_null(e->y);
    dp_augment a = aug ? *aug : (dp_augment){0};
    a.epoch = epoch;
    for (int b = 0; b < s->n_batches; b++, e->n_batches++)
        for (int i = 0; i < n_local; i++) {
            int n = dp_sampler_local(s, b, ranks[i], idx, pos);
            dp_batch_fill(d, idx, pos, n, &a, e->x + e->nx, e->y + e->ny);
            e->nx += (size_t)n * chw, e->ny += (size_t)n;
        }
    free(idx), free(pos);
}

static void test_workers_identical(void **state) {
    (void)state;
    dp_dataset d;
    assert_int_equal(dp_synthetic_make(1, 28, 28, 10, 103, 5, &d), DP_OK);
    const size_t chw = 784;
    const int ranks[2] = {0, 1};
    dp_sampler s;
    assert_int_equal(dp_sampler_init(&s, d.n, 2, 10, 1, 0, 77), DP_OK);
    const int cfg[][2] = {{0, 1}, {1, 1}, {1, 3}, {3, 1}, {3, 7}, {2, 2}};
    for (int epoch = 0; epoch < 2; epoch++) {
        epoch_data want;
        expected_epoch(&d, &s, epoch, 2, ranks, NULL, &want);
        assert_int_equal(want.n_batches, 11);
        for (size_t k = 0; k < sizeof cfg / sizeof *cfg; k++) {
            dp_loader *l = make_loader(&d, &s, 2, ranks, cfg[k][0], cfg[k][1], 0, 0);
            epoch_data got;
            run_epoch(l, epoch, 2, chw, &got);
            assert_same(&got, &want);
            assert_int_equal(got.counts[0], 5); /* 10 over 2 replicas */
            assert_int_equal(got.counts[10 * 2 + 0], 2); /* last batch: 104 - 100 = 4 positions */
            free_epoch(&got);
            dp_loader_destroy(l);
        }
        free_epoch(&want);
    }
    dp_sampler_free(&s);
    dp_dataset_free(&d);
}

/* The synchronous loader's batch filled by a team of 1, 2, 3 or 7 threads (more threads than a
 * replica's samples included), with and without augmentation: the same bytes as one thread. */
static void test_fill_threads_identical(void **state) {
    (void)state;
    dp_dataset d;
    assert_int_equal(dp_synthetic_make(1, 28, 28, 10, 103, 5, &d), DP_OK);
    const int ranks[3] = {0, 1, 2};
    dp_sampler s;
    assert_int_equal(dp_sampler_init(&s, d.n, 3, 15, 1, 0, 41), DP_OK);
    const int teams[] = {1, 2, 3, 7};
    for (int augment = 0; augment < 2; augment++) {
        dp_augment aug = {.enabled = augment, .seed = 5};
        epoch_data want;
        expected_epoch(&d, &s, 3, 3, ranks, &aug, &want);
        for (size_t k = 0; k < sizeof teams / sizeof *teams; k++) {
            fill_threads = teams[k];
            dp_loader *l = make_loader(&d, &s, 3, ranks, 0, 1, augment, 5);
            epoch_data got;
            run_epoch(l, 3, 3, 784, &got);
            assert_same(&got, &want);
            free_epoch(&got);
            dp_loader_destroy(l);
        }
        fill_threads = 1;
        free_epoch(&want);
    }
    dp_sampler_free(&s);
    dp_dataset_free(&d);
}

/* A delivered batch stays intact while the workers run ahead (the ring never overwrites a held slot). */
static void test_held_batch_intact(void **state) {
    (void)state;
    dp_dataset d;
    assert_int_equal(dp_synthetic_make(1, 28, 28, 10, 200, 8, &d), DP_OK);
    dp_sampler s;
    assert_int_equal(dp_sampler_init(&s, d.n, 2, 8, 1, 0, 4), DP_OK);
    const int ranks[2] = {0, 1};
    epoch_data want;
    expected_epoch(&d, &s, 0, 2, ranks, NULL, &want);
    for (int prefetch = 1; prefetch <= 2; prefetch++) {
        dp_loader *l = make_loader(&d, &s, 2, ranks, 3, prefetch, 0, 0);
        assert_int_equal(dp_loader_start_epoch(l, 0), DP_OK);
        const dp_batch *b;
        size_t at = 0;
        for (int k = 0; k < want.n_batches; k++) {
            assert_int_equal(dp_loader_next(l, &b, NULL), DP_OK);
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL); /* time for any worker to (wrongly) refill this slot */
            for (int i = 0; i < 2; i++) {
                assert_memory_equal(b[i].x, want.x + at * 784, (size_t)b[i].n * 784 * sizeof(float));
                at += (size_t)b[i].n;
            }
        }
        assert_int_equal(dp_loader_next(l, &b, NULL), DP_DONE);
        dp_loader_destroy(l);
    }
    free_epoch(&want);
    dp_sampler_free(&s);
    dp_dataset_free(&d);
}

static void test_normalised_values(void **state) {
    (void)state;
    dp_dataset d;
    assert_int_equal(dp_synthetic_make(3, 4, 5, 10, 20, 1, &d), DP_OK);
    const float mean[3] = {0.4914f, 0.4822f, 0.4465f}, std[3] = {0.2470f, 0.2435f, 0.2616f};
    memcpy(d.mean, mean, sizeof mean), memcpy(d.std, std, sizeof std);
    dp_sampler s;
    assert_int_equal(dp_sampler_init(&s, d.n, 1, 20, 0, 0, 1), DP_OK);
    const int rank = 0;
    for (int workers = 0; workers <= 1; workers++) {
        dp_loader *l = make_loader(&d, &s, 1, &rank, workers, 2, 0, 0);
        assert_int_equal(dp_loader_start_epoch(l, 0), DP_OK);
        const dp_batch *b;
        assert_int_equal(dp_loader_next(l, &b, NULL), DP_OK);
        assert_int_equal(b[0].n, 20);
        for (int i = 0; i < 20; i++) { /* no shuffle: file order */
            assert_int_equal(b[0].y[i], d.labels[i]);
            for (int ch = 0; ch < 3; ch++)
                for (int p = 0; p < 20; p++) {
                    float v = d.pixels[(size_t)i * 60 + ch * 20 + p];
                    float want = (v / 255.0f - mean[ch]) / std[ch];
                    assert_float_equal(b[0].x[(size_t)i * 60 + ch * 20 + p], want, 1e-5);
                }
        }
        assert_int_equal(dp_loader_next(l, &b, NULL), DP_DONE);
        dp_loader_destroy(l);
    }
    dp_sampler_free(&s);
    dp_dataset_free(&d);
}

static void test_abandon_epoch(void **state) {
    (void)state;
    dp_dataset d;
    assert_int_equal(dp_synthetic_make(1, 28, 28, 10, 300, 2, &d), DP_OK);
    dp_sampler s;
    assert_int_equal(dp_sampler_init(&s, d.n, 3, 9, 1, 0, 11), DP_OK);
    const int ranks[3] = {0, 1, 2};
    epoch_data want;
    expected_epoch(&d, &s, 5, 3, ranks, NULL, &want);
    for (int workers = 0; workers <= 3; workers += 3) {
        dp_loader *l = make_loader(&d, &s, 3, ranks, workers, 4, 0, 0);
        const dp_batch *b;
        assert_int_equal(dp_loader_start_epoch(l, 1), DP_OK);
        for (int k = 0; k < 3; k++) assert_int_equal(dp_loader_next(l, &b, NULL), DP_OK);
        assert_int_equal(dp_loader_start_epoch(l, 2), DP_OK); /* abandoned after 3 batches */
        assert_int_equal(dp_loader_start_epoch(l, 3), DP_OK); /* and one never read */
        for (int e = 10; e < 40; e++) { /* many abandons while fills are in flight */
            assert_int_equal(dp_loader_start_epoch(l, e), DP_OK);
            assert_int_equal(dp_loader_next(l, &b, NULL), DP_OK);
        }
        epoch_data got;
        run_epoch(l, 5, 3, 784, &got);
        assert_same(&got, &want);
        free_epoch(&got);
        /* destroyed mid-epoch, with workers still filling */
        assert_int_equal(dp_loader_start_epoch(l, 6), DP_OK);
        assert_int_equal(dp_loader_next(l, &b, NULL), DP_OK);
        dp_loader_destroy(l);
    }
    free_epoch(&want);
    /* destroyed before any epoch */
    dp_loader_destroy(make_loader(&d, &s, 3, ranks, 2, 4, 0, 0));
    dp_loader_destroy(NULL);
    dp_sampler_free(&s);
    dp_dataset_free(&d);
}

/* Abandoning epochs while slow (augmented, large) fills are in flight: none of them leaks into
 * the next epoch. */
static void test_abandon_stress(void **state) {
    (void)state;
    dp_dataset d;
    assert_int_equal(dp_synthetic_make(1, 96, 96, 10, 256, 2, &d), DP_OK);
    dp_sampler s;
    assert_int_equal(dp_sampler_init(&s, d.n, 1, 32, 1, 0, 11), DP_OK);
    const int rank = 0;
    dp_augment aug = {.enabled = 1, .seed = 6};
    epoch_data want;
    expected_epoch(&d, &s, 100, 1, &rank, &aug, &want);
    dp_loader *l = make_loader(&d, &s, 1, &rank, 3, 4, 1, 6);
    const dp_batch *b;
    for (int e = 0; e < 20; e++) {
        assert_int_equal(dp_loader_start_epoch(l, e), DP_OK);
        if (e % 2) assert_int_equal(dp_loader_next(l, &b, NULL), DP_OK);
    }
    epoch_data got;
    run_epoch(l, 100, 1, 96 * 96, &got);
    assert_same(&got, &want);
    free_epoch(&got), free_epoch(&want);
    dp_loader_destroy(l);
    dp_sampler_free(&s);
    dp_dataset_free(&d);
}

static void test_misuse(void **state) {
    (void)state;
    dp_dataset d;
    assert_int_equal(dp_synthetic_make(1, 8, 8, 10, 30, 2, &d), DP_OK);
    dp_sampler s;
    assert_int_equal(dp_sampler_init(&s, d.n, 2, 4, 1, 0, 11), DP_OK);
    const int bad = 2, good = 1;
    dp_loader_config c = {.data = &d, .sampler = &s, .n_local = 1, .ranks = &bad, .workers = 1, .prefetch = 2};
    dp_loader *l;
    assert_int_not_equal(dp_loader_create(&l, &c), DP_OK);
    assert_null(l);
    c.ranks = &good;
    c.prefetch = 0;
    assert_int_not_equal(dp_loader_create(&l, &c), DP_OK);
    c.prefetch = 1;
    for (int w = 0; w <= 1; w++) {
        c.workers = w;
        assert_int_equal(dp_loader_create(&l, &c), DP_OK);
        const dp_batch *b;
        assert_int_not_equal(dp_loader_next(l, &b, NULL), DP_OK); /* before any epoch */
        assert_true(tu_contains(dp_last_error(), "epoch"));
        dp_loader_destroy(l);
    }
    dp_sampler_free(&s);
    dp_dataset_free(&d);
}

/* Augmented data for a given data set: workers 0 vs 3 identical; replica counts 1 and 3 give the
 * same image at every position; one rank alone matches its share; epochs differ; images change. */
static void check_augment(int c, int h, int w) {
    dp_dataset d;
    const int n = 96, B = 12;
    const size_t chw = (size_t)c * h * w;
    assert_int_equal(dp_synthetic_make(c, h, w, 10, n, 3, &d), DP_OK);
    dp_sampler s1, s3, s3b;
    assert_int_equal(dp_sampler_init(&s1, n, 1, B, 1, 0, 21), DP_OK);
    assert_int_equal(dp_sampler_init(&s3, n, 3, B, 1, 0, 21), DP_OK);
    assert_int_equal(dp_sampler_init(&s3b, n, 3, B, 1, 0, 21), DP_OK);
    const int r0 = 0, r3[3] = {0, 1, 2}, r_one = 1;

    epoch_data a0, a3, one, plain;
    dp_loader *l = make_loader(&d, &s1, 1, &r0, 0, 1, 1, 99);
    run_epoch(l, 4, 1, chw, &a0);
    dp_loader_destroy(l);
    l = make_loader(&d, &s1, 1, &r0, 3, 5, 1, 99);
    epoch_data w3;
    run_epoch(l, 4, 1, chw, &w3);
    assert_same(&w3, &a0);
    free_epoch(&w3);
    dp_loader_destroy(l);
    l = make_loader(&d, &s1, 1, &r0, 0, 1, 0, 99);
    run_epoch(l, 4, 1, chw, &plain);
    dp_loader_destroy(l);
    l = make_loader(&d, &s3, 3, r3, 2, 3, 1, 99);
    run_epoch(l, 4, 3, chw, &a3);
    dp_loader_destroy(l);
    l = make_loader(&d, &s3b, 1, &r_one, 1, 2, 1, 99);
    run_epoch(l, 4, 1, chw, &one);
    dp_loader_destroy(l);

    /* position p: with N = 1 it is the p-th image delivered; with N = 3 look it up */
    dp_sampler_set_epoch(&s3, 4);
    size_t at3 = 0, at_one = 0;
    int changed = 0;
    for (int b = 0; b < s3.n_batches; b++)
        for (int r = 0; r < 3; r++) {
            int idx[8], pos[8];
            int cnt = dp_sampler_local(&s3, b, r, idx, pos);
            for (int j = 0; j < cnt; j++, at3++) {
                const float *x1 = a0.x + (size_t)pos[j] * chw, *x3 = a3.x + at3 * chw;
                assert_memory_equal(x1, x3, chw * sizeof *x1);
                assert_int_equal(a0.y[pos[j]], a3.y[at3]);
                if (r == 1) {
                    assert_memory_equal(one.x + at_one * chw, x3, chw * sizeof *x3);
                    at_one++;
                }
                if (memcmp(x1, plain.x + (size_t)pos[j] * chw, chw * sizeof *x1) != 0) changed++;
            }
        }
    assert_int_equal(at3, (size_t)n);
    assert_int_equal(at_one, one.ny);
    assert_true(changed >= n * 9 / 10); /* augmentation changes (almost) every image */
    /* another epoch draws again: the same samples at the same positions (no shuffle) differ */
    dp_sampler sf;
    assert_int_equal(dp_sampler_init(&sf, n, 1, B, 0, 0, 21), DP_OK);
    epoch_data e4, e5;
    l = make_loader(&d, &sf, 1, &r0, 1, 2, 1, 99);
    run_epoch(l, 4, 1, chw, &e4);
    run_epoch(l, 5, 1, chw, &e5);
    dp_loader_destroy(l);
    assert_memory_equal(e4.y, e5.y, e4.ny * sizeof *e4.y);
    int same = 0;
    for (int p = 0; p < n; p++) same += memcmp(e4.x + (size_t)p * chw, e5.x + (size_t)p * chw, chw * sizeof *e4.x) == 0;
    assert_true(same <= n / 10);
    free_epoch(&e4), free_epoch(&e5);
    dp_sampler_free(&sf);

    /* 32x32: every image is the plain one shifted by (-4..4, -4..4) with zero fill, maybe flipped */
    if (h == 32 && w == 32) {
        const float fill0 = -d.mean[0] / d.std[0];
        for (int p = 0; p < n; p++) {
            const float *x = a0.x + (size_t)p * chw, *src = plain.x + (size_t)p * chw;
            int found = 0;
            for (int oy = -4; oy <= 4 && !found; oy++)
                for (int ox = -4; ox <= 4 && !found; ox++)
                    for (int flip = 0; flip <= 1 && !found; flip++) {
                        int ok = 1;
                        for (int ch = 0; ch < c && ok; ch++)
                            for (int yy = 0; yy < h && ok; yy++)
                                for (int xx = 0; xx < w && ok; xx++) {
                                    int sy = yy + oy, sx = (flip ? w - 1 - xx : xx) + ox;
                                    float want = sy >= 0 && sy < h && sx >= 0 && sx < w
                                                     ? src[(size_t)ch * h * w + sy * w + sx]
                                                     : (ch == 0 ? fill0 : -d.mean[ch] / d.std[ch]);
                                    ok = fabsf(x[(size_t)ch * h * w + yy * w + xx] - want) < 1e-5f;
                                }
                        found = ok;
                    }
            assert_true(found);
        }
    } else {
        /* the affine keeps values inside the normalised range of 0..255 */
        const float lo = -d.mean[0] / d.std[0] - 1e-4f, hi = (1 - d.mean[0]) / d.std[0] + 1e-4f;
        for (size_t i = 0; i < a0.nx; i++) assert_true(a0.x[i] >= lo && a0.x[i] <= hi);
    }
    free_epoch(&a0), free_epoch(&a3), free_epoch(&one), free_epoch(&plain);
    dp_sampler_free(&s1), dp_sampler_free(&s3), dp_sampler_free(&s3b);
    dp_dataset_free(&d);
}

static void test_augment_28(void **state) {
    (void)state;
    check_augment(1, 28, 28);
}

static void test_augment_32(void **state) {
    (void)state;
    check_augment(3, 32, 32);
}

/* The affine leaves a constant image constant away from the borders, and keeps its label. */
static void test_affine_sanity(void **state) {
    (void)state;
    dp_dataset d;
    assert_int_equal(dp_synthetic_make(1, 28, 28, 10, 4, 3, &d), DP_OK);
    memset(d.pixels, 200, 4 * 784);
    int idx[4] = {0, 1, 2, 3}, pos[4] = {10, 11, 12, 13};
    float x[4 * 784];
    int32_t y[4];
    dp_augment aug = {.enabled = 1, .seed = 5, .epoch = 0};
    dp_batch_fill(&d, idx, pos, 4, &aug, x, y);
    const float v200 = (200.0f / 255.0f - d.mean[0]) / d.std[0];
    for (int i = 0; i < 4; i++) {
        assert_int_equal(y[i], d.labels[i]);
        /* the centre stays inside the image after +-10 deg and +-3 px */
        for (int yy = 10; yy < 18; yy++)
            for (int xx = 10; xx < 18; xx++) assert_float_equal(x[i * 784 + yy * 28 + xx], v200, 1e-4);
    }
    dp_dataset_free(&d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_workers_identical),
        cmocka_unit_test(test_fill_threads_identical), cmocka_unit_test(test_held_batch_intact),
        cmocka_unit_test(test_normalised_values),
        cmocka_unit_test(test_abandon_epoch),     cmocka_unit_test(test_abandon_stress), cmocka_unit_test(test_misuse),
        cmocka_unit_test(test_augment_28),        cmocka_unit_test(test_augment_32),
        cmocka_unit_test(test_affine_sanity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
