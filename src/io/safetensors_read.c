/* safetensors_read.c: reading a safetensors file strictly, header first (layout in safetensors.h). */
#include "io/safetensors.h"

#include <cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/crc.h"
#include "core/printable.h"
#include "core/sysmem.h"
#include "io/safetensors_scan.h"

#define MAX_HEADER (100u << 20) /* the reference reader's limit */

static uint32_t crc_buf(const unsigned char *b, size_t n) { return dp_crc32(0, b, n); }

/* Reads n bytes at off; a short read is the file shrinking under us or an I/O error. */
static dp_status read_at(const char *path, int fd, void *dst, size_t n, off_t off) {
    unsigned char *p = dst;
    while (n) {
        ssize_t got = pread(fd, p, n > (1u << 30) ? (1u << 30) : n, off);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return dp_fail(DP_ERR_IO, "%s: read failed: %s", path, strerror(errno));
        if (got == 0) return dp_fail(DP_ERR_IO, "%s: read failed: the file ended early (was it truncated while read?)", path);
        p += got, n -= (size_t)got, off += got;
    }
    return DP_OK;
}

/* A JSON number that is a whole number in [0, max] (the reference reads shapes and offsets as
 * usize: 1.5, -1 or a string are errors). max <= 2^53, where doubles stop being exact. */
static int whole(const cJSON *v, double max, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= max) || d != (double)(uint64_t)d) return 0;
    *out = (uint64_t)d;
    return 1;
}

typedef struct {
    uint64_t begin, end;
    int index;
} span;

static int by_offset(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

typedef struct {
    const char *name;
    int index;
} named;

static int by_name(const void *a, const void *b) { return strcmp(((const named *)a)->name, ((const named *)b)->name); }

/* Sorts the n names and fails naming the first that appears twice (`what`: "tensor", "metadata"). */
static dp_status unique(const char *path, named *v, int n, const char *what) {
    qsort(v, (size_t)n, sizeof *v, by_name);
    for (int i = 1; i < n; i++)
        if (strcmp(v[i].name, v[i - 1].name) == 0) {
            char a[120];
            return dp_fail(DP_ERR_FORMAT, "%s: corrupt: %s %s appears twice", path, what,
                           dp_printable(v[i].name, a, sizeof a));
        }
    return DP_OK;
}

/* __metadata__: an object of strings, each key once. */
static dp_status check_meta(const char *path, const cJSON *e) {
    if (!cJSON_IsObject(e)) return dp_fail(DP_ERR_FORMAT, "%s: __metadata__ is not an object", path);
    int n = cJSON_GetArraySize(e), k = 0;
    named *v = calloc((size_t)n + 1, sizeof *v);
    if (!v) return dp_fail(DP_ERR_NOMEM, "%s: out of memory reading the header", path);
    dp_status s = DP_OK;
    for (const cJSON *m = e->child; m && s == DP_OK; m = m->next) {
        char a[80];
        if (!cJSON_IsString(m))
            s = dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is not a string", path, dp_printable(m->string, a, sizeof a));
        v[k++] = (named){m->string, 0};
    }
    if (s == DP_OK) s = unique(path, v, k, "metadata");
    free(v);
    return s;
}

/* One tensor entry of the header; its byte range goes to *sp. */
static dp_status parse_entry(const char *path, const cJSON *e, uint64_t data_len, dp_st_tensor *t, span *sp) {
    char shown[200];
    if (strlen(e->string) >= sizeof t->name)
        return dp_fail(DP_ERR_FORMAT, "%s: tensor name '%s' too long", path, dp_printable(e->string, shown, 60));
    snprintf(t->name, sizeof t->name, "%s", e->string);
    const char *nm = dp_printable(t->name, shown, sizeof shown);
    cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2)
        return dp_fail(DP_ERR_FORMAT, "%s: tensor %s: needs dtype, shape and data_offsets", path, nm);
    size_t esize;
    if (strcmp(dt->valuestring, "F32") == 0) t->dtype = DP_ST_F32, esize = 4;
    else if (strcmp(dt->valuestring, "I64") == 0) t->dtype = DP_ST_I64, esize = 8;
    else {
        char d[40];
        return dp_fail(DP_ERR_FORMAT, "%s: tensor %s: dtype %s is not supported (F32, I64)", path, nm,
                       dp_printable(dt->valuestring, d, sizeof d));
    }
    t->ndim = cJSON_GetArraySize(sh);
    if (t->ndim > DP_ST_MAX_DIMS) return dp_fail(DP_ERR_FORMAT, "%s: tensor %s: %d dimensions", path, nm, t->ndim);
    /* the element count saturates: anything past the data is refused below */
    uint64_t count = 1, cap = data_len / esize + 1;
    for (int d = 0; d < t->ndim; d++) {
        uint64_t v;
        if (!whole(cJSON_GetArrayItem(sh, d), 9007199254740992.0, &v))
            return dp_fail(DP_ERR_FORMAT, "%s: tensor %s: shape[%d] is not a whole number >= 0", path, nm, d);
        t->shape[d] = (int64_t)v;
        count = v == 0 ? 0 : count > cap / v ? cap : count * v;
    }
    uint64_t b, en;
    if (!whole(cJSON_GetArrayItem(of, 0), 9007199254740992.0, &b) ||
        !whole(cJSON_GetArrayItem(of, 1), 9007199254740992.0, &en))
        return dp_fail(DP_ERR_FORMAT, "%s: tensor %s: data_offsets are not whole numbers >= 0", path, nm);
    if (en < b || en > data_len)
        return dp_fail(DP_ERR_FORMAT, "%s: truncated or corrupt: tensor %s's bytes [%llu, %llu) lie outside the %llu "
                       "data bytes", path, nm, (unsigned long long)b, (unsigned long long)en,
                       (unsigned long long)data_len);
    if (count >= cap || en - b != count * esize)
        return dp_fail(DP_ERR_FORMAT, "%s: tensor %s: %llu bytes do not hold its shape's elements of %s", path, nm,
                       (unsigned long long)(en - b), dt->valuestring);
    t->nbytes = (size_t)(en - b);
    sp->begin = b, sp->end = en;
    return DP_OK;
}

