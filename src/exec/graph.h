/* graph.h: the CUDA executor's step graphs. On a device that can record its queued work
 * (kernels/device.h: capture_begin), the device part of a micro-step is run once eagerly; when the
 * next micro-step has the same key it is recorded as one graph, and from then on each
 * micro-step with that key replays it: one launch instead of hundreds. The key must hold
 * everything the recorded work depends on (the lanes and their sample counts, the learning
 * rate, the micro-step's place in its step); pointers are fixed for the run. Work that reads
 * the host (losses, metrics) stays outside. On the CPU, with --no-graph, --predict or
 * --save-profile (which time the work from the host) the function simply runs. */
#ifndef DP_GRAPH_H
#define DP_GRAPH_H

#include <stdint.h>

#include "backends/backend.h"
#include "kernels/device.h"

#define DP_GRAPH_SLOTS 16

typedef struct {
    uint64_t key;
    void *graph;          /* NULL: seen once, not recorded yet */
    dp_comm_stats delta;  /* what one run adds to the backend's statistics (replays add it too) */
    int used;
} dp_graph_slot;

typedef struct {
    dp_graph_slot slot[DP_GRAPH_SLOTS];
    int next;             /* round-robin eviction */
    long recorded, replayed;
    int open;             /* a launch's fn is running (dp_graph_run_launch): runs inside it are part of it */
} dp_graph_cache;

/* FNV-1a over n ints, chained from h (start with DP_GRAPH_KEY0). */
#define DP_GRAPH_KEY0 1469598103934665603ull
uint64_t dp_graph_key(uint64_t h, const int *v, int n);

/* Runs fn(arg) through the cache: eagerly, recorded, or replayed. `enabled` 0 always runs it. */
dp_status dp_graph_run(dp_graph_cache *c, const dp_dev *d, dp_backend_t b, int enabled, uint64_t key,
                       dp_status (*fn)(void *arg), void *arg);
/* dp_graph_run for a launch of several steps (exec/launch.h): while fn runs, the steps' own
 * dp_graph_run calls simply run their work, which becomes part of the launch's. */
dp_status dp_graph_run_launch(dp_graph_cache *c, const dp_dev *d, dp_backend_t b, int enabled, uint64_t key,
                              dp_status (*fn)(void *arg), void *arg);
void dp_graph_cache_free(dp_graph_cache *c, const dp_dev *d);

#endif
