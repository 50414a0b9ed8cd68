/* idx.c: reads an IDX image file and its label file (MNIST, Fashion-MNIST), gzip or raw.
 * zlib's gzread passes raw files through, so one path serves both. Every check names the
 * file and says what was expected and what was found. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "core/sysmem.h"
#include "data/dataset.h"

#define IDX_IMAGES_MAGIC 0x00000803u
#define IDX_LABELS_MAGIC 0x00000801u
#define IDX_MAX_SIDE 4096u
#define IDX_MAX_BYTES (8ull << 30) /* refuse headers announcing more than 8 GiB of pixels */
#define IDX_GZ_MAX_RATIO 1100ull   /* deflate expands at most ~1032x: a bound on what a .gz can hold */
#define IDX_FIRST_CHUNK (64ull << 20) /* a .gz body is read into a buffer grown as data arrives */

typedef struct {
    gzFile g;
    const char *path;
    unsigned long long file_bytes; /* on disk (compressed for .gz) */
} idx_file;

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Regular files only (a directory or FIFO fails by name instead of hanging), then zlib on the fd. */
static dp_status open_gz(const char *path, idx_file *f) {
    int fd;
    struct stat st;
    DP_TRY(dp_open_regular(path, NULL, &fd, &st));
    f->path = path;
    f->file_bytes = (unsigned long long)st.st_size;
    f->g = gzdopen(fd, "rb");
    if (!f->g) {
        close(fd);
        return dp_fail(DP_ERR_NOMEM, "%s: out of memory opening it", path);
    }
    gzbuffer(f->g, 1u << 17);
    return DP_OK;
}

/* Before allocating: the most body bytes the file can deliver. A raw file holds exactly its size;
 * a .gz at most IDX_GZ_MAX_RATIO times its size. A header announcing more is refused with the
 * file's size, not after allocating what it announced. */
static dp_status check_room(const idx_file *f, size_t hdr_bytes, unsigned long long want, const char *what) {
    if (gzdirect(f->g)) {
        if (f->file_bytes < hdr_bytes + want)
            return dp_fail(DP_ERR_FORMAT, "%s: truncated: expected %llu bytes (%zu-byte header + %s), found %llu",
                           f->path, hdr_bytes + want, hdr_bytes, what, f->file_bytes);
    } else if (want > f->file_bytes * IDX_GZ_MAX_RATIO) {
        return dp_fail(DP_ERR_FORMAT, "%s: truncated: the header announces %s (%llu bytes) but this %llu-byte gzip "
                       "file cannot hold more than %llu bytes", f->path, what, want, f->file_bytes,
                       f->file_bytes * IDX_GZ_MAX_RATIO);
    }
    return DP_OK;
}

/* Reads up to n bytes; *got says how many came (fewer only at the end of the data). */
static dp_status read_up_to(gzFile g, const char *path, void *buf, size_t n, size_t *got) {
    unsigned char *p = buf;
    *got = 0;
    while (*got < n) {
        size_t want = n - *got;
        if (want > (1u << 30)) want = 1u << 30;
        int r = gzread(g, p + *got, (unsigned)want);
        if (r < 0) {
            int err;
            const char *msg = gzerror(g, &err);
            if (err == Z_ERRNO) return dp_fail(DP_ERR_IO, "%s: read failed: %s", path, strerror(errno));
            return dp_fail(DP_ERR_FORMAT, "%s: corrupt gzip data after %zu bytes: %s", path, *got, msg);
        }
        if (r == 0) break;
        *got += (size_t)r;
    }
    return DP_OK;
}

/* Counts the bytes left in the stream (trailing garbage after the announced data). */
static dp_status count_rest(gzFile g, const char *path, size_t *extra) {
    unsigned char buf[1 << 14];
    size_t got;
    *extra = 0;
    do {
        DP_TRY(read_up_to(g, path, buf, sizeof buf, &got));
        *extra += got;
    } while (got == sizeof buf);
    return DP_OK;
}

static dp_status read_header(gzFile g, const char *path, unsigned char *hdr, size_t n, uint32_t magic,
                             const char *kind) {
    size_t got;
    DP_TRY(read_up_to(g, path, hdr, n, &got));
    if (got < n)
        return dp_fail(DP_ERR_FORMAT, "%s: truncated: the IDX header of %s needs %zu bytes, found %zu", path, kind, n,
                       got);
    uint32_t found = be32(hdr);
    if (found != magic) {
        const char *hint = found == IDX_IMAGES_MAGIC ? " (that is an image file)"
                           : found == IDX_LABELS_MAGIC ? " (that is a label file)"
                                                       : "";
        return dp_fail(DP_ERR_FORMAT, "%s: wrong magic number 0x%08X%s, expected 0x%08X for IDX %s", path,
                       (unsigned)found, hint, (unsigned)magic, kind);
    }
    return DP_OK;
}

