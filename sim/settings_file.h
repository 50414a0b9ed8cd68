/* settings_file.h: the one reader of the overhead model's text files (topology files and compute
 * profiles). A line is whitespace-separated words; '#' starts a comment to the end of the line;
 * the first word is the key. The reader refuses a line too long or with too many words, and a
 * setting given twice (the caller says what identifies it: the key, or the key and its index
 * words), naming the file and both lines, so a typo never silently keeps the later value. Numbers
 * are read strictly, the whole word: whole numbers [-]digits; reals also with a point and an
 * exponent (no '+', hex, inf or nan, nothing beyond a double), and then checked against a range. */
#ifndef DP_SIM_SETTINGS_FILE_H
#define DP_SIM_SETTINGS_FILE_H

#include <stddef.h>

#include "core/status.h"

#define DP_SF_MAX_WORDS 8
#define DP_SF_MAX_LINE 512

typedef struct dp_sf_seen dp_sf_seen;

typedef struct {
    const char *origin; /* the file, in messages */
    const char *rest;   /* the text not read yet */
    int line;           /* of the current line, from 1 */
    int n;              /* words on the current line */
    char *w[DP_SF_MAX_WORDS];
    char buf[DP_SF_MAX_LINE];
    dp_sf_seen *seen; /* the settings given so far (a hash set of their identities) */
    size_t n_seen, cap_seen;
} dp_sf_reader;

void dp_sf_init(dp_sf_reader *r, const char *text, const char *origin);
void dp_sf_free(dp_sf_reader *r);
/* The next line with words: DP_OK with r->w[0..n) set; DP_DONE at the end; DP_ERR_FORMAT for a
 * line longer than DP_SF_MAX_LINE or of more than DP_SF_MAX_WORDS words. */
dp_status dp_sf_next(dp_sf_reader *r);
/* Reads every line of text as 'key value  # source' through line(r, ctx), each key at most once
 * (checked after line() has accepted the key, so an unknown key is named as such): DP_OK at the end,
 * else the first failure. */
dp_status dp_sf_read_pairs(const char *text, const char *origin, dp_status (*line)(dp_sf_reader *r, void *ctx),
                           void *ctx);
/* Refuses the current line when `id` (at most 63 characters) was given on an earlier one. */
dp_status dp_sf_once(dp_sf_reader *r, const char *id);
/* Refuses the current line unless it has min..max words; `form` shows the expected line. */
dp_status dp_sf_words(const dp_sf_reader *r, int min, int max, const char *form);
/* Word i as a finite number in [lo, hi]; as a whole number in [lo, hi] (|hi| <= 2^53). */
dp_status dp_sf_real(const dp_sf_reader *r, int i, double lo, double hi, double *out);
dp_status dp_sf_whole(const dp_sf_reader *r, int i, long long lo, long long hi, long long *out);
dp_status dp_sf_int(const dp_sf_reader *r, int i, int lo, int hi, int *out);
/* Word i copied into dst (n bytes): refused when it does not fit. */
dp_status dp_sf_name(const dp_sf_reader *r, int i, char *dst, size_t n);

#endif
