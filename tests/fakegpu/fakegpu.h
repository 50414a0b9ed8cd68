/* fakegpu.h: a test device that behaves like a GPU on the CPU, so that code written for the CUDA
 * device (kernels/cuda/device.cu) runs in CI without one, and a missing wait, join or event shows
 * up as a wrong result or a crash rather than as luck:
 *   - its memory is an alias the host faults on (a non-canonical address): host code that reads
 *     device memory dies with SIGSEGV, as it would on a GPU;
 *   - its streams (main, DP_DEV_LANES lanes, the collective stream) are worker threads that run
 *     queued kernels and copies later, after random delays, in stream order only;
 *   - a host write to pinned memory while an upload from it is still queued fails the device's
 *     next wait (on a GPU the copy would silently read the new bytes);
 *   - fork/join, one stream waiting for another (wait_for), timing events, graph capture and replay, and the
 *     calls CUDA makes blocking (wait, download, free) behave as on CUDA.
 * Its kernels are the CPU table's (nthreads 1), so results are bitwise the CPU's. For tests only:
 * never linked into dptrain or dptrain_core.
 *
 * Environment: DP_FAKEGPU_SEED (the delays' seed; default fixed), DP_FAKEGPU_DELAY_US (the
 * largest delay before each queued operation, in microseconds; default 200, 0: none). */
#ifndef DP_FAKEGPU_H
#define DP_FAKEGPU_H

#include <pthread.h>
#include <stddef.h>

#include "exec/devices.h"
#include "kernels/device.h"

/* The device kind "fakegpu" (ordinals 0..7; no TF32). */
extern const dp_dev_kind dp_fakegpu_device;

/* Adds "fakegpu" to the device registry (dp_dev_open can then name it); repeatable. */
dp_status dp_fakegpu_register(void);

/* Device and host_alloc blocks of a fakegpu device that are still live (the leaks, if the caller
 * freed everything); *bytes (may be NULL) receives their size. */
size_t dp_fakegpu_live(const dp_dev *d, size_t *bytes);

/* The calls so far, over every fakegpu device of the process, that held the host until queued
 * work finished: wait, download (which waits), an upload from pageable memory under a watch
 * (which waits first), free and host_free (which synchronise, as cudaFree does): the host
 * round trips a step costs on a GPU. */
unsigned long dp_fakegpu_host_waits(void);

/* The device allocations (alloc) so far, over every fakegpu device of the process: a step that
 * allocates would, on a GPU, wait in cudaMalloc (and its free in cudaFree) and break a capture. */
unsigned long dp_fakegpu_allocs(void);

/* The graphs replayed so far (replay: one launch of a recorded step), over every fakegpu device. */
unsigned long dp_fakegpu_replays(void);

/* Kernels and copies (upload, copy, zero; not the NCCL double's writes) queued so far, over every
 * fakegpu device of the process: by the host, one launch each (eager), and by graph replays, one
 * graph node each (what a recorded step holds, run again by each replay). */
typedef struct {
    unsigned long kernels, copies;             /* launched eagerly */
    unsigned long graph_kernels, graph_copies; /* run as nodes of replayed graphs */
} dp_fakegpu_launch_counts;
dp_fakegpu_launch_counts dp_fakegpu_launches(void);

/* Queues on d's stream (a device's main stream, or its collective view's) an operation that never
 * ends, as a GPU kernel that spins for ever: everything queued behind it, and every wait, drain,
 * free or close that needs it, blocks for good. For tests of what ends such a process (the NCCL
 * backend's watchdog); the device cannot be closed afterwards. */
void dp_fakegpu_stream_hang(const dp_dev *d);

/* The distinct host threads that have queued kernel `name` ("conv2d_forward", as the fake GPU's
 * messages name kernels) on d since it opened: up to max of them into ids; returns how many there
 * are (64 pairs of kernel and thread are kept per device). */
int dp_fakegpu_launch_threads(const dp_dev *d, const char *name, pthread_t *ids, int max);

/* Queues on d's stream an operation that runs for `us` microseconds (a long kernel): what is queued
 * behind it stays pending that long while the host goes on. */
void dp_fakegpu_stream_pause(const dp_dev *d, unsigned us);

/* For the NCCL test double inside a test process (tests/test_nccl_fakegpu.c): the host address
 * behind a fakegpu device pointer (any other pointer unchanged), a wait for everything queued so
 * far on the stream a kernel context names (dp_kctx.stream of a fakegpu device or its collective
 * view), and a write of host bytes to device memory queued on such a stream (the bytes are taken
 * at the call). */
void *dp_fakegpu_host_address(const void *p);
void dp_fakegpu_stream_sync(const void *stream);
void dp_fakegpu_stream_write(const void *stream, void *dst, const void *src, size_t bytes);
/* Device memory taken (bytes > 0) or given back (< 0) outside alloc on the device a stream belongs
 * to, as a library's own buffers (NCCL's connections): mem_info reports it as used. */
void dp_fakegpu_stream_charge(const void *stream, long long bytes);

/* For the NCCL test double's device mode (tests/nccl_double/): fn(arg) run by the stream's worker
 * once everything queued on it before has run, as cudaLaunchHostFunc (the arg's bytes are copied at
 * the call); while the stream's device records a graph, the call is recorded and runs at each
 * replay, in the recorded order. And whether the stream's device is recording a graph now. */
void dp_fakegpu_stream_call(const void *stream, void (*fn)(void *arg), const void *arg, size_t bytes);
int dp_fakegpu_stream_capturing(const void *stream);

#endif