/* Reads exactly `want` body bytes after a header of hdr_bytes, refusing short and long files. */
static dp_status read_body(gzFile g, const char *path, unsigned char **bufp, size_t want, size_t hdr_bytes,
                           const char *what) {
    size_t got = 0, extra, cap = 0;
    /* grown as the data arrives: a .gz whose stream ends early costs what it held, not what the
     * header announced */
    while (got < want) {
        size_t next = cap ? (cap > want / 2 ? want : 2 * cap) : (want < IDX_FIRST_CHUNK ? want : IDX_FIRST_CHUNK);
        unsigned char *p = realloc(*bufp, next);
        if (!p) return dp_fail(DP_ERR_NOMEM, "%s: out of memory growing the buffer to %zu bytes for %s", path, next, what);
        *bufp = p, cap = next;
        size_t k;
        DP_TRY(read_up_to(g, path, p + got, cap - got, &k));
        got += k;
        if (got < cap) break;
    }
    if (got < want)
        return dp_fail(DP_ERR_FORMAT, "%s: truncated: expected %zu bytes (%zu-byte header + %s), found %zu", path,
                       hdr_bytes + want, hdr_bytes, what, hdr_bytes + got);
    DP_TRY(count_rest(g, path, &extra));
    if (extra)
        return dp_fail(DP_ERR_FORMAT, "%s: %zu unexpected bytes after the expected %zu (%zu-byte header + %s)", path,
                       extra, hdr_bytes + want, hdr_bytes, what);
    return DP_OK;
}

static dp_status load(int n_classes, const idx_file *fi, const idx_file *fl, dp_dataset *out) {
    const char *ipath = fi->path, *lpath = fl->path;
    gzFile gi = fi->g, gl = fl->g;
    unsigned char ih[16], lh[8];
    DP_TRY(read_header(gi, ipath, ih, sizeof ih, IDX_IMAGES_MAGIC, "images (unsigned bytes, 3 dimensions)"));
    DP_TRY(read_header(gl, lpath, lh, sizeof lh, IDX_LABELS_MAGIC, "labels (unsigned bytes, 1 dimension)"));
    const uint32_t n = be32(ih + 4), rows = be32(ih + 8), cols = be32(ih + 12), nl = be32(lh + 4);
    if (n == 0 || rows == 0 || cols == 0)
        return dp_fail(DP_ERR_FORMAT, "%s: the header says %u images of %ux%u: a dimension is 0", ipath, (unsigned)n,
                       (unsigned)rows, (unsigned)cols);
    const unsigned long long bytes = (unsigned long long)n * rows * cols;
    if (n > INT32_MAX || rows > IDX_MAX_SIDE || cols > IDX_MAX_SIDE || bytes > IDX_MAX_BYTES)
        return dp_fail(DP_ERR_FORMAT,
                       "%s: the header says %u images of %ux%u: absurd sizes (at most %u pixels a side and 8 GiB "
                       "in all); is this an IDX image file?", ipath, (unsigned)n, (unsigned)rows, (unsigned)cols,
                       IDX_MAX_SIDE);
    if (nl != n)
        return dp_fail(DP_ERR_FORMAT, "%s has %u images but %s has %u labels", ipath, (unsigned)n, lpath,
                       (unsigned)nl);

    char what[96], lwhat[64];
    snprintf(what, sizeof what, "%u images of %ux%u", (unsigned)n, (unsigned)rows, (unsigned)cols);
    snprintf(lwhat, sizeof lwhat, "%u labels", (unsigned)n);
    DP_TRY(check_room(fi, sizeof ih, bytes, what));
    DP_TRY(check_room(fl, sizeof lh, n, lwhat));
    char mwhat[4200 + 96];
    snprintf(mwhat, sizeof mwhat, "%s (%s)", ipath, what);
    DP_TRY(dp_memory_check(bytes + n, mwhat));
    DP_TRY(read_body(gi, ipath, &out->pixels, (size_t)bytes, sizeof ih, what));
    DP_TRY(read_body(gl, lpath, &out->labels, n, sizeof lh, lwhat));
    for (uint32_t i = 0; i < n; i++)
        if (out->labels[i] >= n_classes)
            return dp_fail(DP_ERR_FORMAT, "%s: byte offset %zu: label %u is out of range 0..%d", lpath,
                           sizeof lh + (size_t)i, (unsigned)out->labels[i], n_classes - 1);
    out->n = (int)n, out->c = 1, out->h = (int)rows, out->w = (int)cols;
    return DP_OK;
}

dp_status dp_idx_load(const char *images_path, const char *labels_path, int n_classes, dp_dataset *out) {
    memset(out, 0, sizeof *out);
    if (n_classes < 1 || n_classes > 256)
        return dp_fail(DP_ERR_INTERNAL, "%s: %d classes requested; IDX byte labels allow 1..256", labels_path,
                       n_classes);
    idx_file fi, fl;
    DP_TRY(open_gz(images_path, &fi));
    dp_status s = open_gz(labels_path, &fl);
    if (s != DP_OK) {
        gzclose(fi.g);
        return s;
    }
    s = load(n_classes, &fi, &fl, out);
    gzclose(fi.g);
    gzclose(fl.g);
    if (s != DP_OK) {
        free(out->pixels), free(out->labels);
        memset(out, 0, sizeof *out);
        return s;
    }
    snprintf(out->name, sizeof out->name, "idx");
    out->n_classes = n_classes;
    out->mean[0] = 0.0f, out->std[0] = 1.0f; /* plain pixel/255 until the caller sets the set's own */
    return DP_OK;
}
