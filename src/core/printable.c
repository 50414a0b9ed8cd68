/* printable.c: escaping text from files before it is printed. */
#include "core/printable.h"

#include <stdio.h>
#include <string.h>

const char *dp_printable(const char *s, char *buf, size_t n) {
    size_t k = 0;
    if (!s) s = "(null)";
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        /* bytes >= 0x80 too: C1 controls (0x9b is CSI) act on some terminals, raw or as UTF-8 */
        int plain = c >= 0x20 && c < 0x7f && c != '\\';
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
