/* kernels.c: the fake GPU's kernel table. Every entry returns at once, as a CUDA launch does: it
 * copies its arguments by value (the conv dims, tree_sum's vector array: the caller may change
 * them once the call returns), checks each device pointer against the live allocations over the
 * extent the kernel touches, and queues an op on the stream its dp_kctx names. The stream's
 * worker later translates the pointers and calls the CPU table's entry with nthreads 1, so
 * results are bitwise the CPU's for the same arguments. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_internal.h"
#include "kernels/kcall.h"

enum {
    K_CONV_FWD, K_CONV_BWD, K_LIN_FWD, K_LIN_BWD, K_RELU_FWD, K_RELU_BWD, K_ADD, K_COPY, K_MAXPOOL_FWD,
    K_MAXPOOL_BWD, K_AVGPOOL_FWD, K_AVGPOOL_BWD, K_BN_SUMS, K_BN_STATS, K_BN_APPLY, K_BN_BWD_SUMS, K_BN_BWD,
    K_XENT, K_SGD, K_TREE, K_GATHER, K_LANE_METRICS, K_NONFINITE,
};

/* A device pointer argument: the kernel touches bytes [off, off + bytes) from it. */
typedef struct {
    const void *fake;
    size_t off, bytes;
    const char *name;
} k_ptr;

/* A queued kernel call: its scalars by value (in the entry's order), then its pointers. */
typedef struct {
    fg_op op; /* first: the stream queues &op */
    fg_dev *g;
    int stream, kind;
    dp_conv2d_dims dims;
    int i[10];
    size_t z[3];
    float f[4];
    double count;
    int np;
    k_ptr p[];
} k_op;

static const dp_kernels *const C = &dp_cpu_kernels;
static void k_run(fg_dev *g, fg_op *op, uint64_t arg);

/* lanes(): every lane's call as one op, one launch, whose run runs them in lane order. The op
 * holds the calls (each checked and copied as its own entry's) in place: the stream frees it
 * whole. K_SLOT: the room one call takes (its pointers at most 11, as the layers' entries have). */
#define K_SLOT ((sizeof(k_op) + 11 * sizeof(k_ptr) + 15) / 16 * 16)
typedef struct {
    fg_op op;
    int n, cap;
    _Alignas(16) unsigned char calls[];
} lanes_op;
/* the lanes op this thread is filling (lanes() below), or NULL: calls queue on their own */
static _Thread_local lanes_op *filling;

/* Which host thread queues kernel `name`: each pair once. */
static void note_launcher(fg_dev *g, const char *name) {
    const pthread_t self = pthread_self();
    pthread_mutex_lock(&g->mu);
    int seen = 0;
    for (int i = 0; i < g->n_launchers && !seen; i++)
        seen = strcmp(g->launchers[i].name, name) == 0 && pthread_equal(g->launchers[i].thread, self);
    if (!seen && g->n_launchers < (int)(sizeof g->launchers / sizeof g->launchers[0]))
        g->launchers[g->n_launchers].name = name, g->launchers[g->n_launchers++].thread = self;
    pthread_mutex_unlock(&g->mu);
}

/* A new call on the stream c names; NULL (the failure kept for the next wait) out of memory. */
static k_op *k_new(const dp_kctx *c, int kind, const char *name, int np) {
    fg_stream *s = fg_stream_from(c ? c->stream : NULL, name);
    if (c && c->ordinal != s->g->ordinal) { /* CUDA would make another GPU current and fail the launch */
        fprintf(stderr, "fakegpu: %s: dp_kctx.ordinal is %d but its stream is fakegpu %d's (pass the kc of one of "
                "the device's streams whole)\n", name, c->ordinal, s->g->ordinal);
        abort();
    }
    if (filling && (np > 11 || filling->n == filling->cap)) {
        fprintf(stderr, "fakegpu: lanes: %s takes %d pointers (a lane's call holds 11), or a lane queued two\n",
                name, np);
        abort();
    }
    k_op *o = filling ? memset(filling->calls + (size_t)filling->n++ * K_SLOT, 0, K_SLOT)
                      : calloc(1, sizeof *o + (size_t)np * sizeof(k_ptr));
    if (!o) {
        fg_set_fail(s->g, DP_ERR_NOMEM, "fakegpu: out of host memory queueing %s", name);
        return NULL;
    }
    o->op = (fg_op){.run = k_run, .what = name, .waits_for = -1, .launch = FG_KERNEL};
    o->g = s->g, o->stream = s->index, o->kind = kind, o->np = np;
    note_launcher(s->g, name);
    return o;
}

