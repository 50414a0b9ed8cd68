/* timer.h: monotonic wall-clock seconds. */
#ifndef DP_TIMER_H
#define DP_TIMER_H

#include <time.h>

static inline double dp_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
