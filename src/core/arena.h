/* arena.h: the flat memory of a model. One layout describes where every tensor lives inside
 * one allocation; each replica owns one arena per role (parameters, gradients, momentum, BN
 * buffers) with that same layout, so a replica is four pointers and a bucket is a slice. */
#ifndef DP_ARENA_H
#define DP_ARENA_H

#include <stddef.h>

#include "core/status.h"

/* Offsets and counts in floats. */
typedef struct { size_t offset, count; } dp_slice;

enum {
    DP_TENSOR_NO_DECAY = 1 << 0, /* weight decay skips it (off by default: torch decays every parameter) */
    DP_TENSOR_BN = 1 << 1,       /* belongs to a BatchNorm layer */
};

typedef struct {
    char name[48];   /* "conv1.weight", as PyTorch's state_dict would name it */
    dp_slice s;
    int flags;
} dp_tensor_info;

typedef struct {
    size_t n;                 /* floats in the arena, padding included */
    dp_tensor_info *tensors;
    int n_tensors, cap;
    dp_slice *buckets;        /* gradient buckets (DDP): contiguous, from the last tensor backwards */
    int *bucket_first_tensor; /* lowest tensor index in each bucket: the bucket is ready once its gradient is written */
    int n_buckets;
} dp_layout;

/* Tensors start on 64-byte boundaries so that kernels see aligned rows. */
#define DP_ARENA_ALIGN_FLOATS 16

dp_status dp_layout_add(dp_layout *L, const char *name, size_t count, int flags, int *index);
/* Groups tensors into buckets of at most cap_bytes (a tensor larger than the cap gets a bucket of
 * its own), walking from the last tensor to the first, as PyTorch's DDP reducer does. */
dp_status dp_layout_make_buckets(dp_layout *L, size_t cap_bytes);
void dp_layout_free(dp_layout *L);

/* Arenas start on 2 MiB boundaries: the sim backend's ring cuts chunks by address, so an
 * element's summation order depends only on its offset in the arena (sim/ring.c). */
#define DP_ARENA_ALIGN_BYTES ((size_t)2 << 20)

/* A zeroed, DP_ARENA_ALIGN_BYTES-aligned array of n floats (n may be 0). Free with dp_free. */
dp_status dp_alloc_floats(float **out, size_t n, const char *what);
void dp_free(void *p);

#endif
