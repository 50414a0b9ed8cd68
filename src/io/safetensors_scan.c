/* safetensors_scan.c: a safetensors header's shape and parse cost from its raw bytes (safetensors_scan.h). */
#include "io/safetensors_scan.h"

#include <cJSON.h>
#include <string.h>

#include "core/sysmem.h"

#define META_KEY "__metadata__"

/* What the reader allocates per top-level entry besides cJSON's (safetensors_read.c: two tensor
 * tables, the offset spans, the name index and the sort array), rounded up. */
#define PER_ENTRY_TABLES 512ull
/* A cJSON node and the malloc overhead of its (at most two) strings. */
#define PER_VALUE ((unsigned long long)sizeof(cJSON) + 80ull)

static long max_tensors(const dp_st_limits *lim) {
    return lim && lim->max_tensors > 0 ? lim->max_tensors : DP_ST_MAX_TENSORS;
}

static const char *whose(const dp_st_limits *lim) { return lim && lim->why ? lim->why : "this reader's limit"; }

unsigned long long dp_st_max_header(const dp_st_limits *lim) {
    return (unsigned long long)max_tensors(lim) * (DP_ST_MAX_ENTRY_BYTES + 1) + DP_ST_MAX_META_BYTES + 4096;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Whether the raw JSON string s (n bytes between the quotes) decodes to want: a key spelled with
 * escapes ("\u005f_metadata__") is the metadata to cJSON too. */
static int raw_key_is(const char *s, size_t n, const char *want) {
    size_t i = 0, k = 0, wl = strlen(want);
    while (i < n) {
        int c = (unsigned char)s[i++];
        if (c == '\\') {
            if (i >= n) return 0;
            char e = s[i++];
            if (e == 'u') {
                if (i + 4 > n) return 0;
                c = 0;
                for (int d = 0; d < 4; d++) {
                    int h = hexval(s[i + (size_t)d]);
                    if (h < 0) return 0;
                    c = c * 16 + h;
                }
                i += 4;
            } else {
                const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *at = strchr(from, e);
                if (!e || !at) return 0;
                c = (unsigned char)to[at - from];
            }
        }
        if (k >= wl || c != (unsigned char)want[k++]) return 0;
    }
    return k == wl;
}

dp_status dp_st_scan_header(const char *path, const char *h, size_t n, const dp_st_limits *lim, dp_st_scan *out) {
    memset(out, 0, sizeof *out);
    const long max_t = max_tensors(lim);
    int depth = 0, in_string = 0, want_key = 0, in_key = 0, is_meta = 0;
    size_t key_start = 0, member_start = 0;
    long commas = 0, opens = 0, member_values = 0; /* member_values: commas and brackets inside the member */
    int in_member = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)h[i];
        /* raw control bytes are invalid JSON (cJSON would take them inside strings) */
        if (c < 0x20 && c != ' ' && c != '\t' && c != '\n' && c != '\r')
            return dp_fail(DP_ERR_FORMAT, "%s: corrupt safetensors header (control byte 0x%02x at byte %zu)", path, c,
                           8 + i);
        if (in_string) {
            if (c == '\\') {
                /* cJSON writes \u0000 as a NUL byte and every reader of its strings stops there */
                if (i + 5 < n && h[i + 1] == 'u' && memcmp(h + i + 2, "0000", 4) == 0)
                    return dp_fail(DP_ERR_FORMAT, "%s: corrupt safetensors header (\\u0000, a NUL character, in a "
                                   "string at byte %zu): names, dtypes and metadata cannot hold one", path, 8 + i);
                i++, out->string_bytes++;
            } else if (c == '"') {
                in_string = 0;
                if (in_key) {
                    in_key = 0;
                    is_meta = raw_key_is(h + key_start, i - key_start, META_KEY);
                }
            } else {
                out->string_bytes++;
            }
            continue;
        }
        switch (c) {
        case '"':
            in_string = 1;
            if (depth == 1 && want_key) { /* a top-level key: a tensor's name, or __metadata__ */
                want_key = 0, in_key = 1, in_member = 1;
                key_start = i + 1, member_start = i, member_values = 0;
            }
            break;
        case '{':
        case '[':
            opens++, member_values++;
            if (++depth > DP_ST_MAX_DEPTH)
                return dp_fail(DP_ERR_FORMAT, "%s: corrupt safetensors header (nested %d deep at byte %zu; a header "
                               "nests at most %d deep)", path, depth, 8 + i, DP_ST_MAX_DEPTH);
            if (depth == 1) want_key = 1;
            break;
        case ',':
        case '}':
        case ']':
            if (depth == 1 && in_member) { /* the end of a top-level member */
                in_member = 0;
                const size_t bytes = i - member_start;
                /* inside: its own bracket and those within, and its commas; it holds at most that + 1
                   values, a metadata object at most that many keys */
                const long inner = member_values;
                if (is_meta) {
                    out->meta_keys += inner;
                    if (out->meta_keys > DP_ST_MAX_META_KEYS || bytes > DP_ST_MAX_META_BYTES)
                        return dp_fail(DP_ERR_FORMAT, "%s: refused: __metadata__ at byte %zu holds more than %d keys "
                                       "or %u bytes (the most this reader takes)", path, 8 + member_start,
                                       DP_ST_MAX_META_KEYS, DP_ST_MAX_META_BYTES);
                } else {
                    if (bytes > DP_ST_MAX_ENTRY_BYTES || inner + 1 > DP_ST_MAX_ENTRY_VALUES)
                        return dp_fail(DP_ERR_FORMAT, "%s: refused: the header's entry at byte %zu has %zu bytes and "
                                       "up to %ld JSON values; a tensor's entry has at most %d bytes and %d values",
                                       path, 8 + member_start, bytes, inner + 1, DP_ST_MAX_ENTRY_BYTES,
                                       DP_ST_MAX_ENTRY_VALUES);
                    if (++out->tensors > max_t)
                        return dp_fail(DP_ERR_FORMAT, "%s: refused: the header lists more than %ld tensors (%s)%s",
                                       path, max_t, whose(lim),
                                       lim && lim->why ? "; is it a file for another model?" : "");
                }
            }
            if (c == ',') commas++, member_values++;
            if (c == ',' && depth == 1) want_key = 1;
            if (c != ',' && depth > 0) depth--;
            break;
        default:
            break;
        }
    }
    out->values = 1 + commas + opens;
    /* the tables are sized by the top-level entries, metadata keys by their own */
    out->cost = (unsigned long long)out->values * PER_VALUE + out->string_bytes +
                (unsigned long long)(out->tensors + 2) * PER_ENTRY_TABLES + (unsigned long long)out->meta_keys * 16;
    return DP_OK;
}