/* The header alone: f->tensors filled in offset order (data pointers are offsets until the data
 * is read, in *spans). */
static dp_status parse_header(const char *path, const char *hdr, size_t hl, uint64_t data_len, dp_st_file *f,
                              span **spans) {
    /* control bytes, \u0000 and the header's size were judged by dp_st_scan_header */
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, hl, &end, 0);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return dp_fail(DP_ERR_FORMAT, "%s: corrupt safetensors header (invalid JSON near byte %zu)", path,
                       8 + (end ? (size_t)(end - hdr) : 0));
    }
    f->root = root;
    /* the reference pads with spaces; anything else after the JSON is not a safetensors file */
    for (const char *p = end; p < hdr + hl; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            return dp_fail(DP_ERR_FORMAT, "%s: corrupt safetensors header (bytes after the JSON at byte %zu)", path,
                           8 + (size_t)(p - hdr));
    int n = cJSON_GetArraySize(root);
    f->tensors = calloc((size_t)n + 1, sizeof *f->tensors);
    dp_st_tensor *tmp = calloc((size_t)n + 1, sizeof *tmp);
    *spans = calloc((size_t)n + 1, sizeof **spans);
    f->by_name = calloc((size_t)n + 1, sizeof *f->by_name);
    dp_status s = DP_OK;
    if (!f->tensors || !tmp || !*spans || !f->by_name) s = dp_fail(DP_ERR_NOMEM, "%s: out of memory reading the header", path);
    int nt = 0;
    for (cJSON *e = root->child; e && s == DP_OK; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            /* a second one would hide the first (and its CRC) from a reader that takes the last */
            if (f->meta_json) s = dp_fail(DP_ERR_FORMAT, "%s: corrupt: __metadata__ appears twice", path);
            else s = check_meta(path, e);
            f->meta_json = e;
            continue;
        }
        (*spans)[nt].index = nt;
        s = parse_entry(path, e, data_len, &tmp[nt], &(*spans)[nt]);
        nt++;
    }
    if (s != DP_OK) {
        free(tmp);
        return s;
    }
    /* the tensors tile the data exactly, in offset order: O(n log n) for headers of many entries */
    qsort(*spans, (size_t)nt, sizeof **spans, by_offset);
    uint64_t at = 0;
    for (int i = 0; i < nt && s == DP_OK; i++) {
        const span *sp = &(*spans)[i];
        char a[120], b[120];
        if (sp->begin != at)
            s = dp_fail(DP_ERR_FORMAT, "%s: corrupt: tensor %s starts at data byte %llu, the previous tensor%s%s ends "
                        "at %llu (the tensors must tile the data)", path, dp_printable(tmp[sp->index].name, a, sizeof a),
                        (unsigned long long)sp->begin, i ? " " : "", i ? dp_printable(tmp[(sp - 1)->index].name, b, sizeof b) : "",
                        (unsigned long long)at);
        at = sp->end;
        f->tensors[i] = tmp[sp->index];
    }
    free(tmp);
    if (s == DP_OK && at != data_len)
        s = dp_fail(DP_ERR_FORMAT, "%s: truncated or corrupt: the tensors cover %llu of the %llu data bytes", path,
                    (unsigned long long)at, (unsigned long long)data_len);
    if (s != DP_OK) return s;
    f->n = nt;
    named *v = calloc((size_t)nt + 1, sizeof *v);
    if (!v) return dp_fail(DP_ERR_NOMEM, "%s: out of memory reading the header", path);
    for (int i = 0; i < nt; i++) v[i] = (named){f->tensors[i].name, i};
    s = unique(path, v, nt, "tensor");
    for (int i = 0; i < nt; i++) f->by_name[i] = v[i].index;
    free(v);
    return s;
}

