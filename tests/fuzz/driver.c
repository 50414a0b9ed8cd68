/* driver.c: a fuzz target's smoke run without libFuzzer (CI builds with gcc): the seeds, then
 * random mutations of them (byte flips, inserts, deletes, copies, tokens that break parsers) for
 * DP_FUZZ_SECONDS (default 3) seconds, each input fed to LLVMFuzzerTestOneInput. A crash or a
 * sanitizer report fails the test; the seed of the run is printed (DP_FUZZ_SEED replays it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/timer.h"
#include "fuzz.h"

#define MAX_SEEDS 16
#define MAX_INPUT (2u << 20)

static uint8_t *seeds[MAX_SEEDS];
static size_t seed_len[MAX_SEEDS];
static int n_seeds;

static void add_seed(const uint8_t *data, size_t size) {
    if (n_seeds == MAX_SEEDS || size > MAX_INPUT / 2) return;
    seeds[n_seeds] = malloc(size ? size : 1);
    if (!seeds[n_seeds]) abort();
    memcpy(seeds[n_seeds], data, size);
    seed_len[n_seeds++] = size;
}

static uint64_t state;
static uint32_t next(void) { /* xorshift64* */
    state ^= state >> 12, state ^= state << 25, state ^= state >> 27;
    return (uint32_t)((state * 2685821657736338717ull) >> 32);
}

/* A place to mutate: mostly near the start, where headers and keys are. */
static size_t where(size_t n) { return n == 0 ? 0 : (next() % 10 < 8 && n > 2048) ? next() % 2048 : next() % n; }

static size_t mutate(uint8_t *b, size_t n) {
    static const char *const tokens[] = {"0", "-1", "1.5", "1e300", "inf", "nan", "2999999999", "99999999999999999999",
                                         "\"", "{", "}", "[", "]", ",", ":", "\\u0000", "\x1b", "__metadata__",
                                         "num_batches_tracked", "dptrain.epoch", "I64", "max", "#", "\n"};
    for (int k = 1 + (int)(next() % 4); k > 0; k--) {
        size_t at = where(n);
        switch (next() % 6) {
        case 0: /* flip bits */
            if (n) b[at] ^= (uint8_t)(1u << (next() % 8));
            break;
        case 1: /* a random byte */
            if (n) b[at] = (uint8_t)next();
            break;
        case 2: /* delete a run */
            if (n) {
                size_t len = 1 + next() % 16;
                if (len > n - at) len = n - at;
                memmove(b + at, b + at + len, n - at - len);
                n -= len;
            }
            break;
        case 3: /* a copy of a run of the input elsewhere (a line given twice) */
            if (n) {
                size_t from = where(n), len = 1 + next() % 64;
                if (len > n - from) len = n - from;
                if (n + len > MAX_INPUT) break;
                memmove(b + at + len, b + at, n - at);
                memmove(b + at, b + (from < at ? from : from + len), len);
                n += len;
            }
            break;
        default: { /* insert a token */
            const char *t = tokens[next() % (sizeof tokens / sizeof *tokens)];
            size_t len = strlen(t);
            if (n + len > MAX_INPUT) break;
            memmove(b + at + len, b + at, n - at);
            memcpy(b + at, t, len);
            n += len;
        }
        }
    }
    return n;
}

int main(void) {
    dp_fuzz_seeds(add_seed);
    const char *sec = getenv("DP_FUZZ_SECONDS"), *sd = getenv("DP_FUZZ_SEED");
    const double seconds = sec ? atof(sec) : 3.0;
    const uint64_t seed = sd ? strtoull(sd, NULL, 10) : (uint64_t)time(NULL);
    state = seed * 0x9E3779B97F4A7C15ull + 1;
    printf("fuzz smoke: %d seeds, %.1f s, DP_FUZZ_SEED=%llu\n", n_seeds, seconds, (unsigned long long)seed);
    fflush(stdout);
    uint8_t *buf = malloc(MAX_INPUT);
    if (!buf) return 1;
    for (int i = 0; i < n_seeds; i++) LLVMFuzzerTestOneInput(seeds[i], seed_len[i]);
    long runs = 0;
    const double t0 = dp_now();
    while (dp_now() - t0 < seconds && n_seeds) {
        int s = (int)(next() % (uint32_t)n_seeds);
        memcpy(buf, seeds[s], seed_len[s]);
        size_t n = mutate(buf, seed_len[s]);
        LLVMFuzzerTestOneInput(buf, n);
        runs++;
    }
    printf("fuzz smoke: %ld inputs, no crash\n", runs);
    free(buf);
    for (int i = 0; i < n_seeds; i++) free(seeds[i]);
    return 0;
}
