/* kcall.h: a kernel call as data, and the recording table that turns a layer's calls into such
 * records, so that the executor can issue the same call of every lane as one launch
 * (dp_kernels.lanes) without the layers knowing about lanes.
 *
 * The executor runs each lane's nodes with dp_kcall_recorder as the table and a dp_kcall_rec as
 * the kctx's stream: every call a layer makes is appended to that lane's record, nothing runs.
 * The lanes' records then hold the same calls in the same order (the same layers over the same
 * shapes; only the pointers and the lanes' sample counts differ), and call j of all lanes goes to
 * the device's table as one lanes() call. Each lane's sums stay the per-call sums they were, so
 * the results are bitwise those of calling the lanes one by one. */
#ifndef DP_KCALL_H
#define DP_KCALL_H

#include "kernels/kernels.h"

/* The kinds of record: one per entry of kernels.def with a record (layers' and others'), from 1. */
enum {
    DP_KC_NONE,
#define DP_KERNEL_SIZE(name, params, args)
#define DP_KERNEL_LAYER(name, KIND, items) DP_KC_##KIND,
#define DP_KERNEL_CALL(name, KIND, items) DP_KC_##KIND,
#define DP_KERNEL_OWN(name, params)
#include "kernels/kernels.def"
    DP_KC_COUNT
};

/* One call of a dp_kernels entry: its scalars by value and its pointers, in the entry's order. */
typedef struct dp_kcall {
    int kind; /* DP_KC_* */
    dp_conv2d_dims dims;
    int i[10];
    size_t z;
    float f[3];
    double count;
    void *p[11];
} dp_kcall;

/* The entry's name ("conv2d_forward"), for messages. */
const char *dp_kcall_name(int kind);
/* Calls the entry of k that kcall records, with kctx c (inline, with casts C++ accepts too: the
 * CUDA table, in the GPU plugin, runs records as well). */
static inline void dp_kcall_run(const dp_kernels *k, const dp_kctx *c, const dp_kcall *kcall) {
    switch (kcall->kind) {
#define DP_KERNEL_SIZE(name, params, args)
#define DP_KERNEL_OWN(name, params)
#define DP_KERNEL_LAYER(name, KIND, items)                                                                         \
    case DP_KC_##KIND: k->name(c DP_KDEF_UNPACK(items)); break;
#define DP_KERNEL_CALL(name, KIND, items) DP_KERNEL_LAYER(name, KIND, items)
#include "kernels/kernels.def"
    default: break;
    }
}

/* lanes() by calling k's entries lane after lane, in order: the CPU's, and a device's for the
 * kinds it has no one-launch kernel for. */
static inline void dp_kcall_lanes_in_order(const dp_kernels *k, const dp_kctx *c, int n, const dp_kcall *const *calls) {
    for (int l = 0; l < n; l++) dp_kcall_run(k, c, calls[l]);
}
/* Whether two records can be call j of two lanes in one lanes() call: the same entry (and, for a
 * convolution, the same dimensions). Every other scalar is each lane's own (its sample count, BN's
 * update of the running statistics on lane 0 only); a device kernel that takes one from lane 0 for
 * all checks that the lanes agree on it, else runs them one by one. */
int dp_kcall_same(const dp_kcall *a, const dp_kcall *b);

/* A lane's record (the recorder's kctx.stream). */
typedef struct {
    dp_kcall *calls;
    int n, cap;
    const char *refused; /* the first entry that cannot be recorded (not a layer's), or NULL */
    int out_of_memory;
} dp_kcall_rec;

/* The recording table: every layer entry appends to the dp_kcall_rec its kctx's stream points to;
 * the workspace sizes are the CPU table's (the arenas are sized with the device's table before). */
extern const dp_kernels dp_kcall_recorder;

void dp_kcall_rec_reset(dp_kcall_rec *r);
void dp_kcall_rec_free(dp_kcall_rec *r);

#endif
