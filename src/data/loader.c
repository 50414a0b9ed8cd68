/* loader.c: worker threads fill a bounded ring of batch slots ahead of the trainer.
 * Workers take batch numbers k from a shared counter and fill slot k % prefetch; a batch is
 * claimed only once the batch that used its slot before (k - prefetch) has been released by
 * the consumer, and the consumer takes batch k from slot k % prefetch once it is marked ready,
 * so batches arrive in order whatever the number of workers. dp_loader_start_epoch abandons
 * an epoch by stopping claims, waiting for the fills in flight and clearing every slot. */
#include "data/loader.h"

_Static_assert(sizeof(int) == sizeof(int32_t), "dp_batch.idx is the sampler's int indices");

#include <errno.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/timer.h"

typedef struct {
    int batch;      /* number of the batch the slot holds, ready to deliver; -1 if none */
    dp_batch *b;    /* (n_local) views into x and y */
    float *x;       /* (n_local, max_local, c, h, w) */
    int32_t *y;     /* (n_local, max_local) */
    int *idx, *pos; /* (n_local, max_local) scratch for the sampler */
} slot;

struct dp_loader {
    const dp_dataset *data;
    dp_sampler *sampler;
    int n_local, *ranks, workers, n_slots, max_local;
    int fill_threads;       /* the synchronous loader's OpenMP team (dp_loader_config) */
    dp_augment aug;
    int indices_only;       /* fill idx and y only (dp_loader_config) */
    slot *slots;

    pthread_t *threads;
    int n_threads;  /* started, to be joined */
    int have_mu, have_work_cv, have_done_cv;
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* workers wait for a batch to claim */
    pthread_cond_t done_cv; /* the consumer waits for a fill to finish */

    /* Under mu. */
    int stop, started;
    int n_batches;
    int next_claim;     /* next batch a worker takes */
    int next_deliver;   /* next batch the consumer takes */
    int released;       /* batches the consumer has finished with (their slots are free) */
    int holding;        /* the consumer holds batch next_deliver - 1 */
    int busy;           /* workers filling a slot now */

    /* A pthread call failing in a worker (a bug, or a broken runtime). */
    atomic_int broken, broken_claimed;
    char broken_msg[256];
};

static void mark_broken(dp_loader *l, const char *what, int rc) {
    if (atomic_exchange(&l->broken_claimed, 1) == 0) {
        snprintf(l->broken_msg, sizeof l->broken_msg, "data loader worker: %s failed: %s", what, strerror(rc));
        atomic_store(&l->broken, 1);
    }
    /* Best effort: waiters also wake on their own every second to look at `broken`. */
    pthread_cond_broadcast(&l->done_cv);
    pthread_cond_broadcast(&l->work_cv);
}

static dp_status broken_status(dp_loader *l) { return dp_fail(DP_ERR_INTERNAL, "%s", l->broken_msg); }

/* Fills batch k into slot s. threads > 1 (the synchronous loader, called between steps while the
 * compute threads are idle) splits each replica's samples among an OpenMP team: a sample's
 * floats depend on its index and position only, so the split changes no bit. */
static void fill_slot(const dp_loader *l, slot *s, int k, const dp_augment *aug, int threads) {
    const size_t chw = (size_t)l->data->c * l->data->h * l->data->w;
    for (int i = 0; i < l->n_local; i++) {
        const size_t off = (size_t)i * l->max_local;
        int *idx = s->idx + off, *pos = s->pos + off;
        s->b[i].n = dp_sampler_local(l->sampler, k, l->ranks[i], idx, pos);
        if (l->indices_only)
            for (int j = 0; j < s->b[i].n; j++) s->y[off + (size_t)j] = l->data->labels[idx[j]];
    }
    if (l->indices_only) return;
    const dp_augment *a = aug->enabled ? aug : NULL;
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        for (int i = 0; i < l->n_local; i++) {
            const size_t off = (size_t)i * l->max_local;
            const int n = s->b[i].n, lo = (int)((long)n * t / nt), hi = (int)((long)n * (t + 1) / nt);
            if (hi > lo)
                dp_batch_fill(l->data, s->idx + off + lo, s->pos + off + lo, hi - lo, a, s->x + (off + (size_t)lo) * chw,
                              s->y + off + lo);
        }
    }
}

