// device.cu: the CUDA device of kernels/device.h: cudaMalloc'd memory, a main non-blocking stream
// with a cuBLAS handle bound to it, lane streams, and a collective stream; one stream waits for
// another by an event recorded there (each stream's impl). Every call is checked; a failure names
// the call, the device and CUDA's reason. Kernel launches are asynchronous, so their failures surface at wait().
// Every operation first makes its device the thread's current one (cudaSetDevice when another is,
// e.g. after a second device was opened on this thread), so allocations, events and the kernels
// queued after it land on this device; NCCL's communicator is made on the current device too.
#include <mutex>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/timer.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

extern "C" {
#include "kernels/device.h"
const char *dp_cuda_conv_impl(void); // conv_cudnn.cu
}

typedef struct {
    int ordinal;
    int counted; /* counted in opens[] (see cuda_close) */
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws; /* cuBLAS's workspace, set once: no allocation happens while a graph records */
    cudaStream_t lane[DP_DEV_LANES];
    cublasHandle_t lane_blas[DP_DEV_LANES];
    void *lane_ws[DP_DEV_LANES];
    cudaEvent_t forked, joined[DP_DEV_LANES];
    cudaStream_t coll_stream;
    cudaEvent_t main_mark, coll_mark; /* the last point of each stream another waits for */
    dp_dev dev;
} cuda_dev;

static cuda_dev *impl_of(const dp_dev *d) { return (cuda_dev *)d->impl; }
static void use(const dp_dev *d) { dp_cuda_use(impl_of(d)->ordinal); }
static cudaStream_t stream_of(const dp_dev_stream *s) {
    use(s->dev); /* every caller goes on to queue or wait there */
    return (cudaStream_t)s->kc.stream;
}

static dp_status fail_cuda(const dp_dev *d, const char *what, cudaError_t e) {
    return dp_fail(DP_ERR_BACKEND, "CUDA device %d: %s failed: %s", d ? impl_of(d)->ordinal : -1, what,
                   cudaGetErrorString(e));
}

#define CHECK(d, call)                                                   \
    do {                                                                 \
        cudaError_t e_ = (call);                                         \
        if (e_ != cudaSuccess) return fail_cuda((d), #call, e_);         \
    } while (0)

// Makes d's GPU the calling thread's current device; a check first, cheaper than a set.
static cudaError_t use_device(const dp_dev *d) {
    const int ord = impl_of(d)->ordinal;
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur == ord) return cudaSuccess;
    return cudaSetDevice(ord);
}
#define ENTER(d) CHECK(d, use_device(d))

static dp_status s_alloc(const dp_dev_stream *s, float **p, size_t n, const char *what) {
    const dp_dev *d = s->dev;
    *p = NULL;
    ENTER(d);
    size_t bytes = (n ? n : 1) * sizeof(float);
    cudaError_t e = cudaMalloc((void **)p, bytes);
    if (e != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_b, &total_b);
        return dp_fail(DP_ERR_NOMEM, "CUDA device %d: out of memory for %s: %.1f MiB asked, %.1f MiB free of %.1f MiB",
                       impl_of(d)->ordinal, what, bytes / 1048576.0, free_b / 1048576.0, total_b / 1048576.0);
    }
    CHECK(d, cudaMemsetAsync(*p, 0, bytes, stream_of(s)));
    return DP_OK;
}
static dp_status cuda_alloc(const dp_dev *d, float **p, size_t n, const char *what) { return s_alloc(&d->main, p, n, what); }

static void cuda_free(const dp_dev *d, void *p) {
    if (p && use_device(d) == cudaSuccess) cudaFree(p);
}

static dp_status cuda_host_alloc(const dp_dev *d, void **p, size_t bytes, const char *what) {
    *p = NULL;
    ENTER(d);
    cudaError_t e = cudaMallocHost(p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        *p = NULL;
        return dp_fail(DP_ERR_NOMEM, "CUDA device %d: no pinned host memory for %s (%.1f MiB): %s", impl_of(d)->ordinal,
                       what, bytes / 1048576.0, cudaGetErrorString(e));
    }
    return DP_OK;
}

static void cuda_host_free(const dp_dev *d, void *p) {
    if (p && use_device(d) == cudaSuccess) cudaFreeHost(p);
}

