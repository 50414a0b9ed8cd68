/* topology.c: reading and writing topology files, and finding presets. Units are in the key
 * names (GB/s = 1e9 bytes/s, us) so a file reads like the data sheet it was copied from. */
#include "sim/topology.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/backend.h"
#include "core/exe_dir.h"
#include "core/sysmem.h"
#include "io/atomic.h"
#include "sim/settings_file.h"
#include "dp_config.h"

static const char *const kind_keys[DP_TOPO_KINDS] = {"broadcast", "reduce", "gather", "scatter"};

int dp_topology_kind_index(int kind) {
    switch (kind) {
    case DP_COLL_BROADCAST: return 0;
    case DP_COLL_REDUCE: return 1;
    case DP_COLL_GATHER: return 2;
    case DP_COLL_SCATTER: return 3;
    default: return -1;
    }
}

/* "broadcast_latency_us" -> 0 and *bw 0; "gather_bandwidth_GBps" -> 2 and *bw 1; else -1. */
static int kind_key(const char *key, int *bw) {
    for (int i = 0; i < DP_TOPO_KINDS; i++) {
        size_t n = strlen(kind_keys[i]);
        if (strncmp(key, kind_keys[i], n) != 0) continue;
        if (strcmp(key + n, "_latency_us") == 0) return *bw = 0, i;
        if (strcmp(key + n, "_bandwidth_GBps") == 0) return *bw = 1, i;
    }
    return -1;
}

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int candidate_dirs(char dirs[4][512]) {
    int k = 0;
    const char *env = getenv("DPTRAIN_PRESETS");
    if (env && *env) snprintf(dirs[k++], 512, "%s", env);
    char exe[400];
    dp_exe_dir(exe, sizeof exe);
    if (exe[0]) {
        snprintf(dirs[k++], 512, "%s/presets", exe);
        snprintf(dirs[k++], 512, "%s/../share/dptrain/presets", exe);
    }
    snprintf(dirs[k++], 512, "%s", DP_SOURCE_PRESETS);
    return k;
}

void dp_topology_dirs(char *buf, size_t n) {
    char dirs[4][512];
    int k = candidate_dirs(dirs);
    buf[0] = '\0';
    for (int i = 0; i < k; i++) {
        if (i) strncat(buf, ":", n - strlen(buf) - 1);
        strncat(buf, dirs[i], n - strlen(buf) - 1);
    }
}

int dp_preset_find(const char *name, char *path, size_t n) {
    char dirs[4][512];
    int k = candidate_dirs(dirs);
    for (int i = 0; i < k; i++) {
        if (snprintf(path, n, "%s/%s", dirs[i], name) >= (int)n) continue; /* too long to be a preset */
        if (is_file(path)) return 1;
    }
    return 0;
}

/* A text file of settings: a regular file (a FIFO or device is refused, never waited on), at most
 * 16 MiB, printable ASCII outside comments (names in it reach the terminal). */
