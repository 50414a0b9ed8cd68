/* crc.c: see crc.h. */
#include "core/crc.h"

#include <zlib.h>

uint32_t dp_crc32(uint32_t crc, const void *p, size_t n) {
    const unsigned char *b = p;
    uLong c = crc;
    while (n) {
        const uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = crc32(c, b, k);
        b += k, n -= k;
    }
    return (uint32_t)c;
}
