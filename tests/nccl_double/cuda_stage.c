/* cuda_stage.c: the CUDA runtime calls of the NCCL test double (cuda_stage.h), through dlsym so
 * that the double links no CUDA library and loads none in a process without the driver. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cuda_stage.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>

static struct {
    int decided, on;
    cudaError_t (*attributes)(struct cudaPointerAttributes *, const void *);
    cudaError_t (*stream_sync)(cudaStream_t);
    cudaError_t (*copy_async)(void *, const void *, size_t, enum cudaMemcpyKind, cudaStream_t);
    cudaError_t (*get_device)(int *);
    cudaError_t (*set_device)(int);
    const char *(*error_string)(cudaError_t);
    /* the device mode's (optional: dbl_cuda_device_calls) */
    cudaError_t (*event_create)(cudaEvent_t *, unsigned);
    cudaError_t (*event_record)(cudaEvent_t, cudaStream_t);
    cudaError_t (*event_destroy)(cudaEvent_t);
    cudaError_t (*stream_wait_event)(cudaStream_t, cudaEvent_t, unsigned);
} rt;

static int resolve(void *h) {
    *(void **)&rt.attributes = dlsym(h, "cudaPointerGetAttributes");
    *(void **)&rt.stream_sync = dlsym(h, "cudaStreamSynchronize");
    *(void **)&rt.copy_async = dlsym(h, "cudaMemcpyAsync");
    *(void **)&rt.get_device = dlsym(h, "cudaGetDevice");
    *(void **)&rt.set_device = dlsym(h, "cudaSetDevice");
    *(void **)&rt.error_string = dlsym(h, "cudaGetErrorString");
    *(void **)&rt.event_create = dlsym(h, "cudaEventCreateWithFlags");
    *(void **)&rt.event_record = dlsym(h, "cudaEventRecord");
    *(void **)&rt.event_destroy = dlsym(h, "cudaEventDestroy");
    *(void **)&rt.stream_wait_event = dlsym(h, "cudaStreamWaitEvent");
    return rt.attributes && rt.stream_sync && rt.copy_async && rt.get_device && rt.set_device && rt.error_string;
}

int dbl_cuda_on(void) {
    if (rt.decided) return rt.on;
    rt.decided = 1;
    /* the driver is loaded only where CUDA was initialised: a rank with a GPU device */
    if (!dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD)) return 0;
    static const char *const names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};
    void *h = NULL;
    for (int i = 0; i < 3 && !h; i++) h = dlopen(names[i], RTLD_LAZY | RTLD_NOLOAD); /* dptrain's own */
    for (int i = 0; i < 3 && !h; i++) h = dlopen(names[i], RTLD_LAZY);
    rt.on = h && resolve(h);
    return rt.on;
}

/* The device p lives on, or -1 where it is not device memory. */
static int device_of(const void *p) {
    struct cudaPointerAttributes a;
    if (!p || !dbl_cuda_on() || rt.attributes(&a, p) != cudaSuccess) return -1;
    return a.type == cudaMemoryTypeDevice ? a.device : -1;
}

int dbl_cuda_is_device(const void *p) { return device_of(p) >= 0; }

static int failed(cudaError_t e, const char *call, char *err, size_t n) {
    snprintf(err, n, "%s failed: %s", call, rt.error_string(e));
    return -1;
}

int dbl_cuda_sync(const void *stream, char *err, size_t n) {
    const cudaError_t e = rt.stream_sync((cudaStream_t)stream);
    return e == cudaSuccess ? 0 : failed(e, "cudaStreamSynchronize", err, n);
}