static dp_status read_text(const char *path, char **out) {
    struct stat st;
    FILE *f;
    DP_TRY(dp_fopen_regular(path, NULL, &f, &st));
    size_t cap = 4096, len = 0;
    char *s = malloc(cap);
    if (!s) return fclose(f), dp_fail(DP_ERR_NOMEM, "out of memory reading %s", path);
    size_t got;
    while ((got = fread(s + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (len + 1 == cap) {
            char *t = cap < (1u << 24) ? realloc(s, cap *= 2) : NULL;
            if (!t) return free(s), fclose(f), dp_fail(DP_ERR_FORMAT, "%s: too large for a text file of numbers", path);
            s = t;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) return free(s), dp_fail(DP_ERR_IO, "%s: read error", path);
    s[len] = '\0';
    /* UTF-8 may appear in comments (never printed); control bytes nowhere */
    int comment = 0;
    for (size_t i = 0, line = 1; i < len; line += s[i++] == '\n') {
        unsigned char c = (unsigned char)s[i];
        comment = c == '#' ? 1 : c == '\n' ? 0 : comment;
        if ((c < 0x20 && c != '\n' && c != '\t' && c != '\r') || c == 0x7f || (c >= 0x80 && !comment)) {
            free(s);
            return dp_fail(DP_ERR_FORMAT, "%s:%zu: byte 0x%02x: not a text file (printable ASCII expected outside "
                           "comments)", path, line, c);
        }
    }
    *out = s;
    return DP_OK;
}

dp_status dp_read_text_file(const char *path, char **out) { return read_text(path, out); }

/* Bounds: a device count a machine can have; times of at most an hour (in us); bandwidths up to
 * 1 PB/s (in GB/s); per-MB costs up to a second. */
#define MAX_DEVICES 1000000
#define MAX_US 3.6e9
#define MAX_GBPS 1e6
#define MAX_US_PER_MB 1e6

/* The numeric keys: where each goes, its range and its unit's factor to seconds or bytes/s. */
typedef struct {
    const char *key;
    size_t off;
    double lo, hi, scale;
} num_key;

#define F(m) offsetof(dp_topology, m)
static const num_key num_keys[] = {
    {"bus_bandwidth_GBps", F(bus_bw), 1e-6, MAX_GBPS, 1e9},
    {"latency_us", F(latency_s), 0, MAX_US, 1e-6},
    {"host_call_us", F(host_call_s), 0, MAX_US, 1e-6},
    {"launch_us", F(launch_s), 0, MAX_US, 1e-6},
    {"host_bandwidth_GBps", F(host_bw), 1e-6, MAX_GBPS, 1e9},
    {"host_latency_us", F(host_latency_s), 0, MAX_US, 1e-6},
    {"sync_jitter_us", F(sync_jitter_s), 0, MAX_US, 1e-6},
    {"touch_allreduce_us_per_MB", F(touch_allreduce_s_per_byte), 0, MAX_US_PER_MB, 1e-12},
    {"touch_broadcast_us_per_MB", F(touch_broadcast_s_per_byte), 0, MAX_US_PER_MB, 1e-12},
};
#undef F

/* One line of a topology file (its key not seen before). */
static dp_status topology_line(dp_sf_reader *r, void *ctx) {
    dp_topology *t = ctx;
    const char *key = r->w[0], *val = r->w[1];
    double d = 0;
    int ki, is_bw = 0;
    for (size_t i = 0; i < sizeof num_keys / sizeof *num_keys; i++)
        if (strcmp(key, num_keys[i].key) == 0) {
            DP_TRY(dp_sf_real(r, 1, num_keys[i].lo, num_keys[i].hi, &d));
            *(double *)((char *)t + num_keys[i].off) = d * num_keys[i].scale;
            return DP_OK;
        }
    if (strcmp(key, "name") == 0) return dp_sf_name(r, 1, t->name, sizeof t->name);
    if (strcmp(key, "device") == 0) return dp_sf_name(r, 1, t->device, sizeof t->device);
    if (strcmp(key, "algorithm") == 0) {
        if (strcmp(val, "ring") == 0) t->algorithm = DP_ALGO_RING;
        else if (strcmp(val, "tree") == 0) t->algorithm = DP_ALGO_TREE;
        else return dp_fail(DP_ERR_FORMAT, "%s:%d: algorithm: expected ring or tree, got '%s'", r->origin, r->line, val);
        return DP_OK;
    }
    if (strcmp(key, "devices") == 0) return dp_sf_int(r, 1, 1, MAX_DEVICES, &t->devices);
    if (strcmp(key, "p2p") == 0) return dp_sf_int(r, 1, 0, 1, &t->p2p);
    if (strcmp(key, "shared_memory_bus") == 0) return dp_sf_int(r, 1, 0, 1, &t->shared_memory_bus);
    if ((ki = kind_key(key, &is_bw)) >= 0) {
        DP_TRY(dp_sf_real(r, 1, is_bw ? 1e-6 : 0, is_bw ? MAX_GBPS : MAX_US, &d));
        if (is_bw) t->kind_bw[ki] = d * 1e9;
        else t->kind_latency_s[ki] = d * 1e-6;
        return DP_OK;
    }
    return dp_fail(DP_ERR_FORMAT,
                   "%s:%d: unknown key '%s' (expected name, device, devices, algorithm, bus_bandwidth_GBps, "
                   "latency_us, host_call_us, launch_us, host_bandwidth_GBps, host_latency_us, p2p, "
                   "shared_memory_bus, sync_jitter_us, touch_allreduce_us_per_MB, touch_broadcast_us_per_MB, "
                   "{broadcast,reduce,gather,scatter}_latency_us, {broadcast,reduce,gather,scatter}_bandwidth_GBps)",
                   r->origin, r->line, key);
}

dp_status dp_topology_parse(const char *text, const char *origin, dp_topology *t) {
    memset(t, 0, sizeof *t);
    snprintf(t->device, sizeof t->device, "device");
    t->devices = 8;
    DP_TRY(dp_sf_read_pairs(text, origin, topology_line, t));
    for (int i = 0; i < DP_TOPO_KINDS; i++)
        if (t->kind_latency_s[i] > 0 && !t->kind_bw[i])
            return dp_fail(DP_ERR_FORMAT, "%s: %s_latency_us without %s_bandwidth_GBps (give both, or neither to use the "
                           "all-reduce's)", origin, kind_keys[i], kind_keys[i]);
    if (!t->bus_bw) return dp_fail(DP_ERR_FORMAT, "%s: bus_bandwidth_GBps is missing (the one number a topology needs)", origin);
    if (!t->host_bw) t->host_bw = t->bus_bw; /* no separate host link: the same link */
    if (!t->name[0]) snprintf(t->name, sizeof t->name, "%s", origin);
    return DP_OK;
}

dp_status dp_topology_split(const char *flag, const char *list, char (*items)[DP_TOPO_ITEM], int max, int *n) {
    *n = 0;
    if (!*list) return dp_fail(DP_ERR_USAGE, "%s: no topology named; give one or more, comma-separated (pcie4,nvlink4)", flag);
    for (const char *p = list;; p++) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (!len)
            return dp_fail(DP_ERR_USAGE, "%s: '%s' has an empty item; name topologies separated by single commas "
                           "(pcie4,nvlink4)", flag, list);
        if (*n == max) return dp_fail(DP_ERR_USAGE, "%s: at most %d topologies", flag, max);
        if (len >= DP_TOPO_ITEM)
            return dp_fail(DP_ERR_USAGE, "%s: a topology name or path of more than %d characters", flag, DP_TOPO_ITEM - 1);
        memcpy(items[*n], p, len);
        items[(*n)++][len] = '\0';
        if (!comma) return DP_OK;
        p = comma;
    }
}

dp_status dp_topology_load_list(const char *flag, const char *list, dp_topology *topos, int max, int *n) {
    char (*items)[DP_TOPO_ITEM] = calloc((size_t)(max > 0 ? max : 1), sizeof *items);
    if (!items) return dp_fail(DP_ERR_NOMEM, "%s: out of memory", flag);
    int k = 0;
    dp_status s = dp_topology_split(flag, list, items, max, &k);
    *n = 0;
    for (int i = 0; i < k && s == DP_OK; i++)
        if ((s = dp_topology_load(items[i], &topos[i])) == DP_OK) *n = i + 1;
    free(items);
    return s;
}

int dp_topology_file(const char *name_or_path, char *path, size_t n) {
    if (strchr(name_or_path, '/') || is_file(name_or_path)) return snprintf(path, n, "%s", name_or_path) < (int)n;
    return dp_preset_find(name_or_path, path, n);
}

dp_status dp_topology_load(const char *name_or_path, dp_topology *t) {
    char path[512];
    if (!dp_topology_file(name_or_path, path, sizeof path)) {
        char dirs[2048];
        dp_topology_dirs(dirs, sizeof dirs);
        return dp_fail(DP_ERR_USAGE, "topology '%s': no such file, and no preset of that name in %s (presets: pcie4, "
                       "pcie4-p2p, nvlink3, nvlink4, ib, host)", name_or_path, dirs);
    }
    char *text = NULL;
    DP_TRY(read_text(path, &text));
    dp_status s = dp_topology_parse(text, path, t);
    free(text);
    if (s == DP_OK) snprintf(t->path, sizeof t->path, "%s", path);
    return s;
}

typedef struct {
    const dp_topology *t;
    const char *comment;
} save_job;

static dp_status write_topology(FILE *f, void *ctx) {
    const save_job *j = ctx;
    const dp_topology *t = j->t;
    if (j->comment) fprintf(f, "%s", j->comment);
    fprintf(f, "name %s\ndevice %s\ndevices %d\nalgorithm %s\n", t->name, t->device, t->devices,
            t->algorithm == DP_ALGO_TREE ? "tree" : "ring");
    fprintf(f, "bus_bandwidth_GBps %.6g\nlatency_us %.6g\nhost_call_us %.6g\nlaunch_us %.6g\n", t->bus_bw / 1e9,
            t->latency_s * 1e6, t->host_call_s * 1e6, t->launch_s * 1e6);
    fprintf(f, "host_bandwidth_GBps %.6g\nhost_latency_us %.6g\np2p %d\nshared_memory_bus %d\n", t->host_bw / 1e9,
            t->host_latency_s * 1e6, t->p2p, t->shared_memory_bus);
    for (int i = 0; i < DP_TOPO_KINDS; i++)
        if (t->kind_bw[i] > 0)
            fprintf(f, "%s_latency_us %.6g\n%s_bandwidth_GBps %.6g\n", kind_keys[i], t->kind_latency_s[i] * 1e6,
                    kind_keys[i], t->kind_bw[i] / 1e9);
    fprintf(f, "sync_jitter_us %.6g\ntouch_allreduce_us_per_MB %.6g\ntouch_broadcast_us_per_MB %.6g\n",
            t->sync_jitter_s * 1e6, t->touch_allreduce_s_per_byte * 1e12, t->touch_broadcast_s_per_byte * 1e12);
    return ferror(f) ? dp_fail(DP_ERR_IO, "write failed: %s", strerror(errno)) : DP_OK;
}

dp_status dp_topology_save(const char *flag, const char *path, const dp_topology *t, const char *comment) {
    save_job j = {t, comment};
    return dp_atomic_write(flag, path, write_topology, &j);
}
