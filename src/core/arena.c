#include "core/arena.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

dp_status dp_layout_add(dp_layout *L, const char *name, size_t count, int flags, int *index) {
    if (L->n_tensors == L->cap) {
        int cap = L->cap ? 2 * L->cap : 16;
        dp_tensor_info *t = realloc(L->tensors, (size_t)cap * sizeof *t);
        if (!t) return dp_fail(DP_ERR_NOMEM, "out of memory growing the tensor layout");
        L->tensors = t;
        L->cap = cap;
    }
    dp_tensor_info *t = &L->tensors[L->n_tensors];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->s.offset = L->n;
    t->s.count = count;
    t->flags = flags;
    size_t padded = (count + DP_ARENA_ALIGN_FLOATS - 1) / DP_ARENA_ALIGN_FLOATS * DP_ARENA_ALIGN_FLOATS;
    L->n += padded;
    if (index) *index = L->n_tensors;
    L->n_tensors++;
    return DP_OK;
}

dp_status dp_layout_make_buckets(dp_layout *L, size_t cap_bytes) {
    free(L->buckets);
    free(L->bucket_first_tensor);
    L->buckets = NULL;
    L->bucket_first_tensor = NULL;
    L->n_buckets = 0;
    if (L->n_tensors == 0) return DP_OK;
    DP_ALLOC(L->buckets, L->n_tensors, "gradient buckets");
    DP_ALLOC(L->bucket_first_tensor, L->n_tensors, "gradient buckets");
    size_t cap = cap_bytes / sizeof(float);
    size_t end = L->n; /* the open bucket spans [tensors[i].offset, end) */
    for (int i = L->n_tensors - 1; i >= 0; i--) {
        int hi_open = end != (i == L->n_tensors - 1 ? L->n : L->tensors[i + 1].s.offset);
        if (hi_open && end - L->tensors[i].s.offset > cap) {
            /* tensor i does not fit: close the bucket at tensor i + 1 */
            size_t off = L->tensors[i + 1].s.offset;
            L->buckets[L->n_buckets] = (dp_slice){off, end - off};
            L->bucket_first_tensor[L->n_buckets++] = i + 1;
            end = off;
        }
    }
    L->buckets[L->n_buckets] = (dp_slice){0, end};
    L->bucket_first_tensor[L->n_buckets++] = 0;
    return DP_OK;
}

void dp_layout_free(dp_layout *L) {
    free(L->tensors);
    free(L->buckets);
    free(L->bucket_first_tensor);
    memset(L, 0, sizeof *L);
}

dp_status dp_alloc_floats(float **out, size_t n, const char *what) {
    size_t bytes = (n ? n : 1) * sizeof(float);
    bytes = (bytes + 63) / 64 * 64;
    void *p = NULL;
    if (posix_memalign(&p, DP_ARENA_ALIGN_BYTES, bytes) != 0) p = NULL;
    if (!p) return dp_fail(DP_ERR_NOMEM, "out of memory allocating %zu bytes for %s", bytes, what);
    memset(p, 0, bytes);
    *out = p;
    return DP_OK;
}

void dp_free(void *p) { free(p); }