/* A copy on stream with the device of dev current (the stream's), the caller's restored after. */
static int copy_on(const void *dev, void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                   const void *stream, char *err, size_t n) {
    int cur = 0, want = device_of(dev);
    cudaError_t e = rt.get_device(&cur);
    if (e != cudaSuccess) return failed(e, "cudaGetDevice", err, n);
    if (want >= 0 && want != cur && (e = rt.set_device(want)) != cudaSuccess) return failed(e, "cudaSetDevice", err, n);
    e = rt.copy_async(dst, src, bytes, kind, (cudaStream_t)stream);
    /* down: the host reads dst next; up: src (pageable, the double's) is freed next */
    if (e == cudaSuccess) e = rt.stream_sync((cudaStream_t)stream);
    const cudaError_t back = want >= 0 && want != cur ? rt.set_device(cur) : cudaSuccess;
    if (e != cudaSuccess)
        return failed(e, kind == cudaMemcpyDeviceToHost ? "cudaMemcpyAsync (down)" : "cudaMemcpyAsync (up)", err, n);
    return back == cudaSuccess ? 0 : failed(back, "cudaSetDevice (back)", err, n);
}

int dbl_cuda_down(void *dst, const void *src, size_t bytes, const void *stream, char *err, size_t n) {
    return bytes ? copy_on(src, dst, src, bytes, cudaMemcpyDeviceToHost, stream, err, n) : 0;
}

int dbl_cuda_up(void *dst, const void *src, size_t bytes, const void *stream, char *err, size_t n) {
    return bytes ? copy_on(dst, dst, src, bytes, cudaMemcpyHostToDevice, stream, err, n) : 0;
}

/* ---- the device mode: transfers queued on the streams, nothing waited for */

int dbl_cuda_device_calls(void) {
    return dbl_cuda_on() && rt.event_create && rt.event_record && rt.event_destroy && rt.stream_wait_event;
}

/* Makes device dev current (dev < 0: leaves it); *was receives the caller's. */
static int enter(int dev, int *was, char *err, size_t n) {
    cudaError_t e = rt.get_device(was);
    if (e != cudaSuccess) return failed(e, "cudaGetDevice", err, n);
    if (dev >= 0 && dev != *was && (e = rt.set_device(dev)) != cudaSuccess) return failed(e, "cudaSetDevice", err, n);
    return 0;
}

/* `after` waits for the work queued on `before` so far: an event recorded there (with before's
 * device current: an event belongs to the device current at its creation, and is recorded on a
 * stream of that device), then destroyed (CUDA keeps it until the wait is met). */
static int order(const void *before, int before_dev, const void *after, char *err, size_t n) {
    int was = 0;
    if (enter(before_dev, &was, err, n) < 0) return -1;
    cudaEvent_t ev = NULL;
    cudaError_t e = rt.event_create(&ev, cudaEventDisableTiming);
    if (e == cudaSuccess) e = rt.event_record(ev, (cudaStream_t)before);
    if (e == cudaSuccess) e = rt.stream_wait_event((cudaStream_t)after, ev, 0);
    if (ev) rt.event_destroy(ev);
    if (before_dev >= 0 && before_dev != was) rt.set_device(was);
    return e == cudaSuccess ? 0 : failed(e, "an event between two streams (cudaEventRecord, cudaStreamWaitEvent)", err, n);
}

int dbl_cuda_transfer(void *dst, const void *dst_stream, const void *src, const void *src_stream, size_t bytes,
                      char *err, size_t n) {
    const int sdev = device_of(src), ddev = device_of(dst);
    if (sdev < 0 || ddev < 0) {
        snprintf(err, n, "the device mode moves CUDA device memory only (%p to %p)", src, dst);
        return -1;
    }
    /* the receive buffer is free once the receiver's earlier work is done */
    if (src_stream != dst_stream && order(dst_stream, ddev, src_stream, err, n) < 0) return -1;
    int was = 0;
    if (enter(sdev, &was, err, n) < 0) return -1;
    cudaError_t e = bytes ? rt.copy_async(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)src_stream) : cudaSuccess;
    if (sdev != was) rt.set_device(was);
    if (e != cudaSuccess) return failed(e, "cudaMemcpyAsync (device to device)", err, n);
    /* and the receiver's later work reads it after the copy */
    return src_stream != dst_stream ? order(src_stream, sdev, dst_stream, err, n) : 0;
}
