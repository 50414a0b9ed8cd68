/* bf16.h: rounding an fp32 value to the nearest bfloat16 (--precision bf16), as one inline
 * function that the CPU kernels, the CUDA kernels and the tests share, so every device rounds
 * to the same bits. bf16 is fp32's upper 16 bits (8 exponent bits, 7 stored mantissa bits); a
 * bf16 value is held here in an fp32 whose low 16 bits are zero, so the fp32 kernels take it
 * as it is, and a product of two such values is exact in fp32.
 *
 * Rounding is to nearest, ties to even, as PyTorch's and CUDA's float-to-bf16 conversions round
 * finite values: values past the largest bf16 by half a unit or more become infinities,
 * subnormals round like any other value (no flush to zero). A NaN stays a NaN: its sign and upper
 * payload are kept and the quiet bit set (a NaN whose payload lies in the low 16 bits would
 * otherwise become an infinity). */
#ifndef DP_KERNELS_BF16_H
#define DP_KERNELS_BF16_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define DP_BF16_FN static inline __host__ __device__
#else
#define DP_BF16_FN static inline
#endif

/* The bf16 bits (upper 16 of an fp32) of the value nearest to the fp32 with bits u. */
DP_BF16_FN uint16_t dp_bf16_bits(uint32_t u) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u | 0x00400000u) >> 16); /* NaN: quiet, kept */
    /* adding 0x7fff, plus 1 when the kept LSB is odd, carries into the kept bits exactly when the
       dropped half is above one half, or is one half and the kept part is odd */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

DP_BF16_FN float dp_bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u = (uint32_t)dp_bf16_bits(u) << 16;
    float y;
    memcpy(&y, &u, sizeof y);
    return y;
}

#undef DP_BF16_FN
#endif
