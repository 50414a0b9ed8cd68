#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[1024];

dp_status dp_fail(dp_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

const char *dp_last_error(void) { return last_error; }

void dp_set_error(const char *msg) { snprintf(last_error, sizeof last_error, "%s", msg ? msg : ""); }

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
