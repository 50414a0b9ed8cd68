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

/* A record holds at most DP_CONV_ALGOS_MAX entries (the CUDA table plans at most 256 shapes), each
 * field in its range, far above any model's yet small enough that no shape arithmetic overflows:
 * sizes (channels, height, width, kernel, stride) 1..DP_CONV_ALGOS_MAX_SIZE, pad
 * 0..DP_CONV_ALGOS_MAX_SIZE, batch 1..DP_CONV_ALGOS_MAX_BATCH (--batch-size's bound), tf32 0 or 1,
 * algorithms -1..DP_CONV_ALGOS_MAX_ALGO (cuDNN numbers fewer than ten per pass). So the longest
 * record that parses, written back, fits DP_CONV_ALGOS_RECORD_MAX bytes (with its NUL): what a
 * checkpoint writes and reads (train/persist.c, io/checkpoint.h). */
#define DP_CONV_ALGOS_MAX 256
#define DP_CONV_ALGOS_MAX_SIZE 65536
#define DP_CONV_ALGOS_MAX_BATCH (1 << 20)
#define DP_CONV_ALGOS_MAX_ALGO 99
/* 7 fields of 5 digits, batch of 7, tf32, 3 algorithms of 2 characters, 11 separators and the ';' */
#define DP_CONV_ALGOS_ENTRY_MAX (7 * 5 + 7 + 1 + 3 * 2 + 11 + 1)
#define DP_CONV_ALGOS_RECORD_MAX (DP_CONV_ALGOS_MAX * DP_CONV_ALGOS_ENTRY_MAX + 1)

#ifdef __cplusplus
extern "C" {
#endif

/* Writes the n entries as a record into buf (cap bytes, NUL-terminated); the length it needs, as
 * snprintf returns it. */
size_t dp_conv_algos_format(const dp_conv_algo *a, int n, char *buf, size_t cap);
/* Parses a record into at most max entries; the count, or -1 with a one-line reason in why (naming
 * the entry and the field) for text that is not a record: every field a plain decimal in its range
 * (core/parse_num.h: no blank, no sign but a minus, no overflow), each shape with an output. */
int dp_conv_algos_parse(const char *s, dp_conv_algo *a, int max, char *why, size_t why_cap);

/* The process's record: the choices to replay (replacing any pinned before; -1 on a bad record,
 * reason in why) and their lookup (1 and the entry when the shape is pinned, else 0). */
int dp_conv_algos_pin(const char *record, char *why, size_t why_cap);
int dp_conv_algos_pinned(const dp_conv2d_dims *d, int batch, int tf32, dp_conv_algo *out);
/* The choice the process made for a shape (kept once per shape, unless pinned), and the run's record
 * so far: the pinned entries, then the noted ones of other shapes (for the checkpoint; at most
 * DP_CONV_ALGOS_MAX together, so that a resume can replay it); 0 when there are none. */
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
