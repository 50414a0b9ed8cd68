/* collcheck.c: the collectives' conformance checker (collcheck.h). */
#include "collcheck.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/treesum.h"

const size_t cc_counts[] = {0, 1, 2, 7, 8, 9, 1000, 4099, 65537};
const int cc_n_counts = (int)(sizeof cc_counts / sizeof *cc_counts);

void cc_input(float *x, int rank, size_t n, int exact, unsigned seed) {
    uint64_t s = seed * 1000003ull + (uint64_t)rank * 7919ull + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = exact ? (float)(rank + 1) + (float)(i % 7)
                     : (float)((double)(s >> 11) / 9007199254740992.0 - 0.5) * 3.7f;
    }
}

static const char *op_name(cc_op op) {
    static const char *const names[] = {"all-reduce (sum)", "all-reduce (average)", "reduce", "broadcast"};
    return names[op];
}

void cc_check(const char *backend, cc_op op, int w, int root, size_t n, int exact, unsigned seed,
              float *const *results) {
    float **v = calloc((size_t)w, sizeof *v);
    assert_non_null(v);
    for (int r = 0; r < w; r++) {
        v[r] = malloc((n ? n : 1) * sizeof(float));
        assert_non_null(v[r]);
        cc_input(v[r], r, n, exact, seed);
    }
    const float *want = v[op == CC_BROADCAST ? root : 0];
    if (op != CC_BROADCAST) dp_tree_sum(v, w, 0, n, 0);
    if (op == CC_AVG && w > 1)
        for (size_t i = 0; i < n; i++) v[0][i] *= 1.0f / (float)w;
    long wrong = 0;
    int bad_rank = -1;
    size_t first = 0;
    for (int r = 0; r < w; r++) {
        if (!results[r] || (op == CC_REDUCE && r != root)) continue;
        for (size_t i = 0; i < n; i++)
            if (memcmp(&results[r][i], &want[i], sizeof(float)) != 0 && !wrong++) bad_rank = r, first = i;
    }
    float got = wrong ? results[bad_rank][first] : 0.0f, expect = wrong ? want[first] : 0.0f;
    for (int r = 0; r < w; r++) free(v[r]);
    free(v);
    if (wrong)
        fail_msg("%s: %s of %zu floats over %d ranks (root %d): %ld elements differ from the canonical order; first "
                 "at rank %d, element %zu: %.9g, expected %.9g", backend, op_name(op), n, w, root, wrong, bad_rank,
                 first, (double)got, (double)expect);
}

void cc_conformance(const char *backend, int w, int first, int n_local, unsigned flags, cc_run_fn run, void *ctx) {
    const unsigned seed = (unsigned)(w * 31);
    const int exact = (flags & CC_EXACT) != 0;
    float **bufs = calloc((size_t)w, sizeof *bufs);
    assert_non_null(bufs);
    for (int c = 0; c < cc_n_counts; c++) {
        const size_t n = cc_counts[c];
        for (int r = first; r < first + n_local; r++) {
            bufs[r] = malloc((n ? n : 1) * sizeof(float));
            assert_non_null(bufs[r]);
        }
        for (int op = CC_SUM; op <= CC_BROADCAST; op++) {
            if ((op == CC_AVG && (flags & CC_NO_AVG)) || (op == CC_BROADCAST && (flags & CC_SUMS_ONLY))) continue;
            const int rooted = op == CC_REDUCE || op == CC_BROADCAST;
            for (int root = 0; root < w; root += rooted && w > 1 ? w - 1 : w) {
                for (int r = first; r < first + n_local; r++) cc_input(bufs[r], r, n, exact, seed);
                run(ctx, (cc_op)op, bufs + first, n, root);
                cc_check(backend, (cc_op)op, w, root, n, exact, seed, bufs);
            }
        }
        for (int r = first; r < first + n_local; r++) free(bufs[r]), bufs[r] = NULL;
    }
    free(bufs);
}