static dp_status s_wait(const dp_dev_stream *s);

/* Whether host memory is pageable: a copy from or to it may wait for the stream inside the CUDA
 * call, where no watch can end the wait. */
static int pageable(const void *host) {
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, host) != cudaSuccess) {
        cudaGetLastError(); /* older runtimes fail on plain host pointers: pageable */
        return 1;
    }
    return a.type == cudaMemoryTypeUnregistered;
}

static dp_status s_upload(const dp_dev_stream *s, void *dst, const void *src, size_t bytes) {
    const dp_dev *d = s->dev;
    ENTER(d);
    /* with collectives queued (the wait policy has a watch), a pageable source would make the copy
       wait for them unwatched: wait here first, polled, so a dead peer ends the wait; a pinned
       source queues without waiting */
    if (bytes && d->waits->watch && pageable(src)) DP_TRY(s_wait(s));
    if (bytes) CHECK(d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_of(s)));
    return DP_OK;
}
static dp_status cuda_upload(const dp_dev *d, void *dst, const void *src, size_t bytes) {
    return s_upload(&d->main, dst, src, bytes);
}

static dp_status s_copy(const dp_dev_stream *s, void *dst, const void *src, size_t bytes) {
    const dp_dev *d = s->dev;
    ENTER(d);
    if (bytes && dst != src) CHECK(d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_of(s)));
    return DP_OK;
}
static dp_status cuda_copy(const dp_dev *d, void *dst, const void *src, size_t bytes) {
    return s_copy(&d->main, dst, src, bytes);
}

static dp_status cuda_zero(const dp_dev *d, void *p, size_t bytes) {
    ENTER(d);
    if (bytes) CHECK(d, cudaMemsetAsync(p, 0, bytes, stream_of(&d->main)));
    return DP_OK;
}

#define WAIT_SPIN_S 200e-6      // a watched wait spins this long before napping
#define WAIT_WATCH_EVERY_S 1e-3 // and runs the watch this often

static dp_status s_wait(const dp_dev_stream *s) {
    const dp_dev *d = s->dev;
    ENTER(d);
    const dp_wait_policy *w = d->waits;
    if (!w->watch) {
        CHECK(d, cudaStreamSynchronize(stream_of(s)));
    } else { /* poll, so that a dead peer or the deadline can end the wait */
        /* a step's wait usually ends within tens of microseconds of the GPU: spin on the query for
           WAIT_SPIN_S before napping (a nap of 20 us is ~70 us with Linux's timer slack), and run
           the watch (NCCL's error query per communicator, a poll of the side channel) once a
           WAIT_WATCH_EVERY_S, not every round: a short wait never calls it */
        const double t0 = dp_now();
        double next_watch = WAIT_WATCH_EVERY_S;
        for (;;) {
            cudaError_t e = cudaStreamQuery(stream_of(s));
            if (e == cudaSuccess) break;
            if (e != cudaErrorNotReady) return fail_cuda(d, "waiting for the stream (cudaStreamQuery)", e);
            const double waited = dp_now() - t0;
            if (waited >= next_watch) {
                DP_TRY(w->watch(w->ctx, waited));
                next_watch = waited + WAIT_WATCH_EVERY_S;
            }
            if (waited > WAIT_SPIN_S) {
                struct timespec nap = {0, 20000};
                nanosleep(&nap, NULL);
            }
        }
    }
    char msg[512];
    if (dp_cuda_device_error(impl_of(d)->ordinal, msg, sizeof msg))
        return dp_fail(DP_ERR_BACKEND, "CUDA device %d: %s", impl_of(d)->ordinal, msg);
    return DP_OK;
}
static dp_status cuda_wait(const dp_dev *d) { return s_wait(&d->main); }

static dp_status cuda_download(const dp_dev *d, void *dst, const void *src, size_t bytes) {
    ENTER(d);
    /* a copy to pageable memory returns only when it is done, so it would wait inside the call
       for a collective that never ends: with a watch set, the queued work is waited for first;
       a pinned destination (the step metrics') queues at once, and the one wait below is watched */
    if (bytes && d->waits->watch && pageable(dst)) DP_TRY(cuda_wait(d));
    if (bytes) CHECK(d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_of(&d->main)));
    return cuda_wait(d);
}

