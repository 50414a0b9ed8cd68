/* parse_num.c: strict decimal numbers (parse_num.h). strtoll/strtod alone skip leading space, take
 * '+', "0x1p3", "nan" and "inf", and leave trailing text to the caller: the syntax is checked here
 * first, so that ' 5' and '5 ' are refused alike, everywhere. */
#include "core/parse_num.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int digit(char c) { return c >= '0' && c <= '9'; }

int dp_parse_ll_n(const char *s, size_t n, long long *out) {
    size_t i = 0;
    if (i < n && s[i] == '-') i++;
    if (i == n || n > 64) return -1; /* no digits; or longer than any long long, leading zeros and all */
    for (size_t k = i; k < n; k++)
        if (!digit(s[k])) return -1;
    char buf[72];
    memcpy(buf, s, n);
    buf[n] = '\0';
    errno = 0;
    char *end;
    long long v = strtoll(buf, &end, 10);
    if (errno == ERANGE || *end) return -1;
    *out = v;
    return 0;
}

int dp_parse_ll(const char *s, long long *out) { return dp_parse_ll_n(s, strlen(s), out); }

int dp_parse_double(const char *s, double *out) {
    const char *p = s;
    if (*p == '-') p++;
    int mant = 0;
    while (digit(*p)) p++, mant++;
    if (*p == '.') {
        p++;
        while (digit(*p)) p++, mant++;
    }
    if (!mant) return -1;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '-' || *p == '+') p++; /* 1e+03 is how printf writes an exponent */
        if (!digit(*p)) return -1;
        while (digit(*p)) p++;
    }
    if (*p) return -1;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (*end || !isfinite(v) || errno == ERANGE) return -1;
    *out = v;
    return 0;
}
