/* cgroup.c: the process's own memory and CPU cgroups (/proc/self/cgroup, /proc/self/mountinfo),
 * walked up to the tightest limit. */
#include "core/cgroup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PATHN 1024

/* Up to n - 1 bytes of root+path into buf, NUL-terminated; 0 when the file cannot be opened. */
static int read_text(const char *root, const char *path, char *buf, size_t n) {
    char full[PATHN * 2];
    snprintf(full, sizeof full, "%s%s", root, path);
    FILE *f = fopen(full, "r");
    if (!f) return 0;
    const size_t got = fread(buf, 1, n - 1, f);
    fclose(f);
    buf[got] = '\0';
    return 1;
}

unsigned long long dp_cgroup_parse_number(const char *text) {
    /* strtoull, not sscanf: its overflow is defined (ULLONG_MAX, read as "no limit") */
    char *end;
    const unsigned long long v = strtoull(text, &end, 10);
    return end == text ? 0 : v;
}

unsigned long long dp_cgroup_parse_stat(const char *text, const char *key) {
    unsigned long long v = 0;
    const size_t kn = strlen(key);
    for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (strncmp(line, key, kn) == 0 && line[kn] == ' ') v = dp_cgroup_parse_number(line + kn + 1);
    return v;
}

/* The first number in root+path; 0 when the file is missing or says "max". */
static unsigned long long read_number(const char *root, const char *path, int *present) {
    char text[128];
    const int got = read_text(root, path, text, sizeof text);
    if (present) *present = got;
    return got ? dp_cgroup_parse_number(text) : 0;
}

/* The value of `key` in a memory.stat file (0 if absent); v2's file is about 2 KiB. */
static unsigned long long stat_value(const char *root, const char *path, const char *key) {
    char text[16384];
    return read_text(root, path, text, sizeof text) ? dp_cgroup_parse_stat(text, key) : 0;
}

/* 1 if the comma-separated list holds word. */
static int has_word(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, word, n) == 0 && (p[n] == ',' || p[n] == '\0' || p[n] == '\n')) return 1;
    return 0;
}

typedef struct {
    char mnt_root[PATHN], mnt_point[PATHN];
    int found;
} mount_t;

/* The cgroup2 mount and the v1 mount carrying the controller ctl, from mountinfo: "id parent
 * maj:min root mountpoint options... - fstype source superoptions". */
static void find_mounts(const char *root, const char *ctl, mount_t *v2, mount_t *v1) {
    char path[PATHN * 2], line[4096];
    snprintf(path, sizeof path, "%s/proc/self/mountinfo", root);
    FILE *f = fopen(path, "r");
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        char *dash = strstr(line, " - ");
        if (!dash) continue;
        char mroot[PATHN], mpoint[PATHN], fstype[64], source[256], opts[1024] = "";
        if (sscanf(line, "%*s %*s %*s %1023s %1023s", mroot, mpoint) != 2) continue;
        if (sscanf(dash + 3, "%63s %255s %1023s", fstype, source, opts) < 2) continue;
        mount_t *m = strcmp(fstype, "cgroup2") == 0 ? v2 : strcmp(fstype, "cgroup") == 0 && has_word(opts, ctl) ? v1 : NULL;
        if (!m || m->found) continue; /* the first mount of each kind */
        snprintf(m->mnt_root, sizeof m->mnt_root, "%s", mroot);
        snprintf(m->mnt_point, sizeof m->mnt_point, "%s", mpoint);
        m->found = 1;
    }
    fclose(f);
}

/* The group's directory under the mount: the mount shows mnt_root of the hierarchy at mnt_point. */
static void group_dir(const mount_t *m, const char *cgpath, char *dir, size_t n) {
    size_t rl = strlen(m->mnt_root);
    const char *rel = cgpath;
    if (strcmp(m->mnt_root, "/") != 0 && strncmp(cgpath, m->mnt_root, rl) == 0 && (cgpath[rl] == '/' || !cgpath[rl]))
        rel = cgpath + rl;
    snprintf(dir, n, "%s%s", m->mnt_point, strcmp(rel, "/") == 0 ? "" : rel);
}

/* What one level of a group says: its directory (under root) and the hierarchy's version. */
typedef void (*level_fn)(const char *root, const char *dir, int v2, void *ctx);

/* Calls fn for dir and every directory above it up to the mount point. */
static void walk(const char *root, const mount_t *m, const char *leaf, int v2, level_fn fn, void *ctx) {
    char dir[PATHN];
    snprintf(dir, sizeof dir, "%s", leaf);
    const size_t top = strlen(m->mnt_point);
    for (;;) {
        fn(root, dir, v2, ctx);
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= top || !slash || slash == dir) break;
        *slash = '\0';
        if (strlen(dir) < top) break;
    }
}