int dp_fakegpu_launch_threads(const dp_dev *d, const char *name, pthread_t *ids, int max) {
    fg_dev *g = fg_of(d);
    int n = 0;
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < g->n_launchers; i++)
        if (strcmp(g->launchers[i].name, name) == 0) {
            if (n < max) ids[n] = g->launchers[i].thread;
            n++;
        }
    pthread_mutex_unlock(&g->mu);
    return n;
}

/* Pointer argument k: checked now, so a bad one stops the test at the call that passed it. */
static void arg(k_op *o, int k, const char *name, const void *p, size_t off, size_t bytes) {
    o->p[k] = (k_ptr){.fake = p, .off = off, .bytes = bytes, .name = name};
    fg_real(o->g, p, off, bytes, o->op.what, name);
}

static void submit(k_op *o) {
    if (!filling) fg_submit(o->g, o->stream, &o->op);
}

#define F4(n) ((size_t)(n) * sizeof(float))

static void k_run(fg_dev *g, fg_op *op, uint64_t unused) {
    (void)unused;
    k_op *o = (k_op *)op;
    const dp_kctx kc = {.nthreads = 1};
    if (o->kind == K_TREE) { /* n vectors */
        float **v = malloc((size_t)(o->np ? o->np : 1) * sizeof *v);
        if (!v) {
            fg_set_fail(g, DP_ERR_NOMEM, "fakegpu: tree_sum: out of host memory for %d vectors", o->np);
            return;
        }
        for (int k = 0; k < o->np; k++) v[k] = fg_real(g, o->p[k].fake, o->p[k].off, o->p[k].bytes, "tree_sum", "v[i]");
        C->tree_sum(&kc, v, o->np, o->z[0], o->z[1], o->i[0]);
        free(v);
        return;
    }
    void *r[11];
    for (int k = 0; k < o->np; k++) r[k] = fg_real(g, o->p[k].fake, o->p[k].off, o->p[k].bytes, op->what, o->p[k].name);
    const int *i = o->i;
    const size_t *z = o->z;
    const float *f = o->f;
    switch (o->kind) {
    case K_CONV_FWD: C->conv2d_forward(&kc, &o->dims, i[0], r[0], r[1], r[2], r[3], r[4]); break;
    case K_CONV_BWD: C->conv2d_backward(&kc, &o->dims, i[0], r[0], r[1], r[2], r[3], r[4], r[5], r[6]); break;
    case K_LIN_FWD: C->linear_forward(&kc, i[0], i[1], i[2], r[0], r[1], r[2], r[3]); break;
    case K_LIN_BWD: C->linear_backward(&kc, i[0], i[1], i[2], r[0], r[1], r[2], r[3], r[4], r[5]); break;
    case K_RELU_FWD: C->relu_forward(&kc, z[0], r[0], r[1]); break;
    case K_RELU_BWD: C->relu_backward(&kc, z[0], r[0], r[1], r[2]); break;
    case K_ADD: C->add(&kc, z[0], r[0], r[1], r[2]); break;
    case K_COPY: C->copy(&kc, z[0], r[0], r[1]); break;
    case K_MAXPOOL_FWD: C->maxpool_forward(&kc, i[0], i[1], i[2], i[3], i[4], i[5], i[6], r[0], r[1], r[2]); break;
    case K_MAXPOOL_BWD:
        C->maxpool_backward(&kc, i[0], i[1], i[2], i[3], i[4], i[5], i[6], i[7], i[8], r[0], r[1], r[2]);
        break;
    case K_AVGPOOL_FWD: C->avgpool_forward(&kc, i[0], i[1], i[2], r[0], r[1]); break;
    case K_AVGPOOL_BWD: C->avgpool_backward(&kc, i[0], i[1], i[2], r[0], r[1]); break;
    case K_BN_SUMS: C->bn_sums(&kc, i[0], i[1], i[2], r[0], r[1], r[2]); break;
    case K_BN_STATS:
        C->bn_stats(&kc, i[0], i[1], r[0], o->count, f[0], f[1], i[2], r[1], r[2], r[3], r[4]);
        break;
    case K_BN_APPLY: C->bn_apply(&kc, i[0], i[1], i[2], r[0], r[1], r[2], r[3], r[4], r[5]); break;
    case K_BN_BWD_SUMS: C->bn_backward_sums(&kc, i[0], i[1], i[2], r[0], r[1], r[2], r[3], r[4], r[5]); break;
    case K_BN_BWD:
        C->bn_backward(&kc, i[0], i[1], i[2], r[0], r[1], r[2], r[3], r[4], r[5], r[6], o->count, r[7], r[8], r[9],
                       r[10]);
        break;
    case K_XENT: C->softmax_xent(&kc, i[0], i[1], r[0], r[1], f[0], r[2], r[3], r[4]); break;
    case K_SGD: C->sgd(&kc, z[0], r[0], r[1], r[2], f[0], f[1], f[2], i[0]); break;
    case K_GATHER: C->gather_batch(&kc, i[0], i[1], i[2], r[0], r[1], r[2], r[3], r[4], r[5]); break;
    case K_LANE_METRICS: C->lane_metrics(&kc, i[0], r[0], r[1], r[2]); break;
    case K_NONFINITE: C->nonfinite(&kc, z[0], r[0], r[1]); break;
    default: break;
    }
}

