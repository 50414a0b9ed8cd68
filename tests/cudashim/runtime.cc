// runtime.cc: the CUDA stand-in's runtime API: devices, memory, streams, events, stream capture
// and graphs, errors, and the counts (cudashim_counts.h).
//
// Streams: each one a queue of operations run in order by its own worker thread, later than the
// host queued them, so a missing wait is a race here as on a GPU. The legacy stream (0) of each
// device waits for the device's blocking streams and they for it; non-blocking streams wait for
// nothing they were not told to (events). Capture appends a stream's operations to its graph in
// the order they were queued (one valid order of the graph's nodes), and a launch of the graph
// queues them again on the stream it is launched on.
//
// Phase 1 simplifications: device memory is plain host memory (the host could read it; a GPU's
// host cannot), graphs replay in one order on one stream (no concurrency among their nodes), and
// the capture rules are only the basic ones (see docs in tests/cudashim/README.md).
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <thread>
#include <vector>

#include "cudashim_counts.h"
#include "shim.h"

namespace {

constexpr int MAX_DEVICES = 64;

struct Op {
    std::function<void()> fn;
    std::vector<std::pair<CUstream_st *, uint64_t>> deps; // run once each stream has done that many
};

} // namespace

struct CUgraph_st {
    std::vector<std::function<void()>> ops;
};
struct CUgraphExec_st {
    std::vector<std::function<void()>> ops;
};
struct CUstream_st {
    int dev = 0;
    unsigned flags = 0;
    int priority = 0;
    bool legacy = false;
    std::deque<Op> q;
    uint64_t queued = 0, done = 0;
    bool stop = false;
    std::thread worker;
    // capture: the graph this stream's operations go to, and who began it (the origin stream's)
    CUgraph_st *graph = nullptr;
    bool origin = false;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
    std::thread::id capturer;
};
struct CUevent_st {
    unsigned flags = 0;
    CUstream_st *stream = nullptr; // the last record outside capture: done when stream->done >= seq
    uint64_t seq = 0;
    std::shared_ptr<double> ms; // when the last record ran (each record its own slot)
    CUgraph_st *graph = nullptr; // the last record was inside this capture
};

namespace dpshim {
counters counts;
}