static int can_claim(const dp_loader *l) {
    return l->started && l->next_claim < l->n_batches && l->next_claim < l->released + l->n_slots;
}

static void *worker_main(void *arg) {
    dp_loader *l = arg;
    int rc = pthread_mutex_lock(&l->mu);
    if (rc) {
        mark_broken(l, "pthread_mutex_lock", rc);
        return NULL;
    }
    for (;;) {
        while (!l->stop && !can_claim(l)) {
            if ((rc = pthread_cond_wait(&l->work_cv, &l->mu))) {
                pthread_mutex_unlock(&l->mu);
                mark_broken(l, "pthread_cond_wait", rc);
                return NULL;
            }
        }
        if (l->stop) break;
        const int k = l->next_claim++;
        const dp_augment aug = l->aug;
        slot *s = &l->slots[k % l->n_slots];
        l->busy++;
        if ((rc = pthread_mutex_unlock(&l->mu))) {
            mark_broken(l, "pthread_mutex_unlock", rc);
            return NULL;
        }
        /* The sampler's order and the slot are not touched by anyone else while busy > 0. */
        fill_slot(l, s, k, &aug, 1);
        if ((rc = pthread_mutex_lock(&l->mu))) {
            mark_broken(l, "pthread_mutex_lock", rc);
            return NULL;
        }
        l->busy--;
        s->batch = k; /* start_epoch clears it again if this epoch was abandoned meanwhile */
        if ((rc = pthread_cond_broadcast(&l->done_cv))) {
            pthread_mutex_unlock(&l->mu);
            mark_broken(l, "pthread_cond_broadcast", rc);
            return NULL;
        }
    }
    if ((rc = pthread_mutex_unlock(&l->mu))) mark_broken(l, "pthread_mutex_unlock", rc);
    return NULL;
}

static dp_status check(int rc, const char *what) {
    return rc ? dp_fail(DP_ERR_INTERNAL, "data loader: %s failed: %s", what, strerror(rc)) : DP_OK;
}

/* One wait on done_cv, at most a second long, so that a worker that broke without being able
 * to signal is noticed. The caller holds mu; on failure it still does. */
static dp_status wait_done(dp_loader *l) {
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts)) return dp_fail(DP_ERR_INTERNAL, "data loader: clock_gettime failed");
    ts.tv_sec += 1;
    int rc = pthread_cond_timedwait(&l->done_cv, &l->mu, &ts);
    if (rc && rc != ETIMEDOUT) return check(rc, "pthread_cond_timedwait");
    if (atomic_load(&l->broken)) return broken_status(l);
    return DP_OK;
}

