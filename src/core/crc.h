/* crc.h: zlib's CRC-32 over a buffer of any size (zlib takes at most 4 GiB a call). */
#ifndef DP_CORE_CRC_H
#define DP_CORE_CRC_H

#include <stddef.h>
#include <stdint.h>

/* The CRC-32 of n bytes at p continued from crc (0 to start). */
uint32_t dp_crc32(uint32_t crc, const void *p, size_t n);

#endif
