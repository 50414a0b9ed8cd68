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

enum {
    DP_KC_CONV_FWD = 1, DP_KC_CONV_BWD, DP_KC_LIN_FWD, DP_KC_LIN_BWD, DP_KC_RELU_FWD, DP_KC_RELU_BWD, DP_KC_ADD,
    DP_KC_COPY, DP_KC_MAXPOOL_FWD, DP_KC_MAXPOOL_BWD, DP_KC_AVGPOOL_FWD, DP_KC_AVGPOOL_BWD, DP_KC_BN_SUMS,
    DP_KC_BN_STATS, DP_KC_BN_APPLY, DP_KC_BN_BWD_SUMS, DP_KC_BN_BWD, DP_KC_XENT, DP_KC_ROUND_BF16,
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
/* Calls the entry of k that `call` records, with kctx c (inline, with casts C++ accepts too: the
 * CUDA table, in the GPU plugin, runs records as well). */
static inline void dp_kcall_run(const dp_kernels *k, const dp_kctx *c, const dp_kcall *a) {
#define DP_KF(j) ((float *)a->p[j])
#define DP_KI(j) ((int32_t *)a->p[j])
    const int *i = a->i;
    switch (a->kind) {
    case DP_KC_CONV_FWD: k->conv2d_forward(c, &a->dims, i[0], DP_KF(0), DP_KF(1), DP_KF(2), DP_KF(3), DP_KF(4)); break;
    case DP_KC_CONV_BWD:
        k->conv2d_backward(c, &a->dims, i[0], DP_KF(0), DP_KF(1), DP_KF(2), DP_KF(3), DP_KF(4), DP_KF(5), DP_KF(6));
        break;
    case DP_KC_LIN_FWD: k->linear_forward(c, i[0], i[1], i[2], DP_KF(0), DP_KF(1), DP_KF(2), DP_KF(3)); break;
    case DP_KC_LIN_BWD:
        k->linear_backward(c, i[0], i[1], i[2], DP_KF(0), DP_KF(1), DP_KF(2), DP_KF(3), DP_KF(4), DP_KF(5));
        break;
    case DP_KC_RELU_FWD: k->relu_forward(c, a->z, DP_KF(0), DP_KF(1)); break;
    case DP_KC_RELU_BWD: k->relu_backward(c, a->z, DP_KF(0), DP_KF(1), DP_KF(2)); break;
    case DP_KC_ADD: k->add(c, a->z, DP_KF(0), DP_KF(1), DP_KF(2)); break;
    case DP_KC_COPY: k->copy(c, a->z, DP_KF(0), DP_KF(1)); break;
    case DP_KC_ROUND_BF16: k->round_bf16(c, a->z, DP_KF(0), DP_KF(1)); break;
    case DP_KC_MAXPOOL_FWD:
        k->maxpool_forward(c, i[0], i[1], i[2], i[3], i[4], i[5], i[6], DP_KF(0), DP_KF(1), DP_KI(2));
        break;
    case DP_KC_MAXPOOL_BWD:
        k->maxpool_backward(c, i[0], i[1], i[2], i[3], i[4], i[5], i[6], i[7], i[8], DP_KF(0), DP_KI(1), DP_KF(2));
        break;
    case DP_KC_AVGPOOL_FWD: k->avgpool_forward(c, i[0], i[1], i[2], DP_KF(0), DP_KF(1)); break;
    case DP_KC_AVGPOOL_BWD: k->avgpool_backward(c, i[0], i[1], i[2], DP_KF(0), DP_KF(1)); break;
    case DP_KC_BN_SUMS: k->bn_sums(c, i[0], i[1], i[2], DP_KF(0), DP_KF(1), DP_KF(2)); break;
    case DP_KC_BN_STATS:
        k->bn_stats(c, i[0], i[1], DP_KF(0), a->count, a->f[0], a->f[1], i[2], DP_KF(1), DP_KF(2), DP_KF(3), DP_KF(4));
        break;
    case DP_KC_BN_APPLY:
        k->bn_apply(c, i[0], i[1], i[2], DP_KF(0), DP_KF(1), DP_KF(2), DP_KF(3), DP_KF(4), DP_KF(5));
        break;
    case DP_KC_BN_BWD_SUMS:
        k->bn_backward_sums(c, i[0], i[1], i[2], DP_KF(0), DP_KF(1), DP_KF(2), DP_KF(3), DP_KF(4), DP_KF(5));
        break;
    case DP_KC_BN_BWD:
        k->bn_backward(c, i[0], i[1], i[2], DP_KF(0), DP_KF(1), DP_KF(2), DP_KF(3), DP_KF(4), DP_KF(5), DP_KF(6),
                       a->count, DP_KF(7), DP_KF(8), DP_KF(9), DP_KF(10));
        break;
    case DP_KC_XENT: k->softmax_xent(c, i[0], i[1], DP_KF(0), DP_KI(1), a->f[0], DP_KF(2), DP_KF(3), DP_KI(4)); break;
    default: break;
    }
#undef DP_KF
#undef DP_KI
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