/* ---- the entries: each records its scalars, then its pointers with the extents it touches;
 * the workspace sizes are the CPU's (pure functions: nothing to queue) */

static size_t conv_ws(const dp_conv2d_dims *d, int batch, int nthreads) {
    return C->conv2d_workspace_floats(d, batch, nthreads);
}

static void conv_fwd(const dp_kctx *c, const dp_conv2d_dims *d, int batch, const float *x, const float *w,
                     const float *b, float *y, float *ws) {
    k_op *o = k_new(c, K_CONV_FWD, "conv2d_forward", 5);
    if (!o) return;
    o->dims = *d, o->i[0] = batch;
    const size_t nx = (size_t)batch * d->in_c * d->in_h * d->in_w, ny = (size_t)batch * d->out_c * d->out_h * d->out_w;
    arg(o, 0, "x", x, 0, F4(nx));
    arg(o, 1, "w", w, 0, F4((size_t)d->out_c * d->in_c * d->k * d->k));
    arg(o, 2, "b", b, 0, F4(d->out_c));
    arg(o, 3, "y", y, 0, F4(ny));
    arg(o, 4, "ws", ws, 0, F4(C->conv2d_workspace_floats(d, batch, 1))); /* what nthreads 1 uses */
    submit(o);
}

static void conv_bwd(const dp_kctx *c, const dp_conv2d_dims *d, int batch, const float *x, const float *w,
                     const float *dy, float *dx, float *dw, float *db, float *ws) {
    k_op *o = k_new(c, K_CONV_BWD, "conv2d_backward", 7);
    if (!o) return;
    o->dims = *d, o->i[0] = batch;
    const size_t nx = (size_t)batch * d->in_c * d->in_h * d->in_w, ny = (size_t)batch * d->out_c * d->out_h * d->out_w;
    const size_t nw = (size_t)d->out_c * d->in_c * d->k * d->k;
    arg(o, 0, "x", x, 0, F4(nx));
    arg(o, 1, "w", w, 0, F4(nw));
    arg(o, 2, "dy", dy, 0, F4(ny));
    arg(o, 3, "dx", dx, 0, F4(nx));
    arg(o, 4, "dw", dw, 0, F4(nw));
    arg(o, 5, "db", db, 0, F4(d->out_c));
    arg(o, 6, "ws", ws, 0, F4(C->conv2d_workspace_floats(d, batch, 1)));
    submit(o);
}

