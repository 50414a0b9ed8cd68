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
} rt;

static int resolve(void *h) {
    *(void **)&rt.attributes = dlsym(h, "cudaPointerGetAttributes");
    *(void **)&rt.stream_sync = dlsym(h, "cudaStreamSynchronize");
    *(void **)&rt.copy_async = dlsym(h, "cudaMemcpyAsync");
    *(void **)&rt.get_device = dlsym(h, "cudaGetDevice");
    *(void **)&rt.set_device = dlsym(h, "cudaSetDevice");
    *(void **)&rt.error_string = dlsym(h, "cudaGetErrorString");
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