/* The header's own CRC when the file carries one (safetensors.h); head: the 8 length bytes, then the header. */
static dp_status check_header_crc(const char *path, const unsigned char *head, size_t hl, const dp_st_file *f) {
    const char *want = dp_st_meta_get(f, DP_ST_HEADER_CRC_KEY);
    if (!want) return DP_OK;
    char have[16], shown[40];
    if (!dp_st_header_crc_slot((const char *)head + 8, hl))
        return dp_fail(DP_ERR_FORMAT, "%s: corrupt: the header's CRC-32 (%s) is not where it was written", path,
                       dp_printable(want, shown, sizeof shown));
    snprintf(have, sizeof have, "%08x", dp_st_header_crc(head, 8 + hl));
    if (strcmp(have, want) != 0)
        return dp_fail(DP_ERR_FORMAT, "%s: corrupt: the header's CRC-32 is %s, the header says %s", path, have,
                       dp_printable(want, shown, sizeof shown));
    return DP_OK;
}

/* dp_memory_check with " (why)" appended to its message. */
static dp_status memory_for(unsigned long long bytes, const char *what, const char *why) {
    if (dp_memory_check(bytes, what) == DP_OK) return DP_OK;
    char msg[DP_ERROR_MAX];
    snprintf(msg, sizeof msg, "%s", dp_last_error());
    return dp_fail(DP_ERR_NOMEM, "%s (%s)", msg, why);
}

