/* safetensors.c: writing the safetensors container with cJSON (reading: safetensors_read.c). */
#include "io/safetensors.h"

#include <cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/crc.h"

static const char *dtype_name(dp_st_dtype d) { return d == DP_ST_I64 ? "I64" : "F32"; }

static uint32_t crc_of(const dp_st_tensor *t, int n) {
    uint32_t crc = 0;
    for (int i = 0; i < n; i++) crc = dp_crc32(crc, t[i].data, t[i].nbytes);
    return crc;
}

char *dp_st_header_crc_slot(const char *hdr, size_t n) {
    static const char pat[] = "\"" DP_ST_HEADER_CRC_KEY "\":\"";
    const size_t pl = sizeof pat - 1;
    char *found = NULL;
    for (size_t i = 0; i + pl + 9 <= n; i++)
        if (hdr[i] == '"' && memcmp(hdr + i, pat, pl) == 0 && hdr[i + pl + 8] == '"') {
            if (found) return NULL;
            found = (char *)hdr + i + pl;
        }
    return found;
}

uint32_t dp_st_header_crc(const unsigned char *head, size_t n) {
    const unsigned char *slot = n > 8 ? (const unsigned char *)dp_st_header_crc_slot((const char *)head + 8, n - 8) : NULL;
    uLong crc = crc32(0L, Z_NULL, 0);
    if (!slot) return (uint32_t)crc32(crc, head, (uInt)n);
    crc = crc32(crc, head, (uInt)(slot - head));
    crc = crc32(crc, (const unsigned char *)"00000000", 8);
    return (uint32_t)crc32(crc, slot + 8, (uInt)(n - (size_t)(slot - head) - 8));
}

dp_status dp_st_write(FILE *f, const char *what, const dp_st_tensor *t, int n, const dp_st_meta *meta, int n_meta) {
    cJSON *root = cJSON_CreateObject(), *md = cJSON_CreateObject();
    if (!root || !md) {
        cJSON_Delete(root), cJSON_Delete(md);
        return dp_fail(DP_ERR_NOMEM, "%s: out of memory building the safetensors header", what);
    }
    cJSON_AddItemToObject(root, "__metadata__", md);
    for (int i = 0; i < n_meta; i++) cJSON_AddStringToObject(md, meta[i].key, meta[i].value);
    char crc[16];
    snprintf(crc, sizeof crc, "%08x", crc_of(t, n));
    cJSON_AddStringToObject(md, "dptrain.data_crc32", crc);
    cJSON_AddStringToObject(md, DP_ST_HEADER_CRC_KEY, "00000000"); /* filled in below */
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToObject(root, t[i].name, e);
        cJSON_AddStringToObject(e, "dtype", dtype_name(t[i].dtype));
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t[i].ndim; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i].shape[d]));
        cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        off += t[i].nbytes;
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
    }
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!json) return dp_fail(DP_ERR_NOMEM, "%s: out of memory printing the safetensors header", what);
    /* pad with spaces so the data starts 8-byte aligned, as the reference writer does */
    size_t hl = strlen(json), padded = (hl + 7) & ~(size_t)7;
    unsigned char *head = malloc(8 + padded);
    if (!head) {
        free(json);
        return dp_fail(DP_ERR_NOMEM, "%s: out of memory printing the safetensors header", what);
    }
    for (int i = 0; i < 8; i++) head[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(head + 8, json, hl);
    memset(head + 8 + hl, ' ', padded - hl);
    free(json);
    /* the header's CRC-32, taken with its own value as 00000000, then written into that place */
    char *slot = dp_st_header_crc_slot((char *)head + 8, padded);
    if (!slot) {
        free(head);
        return dp_fail(DP_ERR_INTERNAL, "%s: the header CRC's place is not in the header", what);
    }
    char hex[9];
    snprintf(hex, sizeof hex, "%08x", dp_st_header_crc(head, 8 + padded));
    memcpy(slot, hex, 8);
    int bad = fwrite(head, 1, 8 + padded, f) != 8 + padded;
    free(head);
    for (int i = 0; i < n && !bad; i++) bad = t[i].nbytes && fwrite(t[i].data, 1, t[i].nbytes, f) != t[i].nbytes;
    if (bad) return dp_fail(DP_ERR_IO, "%s: write failed: %s", what, strerror(errno));
    return DP_OK;
}
