/* launch.h: several optimizer steps as one graph launch (--steps-per-graph). Where the executor
 * records graphs and holds the training set on the device (graph.h; executor.h: resident), n
 * consecutive whole steps are recorded once and replayed as one launch:
 *   - each step's sample indices, and the host's part of its metrics (its sample counts, the stop
 *     request on the last step), go up from pinned memory at the launch's start, so they are
 *     values in device memory, not in the recording (the host writes them before each launch);
 *   - each step gathers its batch from its own slot of indices, and sums its loss, hits and its
 *     gradients' NaN/Inf check into its own block of metrics; the blocks are all-reduced one by
 *     one after the last step and come down with one wait: one host round trip per launch;
 *   - first, each replica's parameters, momentum and BN buffers are copied aside on the device,
 *     so that a launch in which a step's loss or gradients went NaN/Inf is undone
 *     (dp_exec_launch_undo) and its steps run again one at a time, where the trainer stops or
 *     skips exactly as it does without launches. Steps run the same kernels in the same order
 *     either way: the bits are those of one step per launch.
 * The key of a launch must hold whatever else its steps depend on (their learning rates, lanes
 * and counts); the executor adds the lanes' state at its start. */
#ifndef DP_EXEC_LAUNCH_H
#define DP_EXEC_LAUNCH_H

#include <stdint.h>

#include "exec/executor.h"

#define DP_LAUNCH_MAX 64 /* --steps-per-graph's largest value */

/* Launches can run here: graphs are recorded and the training set is on the device. */
int dp_exec_launch_possible(const dp_executor *ex);
/* Why launches cannot run here (NULL when they can), for the message refusing --steps-per-graph. */
const char *dp_exec_no_launch_reason(const dp_executor *ex);
/* The device records graphs at all (--no-graph has something to turn off). */
int dp_exec_records_graphs(const dp_executor *ex);
/* The staging, metrics blocks and the state's copies for launches of up to k steps in up to
 * `micros` micro-steps (--accumulate). */
dp_status dp_exec_launch_alloc(dp_executor *ex, int k, int micros);
/* Micro-step q's local batches (their counts and indices), of step j (first: its first micro-step),
 * into the launch's pinned staging; kept[r] gets each replica's count and a pointer to the indices
 * there (valid until the next launch's puts), for the micro-step's own run. Host work only. */
dp_status dp_exec_launch_put(dp_executor *ex, int q, int j, int first, const dp_batch *b, dp_batch *kept);
/* Runs steps 0..n-1, `micros` micro-steps in all, as one launch (fn(arg, j) queues step j's
 * micro-steps: each stages through dp_exec_stage, which gathers the next slot of indices, and the
 * step sums through dp_exec_step_sums, which fills block j): eagerly, recorded or replayed by key
 * (graph.h); record 0: eagerly and not remembered (a test's injected fault).
 * stop: the stop request that rides in the last step's metrics (as dp_step_in's). sums[j] gets
 * step j's all-reduced sums after the launch's one wait. */
dp_status dp_exec_launch_run(dp_executor *ex, int n, int micros, uint64_t key, int record, int stop,
                             dp_status (*fn)(void *arg, int j), void *arg, dp_step_sums *sums);
/* Each replica's parameters, momentum and BN buffers back to what they were at the last
 * launch's start (queued), for its steps to run again one by one. */
dp_status dp_exec_launch_undo(dp_executor *ex);
/* Inside a launch's steps: step j's batch gathered from its slot (dp_exec_stage), and its
 * metrics queued into its block (dp_exec_step_sums: *out is zero, the real sums come after). */
int dp_exec_launch_slot(const dp_executor *ex);
dp_status dp_exec_launch_stage(dp_executor *ex, const dp_batch *b, const dp_batch **out);
dp_status dp_exec_launch_sums(dp_executor *ex, const dp_step_in *in, dp_step_sums *out);
void dp_exec_launch_free(dp_executor *ex);

#endif
