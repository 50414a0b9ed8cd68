/* safetensors.c: writing and reading the safetensors container with cJSON. */
#include "io/safetensors.h"

#include <cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/sysmem.h"

static const char *dtype_name(dp_st_dtype d) { return d == DP_ST_I64 ? "I64" : "F32"; }
static size_t dtype_size(dp_st_dtype d) { return d == DP_ST_I64 ? 8 : 4; }

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

static uint32_t crc_buf(const unsigned char *b, size_t n) {
    uLong crc = crc32(0L, Z_NULL, 0);
    while (n) {
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = crc32(crc, b, k);
        b += k, n -= k;
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

void dp_st_free(dp_st_file *f) {
    if (!f) return;
    free(f->buf);
    free(f->tensors);
    cJSON_Delete(f->root);
    memset(f, 0, sizeof *f);
}

static dp_status parse(const char *path, dp_st_file *f) {
    if (f->size < 8) return dp_fail(DP_ERR_FORMAT, "%s: not a safetensors file (%zu bytes, too short)", path, f->size);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)f->buf[i] << (8 * i);
    if (hl > f->size - 8 || hl > (100u << 20))
        return dp_fail(DP_ERR_FORMAT, "%s: truncated or not a safetensors file (header of %llu bytes, file %zu)", path,
                       (unsigned long long)hl, f->size);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)f->buf + 8, (size_t)hl, &end, 0);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return dp_fail(DP_ERR_FORMAT, "%s: corrupt safetensors header (invalid JSON near byte %zu)", path,
                       end ? (size_t)(end - (const char *)f->buf) : (size_t)8);
    }
    f->root = root;
    const unsigned char *data = f->buf + 8 + hl;
    const size_t data_len = f->size - 8 - (size_t)hl;
    int n = cJSON_GetArraySize(root);
    f->tensors = calloc((size_t)n + 1, sizeof *f->tensors);
    if (!f->tensors) return dp_fail(DP_ERR_NOMEM, "%s: out of memory", path);
    size_t covered = 0;
    for (cJSON *e = root->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(e)) return dp_fail(DP_ERR_FORMAT, "%s: __metadata__ is not an object", path);
            for (cJSON *m = e->child; m; m = m->next)
                if (!cJSON_IsString(m))
                    return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is not a string", path, m->string);
            f->meta_json = e;
            continue;
        }
        dp_st_tensor *t = &f->tensors[f->n];
        if (strlen(e->string) >= sizeof t->name)
            return dp_fail(DP_ERR_FORMAT, "%s: tensor name '%.40s...' too long", path, e->string);
        snprintf(t->name, sizeof t->name, "%s", e->string);
        cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
        cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2)
            return dp_fail(DP_ERR_FORMAT, "%s: tensor %s: needs dtype, shape and data_offsets", path, t->name);
        if (strcmp(dt->valuestring, "F32") == 0) t->dtype = DP_ST_F32;
        else if (strcmp(dt->valuestring, "I64") == 0) t->dtype = DP_ST_I64;
        else
            return dp_fail(DP_ERR_FORMAT, "%s: tensor %s: dtype %s is not supported (F32, I64)", path, t->name,
                           dt->valuestring);
        t->ndim = cJSON_GetArraySize(sh);
        if (t->ndim > DP_ST_MAX_DIMS) return dp_fail(DP_ERR_FORMAT, "%s: tensor %s: %d dimensions", path, t->name, t->ndim);
        double count = 1;
        for (int d = 0; d < t->ndim; d++) {
            cJSON *v = cJSON_GetArrayItem(sh, d);
            if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e12)
                return dp_fail(DP_ERR_FORMAT, "%s: tensor %s: bad shape", path, t->name);
            t->shape[d] = (int64_t)v->valuedouble;
            count *= (double)t->shape[d];
        }
        cJSON *ob = cJSON_GetArrayItem(of, 0), *oe = cJSON_GetArrayItem(of, 1);
        double b = cJSON_IsNumber(ob) ? ob->valuedouble : -1, en = cJSON_IsNumber(oe) ? oe->valuedouble : -1;
        if (!(b >= 0 && en >= b && en <= (double)data_len))
            return dp_fail(DP_ERR_FORMAT, "%s: truncated or corrupt: tensor %s's bytes [%.0f, %.0f) lie outside the %zu "
                           "data bytes", path, t->name, b, en, data_len);
        if (en - b != count * (double)dtype_size(t->dtype))
            return dp_fail(DP_ERR_FORMAT, "%s: tensor %s: %.0f bytes for %.0f elements of %s", path, t->name, en - b,
                           count, dtype_name(t->dtype));
        t->data = data + (size_t)b;
        t->nbytes = (size_t)(en - b);
        covered += t->nbytes;
        f->n++;
    }
    /* the tensors tile the data exactly: sorted by offset, each starts where the previous ended */
    for (int i = 1; i < f->n; i++)
        for (int j = i; j > 0 && f->tensors[j].data < f->tensors[j - 1].data; j--) {
            dp_st_tensor tmp = f->tensors[j];
            f->tensors[j] = f->tensors[j - 1];
            f->tensors[j - 1] = tmp;
        }
    for (int i = 1; i < f->n; i++)
        if ((const unsigned char *)f->tensors[i].data <
            (const unsigned char *)f->tensors[i - 1].data + f->tensors[i - 1].nbytes)
            return dp_fail(DP_ERR_FORMAT, "%s: corrupt: tensors %s and %s overlap", path, f->tensors[i - 1].name,
                           f->tensors[i].name);
    if (covered != data_len)
        return dp_fail(DP_ERR_FORMAT, "%s: truncated or corrupt: the tensors cover %zu of the %zu data bytes", path,
                       covered, data_len);
    const char *crc = dp_st_meta_get(f, "dptrain.data_crc32");
    if (crc) {
        char have[16];
        snprintf(have, sizeof have, "%08x", crc_buf(data, data_len));
        if (strcmp(have, crc) != 0)
            return dp_fail(DP_ERR_FORMAT, "%s: corrupt: the tensor data's CRC-32 is %s, the header says %s", path, have,
                           crc);
    }
    return DP_OK;
}

dp_status dp_st_read(const char *path, dp_st_file *out) {
    memset(out, 0, sizeof *out);
    struct stat st;
    FILE *fp;
    DP_TRY(dp_fopen_regular(path, NULL, &fp, &st)); /* a directory or FIFO is named, never waited on */
    dp_status s = DP_OK;
    long size = -1;
    if (fseek(fp, 0, SEEK_END) == 0) size = ftell(fp);
    if (size < 0 || fseek(fp, 0, SEEK_SET) != 0) s = dp_fail(DP_ERR_IO, "%s: cannot seek (not a regular file?)", path);
    if (s == DP_OK && !(out->buf = malloc(size ? (size_t)size : 1)))
        s = dp_fail(DP_ERR_NOMEM, "%s: out of memory reading %ld bytes", path, size);
    if (s == DP_OK && fread(out->buf, 1, (size_t)size, fp) != (size_t)size) s = dp_fail(DP_ERR_IO, "%s: read failed", path);
    fclose(fp);
    if (s == DP_OK) {
        out->size = (size_t)size;
        s = parse(path, out);
    }
    if (s != DP_OK) dp_st_free(out);
    return s;
}

const dp_st_tensor *dp_st_find(const dp_st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

const char *dp_st_meta_get(const dp_st_file *f, const char *key) {
    if (!f->meta_json) return NULL;
    cJSON *v = cJSON_GetObjectItemCaseSensitive((cJSON *)f->meta_json, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
