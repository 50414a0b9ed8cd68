/* parse_num.h: the one parser of numbers a user types (flags, environment variables, settings).
 * Decimal only, the whole string and nothing else: no leading or trailing space, no '+', no
 * hex or octal prefix, no empty string; an overflow, NaN or Inf is refused rather than clamped.
 * Callers check the range and word the message (they know the flag or variable). */
#ifndef DP_PARSE_NUM_H
#define DP_PARSE_NUM_H

#include <stddef.h>

/* s[0..n) as a decimal integer: an optional '-' then digits. 0 on success, -1 otherwise. */
int dp_parse_ll_n(const char *s, size_t n, long long *out);
/* The whole NUL-terminated s, as dp_parse_ll_n. */
int dp_parse_ll(const char *s, long long *out);
/* The whole s as a finite decimal real ("0.5", "-1", "1e-3", ".5", "2."): an optional '-', digits
 * with an optional point, an optional exponent; no hex floats, NaN, Inf, or a value beyond a
 * double (over- or underflow). 0 on success, -1 otherwise. */
int dp_parse_double(const char *s, double *out);

#endif
