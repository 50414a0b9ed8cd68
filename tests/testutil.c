#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <math.h>
#include <zlib.h>

const char *tu_path(const char *name) {
    static char buf[8][512];
    static int next;
    const char *dir = getenv("DP_TEST_TMP");
    if (!dir || !*dir) dir = "/tmp";
    char *p = buf[next++ % 8];
    snprintf(p, 512, "%s/%d-%s", dir, (int)getpid(), name);
    return p;
}

void tu_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

void tu_write_gz(const char *path, const void *data, size_t n) {
    gzFile g = gzopen(path, "wb");
    assert_non_null(g);
    if (n) assert_int_equal(gzwrite(g, data, (unsigned)n), (int)n);
    assert_int_equal(gzclose(g), Z_OK);
}

static int run_captured(char **out, const char *cmd) {
    char full[8400];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    assert_non_null(p);
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += got;
        if (cap - len < 1024) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
    }
    buf[len] = '\0';
    int st = pclose(p);
    if (out) *out = buf; else free(buf);
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return -1;
}

int tu_sh(char **out, const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return run_captured(out, cmd);
}

int tu_run_dptrain(char **out, const char *args_fmt, ...) {
    const char *bin = getenv("DPTRAIN");
    if (!bin) bin = "./dptrain";
    char args[4096], cmd[8192];
    va_list ap;
    va_start(ap, args_fmt);
    vsnprintf(args, sizeof args, args_fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s %s", bin, args);
    return run_captured(out, cmd);
}

int tu_contains(const char *haystack, const char *needle) { return haystack && strstr(haystack, needle) != NULL; }

double tu_rel_diff(const float *a, const float *b, size_t n) {
    double maxd = 0, maxb = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > maxd || isnan(d)) maxd = isnan(d) ? INFINITY : d;
        if (fabs((double)b[i]) > maxb) maxb = fabs((double)b[i]);
    }
    return maxd / maxb;
}