static void lin_fwd(const dp_kctx *c, int batch, int in_f, int out_f, const float *x, const float *w, const float *b,
                    float *y) {
    k_op *o = k_new(c, K_LIN_FWD, "linear_forward", 4);
    if (!o) return;
    o->i[0] = batch, o->i[1] = in_f, o->i[2] = out_f;
    arg(o, 0, "x", x, 0, F4((size_t)batch * in_f));
    arg(o, 1, "w", w, 0, F4((size_t)out_f * in_f));
    arg(o, 2, "b", b, 0, F4(out_f));
    arg(o, 3, "y", y, 0, F4((size_t)batch * out_f));
    submit(o);
}

static void lin_bwd(const dp_kctx *c, int batch, int in_f, int out_f, const float *x, const float *w, const float *dy,
                    float *dx, float *dw, float *db) {
    k_op *o = k_new(c, K_LIN_BWD, "linear_backward", 6);
    if (!o) return;
    o->i[0] = batch, o->i[1] = in_f, o->i[2] = out_f;
    arg(o, 0, "x", x, 0, F4((size_t)batch * in_f));
    arg(o, 1, "w", w, 0, F4((size_t)out_f * in_f));
    arg(o, 2, "dy", dy, 0, F4((size_t)batch * out_f));
    arg(o, 3, "dx", dx, 0, F4((size_t)batch * in_f));
    arg(o, 4, "dw", dw, 0, F4((size_t)out_f * in_f));
    arg(o, 5, "db", db, 0, F4(out_f));
    submit(o);
}

/* element-wise entries: n floats per pointer */
static void elementwise(const dp_kctx *c, int kind, const char *name, size_t n, const char *const *names,
                        const void *const *p, int np) {
    k_op *o = k_new(c, kind, name, np);
    if (!o) return;
    o->z[0] = n;
    for (int k = 0; k < np; k++) arg(o, k, names[k], p[k], 0, F4(n));
    submit(o);
}

static void relu_fwd(const dp_kctx *c, size_t n, const float *x, float *y) {
    elementwise(c, K_RELU_FWD, "relu_forward", n, (const char *[]){"x", "y"}, (const void *[]){x, y}, 2);
}
static void relu_bwd(const dp_kctx *c, size_t n, const float *y, const float *dy, float *dx) {
    elementwise(c, K_RELU_BWD, "relu_backward", n, (const char *[]){"y", "dy", "dx"}, (const void *[]){y, dy, dx}, 3);
}
static void add(const dp_kctx *c, size_t n, const float *a, const float *b, float *y) {
    elementwise(c, K_ADD, "add", n, (const char *[]){"a", "b", "y"}, (const void *[]){a, b, y}, 3);
}
static void copy(const dp_kctx *c, size_t n, const float *x, float *y) {
    elementwise(c, K_COPY, "copy", n, (const char *[]){"x", "y"}, (const void *[]){x, y}, 2);
}

/* PyTorch's floor-mode output size, as kernels/cpu/pool.c computes it */
static int pool_out(int in, int k, int stride, int pad) {
    if (k < 1 || stride < 1 || pad < 0) return 0;
    const int e = in + 2 * pad - k;
    return e < 0 ? 0 : e / stride + 1;
}

static void maxpool_fwd(const dp_kctx *c, int batch, int ch, int h, int w, int k, int stride, int pad, const float *x,
                        float *y, int32_t *argmax) {
    k_op *o = k_new(c, K_MAXPOOL_FWD, "maxpool_forward", 3);
    if (!o) return;
    const int v[7] = {batch, ch, h, w, k, stride, pad};
    for (int j = 0; j < 7; j++) o->i[j] = v[j];
    const size_t ny = (size_t)batch * ch * pool_out(h, k, stride, pad) * pool_out(w, k, stride, pad);
    arg(o, 0, "x", x, 0, F4((size_t)batch * ch * h * w));
    arg(o, 1, "y", y, 0, F4(ny));
    arg(o, 2, "argmax", argmax, 0, ny * sizeof(int32_t));
    submit(o);
}

