/* printable.h: the one sanitiser for text from outside (a file's tensor name or metadata, a job
 * token or a message received from the network, a launcher's variable, a file name) before it is
 * printed: no escape sequence or other control byte may reach the terminal.
 *
 * One rule for which bytes are shown as they are, in two strengths:
 *   dp_printable          a value quoted in a message: only printable ASCII is kept; every other
 *                         byte and the backslash itself are written \xNN (unambiguous: the bytes
 *                         can be read back), and the result is cut to the buffer with "...".
 *   dp_printable_message  a whole message (core/status.c passes every recorded failure through it,
 *                         so that a value nobody quoted is safe too): C0 controls, DEL, C1 controls
 *                         (raw, or as UTF-8), Unicode's bidirectional overrides and bytes that are
 *                         not UTF-8 are written \xNN; printable UTF-8 and backslashes are kept, so a
 *                         value dp_printable escaped already is not escaped twice. */
#ifndef DP_PRINTABLE_H
#define DP_PRINTABLE_H

#include <stddef.h>

/* Copies s into buf (n bytes, n >= 5) with every byte outside printable ASCII written as \xNN,
 * cut with "..." when it does not fit. Returns buf. */
const char *dp_printable(const char *s, char *buf, size_t n);

/* Copies s (len bytes) into buf (n >= 1 bytes, NUL-terminated) under the message rule above, cut
 * at a character's boundary when it does not fit (4 * len + 1 bytes always do). Returns the length
 * written. */
size_t dp_printable_message(const char *s, size_t len, char *buf, size_t n);

/* Whether s (len bytes) is shown as it is under the message rule (dp_printable_message would
 * copy it unchanged). */
int dp_printable_is_clean(const char *s, size_t len);

#endif