static dp_status cuda_fork(const dp_dev *d, int n) {
    cuda_dev *c = impl_of(d);
    ENTER(d); // the lanes' kernels queued after the fork run on the current device
    CHECK(d, cudaEventRecord(c->forked, c->stream));
    for (int i = 0; i < n && i < DP_DEV_LANES; i++) CHECK(d, cudaStreamWaitEvent(c->lane[i], c->forked, 0));
    return DP_OK;
}

static dp_status cuda_join(const dp_dev *d, int n) {
    cuda_dev *c = impl_of(d);
    ENTER(d);
    for (int i = 0; i < n && i < DP_DEV_LANES; i++) {
        CHECK(d, cudaEventRecord(c->joined[i], c->lane[i]));
        CHECK(d, cudaStreamWaitEvent(c->stream, c->joined[i], 0));
    }
    return DP_OK;
}

// s waits for the work queued on `on` so far: on's mark recorded there (the main and collective
// streams have one each; lanes are ordered by fork and join)
static dp_status s_wait_for(const dp_dev_stream *s, const dp_dev_stream *on) {
    const dp_dev *d = s->dev;
    ENTER(d);
    if (!on->impl) return dp_fail(DP_ERR_INTERNAL, "CUDA device %d: a stream with no mark to wait for", impl_of(d)->ordinal);
    CHECK(d, cudaEventRecord((cudaEvent_t)on->impl, (cudaStream_t)on->kc.stream));
    CHECK(d, cudaStreamWaitEvent((cudaStream_t)s->kc.stream, (cudaEvent_t)on->impl, 0));
    return DP_OK;
}

static dp_status cuda_mem_info(const dp_dev *d, unsigned long long *free_b, unsigned long long *total_b) {
    size_t f = 0, t = 0;
    ENTER(d); // cudaMemGetInfo reports the current device
    CHECK(d, cudaMemGetInfo(&f, &t));
    *free_b = f, *total_b = t;
    return DP_OK;
}

static dp_status cuda_capture_begin(const dp_dev *d) {
    ENTER(d);
    CHECK(d, cudaStreamBeginCapture(stream_of(&d->main), cudaStreamCaptureModeThreadLocal));
    return DP_OK;
}

static dp_status cuda_capture_end(const dp_dev *d, void **graph) {
    *graph = NULL;
    ENTER(d);
    cudaGraph_t g = NULL;
    CHECK(d, cudaStreamEndCapture(stream_of(&d->main), &g));
    char msg[512];
    if (dp_cuda_device_error(impl_of(d)->ordinal, msg, sizeof msg)) { // a launch failed while recording
        cudaGraphDestroy(g);
        return dp_fail(DP_ERR_BACKEND, "CUDA device %d: while recording the step: %s", impl_of(d)->ordinal, msg);
    }
    cudaGraphExec_t x = NULL;
    cudaError_t e = cudaGraphInstantiate(&x, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) return fail_cuda(d, "cudaGraphInstantiate", e);
    *graph = x;
    return DP_OK;
}

static dp_status cuda_replay(const dp_dev *d, void *graph) {
    ENTER(d);
    CHECK(d, cudaGraphLaunch((cudaGraphExec_t)graph, stream_of(&d->main)));
    return DP_OK;
}

