/* safetensors_scan.h: one pass over a safetensors header's raw bytes, before cJSON parses it,
 * that bounds what the parse may cost. cJSON allocates a node per JSON value and copies every
 * string: a 100 MiB header of a million empty entries took 1.8 GB to parse, so its shape is
 * judged on the bytes (the limits in safetensors.h) and its cost known before the parse starts.
 * It also refuses what cJSON would read wrongly: raw control bytes, and \u0000 in a string (cJSON
 * ends the string there, so "a\u0000b" would be read as "a"). Private to io/safetensors_read.c. */
#ifndef DP_SAFETENSORS_SCAN_H
#define DP_SAFETENSORS_SCAN_H

#include <stddef.h>

#include "io/safetensors.h"

typedef struct {
    long tensors;            /* top-level keys other than __metadata__ */
    long meta_keys;          /* keys of __metadata__ */
    long values;             /* JSON values, an upper bound: 1 + commas + opening brackets */
    size_t string_bytes;     /* bytes inside strings, an upper bound on what cJSON copies */
    unsigned long long cost; /* what parsing it may allocate: cJSON's nodes and strings and the reader's tables */
} dp_st_scan;

/* Scans the n header bytes at hdr of path under lim (NULL: the defaults). Fails with
 * DP_ERR_FORMAT naming path, the byte and the limit passed. */
dp_status dp_st_scan_header(const char *path, const char *hdr, size_t n, const dp_st_limits *lim, dp_st_scan *out);

/* The most header bytes a file within lim can have: each tensor at most DP_ST_MAX_ENTRY_BYTES,
 * the metadata at most DP_ST_MAX_META_BYTES, a little padding. */
unsigned long long dp_st_max_header(const dp_st_limits *lim);

#endif
