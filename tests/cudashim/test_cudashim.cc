// test_cudashim.cc: the CUDA stand-in's own rules, each as CUDA states it: launch limits and the
// sticky-until-read last error, a block's barrier and shared memory, streams that run later and
// in order, events between streams, pageable uploads staged at the call, capture and graph replay
// and the calls a capture refuses, the current device per thread, and the counts.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <thread>
#include <unistd.h>

#include "cudashim_counts.h"

static int failures;
#define CHECK(cond)                                                             \
    do {                                                                        \
        if (!(cond)) fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #cond), failures++; \
    } while (0)

__global__ void rotate_k(int *out, int n) { // out[t] = (t + 1) % n through shared memory
    __shared__ int s[1024];
    s[threadIdx.x] = (int)threadIdx.x;
    __syncthreads();
    out[blockIdx.x * n + threadIdx.x] = s[(threadIdx.x + 1) % n];
}
__global__ void any_k(int *out, int who) { // __syncthreads_or over the block: only thread `who` says yes
    const int r = __syncthreads_or((int)threadIdx.x == who);
    if (threadIdx.x == 0) out[blockIdx.x] = r;
}
__global__ void slow_set_k(int *p, int v) { // long enough that a stream that does not wait reads early
    usleep(20000);
    *p = v;
}
__global__ void copy_k(const int *from, int *to) { *to = *from; }
__global__ void add_k(int *p, int v) { *p += v; }
__global__ void nothing_k() {}

static void launch_limits() {
    cudaGetLastError();
    dp_shim_launch(nothing_k, dim3(1), dim3(1025), 0, 0)();
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    CHECK(cudaGetLastError() == cudaSuccess); // read and cleared
    dp_shim_launch(nothing_k, dim3(1, 65536), dim3(32), 0, 0)();
    CHECK(cudaPeekAtLastError() == cudaErrorInvalidConfiguration);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    dp_shim_launch(nothing_k, dim3(1), dim3(32, 1, 65), 0, 0)();
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    dp_shim_launch(nothing_k, dim3(1), dim3(32), 48 * 1024 + 1, 0)();
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    dp_shim_launch(nothing_k, dim3(0), dim3(32), 0, 0)();
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    dp_shim_launch(nothing_k, dim3(1, 65535, 1), dim3(1), 0, 0)(); // at the limits: fine
    dp_shim_launch(nothing_k, dim3(1), dim3(1024), 48 * 1024, 0)();
    dp_shim_launch(nothing_k, dim3(1), dim3(16, 1, 64), 0, 0)();
    CHECK(cudaGetLastError() == cudaSuccess);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
}

