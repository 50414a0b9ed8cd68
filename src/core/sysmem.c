/* sysmem.c: available memory (/proc/meminfo, ulimit -v and -d, the process's cgroup limits:
 * core/cgroup.c) and the regular-file open used by every reader. */
#include "core/sysmem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/cgroup.h"

static void consider(dp_mem_avail *out, unsigned long long bytes, const char *source) {
    if (bytes && (!out->bytes || bytes < out->bytes)) {
        out->bytes = bytes;
        snprintf(out->source, sizeof out->source, "%s", source);
    }
}

/* A "Field:   N kB" line of /proc/self/status; 0 when absent. */
static unsigned long long status_kb(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    unsigned long long kb = 0;
    if (!f) return 0;
    char line[256];
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0 && sscanf(line + n, "%llu", &kb) == 1) break;
    fclose(f);
    return kb;
}

void dp_memory_available(dp_mem_avail *out) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kb;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
                consider(out, kb * 1024, "MemAvailable in /proc/meminfo");
        fclose(f);
    }
    if (!out->bytes) {
        long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages > 0 && page > 0) consider(out, (unsigned long long)pages * (unsigned long long)page, "free memory");
    }
    /* ulimit -v / -d: past them malloc fails (and a parser reports the failure as bad input) */
    static const struct {
        int res;
        const char *field, *source;
    } lim[] = {{RLIMIT_AS, "VmSize:", "the address-space limit (ulimit -v) less what is mapped"},
               {RLIMIT_DATA, "VmData:", "the data-segment limit (ulimit -d) less what is in use"}};
    for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++) {
        struct rlimit rl;
        if (getrlimit(lim[i].res, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) continue;
        unsigned long long used = status_kb(lim[i].field) * 1024;
        consider(out, rl.rlim_cur > used ? rl.rlim_cur - used : 1, lim[i].source);
    }
    /* the process's own groups (a job's limit), each level up to the top, v2 and v1 */
    char where[sizeof out->source - 40];
    unsigned long long room = dp_cgroup_headroom("", where, sizeof where);
    if (room) {
        char source[sizeof out->source];
        snprintf(source, sizeof source, "the cgroup limit %s less usage", where);
        consider(out, room, source);
    }
}

const char *dp_format_bytes(unsigned long long bytes, char *buf, size_t cap) {
    if (bytes >= (1ull << 40)) snprintf(buf, cap, "%.1f TiB", (double)bytes / (1ull << 40));
    else if (bytes >= (1ull << 30)) snprintf(buf, cap, "%.1f GiB", (double)bytes / (1ull << 30));
    else if (bytes >= (1ull << 20)) snprintf(buf, cap, "%.1f MiB", (double)bytes / (1ull << 20));
    else snprintf(buf, cap, "%llu bytes", bytes);
    return buf;
}

dp_status dp_memory_check(unsigned long long bytes, const char *what) {
    dp_mem_avail a;
    dp_memory_available(&a);
    if (!a.bytes || bytes <= a.bytes) return DP_OK;
    char need[32], have[32];
    return dp_fail(DP_ERR_NOMEM, "%s needs %s but only %s is available (%s): refusing before allocating it",
                   what, dp_format_bytes(bytes, need, sizeof need), dp_format_bytes(a.bytes, have, sizeof have),
                   a.source);
}

static const char *kind_of(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO (named pipe)";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

dp_status dp_open_regular(const char *path, const char *flag, int *fd, struct stat *st) {
    const char *pre = flag ? flag : "", *sep = flag ? " " : "";
    /* O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting forever */
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (f < 0) return dp_fail(DP_ERR_IO, "%s%s%s: cannot open: %s", pre, sep, path, strerror(errno));
    if (fstat(f, st) != 0) {
        int e = errno;
        close(f);
        return dp_fail(DP_ERR_IO, "%s%s%s: cannot stat: %s", pre, sep, path, strerror(e));
    }
    if (!S_ISREG(st->st_mode)) {
        close(f);
        return dp_fail(DP_ERR_IO, "%s%s%s: is %s, expected a regular file", pre, sep, path, kind_of(st->st_mode));
    }
    int fl = fcntl(f, F_GETFL);
    if (fl >= 0) fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
    *fd = f;
    return DP_OK;
}

dp_status dp_fopen_regular(const char *path, const char *flag, FILE **f, struct stat *st) {
    int fd = -1;
    DP_TRY(dp_open_regular(path, flag, &fd, st));
    *f = fdopen(fd, "rb");
    if (!*f) {
        int e = errno;
        close(fd);
        return dp_fail(DP_ERR_IO, "%s%s%s: cannot open: %s", flag ? flag : "", flag ? " " : "", path, strerror(e));
    }
    return DP_OK;
}