static void cuda_graph_free(const dp_dev *d, void *graph) {
    if (graph && use_device(d) == cudaSuccess) cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

// Timing events: default flags (timing on); the array is the caller's, freed by events_free.
static dp_status cuda_events_create(const dp_dev *d, int n, void **events) {
    cudaEvent_t *ev = (cudaEvent_t *)calloc((size_t)n, sizeof *ev);
    *events = ev;
    if (!ev) return dp_fail(DP_ERR_NOMEM, "CUDA device %d: out of host memory for %d timing events", impl_of(d)->ordinal, n);
    ENTER(d); // an event belongs to the device current at its creation
    for (int i = 0; i < n; i++) CHECK(d, cudaEventCreate(&ev[i]));
    return DP_OK;
}

static dp_status s_record(const dp_dev_stream *s, void *events, int i) {
    const dp_dev *d = s->dev;
    ENTER(d);
    CHECK(d, cudaEventRecord(((cudaEvent_t *)events)[i], stream_of(s)));
    return DP_OK;
}
static dp_status cuda_event_record(const dp_dev *d, void *events, int i) { return s_record(&d->main, events, i); }

static dp_status cuda_event_elapsed(const dp_dev *d, void *events, int i, int j, double *seconds) {
    float ms = 0;
    ENTER(d);
    CHECK(d, cudaEventElapsedTime(&ms, ((cudaEvent_t *)events)[i], ((cudaEvent_t *)events)[j]));
    *seconds = 1e-3 * ms;
    return DP_OK;
}

// A query first: a done event costs no wait; else polled under a watch (a collective the event
// follows may wait on a dead peer), cudaEventSynchronize without one.
static dp_status cuda_event_wait(const dp_dev *d, void *events, int i) {
    ENTER(d);
    cudaEvent_t ev = ((cudaEvent_t *)events)[i];
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) return DP_OK;
    if (e != cudaErrorNotReady) return fail_cuda(d, "querying an upload's event (cudaEventQuery)", e);
    const dp_wait_policy *w = d->waits;
    if (!w->watch) {
        CHECK(d, cudaEventSynchronize(ev));
        return DP_OK;
    }
    const double t0 = dp_now();
    while ((e = cudaEventQuery(ev)) == cudaErrorNotReady) {
        DP_TRY(w->watch(w->ctx, dp_now() - t0));
        struct timespec nap = {0, 20000};
        nanosleep(&nap, NULL);
    }
    if (e != cudaSuccess) return fail_cuda(d, "waiting for an upload's event (cudaEventQuery)", e);
    return DP_OK;
}

static void cuda_events_free(const dp_dev *d, void *events, int n) {
    use_device(d);
    cudaEvent_t *ev = (cudaEvent_t *)events;
    for (int i = 0; ev && i < n; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    free(ev);
}

// Open devices per ordinal: the table's own handles and cuDNN plans of a GPU are released when
// its last open device closes (a second open of one GPU, as the predictor's companion trainers
// make, shares them).
static std::mutex opens_mu;
static int opens[DP_CUDA_MAX_DEVICES];

static void cuda_close(dp_dev *d) {
    cuda_dev *c = impl_of(d);
    const int ord = c->ordinal, was_open = c->counted;
    use_device(d);
    if (c->stream) cudaStreamSynchronize(c->stream);
    for (int i = 0; i < DP_DEV_LANES; i++) {
        if (c->lane_blas[i]) cublasDestroy(c->lane_blas[i]);
        if (c->lane_ws[i]) cudaFree(c->lane_ws[i]);
        if (c->lane[i]) cudaStreamDestroy(c->lane[i]);
        if (c->joined[i]) cudaEventDestroy(c->joined[i]);
    }
    if (c->forked) cudaEventDestroy(c->forked);
    if (c->main_mark) cudaEventDestroy(c->main_mark);
    if (c->coll_mark) cudaEventDestroy(c->coll_mark);
    if (c->coll_stream) cudaStreamDestroy(c->coll_stream);
    if (c->blas) cublasDestroy(c->blas);
    if (c->blas_ws) cudaFree(c->blas_ws);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c);
    int last = 0;
    if (was_open && ord >= 0 && ord < DP_CUDA_MAX_DEVICES) {
        std::lock_guard<std::mutex> g(opens_mu);
        last = --opens[ord] == 0;
    }
    if (last) { // no device of this GPU is open: this thread's and every other's handles go
        dp_cuda_handles_release(ord);
        dp_cuda_conv_release(ord);
        dp_cuda_forget_errors(ord); // a failure of this teardown is no later trainer's
    }
    cudaGetLastError();
}

