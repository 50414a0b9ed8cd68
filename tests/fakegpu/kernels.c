/* kernels.c: the fake GPU's kernel table. Every entry returns at once, as a CUDA launch does: it
 * copies its arguments by value into a record (kcall.h; tree_sum's vector array too: the caller
 * may change them once the call returns), checks each device pointer against the live allocations
 * over the extent kernels.def gives, and queues an op on the stream its dp_kctx names. The
 * stream's worker later translates the pointers and runs the record on the CPU table with
 * nthreads 1, so results are bitwise the CPU's for the same arguments. The entries are generated
 * from kernels.def; tree_sum and lanes are written here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_internal.h"
#include "kernels/kcall.h"

/* tree_sum's kind: its n vectors fit no record */
enum { K_TREE = DP_KC_COUNT };

/* A device pointer argument: the kernel touches bytes [off, off + bytes) from it. */
typedef struct {
    const void *fake;
    size_t off, bytes;
    const char *name;
} k_ptr;

/* A queued kernel call: its record (the pointers as the caller passed them: p[k] below names
 * call.p[k]), then its pointers' extents. */
typedef struct {
    fg_op op; /* first: the stream queues &op */
    fg_dev *g;
    int stream;
    dp_kcall call;
    size_t tree_count; /* tree_sum's count (call.z: lo, call.i[0]: clear) */
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
    o->g = s->g, o->stream = s->index, o->call.kind = kind, o->np = np;
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

static void k_run(fg_dev *g, fg_op *op, uint64_t unused) {
    (void)unused;
    k_op *o = (k_op *)op;
    const dp_kctx kc = {.nthreads = 1};
    if (o->call.kind == K_TREE) { /* n vectors */
        float **v = malloc((size_t)(o->np ? o->np : 1) * sizeof *v);
        if (!v) {
            fg_set_fail(g, DP_ERR_NOMEM, "fakegpu: tree_sum: out of host memory for %d vectors", o->np);
            return;
        }
        for (int k = 0; k < o->np; k++) v[k] = fg_real(g, o->p[k].fake, o->p[k].off, o->p[k].bytes, "tree_sum", "v[i]");
        C->tree_sum(&kc, v, o->np, o->call.z, o->tree_count, o->call.i[0]);
        free(v);
        return;
    }
    dp_kcall real = o->call;
    for (int k = 0; k < o->np; k++) real.p[k] = fg_real(g, o->p[k].fake, o->p[k].off, o->p[k].bytes, op->what, o->p[k].name);
    dp_kcall_run(C, &kc, &real);
}

/* ---- the entries of kernels.def: each records its arguments, then checks its pointers over the
 * extents the list gives; the workspace sizes are the CPU's (pure functions: nothing to queue) */

#define FG_CHECK_A(kind, ...) FG_CHECK_##kind(__VA_ARGS__) FG_CHECK_B
#define FG_CHECK_B(kind, ...) FG_CHECK_##kind(__VA_ARGS__) FG_CHECK_A
#define FG_CHECK_A_END
#define FG_CHECK_B_END
#define FG_CHECK_dims(name)
#define FG_CHECK_int(j, name)
#define FG_CHECK_size_t(name)
#define FG_CHECK_float(j, name)
#define FG_CHECK_double(name)
#define FG_CHECK_ptr(j, type, name, bytes) arg(o, j, #name, name, 0, bytes);

#define DP_KERNEL_SIZE(name, params, args)                                                                         \
    static size_t fk_##name params { return C->name args; }
#define DP_KERNEL_LAYER(name, KIND, items)                                                                         \
    static void fk_##name(const dp_kctx *c DP_KDEF_PROTO(items)) {                                                 \
        k_op *o = k_new(c, DP_KC_##KIND, #name, DP_KDEF_NPTR(items));                                              \
        if (!o) return;                                                                                            \
        dp_kcall *kcall = &o->call;                                                                                \
        DP_KDEF_PACK(items)                                                                                        \
        DP_KDEF_EACH(FG_CHECK, items)                                                                              \
        submit(o);                                                                                                 \
    }
#define DP_KERNEL_CALL(name, KIND, items) DP_KERNEL_LAYER(name, KIND, items)
#define DP_KERNEL_OWN(name, params)
#include "kernels/kernels.def"

static void fk_tree_sum(const dp_kctx *c, float *const *v, int n, size_t lo, size_t count, int clear) {
    k_op *o = k_new(c, K_TREE, "tree_sum", n > 0 ? n : 0);
    if (!o) return;
    o->call.z = lo, o->tree_count = count, o->call.i[0] = clear;
    for (int k = 0; k < n; k++) arg(o, k, "v[i]", v[k], DP_KF4(lo), DP_KF4(count)); /* the array, copied now */
    submit(o);
}

static void lanes_run(fg_dev *g, fg_op *op, uint64_t unused) {
    lanes_op *b = (lanes_op *)op;
    for (int l = 0; l < b->n; l++) k_run(g, (fg_op *)(void *)(b->calls + (size_t)l * K_SLOT), unused);
}

static void fk_lanes(const dp_kctx *c, int n, const dp_kcall *const *calls) {
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
    "fakegpu",
#define DP_KDEF_PREFIX fk_
#include "kernels/kdef_table.h"
};