static void maxpool_bwd(const dp_kctx *c, int batch, int ch, int h, int w, int k, int stride, int pad, int oh, int ow,
                        const float *dy, const int32_t *argmax, float *dx) {
    k_op *o = k_new(c, K_MAXPOOL_BWD, "maxpool_backward", 3);
    if (!o) return;
    const int v[9] = {batch, ch, h, w, k, stride, pad, oh, ow};
    for (int j = 0; j < 9; j++) o->i[j] = v[j];
    const size_t ny = (size_t)batch * ch * oh * ow;
    arg(o, 0, "dy", dy, 0, F4(ny));
    arg(o, 1, "argmax", argmax, 0, ny * sizeof(int32_t));
    arg(o, 2, "dx", dx, 0, F4((size_t)batch * ch * h * w));
    submit(o);
}

static void avgpool_fwd(const dp_kctx *c, int batch, int ch, int hw, const float *x, float *y) {
    k_op *o = k_new(c, K_AVGPOOL_FWD, "avgpool_forward", 2);
    if (!o) return;
    o->i[0] = batch, o->i[1] = ch, o->i[2] = hw;
    arg(o, 0, "x", x, 0, F4((size_t)batch * ch * hw));
    arg(o, 1, "y", y, 0, F4((size_t)batch * ch));
    submit(o);
}

static void avgpool_bwd(const dp_kctx *c, int batch, int ch, int hw, const float *dy, float *dx) {
    k_op *o = k_new(c, K_AVGPOOL_BWD, "avgpool_backward", 2);
    if (!o) return;
    o->i[0] = batch, o->i[1] = ch, o->i[2] = hw;
    arg(o, 0, "dy", dy, 0, F4((size_t)batch * ch));
    arg(o, 1, "dx", dx, 0, F4((size_t)batch * ch * hw));
    submit(o);
}

static size_t bn_ws(int batch, int ch, int hw) { return C->bn_workspace_floats(batch, ch, hw); }

static void bn_sums(const dp_kctx *c, int batch, int ch, int hw, const float *x, float *sums, float *ws) {
    k_op *o = k_new(c, K_BN_SUMS, "bn_sums", 3);
    if (!o) return;
    o->i[0] = batch, o->i[1] = ch, o->i[2] = hw;
    arg(o, 0, "x", x, 0, F4((size_t)batch * ch * hw));
    arg(o, 1, "sums", sums, 0, F4(2 * (size_t)ch));
    arg(o, 2, "ws", ws, 0, F4(C->bn_workspace_floats(batch, ch, hw)));
    submit(o);
}

static void bn_stats(const dp_kctx *c, int ch, int training, const float *sums, double count, float eps,
                     float momentum, int update, float *mean, float *invstd, float *run_mean, float *run_var) {
    k_op *o = k_new(c, K_BN_STATS, "bn_stats", 5);
    if (!o) return;
    o->i[0] = ch, o->i[1] = training, o->i[2] = update, o->count = count, o->f[0] = eps, o->f[1] = momentum;
    arg(o, 0, "sums", sums, 0, F4(2 * (size_t)ch));
    arg(o, 1, "mean", mean, 0, F4(ch));
    arg(o, 2, "invstd", invstd, 0, F4(ch));
    arg(o, 3, "run_mean", run_mean, 0, F4(ch));
    arg(o, 4, "run_var", run_var, 0, F4(ch));
    submit(o);
}

static void bn_apply(const dp_kctx *c, int batch, int ch, int hw, const float *x, const float *mean,
                     const float *invstd, const float *gamma, const float *beta, float *y) {
    k_op *o = k_new(c, K_BN_APPLY, "bn_apply", 6);
    if (!o) return;
    o->i[0] = batch, o->i[1] = ch, o->i[2] = hw;
    const size_t nx = (size_t)batch * ch * hw;
    arg(o, 0, "x", x, 0, F4(nx));
    arg(o, 1, "mean", mean, 0, F4(ch));
    arg(o, 2, "invstd", invstd, 0, F4(ch));
    arg(o, 3, "gamma", gamma, 0, F4(ch));
    arg(o, 4, "beta", beta, 0, F4(ch));
    arg(o, 5, "y", y, 0, F4(nx));
    submit(o);
}