/* Calls fn for every level of this process's groups in the hierarchies carrying controller ctl. */
static void for_levels(const char *root, const char *ctl, level_fn fn, void *ctx) {
    mount_t v2 = {0}, v1 = {0};
    find_mounts(root, ctl, &v2, &v1);
    char path[PATHN * 2], line[PATHN + 256];
    snprintf(path, sizeof path, "%s/proc/self/cgroup", root);
    FILE *f = fopen(path, "r");
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || c2[1] != '/') continue;
        *c1 = '\0', *c2 = '\0';
        const char *controllers = c1 + 1, *cgpath = c2 + 1;
        char dir[PATHN];
        if (strcmp(line, "0") == 0 && !*controllers && v2.found) {
            group_dir(&v2, cgpath, dir, sizeof dir);
            walk(root, &v2, dir, 1, fn, ctx);
        } else if (has_word(controllers, ctl) && v1.found) {
            group_dir(&v1, cgpath, dir, sizeof dir);
            walk(root, &v1, dir, 0, fn, ctx);
        }
    }
    fclose(f);
}

typedef struct {
    unsigned long long best; /* the smallest headroom or core count so far, 0: none */
    char *where;
    size_t wn;
} tightest;

/* A memory level: its limit less its usage. */
static void memory_level(const char *root, const char *dir, int v2, void *ctx) {
    tightest *t = ctx;
    char file[PATHN + 64];
    int present;
    snprintf(file, sizeof file, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
    unsigned long long limit = read_number(root, file, &present);
    /* v1 reports "no limit" as a huge number rounded to the page size */
    if (!present || !limit || limit >= (1ull << 60)) return;
    char usage_file[PATHN + 64], stat_file[PATHN + 64];
    snprintf(usage_file, sizeof usage_file, "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
    snprintf(stat_file, sizeof stat_file, "%s/memory.stat", dir);
    unsigned long long used = read_number(root, usage_file, NULL);
    /* page cache the kernel drops before it OOM-kills: not in use (as docker stats counts) */
    unsigned long long cache = stat_value(root, stat_file, v2 ? "inactive_file" : "total_inactive_file");
    used = cache < used ? used - cache : 0;
    unsigned long long room = limit > used ? limit - used : 1;
    if (!t->best || room < t->best) {
        t->best = room;
        if (t->where) snprintf(t->where, t->wn, "%s", file);
    }
}

int dp_cgroup_parse_pair(const char *text, long long *a, long long *b) {
    char *end;
    *a = strtoll(text, &end, 10);
    if (end == text || *a <= 0 || *a > (1ll << 50)) return 0;
    if (!b) return (*end == '\n' || *end == '\0');
    char *p = end;
    if (*p != ' ') return 0;
    *b = strtoll(p + 1, &end, 10);
    if (end == p + 1 || *b <= 0 || *b > (1ll << 50)) return 0;
    return *end == '\n' || *end == '\0';
}

/* dp_cgroup_parse_pair of root+path's start; 0 when the file is missing. */
static int read_pair(const char *root, const char *path, long long *a, long long *b) {
    char text[128];
    return read_text(root, path, text, sizeof text) && dp_cgroup_parse_pair(text, a, b);
}

/* A CPU level: its quota per period in cores, rounded up (1.5 cores' time keeps 2 threads busy
 * 75% of each period; 1 thread would leave half a core's time unused). */
static void cpu_level(const char *root, const char *dir, int v2, void *ctx) {
    tightest *t = ctx;
    char file[PATHN + 64], pfile[PATHN + 64];
    long long quota = 0, period = 0;
    if (v2) {
        snprintf(file, sizeof file, "%s/cpu.max", dir);
        if (!read_pair(root, file, &quota, &period)) return;
    } else {
        snprintf(file, sizeof file, "%s/cpu.cfs_quota_us", dir);
        snprintf(pfile, sizeof pfile, "%s/cpu.cfs_period_us", dir);
        if (!read_pair(root, file, &quota, NULL) || !read_pair(root, pfile, &period, NULL)) return;
    }
    const unsigned long long cores = (unsigned long long)((quota + period - 1) / period);
    if (!t->best || cores < t->best) {
        t->best = cores;
        if (t->where) snprintf(t->where, t->wn, "%s (%lld / %lld us)", file, quota, period);
    }
}

int dp_cgroup_cpu_limit(const char *root, char *where, size_t n) {
    if (!root) root = "";
    if (where && n) where[0] = '\0';
    tightest t = {0, where, n};
    for_levels(root, "cpu", cpu_level, &t);
    return t.best > 1u << 20 ? 1 << 20 : (int)t.best;
}

unsigned long long dp_cgroup_headroom(const char *root, char *where, size_t n) {
    if (!root) root = "";
    if (where && n) where[0] = '\0';
    tightest t = {0, where, n};
    for_levels(root, "memory", memory_level, &t);
    return t.best;
}
