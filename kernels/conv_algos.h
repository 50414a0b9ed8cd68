/* conv_algos.h: the record of which cuDNN algorithm each convolution shape runs, so that a run can be
 * replayed with the same choices (the same bits) by another replica, rank or resume. A record is one
 * line of text, entries separated by ';':
 *     in_c,in_h,in_w,out_c,k,stride,pad,batch,tf32:forward,data,filter
 * each algorithm a cuDNN algorithm number, -1 for the im2col + cuBLAS path. The process keeps the
 * choices it made (dp_conv_algos_note, by the CUDA table when it plans a shape) and the choices it
 * must make (dp_conv_algos_pin: a record given to replay). Plain C, no CUDA: tested without a GPU. */
#ifndef DP_CONV_ALGOS_H
#define DP_CONV_ALGOS_H

#include <stddef.h>

#include "kernels/shapes.h"

typedef struct {
    dp_conv2d_dims d; /* out_h, out_w filled (dp_conv2d_dims_init) */
    int batch, tf32;
    int fwd, data, filter; /* cuDNN algorithm numbers; -1: im2col + cuBLAS */
} dp_conv_algo;

#define DP_CONV_ALGOS_MAX 256

#ifdef __cplusplus
extern "C" {
#endif

/* Writes the n entries as a record into buf (cap bytes, NUL-terminated); the length it needs, as
 * snprintf returns it. */
size_t dp_conv_algos_format(const dp_conv_algo *a, int n, char *buf, size_t cap);
/* Parses a record into at most max entries; the count, or -1 with a one-line reason in why (naming
 * the entry) for text that is not a record. */
int dp_conv_algos_parse(const char *s, dp_conv_algo *a, int max, char *why, size_t why_cap);

/* The process's record: the choices to replay (replacing any pinned before; -1 on a bad record,
 * reason in why) and their lookup (1 and the entry when the shape is pinned, else 0). */
int dp_conv_algos_pin(const char *record, char *why, size_t why_cap);
int dp_conv_algos_pinned(const dp_conv2d_dims *d, int batch, int tf32, dp_conv_algo *out);
/* The choice the process made for a shape (kept once per shape), and the run's record so far: the
 * pinned entries, then the noted ones of other shapes (for the checkpoint); 0 when there are none. */
void dp_conv_algos_note(const dp_conv_algo *a);
size_t dp_conv_algos_current(char *buf, size_t cap);
/* DPTRAIN_CONV_ALGOS, read once per process: "time" (1: choose by timing), a record (pinned; 0), unset
 * (0); -1 with the reason in why for text that is neither. */
int dp_conv_algos_pin_env(char *why, size_t why_cap);
/* Forgets every pinned and noted choice (tests). */
void dp_conv_algos_reset(void);

#ifdef __cplusplus
}
#endif

#endif