static void bn_bwd_sums(const dp_kctx *c, int batch, int ch, int hw, const float *x, const float *dy,
                        const float *mean, const float *invstd, float *sums, float *ws) {
    k_op *o = k_new(c, K_BN_BWD_SUMS, "bn_backward_sums", 6);
    if (!o) return;
    o->i[0] = batch, o->i[1] = ch, o->i[2] = hw;
    const size_t nx = (size_t)batch * ch * hw;
    arg(o, 0, "x", x, 0, F4(nx));
    arg(o, 1, "dy", dy, 0, F4(nx));
    arg(o, 2, "mean", mean, 0, F4(ch));
    arg(o, 3, "invstd", invstd, 0, F4(ch));
    arg(o, 4, "sums", sums, 0, F4(2 * (size_t)ch));
    arg(o, 5, "ws", ws, 0, F4(C->bn_workspace_floats(batch, ch, hw)));
    submit(o);
}

static void bn_bwd(const dp_kctx *c, int batch, int ch, int hw, const float *x, const float *dy, const float *mean,
                   const float *invstd, const float *gamma, const float *local, const float *sums, double count,
                   float *dx, float *dgamma, float *dbeta, float *ws) {
    k_op *o = k_new(c, K_BN_BWD, "bn_backward", 11);
    if (!o) return;
    o->i[0] = batch, o->i[1] = ch, o->i[2] = hw, o->count = count;
    const size_t nx = (size_t)batch * ch * hw;
    arg(o, 0, "x", x, 0, F4(nx));
    arg(o, 1, "dy", dy, 0, F4(nx));
    arg(o, 2, "mean", mean, 0, F4(ch));
    arg(o, 3, "invstd", invstd, 0, F4(ch));
    arg(o, 4, "gamma", gamma, 0, F4(ch));
    arg(o, 5, "local", local, 0, F4(2 * (size_t)ch));
    arg(o, 6, "sums", sums, 0, F4(2 * (size_t)ch));
    arg(o, 7, "dx", dx, 0, F4(nx));
    arg(o, 8, "dgamma", dgamma, 0, F4(ch));
    arg(o, 9, "dbeta", dbeta, 0, F4(ch));
    arg(o, 10, "ws", ws, 0, F4(C->bn_workspace_floats(batch, ch, hw)));
    submit(o);
}

static void xent(const dp_kctx *c, int batch, int classes, const float *logits, const int32_t *labels,
                 float grad_scale, float *dlogits, float *loss, int32_t *correct) {
    k_op *o = k_new(c, K_XENT, "softmax_xent", 5);
    if (!o) return;
    o->i[0] = batch, o->i[1] = classes, o->f[0] = grad_scale;
    arg(o, 0, "logits", logits, 0, F4((size_t)batch * classes));
    arg(o, 1, "labels", labels, 0, (size_t)batch * sizeof(int32_t));
    arg(o, 2, "dlogits", dlogits, 0, F4((size_t)batch * classes));
    arg(o, 3, "loss", loss, 0, sizeof(float)); /* device memory, as on CUDA */
    arg(o, 4, "correct", correct, 0, sizeof(int32_t));
    submit(o);
}

static void sgd(const dp_kctx *c, size_t n, float *p, const float *g, float *buf, float lr, float momentum, float wd,
                int nesterov) {
    k_op *o = k_new(c, K_SGD, "sgd", 3);
    if (!o) return;
    o->z[0] = n, o->f[0] = lr, o->f[1] = momentum, o->f[2] = wd, o->i[0] = nesterov;
    arg(o, 0, "p", p, 0, F4(n));
    arg(o, 1, "g", g, 0, F4(n));
    arg(o, 2, "buf", buf, 0, F4(n));
    submit(o);
}

static void tree(const dp_kctx *c, float *const *v, int n, size_t lo, size_t count, int clear) {
    k_op *o = k_new(c, K_TREE, "tree_sum", n > 0 ? n : 0);
    if (!o) return;
    o->z[0] = lo, o->z[1] = count, o->i[0] = clear;
    for (int k = 0; k < n; k++) arg(o, k, "v[i]", v[k], F4(lo), F4(count)); /* the array, copied now */
    submit(o);
}

/* The samples idx names lie anywhere in the data set: its arrays are checked from their start (the
 * whole allocation is theirs), the batch's over what it writes. */
