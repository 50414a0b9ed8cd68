/* json.c: the JSON line buffer and string escaping used by every --log writer. */
#include "report/json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dp_jbuf_free(dp_jbuf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

void dp_jbuf_reset(dp_jbuf *b) {
    b->len = 0;
    b->oom = 0;
    if (b->p) b->p[0] = '\0';
}

static int reserve(dp_jbuf *b, size_t more) {
    if (b->oom) return 0;
    if (b->len + more + 1 <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 512;
    while (cap < b->len + more + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return b->oom = 1, 0;
    b->p = p, b->cap = cap;
    return 1;
}

static void put(dp_jbuf *b, const char *s, size_t n) {
    if (!reserve(b, n)) return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void dp_jbuf_printf(dp_jbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) {
        put(b, small, (size_t)n);
        return;
    }
    if (!reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if it is not one (overlong forms,
 * surrogates and code points above U+10FFFF included, as RFC 3629). */
static int utf8_len(const unsigned char *s) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int n;
    unsigned min, cp;
    if ((c & 0xE0) == 0xC0) n = 2, min = 0x80, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) n = 3, min = 0x800, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) n = 4, min = 0x10000, cp = c & 0x07;
    else return 0;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0; /* also stops at the terminating NUL */
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

void dp_jbuf_string(dp_jbuf *b, const char *s) {
    put(b, "\"", 1);
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    while (*p) {
        unsigned c = *p;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c;
            put(b, esc, 2);
            p++;
        } else if (c < 0x20 || c == 0x7F) {
            if (c == '\n') put(b, "\\n", 2);
            else if (c == '\r') put(b, "\\r", 2);
            else if (c == '\t') put(b, "\\t", 2);
            else {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                put(b, esc, 6);
            }
            p++;
        } else {
            int n = utf8_len(p);
            if (n == 0) {
                put(b, "\\ufffd", 6); /* one replacement per bad byte; the rest resynchronises */
                p++;
            } else {
                put(b, (const char *)p, (size_t)n);
                p += n;
            }
        }
    }
    put(b, "\"", 1);
}

void dp_jbuf_kv_string(dp_jbuf *b, const char *key, const char *value, int first) {
    dp_jbuf_printf(b, "%s\"%s\":", first ? "" : ",", key);
    dp_jbuf_string(b, value);
}