// The operations; cuda_open copies them in and adds the streams, handles and description.
static dp_dev make_ops(void) {
    dp_dev o;
    memset(&o, 0, sizeof o);
    o.name = "cuda";
    o.caps = DP_CAP_ASYNC | DP_CAP_LANES | DP_CAP_GRAPHS | DP_CAP_EVENTS | DP_CAP_COLL_STREAM;
    o.k = &dp_cuda_kernels;
    o.n_lanes = DP_DEV_LANES;
    o.alloc = cuda_alloc, o.free = cuda_free, o.host_alloc = cuda_host_alloc, o.host_free = cuda_host_free;
    o.upload = cuda_upload, o.copy = cuda_copy, o.zero = cuda_zero, o.download = cuda_download, o.wait = cuda_wait;
    o.capture_begin = cuda_capture_begin, o.capture_end = cuda_capture_end, o.replay = cuda_replay;
    o.graph_free = cuda_graph_free, o.fork = cuda_fork, o.join = cuda_join, o.mem_info = cuda_mem_info;
    o.events_create = cuda_events_create, o.event_record = cuda_event_record;
    o.event_elapsed = cuda_event_elapsed, o.events_free = cuda_events_free;
    o.event_wait = cuda_event_wait;
    o.reserved = (unsigned long long)256 << 20; // cuDNN's handle and plans, graphs, headroom
    o.close = cuda_close;
    return o;
}
static const dp_dev cuda_ops = make_ops();
static const dp_dev_stream cuda_stream_ops = {NULL, {}, NULL, s_alloc, s_upload, s_copy, s_wait, s_record, s_wait_for};
static const dp_wait_policy cuda_blocking = {NULL, NULL};

// A test-only device map: DPTRAIN_TEST_DEVICE_MAP="0,0" makes ordinal i open GPU map[i], so that
// `--gpus 0,1` puts two replicas, each with its own streams, on the one GPU of a test machine
// (through the NCCL test double's device mode; real NCCL refuses two ranks on one GPU). Unset: i.
static dp_status mapped_ordinal(int *ordinal) {
    const char *v = getenv("DPTRAIN_TEST_DEVICE_MAP");
    if (!v || !*v) return DP_OK;
    int i = 0;
    for (const char *p = v; *p; i++) {
        char *end = NULL;
        const long g = strtol(p, &end, 10);
        if (end == p || g < 0 || g > 1023 || (*end && *end != ','))
            return dp_fail(DP_ERR_USAGE, "DPTRAIN_TEST_DEVICE_MAP='%s': expected GPU ordinals separated by commas "
                           "(a test setting); unset it", v);
        if (i == *ordinal) {
            *ordinal = (int)g;
            return DP_OK;
        }
        p = *end ? end + 1 : end;
    }
    return DP_OK; // ordinals past the list open themselves
}

