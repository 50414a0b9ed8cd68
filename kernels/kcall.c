/* kcall.c: kernel calls as data (kcall.h): running a record, and the recording table. */
#include "kernels/kcall.h"

#include <stdlib.h>
#include <string.h>

static const char *const names[] = {
#define DP_KERNEL_SIZE(name, params, args)
#define DP_KERNEL_LAYER(name, KIND, items) [DP_KC_##KIND] = #name,
#define DP_KERNEL_CALL(name, KIND, items) [DP_KC_##KIND] = #name,
#define DP_KERNEL_OWN(name, params)
#include "kernels/kernels.def"
};

const char *dp_kcall_name(int kind) { return kind > 0 && kind < DP_KC_COUNT ? names[kind] : "an unknown kernel"; }

int dp_kcall_same(const dp_kcall *a, const dp_kcall *b) {
    const int conv = a->kind == DP_KC_CONV_FWD || a->kind == DP_KC_CONV_BWD || a->kind == DP_KC_CONV_RELU_FWD;
    return a->kind == b->kind && (!conv || memcmp(&a->dims, &b->dims, sizeof a->dims) == 0);
}

/* ---- the recorder */

void dp_kcall_rec_reset(dp_kcall_rec *r) { r->n = 0, r->refused = NULL, r->out_of_memory = 0; }

void dp_kcall_rec_free(dp_kcall_rec *r) {
    free(r->calls);
    memset(r, 0, sizeof *r);
}

/* A new zeroed record of `kind` in c's recording, or NULL (noted) out of memory. */
static dp_kcall *rec(const dp_kctx *c, int kind) {
    dp_kcall_rec *r = c->stream;
    if (r->n == r->cap) {
        const int cap = r->cap ? 2 * r->cap : 64;
        dp_kcall *calls = realloc(r->calls, (size_t)cap * sizeof *calls);
        if (!calls) {
            r->out_of_memory = 1;
            return NULL;
        }
        r->calls = calls, r->cap = cap;
    }
    dp_kcall *a = &r->calls[r->n++];
    memset(a, 0, sizeof *a);
    a->kind = kind;
    return a;
}

/* The entries: a layer's appends its record, the others are refused (so that a change that
 * records one fails the step, dp_kcall_rec.refused, rather than dropping the call), and the
 * workspace sizes are the CPU's. */
static void refuse(const dp_kctx *c, const char *name) {
    dp_kcall_rec *r = c->stream;
    if (!r->refused) r->refused = name;
}
#define DP_KERNEL_SIZE(name, params, args)                                                                         \
    static size_t rec_##name params { return dp_cpu_kernels.name args; }
#define DP_KERNEL_LAYER(name, KIND, items)                                                                         \
    static void rec_##name(const dp_kctx *c DP_KDEF_PROTO(items)) {                                                \
        dp_kcall *kcall = rec(c, DP_KC_##KIND);                                                                    \
        if (!kcall) return;                                                                                        \
        DP_KDEF_PACK(items)                                                                                        \
    }
#define DP_KERNEL_CALL(name, KIND, items)                                                                          \
    static void rec_##name(const dp_kctx *c DP_KDEF_PROTO(items)) {                                                \
        DP_KDEF_VOID(items)                                                                                        \
        refuse(c, #name);                                                                                          \
    }
#define DP_KERNEL_OWN(name, params)
#include "kernels/kernels.def"

static void rec_tree_sum(const dp_kctx *c, float *const *v, int n, size_t lo, size_t count, int clear) {
    (void)v, (void)n, (void)lo, (void)count, (void)clear;
    refuse(c, "tree_sum");
}
static void rec_lanes(const dp_kctx *c, int n, const dp_kcall *const *calls) {
    (void)n, (void)calls;
    refuse(c, "lanes");
}

const dp_kernels dp_kcall_recorder = {
    "recorder",
#define DP_KDEF_PREFIX rec_
#include "kernels/kdef_table.h"
};
