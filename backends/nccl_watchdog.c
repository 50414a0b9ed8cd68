/* nccl_watchdog.c: see nccl_watchdog.h. Plain pthreads and a monotonic clock; the thread wakes
 * every 100 ms and reads what the main thread is in, under a mutex. */
#include "backends/nccl_watchdog.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/timer.h"

struct dp_nccl_watchdog {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    char who[96];
    double limit_s;   /* deadline + grace */
    double grace_s;
    double limit_now; /* the limit of the call the main thread is in */
    const char *what; /* the call the main thread is in, or NULL */
    double since;     /* when it entered it */
};

static void *watch(void *arg) {
    dp_nccl_watchdog *w = arg;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        if (w->what && dp_now() - w->since > w->limit_now) {
            /* the main thread cannot end this call itself: say so and end the process */
            fprintf(stderr, "dptrain: nccl: %s: %s has not returned after %.0f s (%s); the watchdog ends this "
                    "rank\n", w->who, w->what, dp_now() - w->since,
                    w->limit_now < w->limit_s ? "a grace period" : "--timeout and a grace period");
            fflush(stderr);
            _exit(1);
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 100 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&w->cv, &w->mu, &until);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

dp_status dp_nccl_watchdog_start(const char *who, double deadline_s, double grace_s, dp_nccl_watchdog **out) {
    *out = NULL;
    dp_nccl_watchdog *w = calloc(1, sizeof *w);
    if (!w) return dp_fail(DP_ERR_NOMEM, "nccl: %s: out of memory starting the watchdog", who);
    snprintf(w->who, sizeof w->who, "%s", who);
    w->limit_s = deadline_s + grace_s, w->grace_s = grace_s;
    int e = pthread_mutex_init(&w->mu, NULL);
    if (!e) e = pthread_cond_init(&w->cv, NULL);
    if (!e) e = pthread_create(&w->thread, NULL, watch, w);
    if (e) {
        free(w);
        return dp_fail(DP_ERR_BACKEND, "nccl: %s: cannot start the watchdog thread: %s", who, strerror(e));
    }
    *out = w;
    return DP_OK;
}

static void enter(dp_nccl_watchdog *w, const char *what, double limit) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->what = what, w->since = dp_now(), w->limit_now = limit;
    pthread_mutex_unlock(&w->mu);
}
void dp_nccl_watchdog_enter(dp_nccl_watchdog *w, const char *what) { enter(w, what, w ? w->limit_s : 0); }
void dp_nccl_watchdog_enter_brief(dp_nccl_watchdog *w, const char *what) { enter(w, what, w ? w->grace_s : 0); }

void dp_nccl_watchdog_leave(dp_nccl_watchdog *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->what = NULL;
    pthread_mutex_unlock(&w->mu);
}

void dp_nccl_watchdog_stop(dp_nccl_watchdog *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
