/* json.c: the --log line as a cJSON object (json.h): UTF-8 repair for strings, fixed precision for reals. */
#include "report/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

dp_json dp_json_begin(const char *event) {
    dp_json j = {.root = cJSON_CreateObject()};
    j.at = j.root;
    j.oom = !j.root;
    dp_json_str(&j, "event", event);
    return j;
}

static void add(dp_json *j, const char *key, cJSON *item) {
    if (!item || j->oom || !cJSON_AddItemToObject(j->at, key, item)) {
        cJSON_Delete(item);
        j->oom = 1;
    }
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

char *dp_json_utf8(const char *s) {
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    char *out = malloc(3 * strlen((const char *)p) + 1); /* a bad byte (1) grows to U+FFFD (3) at most */
    if (!out) return NULL;
    size_t o = 0;
    while (*p) {
        int n = utf8_len(p);
        if (n == 0) { /* one replacement per bad byte; the rest resynchronises */
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3, p++;
        } else {
            memcpy(out + o, p, (size_t)n);
            o += (size_t)n, p += n;
        }
    }
    out[o] = '\0';
    return out;
}

void dp_json_str(dp_json *j, const char *key, const char *s) {
    if (j->oom) return;
    char *v = dp_json_utf8(s);
    add(j, key, v ? cJSON_CreateString(v) : NULL);
    free(v);
}

void dp_json_int(dp_json *j, const char *key, long long v) {
    if (j->oom) return;
    char text[32]; /* as text: a double would round integers above 2^53 */
    snprintf(text, sizeof text, "%lld", v);
    add(j, key, cJSON_CreateRaw(text));
}

void dp_json_uint(dp_json *j, const char *key, unsigned long long v) {
    if (j->oom) return;
    char text[32];
    snprintf(text, sizeof text, "%llu", v);
    add(j, key, cJSON_CreateRaw(text));
}

void dp_json_real(dp_json *j, const char *key, const char *fmt, double v) {
    if (j->oom) return;
    char text[64] = "null";
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral" /* the callers' formats are literals for one double */
    if (isfinite(v)) snprintf(text, sizeof text, fmt, v);
#pragma GCC diagnostic pop
    add(j, key, cJSON_CreateRaw(text));
}

cJSON *dp_json_array(dp_json *j, const char *key) {
    if (j->oom) return NULL;
    cJSON *a = cJSON_CreateArray();
    add(j, key, a);
    return j->oom ? NULL : a;
}

void dp_json_element(dp_json *j, cJSON *array) {
    if (j->oom) return;
    cJSON *o = cJSON_CreateObject();
    if (!o || !array || !cJSON_AddItemToArray(array, o)) {
        cJSON_Delete(o);
        j->oom = 1;
        return;
    }
    j->at = o;
}

void dp_json_at_root(dp_json *j) { j->at = j->root; }

char *dp_json_print(dp_json *j) { return j->oom ? NULL : cJSON_PrintUnformatted(j->root); }

void dp_json_free(dp_json *j) {
    cJSON_Delete(j->root);
    memset(j, 0, sizeof *j);
}