namespace {

using namespace dpshim;

// One lock and one condition for everything: the stand-in's worth is being right, not fast.
// Never destroyed: detached workers may wait on them while the process exits.
std::mutex &mu = *new std::mutex;
std::condition_variable &cv = *new std::condition_variable;
std::vector<CUstream_st *> &streams = *new std::vector<CUstream_st *>; // every live stream
CUstream_st *legacy[MAX_DEVICES];
// allocations: base -> size, device; highest base first, so lower_bound(p) is the one p may lie in
using Allocs = std::map<const char *, std::pair<size_t, int>, std::greater<const char *>>;
Allocs &device_mem = *new Allocs, &pinned = *new Allocs; // cudaMalloc's, cudaMallocHost's
size_t used[MAX_DEVICES];

thread_local int current_device = 0;
thread_local cudaError_t last_error = cudaSuccess;

int device_count() {
    static const int n = [] {
        const char *e = getenv("DP_CUDASHIM_DEVICES");
        const int v = e ? atoi(e) : 1;
        return v < 0 ? 0 : v > MAX_DEVICES ? MAX_DEVICES : v;
    }();
    return n;
}
size_t device_bytes() {
    static const size_t n = [] {
        const char *e = getenv("DP_CUDASHIM_MEM_MB");
        return (size_t)(e ? atol(e) : 16384) << 20;
    }();
    return n;
}
double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// DP_CUDASHIM_DELAY_US=N: each operation starts up to N microseconds late (random), so that work
// the host forgot to wait for is still unfinished when it looks (a race shows more often)
unsigned max_delay_us() {
    static const unsigned n = [] {
        const char *e = getenv("DP_CUDASHIM_DELAY_US");
        return e ? (unsigned)atoi(e) : 0u;
    }();
    return n;
}

bool ready(const Op &op) {
    for (auto &d : op.deps)
        if (d.first->done < d.second) return false;
    return true;
}

void work(CUstream_st *s) {
    unsigned seed = (unsigned)(uintptr_t)s;
    std::unique_lock<std::mutex> l(mu);
    for (;;) {
        cv.wait(l, [s] { return s->q.empty() ? s->stop : ready(s->q.front()); });
        if (s->q.empty()) return;
        Op op = std::move(s->q.front());
        s->q.pop_front();
        l.unlock();
        if (max_delay_us())
            std::this_thread::sleep_for(std::chrono::microseconds(rand_r(&seed) % (max_delay_us() + 1)));
        op.fn();
        op.fn = nullptr; // its captures (the kernel's arguments) go before the op counts as done
        l.lock();
        s->done++;
        cv.notify_all();
    }
}

CUstream_st *make_stream(int dev, unsigned flags, int priority, bool is_legacy) { // under mu
    CUstream_st *s = new CUstream_st;
    s->dev = dev, s->flags = flags, s->priority = priority, s->legacy = is_legacy;
    s->worker = std::thread(work, s);
    streams.push_back(s);
    return s;
}

CUstream_st *resolve(cudaStream_t s) { // under mu: 0 is the current device's legacy stream
    if (s) return s;
    CUstream_st *&l = legacy[current_device];
    if (!l) {
        l = make_stream(current_device, cudaStreamDefault, 0, true);
        l->worker.detach(); // lives as long as the process
    }
    return l;
}

bool any_capture(int dev) { // under mu
    for (CUstream_st *s : streams)
        if (s->dev == dev && s->graph) return true;
    return false;
}

cudaError_t enqueue_locked(CUstream_st *s, std::function<void()> fn) {
    if (s->graph) {
        s->graph->ops.push_back(std::move(fn));
        return cudaSuccess;
    }
    // the legacy stream may not be used while a stream of its device is captured (global mode)
    if (s->legacy && any_capture(s->dev)) return fail(cudaErrorStreamCaptureImplicit);
    Op op{std::move(fn), {}};
    for (CUstream_st *o : streams) // the legacy stream and the blocking streams wait for each other
        if (o != s && o->dev == s->dev && !(o->flags & cudaStreamNonBlocking) && !(s->flags & cudaStreamNonBlocking) &&
            (s->legacy || o->legacy))
            op.deps.emplace_back(o, o->queued);
    s->q.push_back(std::move(op));
    s->queued++;
    cv.notify_all();
    return cudaSuccess;
}

void wait_for(std::unique_lock<std::mutex> &l, CUstream_st *s, uint64_t seq) {
    counts.host_waits++;
    cv.wait(l, [s, seq] { return s->done >= seq; });
}

cudaError_t sync_device_locked(std::unique_lock<std::mutex> &l, int dev) {
    counts.host_waits++;
    std::vector<std::pair<CUstream_st *, uint64_t>> until;
    for (CUstream_st *s : streams)
        if (s->dev == dev) until.emplace_back(s, s->queued);
    cv.wait(l, [&until] {
        for (auto &u : until)
            if (u.first->done < u.second) return false;
        return true;
    });
    return cudaSuccess;
}

// The allocation p lies in, from a map of base -> size: its base, or null.
const char *owner(const Allocs &m, const void *p) {
    auto it = m.lower_bound((const char *)p); // the greatest base <= p
    if (it == m.end()) return nullptr;
    return (const char *)p < it->first + (it->second.first ? it->second.first : 1) ? it->first : nullptr;
}

cudaError_t copy(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s, bool sync) {
    if (!n) return cudaSuccess;
    if (!dst || !src || kind > cudaMemcpyDefault) return fail(cudaErrorInvalidValue);
    std::unique_lock<std::mutex> l(mu);
    CUstream_st *st = resolve(s);
    const bool host_src = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost ||
                          (kind == cudaMemcpyDefault && !owner(device_mem, src));
    const bool host_dst = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost ||
                          (kind == cudaMemcpyDefault && !owner(device_mem, dst));
    if ((!host_src && !owner(device_mem, src)) || (!host_dst && !owner(device_mem, dst)))
        return fail(cudaErrorInvalidValue); // a "device" pointer that is no allocation
    // pageable memory cannot be copied by a graph (CUDA refuses it during capture)
    if (st->graph && ((host_src && !owner(pinned, src)) || (host_dst && !owner(pinned, dst))))
        return fail(cudaErrorStreamCaptureUnsupported);
    std::function<void()> fn;
    if (host_src && !owner(pinned, src) && !sync) { // pageable: staged now, the caller may reuse it
        auto staged = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + n);
        fn = [dst, staged, n] { memcpy(dst, staged->data(), n); };
    } else {
        fn = [dst, src, n] { memmove(dst, src, n); };
    }
    counts.copies++;
    cudaError_t e = enqueue_locked(st, std::move(fn));
    // synchronous, or a download into pageable memory: the host waits for it
    if (e == cudaSuccess && !st->graph && (sync || (host_dst && !owner(pinned, dst)))) wait_for(l, st, st->queued);
    return e;
}

