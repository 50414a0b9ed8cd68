/* collcheck.h: the collectives' conformance checker, in the shape of nccl-tests: seeded inputs for
 * each rank, and every element of every rank's result compared bitwise with what the canonical order
 * gives (core/ordered.h: for each element, the fixed tree of core/treesum.h over ranks 0..w-1). Every
 * backend's suite runs its collectives through this one checker. Random floats make the order of the
 * additions show; a backend whose all-reduce has an order of its own (the sim's ring and tree) is
 * given small integers instead, which any order sums exactly. */
#ifndef DP_TEST_COLLCHECK_H
#define DP_TEST_COLLCHECK_H

#include <stddef.h>

typedef enum { CC_SUM, CC_AVG, CC_REDUCE, CC_BROADCAST } cc_op;

/* Rank r's input of n floats (exact: small integers). */
void cc_input(float *x, int rank, size_t n, int exact, unsigned seed);
/* Fails the test, naming the backend, the collective, w, n, the rank and the first wrong element,
 * unless every rank's result (host copies, results[r] for rank r; NULL for a rank another process
 * holds) equals the canonical order's bitwise. CC_REDUCE checks the root alone (the others' buffers are left unspecified); CC_AVG is the
 * sum times 1/w; CC_BROADCAST the root's input. */
void cc_check(const char *backend, cc_op op, int w, int root, size_t n, int exact, unsigned seed,
              float *const *results);
/* Runs a collective on this process's ranks first..first+n_local-1: bufs[i] is rank first+i's buffer
 * of n floats (on the host), holding its input; the result is to be left there. */
typedef void (*cc_run_fn)(void *ctx, cc_op op, float *const *bufs, size_t n, int root);
enum { CC_EXACT = 1, CC_NO_AVG = 2, CC_SUMS_ONLY = 4 }; /* cc_conformance's flags */
/* The conformance run of one backend at w ranks: every count of cc_counts, the all-reduce (sum and, without
 * CC_NO_AVG, average), the reduce to ranks 0 and w-1 and (without CC_SUMS_ONLY) the broadcast from them,
 * each through run(ctx, ...) and cc_check. CC_EXACT: small integer inputs. */
void cc_conformance(const char *backend, int w, int first, int n_local, unsigned flags, cc_run_fn run, void *ctx);
/* The counts every backend is checked at: 0, 1, fewer than the ranks, not a multiple of them, and
 * large enough for the threaded paths. */
extern const size_t cc_counts[];
extern const int cc_n_counts;

#endif