static void gather(const dp_kctx *c, int n, int ch, int hw, const uint8_t *pixels, const uint8_t *labels,
                   const int32_t *idx, const float *lut, float *x, int32_t *y) {
    k_op *o = k_new(c, K_GATHER, "gather_batch", 6);
    if (!o) return;
    o->i[0] = n, o->i[1] = ch, o->i[2] = hw;
    arg(o, 0, "pixels", pixels, 0, (size_t)ch * hw);
    arg(o, 1, "labels", labels, 0, 1);
    arg(o, 2, "idx", idx, 0, (size_t)n * sizeof(int32_t));
    arg(o, 3, "lut", lut, 0, F4((size_t)ch * 256));
    arg(o, 4, "x", x, 0, F4((size_t)n * ch * hw));
    arg(o, 5, "y", y, 0, (size_t)n * sizeof(int32_t));
    submit(o);
}

static void lane_metrics(const dp_kctx *c, int n, float *loss, const int32_t *correct, float *out) {
    k_op *o = k_new(c, K_LANE_METRICS, "lane_metrics", 3);
    if (!o) return;
    o->i[0] = n;
    arg(o, 0, "loss", loss, 0, F4(n));
    arg(o, 1, "correct", correct, 0, (size_t)n * sizeof(int32_t));
    arg(o, 2, "out", out, 0, F4(2));
    submit(o);
}

static void nonfinite(const dp_kctx *c, size_t n, const float *x, float *flag) {
    k_op *o = k_new(c, K_NONFINITE, "nonfinite", 2);
    if (!o) return;
    o->z[0] = n;
    arg(o, 0, "x", x, 0, F4(n));
    arg(o, 1, "flag", flag, 0, F4(1));
    submit(o);
}

static void lanes_run(fg_dev *g, fg_op *op, uint64_t unused) {
    lanes_op *b = (lanes_op *)op;
    for (int l = 0; l < b->n; l++) k_run(g, (fg_op *)(void *)(b->calls + (size_t)l * K_SLOT), unused);
}

static void lanes(const dp_kctx *c, int n, const dp_kcall *const *calls) {
    fg_stream *s = fg_stream_from(c ? c->stream : NULL, "lanes");
    lanes_op *b = calloc(1, sizeof *b + (size_t)n * K_SLOT);
    if (!b) {
        fg_set_fail(s->g, DP_ERR_NOMEM, "fakegpu: out of host memory queueing %d lanes of %s", n,
                    dp_kcall_name(calls[0]->kind));
        return;
    }
    b->cap = n;
    b->op = (fg_op){.run = lanes_run, .what = dp_kcall_name(calls[0]->kind), .waits_for = -1, .launch = FG_KERNEL};
    filling = b;
    dp_kcall_lanes_in_order(&dp_fakegpu_kernels, c, n, calls); /* each call checked, copied into b */
    filling = NULL;
    if (b->n) fg_submit(s->g, s->index, &b->op);
    else free(b); /* no lane had work: nothing to launch */
}

const dp_kernels dp_fakegpu_kernels = {
    .device = "fakegpu",
    .conv2d_workspace_floats = conv_ws,
    .conv2d_forward = conv_fwd,
    .conv2d_backward = conv_bwd,
    .linear_forward = lin_fwd,
    .linear_backward = lin_bwd,
    .relu_forward = relu_fwd,
    .relu_backward = relu_bwd,
    .add = add,
    .copy = copy,
    .maxpool_forward = maxpool_fwd,
    .maxpool_backward = maxpool_bwd,
    .avgpool_forward = avgpool_fwd,
    .avgpool_backward = avgpool_bwd,
    .bn_workspace_floats = bn_ws,
    .bn_sums = bn_sums,
    .bn_stats = bn_stats,
    .bn_apply = bn_apply,
    .bn_backward_sums = bn_bwd_sums,
    .bn_backward = bn_bwd,
    .softmax_xent = xent,
    .sgd = sgd,
    .tree_sum = tree,
    .lane_metrics = lane_metrics,
    .nonfinite = nonfinite,
    .gather_batch = gather,
    .lanes = lanes,
};