cudaError_t set(void *p, int v, size_t n, cudaStream_t s, bool sync) {
    if (!n) return cudaSuccess;
    std::unique_lock<std::mutex> l(mu);
    const char *base = owner(device_mem, p);
    if (!base || (const char *)p + n > base + device_mem.at(base).first) return fail(cudaErrorInvalidValue);
    CUstream_st *st = resolve(s);
    counts.copies++;
    cudaError_t e = enqueue_locked(st, [p, v, n] { memset(p, v, n); });
    if (e == cudaSuccess && sync) wait_for(l, st, st->queued);
    return e;
}

} // namespace

namespace dpshim {

cudaError_t fail(cudaError_t e) {
    if (e != cudaSuccess) last_error = e;
    return e;
}

cudaError_t enqueue(cudaStream_t s, std::function<void()> fn) {
    std::lock_guard<std::mutex> g(mu);
    return enqueue_locked(resolve(s), std::move(fn));
}

cudaError_t sync_stream(cudaStream_t s) { return cudaStreamSynchronize(s); }

bool capturing(cudaStream_t s) {
    std::lock_guard<std::mutex> g(mu);
    return resolve(s)->graph != nullptr;
}

} // namespace dpshim

void dp_shim_launch_kernel(dim3 grid, dim3 block, size_t shmem, cudaStream_t s, std::function<void()> body) {
    // the limits of every GPU since sm_30: 1024 threads a block (z at most 64), grid y and z at
    // most 65535, x at most 2^31-1, 48 KiB of static shared memory
    const unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (!threads || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 || !grid.x || !grid.y ||
        !grid.z || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535 || shmem > 48 * 1024) {
        fail(cudaErrorInvalidConfiguration);
        return;
    }
    enqueue(s, [grid, block, body = std::move(body)] {
        counts.launches++;
        run_grid(grid, block, body);
    });
}

extern "C" {

const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
#define N(x) \
    case x: return #x;
        N(cudaSuccess) N(cudaErrorInvalidValue) N(cudaErrorMemoryAllocation) N(cudaErrorInvalidConfiguration)
        N(cudaErrorInvalidDevicePointer) N(cudaErrorInvalidMemcpyDirection) N(cudaErrorNoDevice)
        N(cudaErrorInvalidDevice) N(cudaErrorInvalidResourceHandle) N(cudaErrorIllegalState) N(cudaErrorNotReady)
        N(cudaErrorLaunchFailure) N(cudaErrorNotSupported) N(cudaErrorStreamCaptureUnsupported)
        N(cudaErrorStreamCaptureInvalidated) N(cudaErrorStreamCaptureUnmatched) N(cudaErrorStreamCaptureImplicit)
        N(cudaErrorStreamCaptureWrongThread)
#undef N
    }
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureImplicit:
        return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorStreamCaptureWrongThread:
        return "attempted to end stream capture from a thread other than the one that began it";
    default: return cudaGetErrorName(e);
    }
}

cudaError_t cudaGetLastError(void) {
    const cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return last_error; }

