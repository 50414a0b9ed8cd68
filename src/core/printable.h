/* printable.h: text read from a file (a tensor name, a metadata value) made safe to print: a
 * crafted file must not reach the terminal with escape sequences or other control bytes. */
#ifndef DP_PRINTABLE_H
#define DP_PRINTABLE_H

#include <stddef.h>

/* Copies s into buf (n bytes, n >= 5) with every byte outside printable ASCII written as \xNN,
 * cut with "..." when it does not fit. Returns buf. */
const char *dp_printable(const char *s, char *buf, size_t n);

#endif
