/* cuda_stage.h: the NCCL test double over CUDA memory. Real NCCL refuses two ranks on one GPU;
 * the double can put them there because it moves bytes through host memory: a buffer that is
 * CUDA device memory is copied down once its stream's earlier work is done, moved as host bytes,
 * and the result copied up on the operation's stream. The CUDA runtime is looked up with dlopen
 * only in a process that has the CUDA driver loaded (a --device cuda rank), so CPU-only runs of
 * the double never touch CUDA. Each call returns 0, or -1 with a message in err. */
#ifndef DP_NCCL_DOUBLE_CUDA_STAGE_H
#define DP_NCCL_DOUBLE_CUDA_STAGE_H

#include <stddef.h>

/* Whether this process drives CUDA memory (libcuda loaded, libcudart found): decided once. */
int dbl_cuda_on(void);
/* Whether p is CUDA device memory (host, pinned and managed memory are the host's to read). */
int dbl_cuda_is_device(const void *p);
/* Waits for the work queued so far on stream (a cudaStream_t). */
int dbl_cuda_sync(const void *stream, char *err, size_t n);
/* bytes of device memory src into host memory dst, after the stream's earlier work (waits). */
int dbl_cuda_down(void *dst, const void *src, size_t bytes, const void *stream, char *err, size_t n);
/* bytes of host memory src into device memory dst, queued on stream; src may be freed on return. */
int dbl_cuda_up(void *dst, const void *src, size_t bytes, const void *stream, char *err, size_t n);

/* The device mode (nccl_double.c): whether the runtime offers its calls, and one transfer of bytes
 * from device memory src to device memory dst queued on the streams, nothing waited for: the
 * sender's stream waits for the receiver's work so far (an event), copies, and the receiver's
 * stream waits for the copy (an event back), as NCCL's kernels order them. Capturable. */
int dbl_cuda_device_calls(void);
int dbl_cuda_transfer(void *dst, const void *dst_stream, const void *src, const void *src_stream, size_t bytes,
                      char *err, size_t n);

#endif