cudaError_t cudaGetDeviceCount(int *n) {
    if (!n) return fail(cudaErrorInvalidValue);
    *n = device_count();
    return *n ? cudaSuccess : fail(cudaErrorNoDevice);
}
cudaError_t cudaGetDevice(int *dev) {
    if (!dev) return fail(cudaErrorInvalidValue);
    *dev = current_device;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int dev) {
    if (dev < 0 || dev >= device_count()) return fail(cudaErrorInvalidDevice);
    current_device = dev;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev) {
    if (!p) return fail(cudaErrorInvalidValue);
    if (dev < 0 || dev >= device_count()) return fail(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CUDA stand-in (CPU)");
    p->totalGlobalMem = device_bytes(), p->sharedMemPerBlock = 48 * 1024;
    p->regsPerBlock = 65536, p->warpSize = 32, p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647, p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->major = 9, p->minor = 0, p->multiProcessorCount = 2;
    p->pciBusID = dev + 1;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char *id, int len, int dev) {
    if (!id || len <= 0) return fail(cudaErrorInvalidValue);
    if (dev < 0 || dev >= device_count()) return fail(cudaErrorInvalidDevice);
    snprintf(id, (size_t)len, "0000:%02x:00.0", dev + 1);
    return cudaSuccess;
}
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
    if (least) *least = 0;
    if (greatest) *greatest = -5; // H100's range
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    std::unique_lock<std::mutex> l(mu);
    if (any_capture(current_device)) return fail(cudaErrorStreamCaptureUnsupported);
    return sync_device_locked(l, current_device);
}
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    std::lock_guard<std::mutex> g(mu);
    if (free_bytes) *free_bytes = device_bytes() - used[current_device];
    if (total_bytes) *total_bytes = device_bytes();
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes) {
    if (!p) return fail(cudaErrorInvalidValue);
    *p = nullptr;
    std::lock_guard<std::mutex> g(mu);
    if (any_capture(current_device)) return fail(cudaErrorStreamCaptureUnsupported);
    const size_t size = (bytes + 255) / 256 * 256;
    if (size > device_bytes() - used[current_device]) return fail(cudaErrorMemoryAllocation);
    char *m = (char *)aligned_alloc(256, size ? size : 256);
    if (!m) return fail(cudaErrorMemoryAllocation);
    // never zeroed on a GPU: small allocations start as NaNs here, so a read before a write shows
    if (size <= ((size_t)4 << 20)) memset(m, 0xff, size);
    device_mem[m] = {size, current_device};
    used[current_device] += size;
    *p = m;
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    std::unique_lock<std::mutex> l(mu);
    auto it = device_mem.find((const char *)p);
    if (it == device_mem.end()) return fail(cudaErrorInvalidValue);
    if (any_capture(it->second.second)) return fail(cudaErrorStreamCaptureUnsupported);
    sync_device_locked(l, it->second.second); // cudaFree waits for the device
    used[it->second.second] -= it->second.first;
    device_mem.erase(it);
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void **p, size_t bytes) {
    if (!p) return fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> g(mu);
    char *m = (char *)malloc(bytes ? bytes : 1);
    if (!m) return fail(cudaErrorMemoryAllocation);
    pinned[m] = {bytes, current_device};
    *p = m;
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) {
    if (!p) return cudaSuccess;
    std::unique_lock<std::mutex> l(mu);
    auto it = pinned.find((const char *)p);
    if (it == pinned.end()) return fail(cudaErrorInvalidValue);
    sync_device_locked(l, current_device);
    pinned.erase(it);
    free(p);
    return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p) {
    if (!a) return fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> g(mu);
    memset(a, 0, sizeof *a);
    a->device = -2;
    if (const char *b = owner(device_mem, p)) {
        a->type = cudaMemoryTypeDevice, a->device = device_mem.at(b).second, a->devicePointer = (void *)p;
    } else if (owner(pinned, p)) {
        a->type = cudaMemoryTypeHost, a->device = 0, a->hostPointer = (void *)p, a->devicePointer = (void *)p;
    } else {
        a->type = cudaMemoryTypeUnregistered;
    }
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    return copy(dst, src, n, kind, 0, true);
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
    return copy(dst, src, n, kind, s, false);
}
cudaError_t cudaMemset(void *p, int v, size_t n) { return set(p, v, n, 0, true); }
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) { return set(p, v, n, s, false); }

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int priority) {
    if (!s || (flags & ~cudaStreamNonBlocking)) return fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> g(mu);
    *s = make_stream(current_device, flags, priority < -5 ? -5 : priority > 0 ? 0 : priority, false);
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    return cudaStreamCreateWithPriority(s, flags, 0);
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithPriority(s, cudaStreamDefault, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (!s) return fail(cudaErrorInvalidResourceHandle);
    {
        std::lock_guard<std::mutex> g(mu);
        for (size_t i = 0; i < streams.size(); i++)
            if (streams[i] == s) streams.erase(streams.begin() + (long)i);
        s->stop = true; // its queued work still runs, as on a GPU
        cv.notify_all();
    }
    s->worker.join();
    delete s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    std::unique_lock<std::mutex> l(mu);
    CUstream_st *st = resolve(s);
    if (st->graph) return fail(cudaErrorStreamCaptureUnsupported);
    wait_for(l, st, st->queued);
    return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
    std::lock_guard<std::mutex> g(mu);
    CUstream_st *st = resolve(s);
    if (st->graph) return fail(cudaErrorStreamCaptureUnsupported);
    return st->done >= st->queued ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
    if (!e || flags) return fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> g(mu);
    CUstream_st *st = resolve(s);
    bool live = false; // the capture e was recorded in is still going on
    for (CUstream_st *o : streams) live = live || (e->graph && o->graph == e->graph);
    if (e->graph && !live) return cudaSuccess; // its record was a dependency of an ended capture: none here
    if (e->graph) { // an event of a capture: s joins it (its later work goes into the same graph)
        if (st->graph && st->graph != e->graph) return fail(cudaErrorStreamCaptureUnmatched);
        if (!st->graph) st->graph = e->graph, st->origin = false;
        return cudaSuccess;
    }
    if (!e->stream) return cudaSuccess; // never recorded: nothing to wait for
    if (st->graph) return cudaSuccess;   // outside the capture: the graph's launch orders it
    Op op{[] {}, {{e->stream, e->seq}}};
    st->q.push_back(std::move(op));
    st->queued++;
    cv.notify_all();
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
    if (!e || (flags & ~3u)) return fail(cudaErrorInvalidValue);
    *e = new CUevent_st;
    (*e)->flags = flags;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    std::lock_guard<std::mutex> g(mu); // a pending record writes its own slot, not e
    delete e;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    std::lock_guard<std::mutex> g(mu);
    CUstream_st *st = resolve(s);
    if (st->graph) {
        e->graph = st->graph;
        return cudaSuccess;
    }
    auto slot = std::make_shared<double>(0.0);
    cudaError_t r = enqueue_locked(st, [slot] { *slot = now_ms(); });
    if (r != cudaSuccess) return r;
    e->graph = nullptr, e->stream = st, e->seq = st->queued, e->ms = slot;
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    std::lock_guard<std::mutex> g(mu);
    return !e->stream || e->stream->done >= e->seq ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    std::unique_lock<std::mutex> l(mu);
    if (e->stream) wait_for(l, e->stream, e->seq);
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    if (!ms || !a || !b) return fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> g(mu);
    if ((a->flags | b->flags) & cudaEventDisableTiming) return fail(cudaErrorInvalidResourceHandle);
    if (!a->stream || !b->stream) return fail(cudaErrorInvalidResourceHandle);
    if (a->stream->done < a->seq || b->stream->done < b->seq) return cudaErrorNotReady;
    *ms = (float)(*b->ms - *a->ms);
    return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
    std::lock_guard<std::mutex> g(mu);
    CUstream_st *st = resolve(s);
    if (st->legacy) return fail(cudaErrorStreamCaptureUnsupported);
    if (st->graph) return fail(cudaErrorIllegalState);
    st->graph = new CUgraph_st, st->origin = true, st->mode = mode, st->capturer = std::this_thread::get_id();
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *out) {
    if (!out) return fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> g(mu);
    CUstream_st *st = resolve(s);
    if (!st->graph || !st->origin) return fail(cudaErrorIllegalState);
    if (st->mode != cudaStreamCaptureModeRelaxed && st->capturer != std::this_thread::get_id())
        return fail(cudaErrorStreamCaptureWrongThread);
    CUgraph_st *graph = st->graph;
    for (CUstream_st *o : streams) // the streams that joined leave with it
        if (o->graph == graph) o->graph = nullptr, o->origin = false;
    *out = graph;
    return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus *status) {
    if (!status) return fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> g(mu);
    *status = resolve(s)->graph ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t graph, unsigned long long flags) {
    (void)flags;
    if (!x || !graph) return fail(cudaErrorInvalidValue);
    *x = new CUgraphExec_st{graph->ops};
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s) {
    if (!x) return fail(cudaErrorInvalidResourceHandle);
    std::lock_guard<std::mutex> g(mu);
    CUstream_st *st = resolve(s);
    counts.graph_launches++;
    for (auto &op : x->ops) {
        cudaError_t e = enqueue_locked(st, op);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    delete graph;
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x) {
    if (x) {
        std::unique_lock<std::mutex> l(mu); // its nodes may still be queued: they hold copies
        delete x;
    }
    return cudaSuccess;
}

void dp_cudashim_counts_get(dp_cudashim_counts *out) {
    out->launches = counts.launches, out->blas_calls = counts.blas_calls, out->dnn_calls = counts.dnn_calls;
    out->host_waits = counts.host_waits, out->copies = counts.copies, out->graph_launches = counts.graph_launches;
}
void dp_cudashim_counts_reset(void) {
    counts.launches = 0, counts.blas_calls = 0, counts.dnn_calls = 0;
    counts.host_waits = 0, counts.copies = 0, counts.graph_launches = 0;
}

} // extern "C"
