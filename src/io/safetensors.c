/* safetensors.c: writing the safetensors container with cJSON (reading: safetensors_read.c). */
#include "io/safetensors.h"

#include <cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static const char *dtype_name(dp_st_dtype d) { return d == DP_ST_I64 ? "I64" : "F32"; }

static uint32_t crc_of(const dp_st_tensor *t, int n) {
    uLong crc = crc32(0L, Z_NULL, 0);
    for (int i = 0; i < n; i++) {
        const unsigned char *b = t[i].data;
        for (size_t left = t[i].nbytes; left;) {
            uInt k = left > (1u << 30) ? (1u << 30) : (uInt)left;
            crc = crc32(crc, b, k);
            b += k, left -= k;
        }
    }
    return (uint32_t)crc;
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
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    int bad = fwrite(len8, 1, 8, f) != 8 || fwrite(json, 1, hl, f) != hl;
    for (size_t i = hl; i < padded && !bad; i++) bad = fputc(' ', f) == EOF;
    free(json);
    for (int i = 0; i < n && !bad; i++) bad = t[i].nbytes && fwrite(t[i].data, 1, t[i].nbytes, f) != t[i].nbytes;
    if (bad) return dp_fail(DP_ERR_IO, "%s: write failed: %s", what, strerror(errno));
    return DP_OK;
}
