/* json.h: one --log line, built as a cJSON object and printed by cJSON (cJSON_PrintUnformatted):
 * keys in the order they are added, no spaces. What this module adds to cJSON is the log's two
 * rules for values:
 * - a string is made valid UTF-8 first (each byte of an invalid or truncated sequence becomes
 *   U+FFFD, as Python's errors="replace"), then cJSON escapes it, so a path with any byte in it
 *   cannot make a line unparsable;
 * - a measured real is written at the precision the log states for it (a printf format such as
 *   "%.9g" for a float loss, "%.6f" for seconds), so each field keeps one spelling; NaN and Inf,
 *   which JSON has no spelling for, are written as null (as cJSON writes them).
 * A failed allocation anywhere marks the line (oom): it is dropped, never written in part. */
#ifndef DP_REPORT_JSON_H
#define DP_REPORT_JSON_H

#include <cjson/cJSON.h>

typedef struct {
    cJSON *root; /* the line's object */
    cJSON *at;   /* where fields go: the root, or the element of an array last opened */
    int oom;
} dp_json;

/* A line {"event":event}; later fields follow in the order added. */
dp_json dp_json_begin(const char *event);
/* s made valid UTF-8 (see above); NULL is written as "". */
void dp_json_str(dp_json *j, const char *key, const char *s);
void dp_json_int(dp_json *j, const char *key, long long v);
void dp_json_uint(dp_json *j, const char *key, unsigned long long v);
/* v printed with fmt, a printf format for one double; null when v is NaN or Inf. */
void dp_json_real(dp_json *j, const char *key, const char *fmt, double v);
/* An empty array under key; dp_json_element appends an object to it and makes that object where
 * the next fields go, until dp_json_at_root. */
cJSON *dp_json_array(dp_json *j, const char *key);
void dp_json_element(dp_json *j, cJSON *array);
void dp_json_at_root(dp_json *j);
/* The line as text, without a newline (release it with cJSON_free); NULL after a failed allocation. */
char *dp_json_print(dp_json *j);
void dp_json_free(dp_json *j);

/* s with every byte that is not part of valid UTF-8 (RFC 3629: no overlong forms, surrogates or
 * code points above U+10FFFF) replaced by U+FFFD; malloc'd, NULL when out of memory. */
char *dp_json_utf8(const char *s);

#endif