static dp_status setup(dp_loader *l, const dp_loader_config *cfg) {
    const dp_dataset *d = cfg->data;
    if (!d || !cfg->sampler || !cfg->ranks || cfg->n_local < 1)
        return dp_fail(DP_ERR_INTERNAL, "data loader: incomplete configuration");
    if (cfg->workers < 0 || cfg->workers > 1024)
        return dp_fail(DP_ERR_USAGE, "--workers %d: expected 0..1024", cfg->workers);
    if (cfg->workers > 0 && cfg->prefetch < 1)
        return dp_fail(DP_ERR_INTERNAL, "data loader: prefetch %d, at least 1 slot is needed", cfg->prefetch);
    if (d->n != cfg->sampler->n_samples)
        return dp_fail(DP_ERR_INTERNAL, "data loader: the sampler covers %d samples, the data set has %d",
                       cfg->sampler->n_samples, d->n);
    l->data = d;
    l->sampler = cfg->sampler;
    l->n_local = cfg->n_local;
    l->workers = cfg->workers;
    l->fill_threads = cfg->workers == 0 && cfg->fill_threads > 1 ? cfg->fill_threads : 1;
    l->n_slots = cfg->workers > 0 ? cfg->prefetch : 1;
    l->max_local = dp_sampler_max_local(cfg->sampler);
    l->aug = cfg->augment;
    l->indices_only = cfg->indices_only && !cfg->augment.enabled;
    DP_ALLOC(l->ranks, l->n_local, "the loader's replica ranks");
    for (int i = 0; i < l->n_local; i++) {
        if (cfg->ranks[i] < 0 || cfg->ranks[i] >= cfg->sampler->n_replicas)
            return dp_fail(DP_ERR_INTERNAL, "data loader: replica rank %d outside 0..%d", cfg->ranks[i],
                           cfg->sampler->n_replicas - 1);
        l->ranks[i] = cfg->ranks[i];
    }

    const size_t per = (size_t)l->n_local * l->max_local, chw = (size_t)d->c * d->h * d->w;
    DP_ALLOC(l->slots, l->n_slots, "the loader's slots");
    for (int k = 0; k < l->n_slots; k++) {
        slot *s = &l->slots[k];
        s->batch = -1;
        DP_ALLOC(s->b, l->n_local, "a loader slot");
        DP_ALLOC(s->x, per * chw, "a loader slot's images");
        DP_ALLOC(s->y, per, "a loader slot's labels");
        DP_ALLOC(s->idx, per, "a loader slot's indices");
        DP_ALLOC(s->pos, per, "a loader slot's positions");
        for (int i = 0; i < l->n_local; i++)
            s->b[i] = (dp_batch){.n = 0, .x = s->x + (size_t)i * l->max_local * chw,
                                 .y = s->y + (size_t)i * l->max_local,
                                 .idx = (const int32_t *)s->idx + (size_t)i * l->max_local};
    }
    if (l->workers == 0) return DP_OK;

    pthread_mutexattr_t ma;
    DP_TRY(check(pthread_mutexattr_init(&ma), "pthread_mutexattr_init"));
    int rc = pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ERRORCHECK);
    if (!rc) rc = pthread_mutex_init(&l->mu, &ma);
    pthread_mutexattr_destroy(&ma);
    DP_TRY(check(rc, "pthread_mutex_init"));
    l->have_mu = 1;
    pthread_condattr_t ca;
    DP_TRY(check(pthread_condattr_init(&ca), "pthread_condattr_init"));
    rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (!rc) {
        rc = pthread_cond_init(&l->done_cv, &ca);
        l->have_done_cv = rc == 0;
    }
    if (!rc) {
        rc = pthread_cond_init(&l->work_cv, NULL);
        l->have_work_cv = rc == 0;
    }
    pthread_condattr_destroy(&ca);
    DP_TRY(check(rc, "pthread_cond_init"));

    DP_ALLOC(l->threads, l->workers, "the loader's threads");
    for (int t = 0; t < l->workers; t++) {
        rc = pthread_create(&l->threads[t], NULL, worker_main, l);
        if (rc)
            return dp_fail(DP_ERR_NOMEM, "data loader: cannot start worker thread %d of %d: %s (try fewer --workers)",
                           t + 1, l->workers, strerror(rc));
        l->n_threads++;
    }
    return DP_OK;
}

dp_status dp_loader_create(dp_loader **out, const dp_loader_config *cfg) {
    *out = NULL;
    dp_loader *l = calloc(1, sizeof *l);
    if (!l) return dp_fail(DP_ERR_NOMEM, "out of memory allocating the data loader");
    atomic_init(&l->broken, 0);
    atomic_init(&l->broken_claimed, 0);
    dp_status s = setup(l, cfg);
    if (s != DP_OK) {
        dp_loader_destroy(l); /* records no message: the setup's stays */
        return s;
    }
    *out = l;
    return DP_OK;
}

/* Epoch state shared by both modes; the caller makes sure no fill is in flight. */
static void reset_epoch(dp_loader *l, int epoch, int first) {
    for (int k = 0; k < l->n_slots; k++) l->slots[k].batch = -1;
    dp_sampler_set_epoch(l->sampler, epoch);
    l->aug.epoch = epoch;
    l->n_batches = l->sampler->n_batches;
    /* batches before `first` count as delivered and released: slot k % n_slots stays the rule */
    l->next_claim = l->next_deliver = l->released = first;
    l->holding = 0;
    l->started = 1;
}