static dp_status read_file(const char *path, int fd, off_t fsize, const dp_st_limits *lim, dp_st_file *f) {
    if (fsize < 8)
        return dp_fail(DP_ERR_FORMAT, "%s: not a safetensors file (%lld bytes, too short)", path, (long long)fsize);
    const uint64_t size = (uint64_t)fsize;
    unsigned char len8[8];
    DP_TRY(read_at(path, fd, len8, 8, 0));
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)len8[i] << (8 * i);
    if (hl > size - 8 || hl > MAX_HEADER)
        return dp_fail(DP_ERR_FORMAT, "%s: truncated or not a safetensors file (header of %llu bytes, file %llu)", path,
                       (unsigned long long)hl, (unsigned long long)size);
    /* a header longer than its tensors and metadata can be is refused unread */
    const unsigned long long max_hl = dp_st_max_header(lim);
    if (hl > max_hl) {
        char a[32], b[32];
        return dp_fail(DP_ERR_FORMAT, "%s: refused: a header of %s, more than the %s of %ld tensors (%s) at %d bytes "
                       "each and %u bytes of metadata; is it a file for another model?", path,
                       dp_format_bytes(hl, a, sizeof a), dp_format_bytes(max_hl, b, sizeof b),
                       lim && lim->max_tensors > 0 ? lim->max_tensors : DP_ST_MAX_TENSORS,
                       lim && lim->why ? lim->why : "this reader's limit", DP_ST_MAX_ENTRY_BYTES, DP_ST_MAX_META_BYTES);
    }
    char what[4200];
    snprintf(what, sizeof what, "%s: its header of %llu bytes", path, (unsigned long long)hl);
    DP_TRY(memory_for(8 + hl, what, "read before it is judged"));
    unsigned char *head = malloc((size_t)(8 + hl)); /* the length bytes and the header, as the CRC covers them */
    if (!head)
        return dp_fail(DP_ERR_NOMEM, "%s: out of memory reading a header of %llu bytes", path, (unsigned long long)hl);
    memcpy(head, len8, 8);
    const char *hdr = (const char *)head + 8;
    span *spans = NULL;
    dp_st_scan sc;
    dp_status s = read_at(path, fd, head + 8, (size_t)hl, 8);
    if (s == DP_OK) s = dp_st_scan_header(path, hdr, (size_t)hl, lim, &sc);
    if (s == DP_OK) {
        snprintf(what, sizeof what, "%s: parsing its header (%ld tensors, up to %ld JSON values)", path, sc.tensors,
                 sc.values);
        s = memory_for(sc.cost, what, "cJSON's nodes and strings and the tables, counted before the parse");
    }
    if (s == DP_OK) s = parse_header(path, hdr, (size_t)hl, size - 8 - hl, f, &spans);
    if (s == DP_OK) s = check_header_crc(path, head, (size_t)hl, f);
    /* only a file whose header describes all of it is read whole: never more than the memory there is */
    if (s == DP_OK) s = memory_for(size, path, "the whole file is read");
    if (s == DP_OK && !(f->buf = malloc((size_t)size)))
        s = dp_fail(DP_ERR_NOMEM, "%s: out of memory reading %llu bytes", path, (unsigned long long)size);
    if (s == DP_OK) {
        f->size = (size_t)size;
        memcpy(f->buf, head, (size_t)(8 + hl));
        free(head), head = NULL;
        s = read_at(path, fd, f->buf + 8 + hl, (size_t)(size - 8 - hl), (off_t)(8 + hl));
    }
    free(head);
    if (s == DP_OK) {
        const unsigned char *data = f->buf + 8 + hl;
        for (int i = 0; i < f->n; i++) f->tensors[i].data = data + spans[i].begin;
        const char *crc = dp_st_meta_get(f, "dptrain.data_crc32");
        char have[16], shown[40];
        if (crc) snprintf(have, sizeof have, "%08x", crc_buf(data, (size_t)(size - 8 - hl)));
        if (crc && strcmp(have, crc) != 0)
            s = dp_fail(DP_ERR_FORMAT, "%s: corrupt: the tensor data's CRC-32 is %s, the header says %s", path, have,
                        dp_printable(crc, shown, sizeof shown));
    }
    free(spans);
    return s;
}

dp_status dp_st_read(const char *path, dp_st_file *out) { return dp_st_read_limited(path, NULL, out); }

dp_status dp_st_read_limited(const char *path, const dp_st_limits *lim, dp_st_file *out) {
    memset(out, 0, sizeof *out);
    struct stat st;
    int fd;
    DP_TRY(dp_open_regular(path, NULL, &fd, &st)); /* a directory or FIFO is named, never waited on */
    dp_status s = read_file(path, fd, st.st_size, lim, out);
    close(fd);
    if (s != DP_OK) dp_st_free(out);
    return s;
}

void dp_st_free(dp_st_file *f) {
    if (!f) return;
    free(f->buf);
    free(f->tensors);
    free(f->by_name);
    cJSON_Delete(f->root);
    memset(f, 0, sizeof *f);
}

const dp_st_tensor *dp_st_find(const dp_st_file *f, const char *name) {
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(f->tensors[f->by_name[mid]].name, name);
        if (c == 0) return &f->tensors[f->by_name[mid]];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

const char *dp_st_meta_get(const dp_st_file *f, const char *key) {
    if (!f->meta_json) return NULL;
    cJSON *v = cJSON_GetObjectItemCaseSensitive((cJSON *)f->meta_json, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
