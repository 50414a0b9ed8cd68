/* rng.h: the seeded random streams. xoshiro256** seeded through splitmix64.
 * A stream is named by (seed, stream id), so replica r, epoch e or sample i get
 * independent, reproducible sequences whatever the thread or replica count. */
#ifndef DP_RNG_H
#define DP_RNG_H

#include <stdint.h>

typedef struct { uint64_t s[4]; } dp_rng;

void dp_rng_seed(dp_rng *r, uint64_t seed, uint64_t stream);
uint64_t dp_rng_u64(dp_rng *r);
/* Uniform in [0, 1) with 24 random bits (float) or 53 (double). */
float dp_rng_uniform(dp_rng *r);
double dp_rng_uniform_double(dp_rng *r);
/* Uniform integer in [0, n), unbiased. n > 0. */
uint32_t dp_rng_below(dp_rng *r, uint32_t n);
/* Mixes several values into one stream id. */
uint64_t dp_rng_mix(uint64_t a, uint64_t b);

#endif