dp_status dp_loader_start_epoch(dp_loader *l, int epoch) { return dp_loader_start_epoch_at(l, epoch, 0); }

dp_status dp_loader_start_epoch_at(dp_loader *l, int epoch, int first_batch) {
    if (first_batch < 0 || first_batch > l->sampler->n_batches)
        return dp_fail(DP_ERR_INTERNAL, "data loader: epoch %d has %d batches, cannot start at batch %d", epoch,
                       l->sampler->n_batches, first_batch);
    if (l->workers == 0) {
        reset_epoch(l, epoch, first_batch);
        return DP_OK;
    }
    DP_TRY(check(pthread_mutex_lock(&l->mu), "pthread_mutex_lock"));
    /* Stop claiming, then let in-flight fills of the old epoch finish; reset_epoch drops them. */
    l->started = 0;
    dp_status s = DP_OK;
    while (l->busy > 0 && s == DP_OK) s = wait_done(l);
    if (s == DP_OK) {
        reset_epoch(l, epoch, first_batch);
        s = check(pthread_cond_broadcast(&l->work_cv), "pthread_cond_broadcast");
    }
    dp_status u = check(pthread_mutex_unlock(&l->mu), "pthread_mutex_unlock");
    return s != DP_OK ? s : u;
}

dp_status dp_loader_next(dp_loader *l, const dp_batch **batches, double *wait_s) {
    if (wait_s) *wait_s = 0;
    *batches = NULL;
    if (l->workers == 0) {
        if (!l->started) return dp_fail(DP_ERR_INTERNAL, "data loader: next batch asked before the first epoch");
        if (l->next_deliver >= l->n_batches) return DP_DONE;
        double t0 = dp_now();
        fill_slot(l, &l->slots[0], l->next_deliver++, &l->aug, l->fill_threads);
        if (wait_s) *wait_s = dp_now() - t0;
        *batches = l->slots[0].b;
        return DP_OK;
    }
    DP_TRY(check(pthread_mutex_lock(&l->mu), "pthread_mutex_lock"));
    dp_status s = DP_OK;
    if (!l->started) {
        s = dp_fail(DP_ERR_INTERNAL, "data loader: next batch asked before the first epoch");
    } else {
        if (l->holding) { /* the previous batch's slot is free again */
            l->holding = 0;
            l->released++;
            s = check(pthread_cond_broadcast(&l->work_cv), "pthread_cond_broadcast");
        }
        if (s == DP_OK && l->next_deliver >= l->n_batches) s = DP_DONE;
    }
    if (s == DP_OK) {
        const int k = l->next_deliver;
        slot *sl = &l->slots[k % l->n_slots];
        double t0 = dp_now();
        while (sl->batch != k && s == DP_OK) s = wait_done(l);
        if (wait_s) *wait_s = dp_now() - t0;
        if (s == DP_OK) {
            l->next_deliver++;
            l->holding = 1;
            *batches = sl->b;
        }
    }
    dp_status u = check(pthread_mutex_unlock(&l->mu), "pthread_mutex_unlock");
    return s != DP_OK ? s : u;
}

void dp_loader_destroy(dp_loader *l) {
    if (!l) return;
    if (l->n_threads > 0) {
        /* If the lock fails the store still happens; the workers' waits are not timed, so this is
         * best effort in a runtime that is already broken. */
        int locked = pthread_mutex_lock(&l->mu) == 0;
        l->stop = 1;
        pthread_cond_broadcast(&l->work_cv);
        if (locked) pthread_mutex_unlock(&l->mu);
        for (int t = 0; t < l->n_threads; t++) pthread_join(l->threads[t], NULL);
    }
    if (l->have_work_cv) pthread_cond_destroy(&l->work_cv);
    if (l->have_done_cv) pthread_cond_destroy(&l->done_cv);
    if (l->have_mu) pthread_mutex_destroy(&l->mu);
    if (l->slots)
        for (int k = 0; k < l->n_slots; k++) {
            slot *s = &l->slots[k];
            free(s->b), free(s->x), free(s->y), free(s->idx), free(s->pos);
        }
    free(l->slots);
    free(l->threads);
    free(l->ranks);
    free(l);
}