static void barriers() {
    enum { N = 256, B = 3 };
    int *d, h[N * B];
    CHECK(cudaMalloc((void **)&d, sizeof h) == cudaSuccess);
    dp_shim_launch(rotate_k, dim3(B), dim3(N), 0, 0)(d, N);
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < N; t++) CHECK(h[b * N + t] == (t + 1) % N);
    dp_shim_launch(any_k, dim3(2), dim3(N), 0, 0)(d, 77);
    dp_shim_launch(any_k, dim3(1), dim3(N), 0, 0)(d + 2, N); // nobody
    CHECK(cudaMemcpy(h, d, 3 * sizeof *h, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(h[0] == 1 && h[1] == 1 && h[2] == 0);
    CHECK(cudaFree(d) == cudaSuccess);
}

static void streams_and_events() {
    cudaStream_t a, b;
    cudaEvent_t e;
    int *d, h = 0;
    CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking) == cudaSuccess);
    CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking) == cudaSuccess);
    CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess);
    CHECK(cudaMalloc((void **)&d, 2 * sizeof *d) == cudaSuccess);
    CHECK(cudaMemset(d, 0, 2 * sizeof *d) == cudaSuccess);
    dp_shim_launch(slow_set_k, dim3(1), dim3(1), 0, a)(d, 42);
    CHECK(cudaStreamQuery(a) == cudaErrorNotReady); // later than the host
    CHECK(cudaEventRecord(e, a) == cudaSuccess);
    CHECK(cudaStreamWaitEvent(b, e, 0) == cudaSuccess);
    dp_shim_launch(copy_k, dim3(1), dim3(1), 0, b)(d, d + 1);
    CHECK(cudaStreamSynchronize(b) == cudaSuccess);
    CHECK(cudaEventQuery(e) == cudaSuccess);
    CHECK(cudaMemcpy(&h, d + 1, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(h == 42);
    float ms;
    CHECK(cudaEventElapsedTime(&ms, e, e) == cudaErrorInvalidResourceHandle); // no timing
    // a pageable upload is staged at the call: the caller may reuse its buffer at once
    int src = 7;
    CHECK(cudaMemcpyAsync(d, &src, sizeof src, cudaMemcpyHostToDevice, a) == cudaSuccess);
    src = 8;
    CHECK(cudaStreamSynchronize(a) == cudaSuccess);
    CHECK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(h == 7);
    CHECK(cudaFree(d) == cudaSuccess);
    CHECK(cudaEventDestroy(e) == cudaSuccess);
    CHECK(cudaStreamDestroy(a) == cudaSuccess);
    CHECK(cudaStreamDestroy(b) == cudaSuccess);
}

static void capture_and_graphs() {
    cudaStream_t s, lane;
    cudaEvent_t fork, join;
    int *d, h = 0;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    CHECK(cudaStreamCreateWithFlags(&lane, cudaStreamNonBlocking) == cudaSuccess);
    CHECK(cudaEventCreate(&fork) == cudaSuccess && cudaEventCreate(&join) == cudaSuccess);
    CHECK(cudaMalloc((void **)&d, sizeof *d) == cudaSuccess);
    CHECK(cudaMemset(d, 0, sizeof *d) == cudaSuccess);
    dp_cudashim_counts c0, c1;
    dp_cudashim_counts_get(&c0);
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    dp_shim_launch(add_k, dim3(1), dim3(1), 0, s)(d, 1);
    CHECK(cudaEventRecord(fork, s) == cudaSuccess); // a lane joins the capture, and is joined back
    CHECK(cudaStreamWaitEvent(lane, fork, 0) == cudaSuccess);
    dp_shim_launch(add_k, dim3(1), dim3(1), 0, lane)(d, 10);
    CHECK(cudaEventRecord(join, lane) == cudaSuccess);
    CHECK(cudaStreamWaitEvent(s, join, 0) == cudaSuccess);
    cudaStreamCaptureStatus st;
    CHECK(cudaStreamIsCapturing(lane, &st) == cudaSuccess && st == cudaStreamCaptureStatusActive);
    CHECK(cudaStreamSynchronize(s) == cudaErrorStreamCaptureUnsupported); // refused while capturing
    void *p;
    CHECK(cudaMalloc(&p, 16) == cudaErrorStreamCaptureUnsupported);
    int host = 5; // pageable memory: no graph can copy it
    CHECK(cudaMemcpyAsync(d, &host, sizeof host, cudaMemcpyHostToDevice, s) == cudaErrorStreamCaptureUnsupported);
    cudaGraph_t g = nullptr;
    cudaError_t other = cudaSuccess;
    std::thread([&] { other = cudaStreamEndCapture(s, &g); }).join();
    CHECK(other == cudaErrorStreamCaptureWrongThread);
    CHECK(cudaStreamEndCapture(s, &g) == cudaSuccess);
    CHECK(cudaStreamIsCapturing(lane, &st) == cudaSuccess && st == cudaStreamCaptureStatusNone);
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0) == cudaSuccess);
    CHECK(cudaGraphDestroy(g) == cudaSuccess);
    // an event last recorded inside the ended capture: waiting for it joins no capture, and the
    // waiting stream's work runs
    CHECK(cudaStreamWaitEvent(lane, join, 0) == cudaSuccess);
    CHECK(cudaStreamIsCapturing(lane, &st) == cudaSuccess && st == cudaStreamCaptureStatusNone);
    dp_shim_launch(add_k, dim3(1), dim3(1), 0, lane)(d, 100);
    CHECK(cudaStreamSynchronize(lane) == cudaSuccess);
    for (int i = 0; i < 3; i++) CHECK(cudaGraphLaunch(x, s) == cudaSuccess);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(h == 133); // nothing ran at capture, three replays of both kernels, the lane's 100
    dp_cudashim_counts_get(&c1);
    CHECK(c1.launches - c0.launches == 7);
    CHECK(c1.graph_launches - c0.graph_launches == 3);
    CHECK(c1.host_waits > c0.host_waits);
    CHECK(cudaGraphExecDestroy(x) == cudaSuccess);
    CHECK(cudaFree(d) == cudaSuccess);
    cudaEventDestroy(fork), cudaEventDestroy(join), cudaStreamDestroy(lane), cudaStreamDestroy(s);
}

static void devices() {
    int n = 0, cur = -1;
    CHECK(cudaGetDeviceCount(&n) == cudaSuccess && n >= 1);
    CHECK(cudaSetDevice(n) == cudaErrorInvalidDevice);
    cudaGetLastError();
    if (n > 1) {
        CHECK(cudaSetDevice(1) == cudaSuccess);
        std::thread([&] { cudaGetDevice(&cur); }).join();
        CHECK(cur == 0); // the current device is the calling thread's
        cudaSetDevice(0);
    }
    size_t fr, total;
    CHECK(cudaMemGetInfo(&fr, &total) == cudaSuccess && fr <= total);
    void *p;
    CHECK(cudaMalloc(&p, total + 1) == cudaErrorMemoryAllocation); // the device's memory runs out
    cudaGetLastError();
}

int main(void) {
    launch_limits();
    barriers();
    streams_and_events();
    capture_and_graphs();
    devices();
    if (failures) fprintf(stderr, "test_cudashim: %d failed\n", failures);
    return failures ? 1 : 0;
}
