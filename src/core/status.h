/* status.h: the error convention of the whole library.
 * Library code never exits: it returns a dp_status and records one line that names
 * the cause (the file, the flag, the rank). Only main() maps a status to an exit code. */
#ifndef DP_STATUS_H
#define DP_STATUS_H

typedef enum {
    DP_OK = 0,
    DP_ERR_USAGE,       /* bad flag or flag value: exit code 2 */
    DP_ERR_IO,          /* file missing, unreadable, short read, write failed */
    DP_ERR_FORMAT,      /* file exists but its content is corrupt or of the wrong kind */
    DP_ERR_NOMEM,       /* an allocation failed */
    DP_ERR_NUMERIC,     /* NaN or Inf in the loss */
    DP_ERR_BACKEND,     /* a collective or a device call failed */
    DP_ERR_UNSUPPORTED, /* a feature not compiled in */
    DP_ERR_INTERNAL,    /* a broken invariant: a bug */
    DP_DONE             /* not an error: an iterator is exhausted */
} dp_status;

/* The longest message kept; a longer one keeps its start and its end (the reason) around " [...] ".
 * A message that quotes dp_last_error() copies it into a buffer of this size. */
#define DP_ERROR_MAX 4096

/* Records the message (printf format) for the calling thread and returns s, so that
 * `return dp_fail(DP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));` is one line. */
dp_status dp_fail(dp_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The last message recorded by this thread ("" if none). */
const char *dp_last_error(void);
/* Copies a message recorded on another thread (loader threads) into this thread's slot. */
void dp_set_error(const char *msg);
void dp_clear_error(void);
const char *dp_status_name(dp_status s);
/* Exit code for main(): 0 ok, 2 usage, 1 anything else. */
int dp_exit_code(dp_status s);

#define DP_TRY(expr)                         \
    do {                                     \
        dp_status dp_try_s_ = (expr);        \
        if (dp_try_s_ != DP_OK) return dp_try_s_; \
    } while (0)

/* Allocation that fails with a message naming what was being allocated. */
#define DP_ALLOC(ptr, count, what)                                                       \
    do {                                                                                 \
        size_t dp_alloc_n_ = (size_t)(count);                                            \
        (ptr) = calloc(dp_alloc_n_ ? dp_alloc_n_ : 1, sizeof(*(ptr)));                   \
        if (!(ptr))                                                                      \
            return dp_fail(DP_ERR_NOMEM, "out of memory allocating %zu x %zu bytes for %s", \
                           dp_alloc_n_, sizeof(*(ptr)), (what));                         \
    } while (0)

#endif
