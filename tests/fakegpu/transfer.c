/* transfer.c: moving bytes on the fake GPU, with CUDA's blocking rules:
 *   - upload from host_alloc (pinned) memory is queued and reads the source when it runs, so a
 *     caller that refills the staging buffer before a wait uploads the new bytes (as a DMA from
 *     pinned memory would), and the device's next wait fails naming the race (a digest of the
 *     source taken when queued differs from the one when it runs); from other (pageable) memory the bytes are staged at the call, which
 *     then returns (as CUDA does through its own pinned staging buffer);
 *   - copy and zero are queued;
 *   - download waits for the main stream, then copies (a copy into pageable memory returns only
 *     when done; device.cu waits after it in every case).
 * Device pointers are checked at the call and translated again when the op runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_internal.h"

typedef struct {
    fg_op op;
    void *dst;
    const void *src; /* a device pointer (copy), pinned host memory (upload), or NULL: staged */
    size_t bytes;
    unsigned char staged[];
} mv_op;

/* A digest of the bytes an upload from pinned memory will read, taken when it is queued (eagerly or
 * by a replay) and again when it runs: a difference is a host write to the source while the copy
 * was pending, a race a GPU does not report (its DMA reads whatever is there when it runs). */
static uint64_t digest(const void *p, size_t bytes) {
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull ^ bytes;
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0x100000001b3ull, h ^= h >> 29;
    }
    for (; i < bytes; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t upload_queued(fg_dev *g, fg_op *op) {
    (void)g;
    const mv_op *o = (const mv_op *)op;
    return o->src ? digest(o->src, o->bytes) : 0;
}

static void upload_run(fg_dev *g, fg_op *op, uint64_t queued) {
    mv_op *o = (mv_op *)op;
    if (o->src && digest(o->src, o->bytes) != queued) {
        fprintf(stderr, "fakegpu: device %d: the host wrote to pinned memory %p (%zu bytes) while an upload from it "
                "was queued and had not run\n", g->ordinal, o->src, o->bytes);
        fg_set_fail(g, DP_ERR_INTERNAL, "fakegpu: device %d: the host wrote to pinned memory %p (%zu bytes) while an "
                    "upload from it was queued and had not run (a GPU would copy the new bytes): wait for an event "
                    "recorded after the upload before writing its source again", g->ordinal, o->src, o->bytes);
    }
    memcpy(fg_real(g, o->dst, 0, o->bytes, "upload", "dst"), o->src ? o->src : o->staged, o->bytes);
}

static void copy_run(fg_dev *g, fg_op *op, uint64_t unused) {
    (void)unused;
    mv_op *o = (mv_op *)op;
    memmove(fg_real(g, o->dst, 0, o->bytes, "copy", "dst"), fg_real(g, o->src, 0, o->bytes, "copy", "src"), o->bytes);
}

static void zero_run(fg_dev *g, fg_op *op, uint64_t unused) {
    (void)unused;
    mv_op *o = (mv_op *)op;
    memset(fg_real(g, o->dst, 0, o->bytes, "zero", "p"), 0, o->bytes);
}

static dp_status queue(const dp_dev_stream *s, const char *what, void (*run)(fg_dev *, fg_op *, uint64_t), void *dst,
                       const void *src, size_t bytes, size_t staged) {
    mv_op *o = malloc(sizeof *o + staged);
    if (!o) return dp_fail(DP_ERR_NOMEM, "fakegpu: out of host memory queueing %s of %zu bytes", what, bytes);
    o->op = (fg_op){.run = run, .on_enqueue = run == upload_run ? upload_queued : NULL, .what = what, .waits_for = -1,
                    .launch = strcmp(what, "NCCL's write") ? FG_COPY : 0};
    o->dst = dst, o->src = staged ? NULL : src, o->bytes = bytes;
    if (staged) memcpy(o->staged, src, bytes);
    fg_submit(fg_of(s->dev), fg_stream_of(s), &o->op);
    return DP_OK;
}

/* Host code that hands device memory to a host side of a transfer is a bug the GPU would fault on. */
static void host_side(const void *p, const char *call, const char *arg) {
    if ((uintptr_t)p & FG_ALIAS_BIT) {
        fprintf(stderr, "fakegpu: %s: %s = %p is device memory, not host memory (copy moves device to device)\n",
                call, arg, p);
        abort();
    }
}

dp_status fg_s_upload(const dp_dev_stream *s, void *dst, const void *src, size_t bytes) {
    if (!bytes) return DP_OK;
    fg_dev *g = fg_of(s->dev);
    fg_real(g, dst, 0, bytes, "upload", "dst");
    host_side(src, "upload", "src");
    if (fg_is_pinned(g, src, bytes)) return queue(s, "upload", upload_run, dst, src, bytes, 0);
    /* pageable: CUDA cannot record it in a graph; with a watch set, device.cu waits first (polled) */
    DP_TRY(fg_forbidden(g, "upload from pageable host memory"));
    if (s->dev->waits->watch) DP_TRY(fg_s_wait(s));
    return queue(s, "upload", upload_run, dst, src, bytes, bytes);
}
dp_status fg_upload(const dp_dev *d, void *dst, const void *src, size_t bytes) { return fg_s_upload(&d->main, dst, src, bytes); }

dp_status fg_s_copy(const dp_dev_stream *s, void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return DP_OK;
    fg_real(fg_of(s->dev), dst, 0, bytes, "copy", "dst");
    fg_real(fg_of(s->dev), src, 0, bytes, "copy", "src");
    return queue(s, "copy", copy_run, dst, src, bytes, 0);
}
dp_status fg_copy(const dp_dev *d, void *dst, const void *src, size_t bytes) { return fg_s_copy(&d->main, dst, src, bytes); }

dp_status fg_s_zero(const dp_dev_stream *s, void *p, size_t bytes) {
    if (!bytes) return DP_OK;
    fg_real(fg_of(s->dev), p, 0, bytes, "zero", "p");
    return queue(s, "zero", zero_run, p, NULL, bytes, 0);
}
dp_status fg_zero(const dp_dev *d, void *p, size_t bytes) { return fg_s_zero(&d->main, p, bytes); }

dp_status fg_download(const dp_dev *d, void *dst, const void *src, size_t bytes) {
    fg_dev *g = fg_of(d);
    DP_TRY(fg_forbidden(g, "download"));
    if (bytes) {
        fg_real(g, src, 0, bytes, "download", "src");
        host_side(dst, "download", "dst");
    }
    DP_TRY(fg_wait(d));
    if (bytes) memcpy(dst, fg_real(g, src, 0, bytes, "download", "src"), bytes);
    return DP_OK;
}

/* ---- for the NCCL test double in a test process (fakegpu.h) */

void *dp_fakegpu_host_address(const void *p) {
    const uintptr_t u = (uintptr_t)p;
    return (void *)(u & FG_ALIAS_BIT ? u ^ FG_ALIAS_BIT : u);
}

void dp_fakegpu_stream_sync(const void *stream) {
    fg_stream *s = fg_stream_from(stream, "dp_fakegpu_stream_sync");
    fg_drain(s->g, s->index);
}

void dp_fakegpu_stream_charge(const void *stream, long long bytes) {
    fg_stream_from(stream, "dp_fakegpu_stream_charge")->g->charged += bytes;
}

void dp_fakegpu_stream_write(const void *stream, void *dst, const void *src, size_t bytes) {
    fg_stream *s = fg_stream_from(stream, "dp_fakegpu_stream_write");
    if (s->index != FG_MAIN && s->index != FG_COLL) {
        fprintf(stderr, "fakegpu: dp_fakegpu_stream_write: a lane stream (only the main and collective streams)\n");
        abort();
    }
    const dp_dev_stream *st = s->index == FG_COLL ? &s->g->dev.coll : &s->g->dev.main;
    if (!bytes) return;
    fg_real(s->g, dst, 0, bytes, "dp_fakegpu_stream_write", "dst");
    /* staged now and queued, without upload's wait (whose watch would call back into NCCL) */
    if (queue(st, "NCCL's write", upload_run, dst, src, bytes, bytes) != DP_OK)
        fg_set_fail(s->g, DP_ERR_NOMEM, "fakegpu: %s", dp_last_error());
}
