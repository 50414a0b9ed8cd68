/* cgroup.c: the process's own memory cgroups (/proc/self/cgroup, /proc/self/mountinfo), walked up
 * to the tightest limit. */
#include "core/cgroup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PATHN 1024

/* The first number in root+path; 0 when the file is missing or says "max". */
static unsigned long long read_number(const char *root, const char *path, int *present) {
    char full[PATHN * 2];
    snprintf(full, sizeof full, "%s%s", root, path);
    FILE *f = fopen(full, "r");
    if (present) *present = f != NULL;
    if (!f) return 0;
    unsigned long long v = 0;
    if (fscanf(f, "%llu", &v) != 1) v = 0;
    fclose(f);
    return v;
}

/* The value of `key` in a memory.stat file (0 if absent). */
static unsigned long long stat_value(const char *root, const char *path, const char *key) {
    char full[PATHN * 2], line[256];
    snprintf(full, sizeof full, "%s%s", root, path);
    FILE *f = fopen(full, "r");
    if (!f) return 0;
    unsigned long long v = 0, x;
    size_t kn = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, kn) == 0 && line[kn] == ' ' && sscanf(line + kn, "%llu", &x) == 1) v = x;
    fclose(f);
    return v;
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

/* The cgroup2 mount and the v1 mount carrying the memory controller, from mountinfo: "id parent
 * maj:min root mountpoint options... - fstype source superoptions". */
static void find_mounts(const char *root, mount_t *v2, mount_t *v1) {
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
        mount_t *m = strcmp(fstype, "cgroup2") == 0 ? v2 : strcmp(fstype, "cgroup") == 0 && has_word(opts, "memory") ? v1 : NULL;
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

/* Walks from dir up to the mount point, keeping the smallest headroom. */
static void walk(const char *root, const mount_t *m, const char *leaf, int v2, unsigned long long *best, char *where,
                 size_t wn) {
    char dir[PATHN], file[PATHN + 64];
    snprintf(dir, sizeof dir, "%s", leaf);
    const size_t top = strlen(m->mnt_point);
    for (;;) {
        int present;
        snprintf(file, sizeof file, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
        unsigned long long limit = read_number(root, file, &present);
        /* v1 reports "no limit" as a huge number rounded to the page size */
        if (present && limit && limit < (1ull << 60)) {
            char usage_file[PATHN + 64], stat_file[PATHN + 64];
            snprintf(usage_file, sizeof usage_file, "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
            snprintf(stat_file, sizeof stat_file, "%s/memory.stat", dir);
            unsigned long long used = read_number(root, usage_file, NULL);
            /* page cache the kernel drops before it OOM-kills: not in use (as docker stats counts) */
            unsigned long long cache = stat_value(root, stat_file, v2 ? "inactive_file" : "total_inactive_file");
            used = cache < used ? used - cache : 0;
            unsigned long long room = limit > used ? limit - used : 1;
            if (!*best || room < *best) {
                *best = room;
                if (where) snprintf(where, wn, "%s", file);
            }
        }
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= top || !slash || slash == dir) break;
        *slash = '\0';
        if (strlen(dir) < top) break;
    }
}

unsigned long long dp_cgroup_headroom(const char *root, char *where, size_t n) {
    if (!root) root = "";
    if (where && n) where[0] = '\0';
    mount_t v2 = {0}, v1 = {0};
    find_mounts(root, &v2, &v1);
    char path[PATHN * 2], line[PATHN + 256];
    snprintf(path, sizeof path, "%s/proc/self/cgroup", root);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    unsigned long long best = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || c2[1] != '/') continue;
        *c1 = '\0', *c2 = '\0';
        const char *controllers = c1 + 1, *cgpath = c2 + 1;
        char dir[PATHN];
        if (strcmp(line, "0") == 0 && !*controllers && v2.found) {
            group_dir(&v2, cgpath, dir, sizeof dir);
            walk(root, &v2, dir, 1, &best, where, n);
        } else if (has_word(controllers, "memory") && v1.found) {
            group_dir(&v1, cgpath, dir, sizeof dir);
            walk(root, &v1, dir, 0, &best, where, n);
        }
    }
    fclose(f);
    return best;
}
