/* memory.c: the fake GPU's memory tables and address translation. Device memory is real host
 * memory handed out under an alias with FG_ALIAS_BIT set: a non-canonical address, so a host
 * load or store through it faults (SIGSEGV) as a dereferenced cudaMalloc pointer would, while
 * pointer arithmetic on it (slices, offsets) keeps working, since the alias is linear: the real
 * address of any interior pointer is fake ^ FG_ALIAS_BIT. Workers translate every pointer an
 * operation touches, checked against the live allocations, so a stale or overrunning pointer
 * stops the test with the name of the call rather than corrupting memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_internal.h"

int fg_blocks_add(fg_dev *g, fg_blocks *t, uintptr_t real, size_t bytes, const char *what) {
    int rc = 0;
    pthread_mutex_lock(&g->mem_mu);
    if (t->n == t->cap) {
        const size_t cap = t->cap ? 2 * t->cap : 64;
        fg_block *b = realloc(t->b, cap * sizeof *b);
        if (b) t->b = b, t->cap = cap;
        else rc = -1;
    }
    if (rc == 0) {
        fg_block *b = &t->b[t->n++];
        b->real = real, b->bytes = bytes;
        snprintf(b->what, sizeof b->what, "%s", what ? what : "?");
    }
    pthread_mutex_unlock(&g->mem_mu);
    return rc;
}

size_t fg_blocks_remove(fg_dev *g, fg_blocks *t, uintptr_t real) {
    size_t bytes = 0;
    pthread_mutex_lock(&g->mem_mu);
    for (size_t i = 0; i < t->n; i++)
        if (t->b[i].real == real) {
            bytes = t->b[i].bytes;
            t->b[i] = t->b[--t->n];
            break;
        }
    pthread_mutex_unlock(&g->mem_mu);
    return bytes;
}

/* The block holding byte address a (a == its end counts, for empty ranges); mem_mu held. */
static const fg_block *holding(const fg_blocks *t, uintptr_t a) {
    for (size_t i = 0; i < t->n; i++)
        if (a >= t->b[i].real && a - t->b[i].real <= t->b[i].bytes) return &t->b[i];
    return NULL;
}

int fg_is_pinned(fg_dev *g, const void *p, size_t bytes) {
    pthread_mutex_lock(&g->mem_mu);
    const fg_block *b = holding(&g->host, (uintptr_t)p);
    const int in = b && bytes <= b->bytes - ((uintptr_t)p - b->real);
    pthread_mutex_unlock(&g->mem_mu);
    return in;
}

void *fg_real(fg_dev *g, const void *fake, size_t off, size_t bytes, const char *call, const char *arg) {
    if (!fake) return NULL; /* optional arguments (a conv without bias, dx of the first layer) */
    const uintptr_t f = (uintptr_t)fake;
    if (!(f & FG_ALIAS_BIT)) {
        fprintf(stderr, "fakegpu: %s: %s = %p is host memory, not memory of the fakegpu device\n", call, arg, fake);
        abort();
    }
    const uintptr_t real = f ^ FG_ALIAS_BIT, lo = real + off;
    pthread_mutex_lock(&g->mem_mu);
    const fg_block *b = holding(&g->mem, lo);
    if (!b) {
        fprintf(stderr,
                "fakegpu: %s: %s = %p (+%zu bytes) is inside no live allocation of this device (freed, or "
                "another device's)\n",
                call, arg, fake, off);
        abort();
    }
    const size_t at = lo - b->real;
    if (bytes > b->bytes - at) {
        fprintf(stderr, "fakegpu: %s: %s touches bytes [%zu, %zu) of the allocation for '%s', which has %zu\n", call,
                arg, at, at + bytes, b->what, b->bytes);
        abort();
    }
    pthread_mutex_unlock(&g->mem_mu);
    return (void *)real;
}

size_t fg_blocks_live(fg_dev *g, const fg_blocks *t, size_t *bytes) {
    size_t sum = 0;
    pthread_mutex_lock(&g->mem_mu);
    const size_t n = t->n;
    for (size_t i = 0; i < n; i++) sum += t->b[i].bytes;
    pthread_mutex_unlock(&g->mem_mu);
    if (bytes) *bytes = sum;
    return n;
}

/* At close, when no worker runs: no lock. */
size_t fg_blocks_release(fg_blocks *t, const char *kind) {
    const size_t n = t->n;
    for (size_t i = 0; i < n; i++) {
        fprintf(stderr, "fakegpu: close: %zu bytes of %s for '%s' were never freed\n", t->b[i].bytes, kind,
                t->b[i].what);
        free((void *)t->b[i].real);
    }
    free(t->b);
    memset(t, 0, sizeof *t);
    return n;
}
