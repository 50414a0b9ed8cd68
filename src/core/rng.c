#include "core/rng.h"

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t dp_rng_mix(uint64_t a, uint64_t b) {
    uint64_t x = a ^ (b * 0xD6E8FEB86659FD93ull);
    return splitmix64(&x);
}

void dp_rng_seed(dp_rng *r, uint64_t seed, uint64_t stream) {
    uint64_t x = dp_rng_mix(seed, stream);
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t dp_rng_u64(dp_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float dp_rng_uniform(dp_rng *r) { return (float)(dp_rng_u64(r) >> 40) * 0x1.0p-24f; }

double dp_rng_uniform_double(dp_rng *r) { return (double)(dp_rng_u64(r) >> 11) * 0x1.0p-53; }

uint32_t dp_rng_below(dp_rng *r, uint32_t n) {
    /* Lemire's multiply-shift with rejection: unbiased. */
    uint64_t m = (uint64_t)(uint32_t)(dp_rng_u64(r) >> 32) * n;
    uint32_t lo = (uint32_t)m;
    if (lo < n) {
        uint32_t t = (uint32_t)(-n) % n;
        while (lo < t) {
            m = (uint64_t)(uint32_t)(dp_rng_u64(r) >> 32) * n;
            lo = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}
