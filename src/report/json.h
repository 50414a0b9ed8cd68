/* json.h: builds one JSON line in memory. Owns the escaping of every string that goes into
 * --log, so a path with a control character or a byte that is not UTF-8 cannot make a log
 * line unparsable. A line is written whole (report.c), never piece by piece. */
#ifndef DP_REPORT_JSON_H
#define DP_REPORT_JSON_H

#include <stddef.h>

#include "core/status.h"

typedef struct {
    char *p;
    size_t len, cap;
    int oom;            /* an append failed to grow the buffer: the line is dropped, not cut */
} dp_jbuf;

void dp_jbuf_free(dp_jbuf *b);
void dp_jbuf_reset(dp_jbuf *b);
/* printf-style raw append (numbers, punctuation, keys the code spells itself). */
void dp_jbuf_printf(dp_jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as a JSON string literal, quotes included. '"' '\\' and control characters are
 * escaped (\n \r \t, else \u00XX); valid UTF-8 passes through; each byte of an invalid or
 * truncated UTF-8 sequence becomes U+FFFD (written \ufffd), as Python's errors="replace".
 * NULL is written as "". */
void dp_jbuf_string(dp_jbuf *b, const char *s);
/* `"key":"value"` with the value escaped, preceded by a comma unless first. */
void dp_jbuf_kv_string(dp_jbuf *b, const char *key, const char *value, int first);

#endif
