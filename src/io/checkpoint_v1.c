/* checkpoint_v1.c: reading the old DPCKPT01 format (dptrain 0.1's --save), so old files still
 * evaluate and initialise runs; nothing writes it any more. */
#include "io/checkpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/crc.h"
#include "core/printable.h"
#include "core/sysmem.h"

static const char magic[8] = {'D', 'P', 'C', 'K', 'P', 'T', '0', '1'};

dp_status dp_checkpoint_v1_load(const char *path, const dp_model *m, float *params, float *buffers, float *momentum,
                                dp_ckpt_v1_header *hdr_out) {
    struct stat st;
    FILE *f;
    DP_TRY(dp_fopen_regular(path, NULL, &f, &st));
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return dp_fail(DP_ERR_IO, "%s: cannot seek: %s", path, strerror(errno));
    }
    dp_status s = DP_OK;
    unsigned char *buf = NULL;
    if (size < (long)(sizeof magic + sizeof(dp_ckpt_v1_header) + 4)) {
        s = dp_fail(DP_ERR_FORMAT, "%s: not a dptrain checkpoint (%ld bytes, too short)", path, size);
        goto out;
    }
    /* the header first: a file it does not describe, or one for another model, is refused before
       the rest is read (a huge file must not be read whole to be refused) */
    unsigned char pre[sizeof magic + sizeof(dp_ckpt_v1_header)];
    if (fread(pre, 1, sizeof pre, f) != sizeof pre) {
        s = dp_fail(DP_ERR_IO, "%s: read failed", path);
        goto out;
    }
    if (memcmp(pre, magic, sizeof magic) != 0) {
        s = dp_fail(DP_ERR_FORMAT, "%s: not a dptrain checkpoint (bad magic)", path);
        goto out;
    }
    dp_ckpt_v1_header h;
    memcpy(&h, pre + sizeof magic, sizeof h);
    h.model[sizeof h.model - 1] = '\0';
    const int64_t max_floats = (int64_t)1 << 40; /* bounds the size arithmetic below */
    size_t floats = h.n_params >= 0 && h.n_params < max_floats && h.n_buffers >= 0 && h.n_buffers < max_floats
                        ? (size_t)h.n_params * (h.has_momentum ? 2 : 1) + (size_t)h.n_buffers
                        : 0;
    size_t expect = sizeof magic + sizeof h + floats * sizeof(float) + 4;
    if (!floats || (size_t)size != expect) {
        s = dp_fail(DP_ERR_FORMAT, "%s: truncated or corrupt checkpoint (%ld bytes, header says %zu)", path, size,
                    expect);
        goto out;
    }
    if (strcmp(h.model, m->name) != 0 || h.c != m->input.c || h.h != m->input.h || h.w != m->input.w ||
        h.n_classes != m->n_classes || (size_t)h.n_params != m->params.n || (size_t)h.n_buffers != m->buffers.n) {
        /* both halves name the counts too: a file of the same model, shape and classes may still hold
           another number of parameters (another version of the model, or a crafted header) */
        char shown[160];
        s = dp_fail(DP_ERR_USAGE,
                    "%s: checkpoint is for model %s on %dx%dx%d inputs with %d classes, %lld parameter floats and "
                    "%lld buffer floats; this run has model %s on %dx%dx%d with %d classes, %zu parameter floats and "
                    "%zu buffer floats",
                    path, dp_printable(h.model, shown, sizeof shown), h.c, h.h, h.w, h.n_classes,
                    (long long)h.n_params, (long long)h.n_buffers, m->name, m->input.c, m->input.h, m->input.w,
                    m->n_classes, m->params.n, m->buffers.n);
        goto out;
    }
    buf = malloc((size_t)size);
    if (!buf) {
        s = dp_fail(DP_ERR_NOMEM, "%s: out of memory reading %ld bytes", path, size);
        goto out;
    }
    memcpy(buf, pre, sizeof pre);
    if (fread(buf + sizeof pre, 1, (size_t)size - sizeof pre, f) != (size_t)size - sizeof pre) {
        s = dp_fail(DP_ERR_IO, "%s: read failed", path);
        goto out;
    }
    uint32_t stored;
    memcpy(&stored, buf + size - 4, 4);
    if (dp_crc32(0, buf, (size_t)size - 4) != stored) {
        s = dp_fail(DP_ERR_FORMAT, "%s: checkpoint is corrupt (CRC mismatch)", path);
        goto out;
    }
    const unsigned char *p = buf + sizeof magic + sizeof h;
    memcpy(params, p, m->params.n * sizeof(float));
    p += m->params.n * sizeof(float);
    memcpy(buffers, p, m->buffers.n * sizeof(float));
    p += m->buffers.n * sizeof(float);
    if (momentum && h.has_momentum) memcpy(momentum, p, m->params.n * sizeof(float));
    if (hdr_out) *hdr_out = h;
out:
    free(buf);
    fclose(f);
    return s;
}