static dp_status cuda_open(int ordinal, int tf32, const dp_wait_policy *waits, dp_dev **out) {
    *out = NULL;
    DP_TRY(mapped_ordinal(&ordinal));
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0)
        return dp_fail(DP_ERR_UNSUPPORTED, "--device cuda: no CUDA device found (%s); use --device cpu",
                       e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount: 0 devices");
    if (ordinal < 0 || ordinal >= n)
        return dp_fail(DP_ERR_USAGE, "--gpu %d: this machine has %d CUDA device%s (0..%d)", ordinal, n,
                       n == 1 ? "" : "s", n - 1);
    cuda_dev *c = (cuda_dev *)calloc(1, sizeof *c);
    if (!c) return dp_fail(DP_ERR_NOMEM, "out of memory opening CUDA device %d", ordinal);
    c->ordinal = ordinal;
    dp_dev *d = &c->dev;
    d->impl = c;
    d->close = cuda_close;
    cudaDeviceProp p;
    if ((e = cudaSetDevice(ordinal)) != cudaSuccess || (e = cudaGetDeviceProperties(&p, ordinal)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        dp_status s = fail_cuda(d, "opening the device (cudaSetDevice / cudaStreamCreate)", e);
        cuda_close(d);
        return s;
    }
    cublasStatus_t bs = cublasCreate(&c->blas);
    if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetStream(c->blas, c->stream);
    const size_t ws_bytes = DP_CUDA_BLAS_WORKSPACE;
    if (bs == CUBLAS_STATUS_SUCCESS) {
        if ((e = cudaMalloc(&c->blas_ws, ws_bytes)) != cudaSuccess) {
            dp_status s = fail_cuda(d, "allocating cuBLAS's 32 MiB workspace", e);
            cuda_close(d);
            return s;
        }
        bs = cublasSetWorkspace(c->blas, c->blas_ws, ws_bytes);
    }
    // fp32 unless asked: results then compare with the CPU's; TF32 trades 10 mantissa bits for speed
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasSetMathMode(c->blas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
    // lane streams: independent lanes run at once; each has its own handle and workspace (a shared
    // workspace would be a race between streams), in the same math mode
    // the same workspace as the main handle: cuBLAS picks its algorithm by the workspace it has, and
    // a lane must compute what the main stream would (DP runs there, DDP's recorded steps on lanes)
    const size_t lane_ws_bytes = ws_bytes;
    // the collective stream at the greatest priority: a bucket's NCCL kernels, queued while up to
    // DP_DEV_LANES lanes of backward kernels fill the SMs, get the next free blocks instead of
    // starting late on one rank while the others' kernels spin waiting for it
    int least_prio = 0, greatest_prio = 0;
    if (cudaDeviceGetStreamPriorityRange(&least_prio, &greatest_prio) != cudaSuccess) greatest_prio = 0;
    if (cudaEventCreateWithFlags(&c->forked, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&c->main_mark, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&c->coll_mark, cudaEventDisableTiming) != cudaSuccess ||
        cudaStreamCreateWithPriority(&c->coll_stream, cudaStreamNonBlocking, greatest_prio) != cudaSuccess)
        bs = CUBLAS_STATUS_ALLOC_FAILED;
    for (int i = 0; i < DP_DEV_LANES && bs == CUBLAS_STATUS_SUCCESS; i++) {
        if (cudaStreamCreateWithFlags(&c->lane[i], cudaStreamNonBlocking) != cudaSuccess ||
            cudaEventCreateWithFlags(&c->joined[i], cudaEventDisableTiming) != cudaSuccess ||
            cudaMalloc(&c->lane_ws[i], lane_ws_bytes) != cudaSuccess) {
            bs = CUBLAS_STATUS_ALLOC_FAILED;
            break;
        }
        bs = cublasCreate(&c->lane_blas[i]);
        if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetStream(c->lane_blas[i], c->lane[i]);
        if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetWorkspace(c->lane_blas[i], c->lane_ws[i], lane_ws_bytes);
        if (bs == CUBLAS_STATUS_SUCCESS)
            bs = cublasSetMathMode(c->lane_blas[i], tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
    }
    if (bs != CUBLAS_STATUS_SUCCESS) {
        cuda_close(d);
        return dp_fail(DP_ERR_BACKEND, "CUDA device %d: cuBLAS, its workspaces or the lane streams could not be set up (status %d)", ordinal, (int)bs);
    }
    *d = cuda_ops;
    d->impl = c;
    int first = 1;
    if (ordinal < DP_CUDA_MAX_DEVICES) {
        std::lock_guard<std::mutex> g(opens_mu);
        first = opens[ordinal]++ == 0, c->counted = 1;
    }
    // a failure noted before this GPU's first open is no business of this device's (with one open
    // already, say a predictor's companion of a trainer, a failure there is that trainer's, unread)
    if (first) dp_cuda_forget_errors(ordinal);
    d->waits = waits ? waits : &cuda_blocking;
    dp_kctx lane_kc[DP_DEV_LANES];
    for (int i = 0; i < DP_DEV_LANES; i++)
        lane_kc[i] = (dp_kctx){.nthreads = 1, .stream = c->lane[i], .handle = c->lane_blas[i], .fast_math = tf32,
                               .ordinal = ordinal};
    // the collective stream's kernels (the sim's sums) need no cuBLAS handle
    const dp_kctx coll_kc = {.nthreads = 1, .stream = c->coll_stream, .handle = NULL, .fast_math = tf32, .ordinal = ordinal};
    dp_dev_streams_init(d, &cuda_stream_ops,
                        (dp_kctx){.nthreads = 1, .stream = c->stream, .handle = c->blas, .fast_math = tf32, .ordinal = ordinal},
                        lane_kc, DP_DEV_LANES, &coll_kc);
    d->main.impl = c->main_mark, d->coll.impl = c->coll_mark;
    snprintf(d->desc, sizeof d->desc, "%.80s (cuda:%d, sm_%d%d, %.1f GiB, TF32 %s, convolutions: %s)", p.name, ordinal,
             p.major, p.minor, p.totalGlobalMem / 1073741824.0, tf32 ? "on" : "off", dp_cuda_conv_impl());
    *out = d;
    return DP_OK;
}

extern "C" const dp_dev_kind dp_cuda_device = {"cuda", cuda_open};
