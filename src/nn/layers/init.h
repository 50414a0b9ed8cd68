/* init.h: PyTorch's default initialisation, shared by the layers that have weights. */
#ifndef DP_LAYER_INIT_H
#define DP_LAYER_INIT_H

#include <math.h>
#include <stddef.h>

#include "core/rng.h"

/* kaiming_uniform_(a=sqrt(5)) on a weight and uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) on a bias
 * have the same bound, 1/sqrt(fan_in): gain sqrt(2/(1+5)) * sqrt(3/fan_in). */
static inline void dp_init_uniform_fan_in(float *p, size_t n, size_t fan_in, dp_rng *rng) {
    float bound = 1.0f / sqrtf((float)fan_in);
    for (size_t i = 0; i < n; i++) p[i] = (2.0f * dp_rng_uniform(rng) - 1.0f) * bound;
}

#endif
