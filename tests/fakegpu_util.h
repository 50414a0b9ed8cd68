/* fakegpu_util.h: what the fakegpu suites share: opening the device, moving test data, and
 * checking that nothing leaked. */
#ifndef DP_FAKEGPU_UTIL_H
#define DP_FAKEGPU_UTIL_H

#include <stdlib.h>

#include "fakegpu.h"
#include "testutil.h"

/* A failed dp_status call fails the test with its message. */
#define FGT_OK(expr)                                                           \
    do {                                                                       \
        dp_status fgt_s_ = (expr);                                             \
        if (fgt_s_ != DP_OK) fail_msg("%s: %s", #expr, dp_last_error());       \
    } while (0)

/* The wait policy fgt_open's devices are opened with (a suite may set its watch, as nccl does). */
static dp_wait_policy fgt_waits;

/* Opens fakegpu 0; delay_us: the largest queueing delay (NULL: the environment's or the default). */
static inline dp_dev *fgt_open(const char *delay_us) {
    if (delay_us) setenv("DP_FAKEGPU_DELAY_US", delay_us, 1);
    FGT_OK(dp_fakegpu_register());
    dp_dev *d = NULL;
    FGT_OK(dp_dev_open("fakegpu", 0, 0, &fgt_waits, &d));
    return d;
}

/* Closes it, failing the test if a block was never freed. */
static inline void fgt_close(dp_dev *d) {
    size_t bytes = 0;
    const size_t n = dp_fakegpu_live(d, &bytes);
    dp_dev_close(d);
    if (n) fail_msg("%zu blocks (%zu bytes) were never freed", n, bytes);
}

/* bytes of device memory holding h (NULL: zeros) */
static inline void *fgt_put(dp_dev *d, const void *h, size_t bytes) {
    float *p = NULL;
    FGT_OK(d->alloc(d, &p, (bytes + sizeof(float) - 1) / sizeof(float), "test data"));
    if (h) FGT_OK(d->upload(d, p, h, bytes));
    return p;
}

static inline void fgt_get(dp_dev *d, void *h, const void *p, size_t bytes) { FGT_OK(d->download(d, h, p, bytes)); }

#endif
