#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/printable.h"

static _Thread_local char last_error[DP_ERROR_MAX];

/* Stores msg (len bytes); one too long keeps its start and its end, where the reason is ("PATH:
 * reason", "...; the previous file is kept"), and drops the middle of a long path instead. */
static void store_raw(const char *msg, size_t len) {
    if (len < sizeof last_error) {
        memcpy(last_error, msg, len + 1);
        return;
    }
    static const char gap[] = " [...] ";
    const size_t head = sizeof last_error / 4, tail = sizeof last_error - 1 - head - (sizeof gap - 1);
    memcpy(last_error, msg, head);
    memcpy(last_error + head, gap, sizeof gap - 1);
    memcpy(last_error + head + sizeof gap - 1, msg + len - tail, tail);
    last_error[sizeof last_error - 1] = '\0';
}

/* Every message is printed sooner or later, and many quote text from outside (a file name, a
 * launcher's variable, what a peer sent): whatever nobody escaped is escaped here, once
 * (core/printable.h), so that no control byte of it reaches a terminal. */
static void store(const char *msg, size_t len) {
    store_raw(msg, len);
    const size_t n = strlen(last_error);
    if (dp_printable_is_clean(last_error, n)) return;
    char safe[4 * DP_ERROR_MAX]; /* room for every byte escaped */
    store_raw(safe, dp_printable_message(last_error, n, safe, sizeof safe));
}

dp_status dp_fail(dp_status s, const char *fmt, ...) {
    char buf[4 * DP_ERROR_MAX]; /* room for a message that quotes another one and two long paths */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    store(buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
    return s;
}

const char *dp_last_error(void) { return last_error; }

void dp_set_error(const char *msg) {
    if (!msg) msg = "";
    store(msg, strlen(msg));
}

void dp_clear_error(void) { last_error[0] = '\0'; }

const char *dp_status_name(dp_status s) {
    switch (s) {
    case DP_OK: return "ok";
    case DP_ERR_USAGE: return "usage error";
    case DP_ERR_IO: return "I/O error";
    case DP_ERR_FORMAT: return "format error";
    case DP_ERR_NOMEM: return "out of memory";
    case DP_ERR_NUMERIC: return "numeric error";
    case DP_ERR_BACKEND: return "backend error";
    case DP_ERR_UNSUPPORTED: return "unsupported";
    case DP_ERR_INTERNAL: return "internal error";
    case DP_DONE: return "done";
    }
    return "unknown status";
}

int dp_exit_code(dp_status s) {
    if (s == DP_OK || s == DP_DONE) return 0;
    return s == DP_ERR_USAGE ? 2 : 1;
}
