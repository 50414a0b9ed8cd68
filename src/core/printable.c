/* printable.c: escaping text from outside before it is printed (printable.h). */
#include "core/printable.h"

#include <stdio.h>
#include <string.h>

/* How many bytes at s (len left) form one character shown as it is: 0 when s[0] must be escaped.
 * ascii_only: the quoting rule (printable ASCII but the backslash); else the message rule. */
static size_t shown_as_is(const unsigned char *s, size_t len, int ascii_only) {
    const unsigned char c = s[0];
    if (c >= 0x20 && c < 0x7f) return ascii_only && c == '\\' ? 0 : 1;
    /* bytes >= 0x80 too in a quoted value: C1 controls (0x9b is CSI) act on some terminals, raw or as UTF-8 */
    if (ascii_only || c < 0xc2 || c > 0xf4) return 0; /* a control, a continuation, an overlong lead, past U+10FFFF */
    const size_t need = c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    if (len < need) return 0;
    for (size_t i = 1; i < need; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    const unsigned char d = s[1];
    if (c == 0xc2 && d < 0xa0) return 0;                       /* U+0080..U+009F: the C1 controls */
    if ((c == 0xe0 && d < 0xa0) || (c == 0xf0 && d < 0x90)) return 0; /* overlong */
    if (c == 0xed && d >= 0xa0) return 0;                      /* UTF-16 surrogates */
    if (c == 0xf4 && d >= 0x90) return 0;                      /* past U+10FFFF */
    /* U+202A..U+202E and U+2066..U+2069: bidirectional embeddings, overrides and isolates, which
       reorder what follows them on the line */
    if (c == 0xe2 && ((d == 0x80 && s[2] >= 0xaa && s[2] <= 0xae) || (d == 0x81 && s[2] >= 0xa6 && s[2] <= 0xa9)))
        return 0;
    return need;
}

const char *dp_printable(const char *s, char *buf, size_t n) {
    size_t k = 0;
    if (!s) s = "(null)";
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        const int plain = shown_as_is(&c, 1, 1) == 1;
        size_t need = plain ? 1 : 4;
        if (k + need + 4 > n) { /* room for "..." and the NUL */
            snprintf(buf + k, n - k, "...");
            return buf;
        }
        if (plain) buf[k++] = (char)c;
        else k += (size_t)snprintf(buf + k, n - k, "\\x%02x", c);
    }
    buf[k] = '\0';
    return buf;
}

size_t dp_printable_message(const char *s, size_t len, char *buf, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t k = 0;
    if (!n) return 0;
    for (size_t i = 0; i < len;) {
        const size_t run = shown_as_is(p + i, len - i, 0);
        const size_t need = run ? run : 4;
        if (k + need + 1 > n) break;
        if (run) memcpy(buf + k, p + i, run), k += run, i += run;
        else k += (size_t)snprintf(buf + k, n - k, "\\x%02x", p[i]), i++;
    }
    buf[k] = '\0';
    return k;
}

int dp_printable_is_clean(const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        const size_t run = shown_as_is(p + i, len - i, 0);
        if (!run) return 0;
        i += run;
    }
    return 1;
}
