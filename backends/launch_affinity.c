/* launch_affinity.c: the NUMA and binding checks of an NCCL rank (launch_affinity.h). */
#include "backends/launch_affinity.h"

#include <ctype.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void set_cpu(dp_cpuset *s, int c) { s->w[c / 64] |= 1ULL << (c % 64); }
static int has_cpu(const dp_cpuset *s, int c) { return (int)(s->w[c / 64] >> (c % 64) & 1); }

static int count(const dp_cpuset *s) {
    int n = 0;
    for (size_t i = 0; i < sizeof s->w / sizeof *s->w; i++) n += __builtin_popcountll(s->w[i]);
    return n;
}

/* A CPU number at *p (digits only, below DP_CPUSET_MAX): advances *p; -1 when there is none. */
static int cpu_at(const char **p) {
    if (!isdigit((unsigned char)**p)) return -1;
    errno = 0;
    char *end;
    const long v = strtol(*p, &end, 10);
    if (errno || v >= DP_CPUSET_MAX) return -1;
    *p = end;
    return (int)v;
}

int dp_cpuset_parse(const char *list, dp_cpuset *s) {
    memset(s, 0, sizeof *s);
    if (!list) return -1;
    const char *p = list;
    for (;;) {
        const int lo = cpu_at(&p);
        int hi = lo;
        if (lo < 0) return -1;
        if (*p == '-') {
            p++;
            if ((hi = cpu_at(&p)) < lo) return -1;
        }
        for (int c = lo; c <= hi; c++) set_cpu(s, c);
        if (*p != ',') break;
        p++;
    }
    while (*p == '\n') p++;
    return *p ? -1 : count(s);
}

int dp_cpuset_of_self(dp_cpuset *s) {
    memset(s, 0, sizeof *s);
    /* a fixed cpu_set_t stops at 1024 CPUs; the kernel refuses a mask shorter than its own */
    for (int n = 1024; n <= DP_CPUSET_MAX; n *= 2) {
        cpu_set_t *set = CPU_ALLOC(n);
        if (!set) return -1;
        const size_t size = CPU_ALLOC_SIZE(n);
        const int ok = sched_getaffinity(0, size, set) == 0;
        if (ok)
            for (int c = 0; c < n; c++)
                if (CPU_ISSET_S(c, size, set)) set_cpu(s, c);
        CPU_FREE(set);
        if (ok) return count(s) > 0 ? count(s) : -1;
    }
    return -1;
}

void dp_cpuset_format(const dp_cpuset *s, char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = '\0';
    for (int c = 0; c < DP_CPUSET_MAX; c++) {
        if (!has_cpu(s, c)) continue;
        int hi = c;
        while (hi + 1 < DP_CPUSET_MAX && has_cpu(s, hi + 1)) hi++;
        char part[24];
        if (hi == c) snprintf(part, sizeof part, "%s%d", at ? "," : "", c);
        else snprintf(part, sizeof part, "%s%d-%d", at ? "," : "", c, hi);
        if (at + strlen(part) + 5 > cap) { /* room kept for ",..." and the terminator */
            if (at + 5 <= cap) snprintf(buf + at, cap - at, "%s...", at ? "," : "");
            return;
        }
        at += (size_t)snprintf(buf + at, cap - at, "%s", part);
        c = hi;
    }
}

int dp_cpuset_overlap(const dp_cpuset *a, const dp_cpuset *b) {
    for (size_t i = 0; i < sizeof a->w / sizeof *a->w; i++)
        if (a->w[i] & b->w[i]) return 1;
    return 0;
}

/* sysfs names a PCI device "0000:1b:00.0": a 4-digit domain, lower case. CUDA writes upper case
 * and NVML an 8-digit domain. 0 when bus_id is not such an id. */
static int sysfs_bus_id(const char *bus_id, char *out, size_t cap) {
    unsigned dom, bus, dev, fn;
    char tail;
    if (!bus_id || sscanf(bus_id, "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) != 4) return 0;
    if (dom > 0xffff || bus > 0xff || dev > 0x1f || fn > 7) return 0;
    snprintf(out, cap, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
    return 1;
}

int dp_numa_check(const char *root, int rank, const char *bus_id, const dp_cpuset *mine, char *msg, size_t cap) {
    char id[16], path[512], text[4096];
    msg[0] = '\0';
    if (!sysfs_bus_id(bus_id, id, sizeof id) || count(mine) == 0) return 0;
    if (snprintf(path, sizeof path, "%s/sys/bus/pci/devices/%s/local_cpulist", root ? root : "", id) >= (int)sizeof path)
        return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    const size_t n = fread(text, 1, sizeof text - 1, f);
    const int whole = feof(f) && !ferror(f);
    fclose(f);
    text[n] = '\0';
    dp_cpuset gpu;
    if (!whole || dp_cpuset_parse(text, &gpu) <= 0 || dp_cpuset_overlap(&gpu, mine)) return 0;
    char mine_s[160], gpu_s[160];
    dp_cpuset_format(mine, mine_s, sizeof mine_s);
    dp_cpuset_format(&gpu, gpu_s, sizeof gpu_s);
    snprintf(msg, cap,
             "warning: --backend nccl: rank %d runs on CPUs %s, but its GPU (PCI %s) is attached to CPUs %s (%s): "
             "every copy between them crosses sockets; bind each rank near its GPU or not at all "
             "(mpirun --map-by ppr:N:node --bind-to none, or torchrun --numa-binding=node)",
             rank, mine_s, id, gpu_s, path);
    return 1;
}

int dp_binding_check(int rank, const dp_cpuset *mine, char *msg, size_t cap) {
    const int n = count(mine);
    msg[0] = '\0';
    if (n <= 0 || n >= DP_NCCL_MIN_CPUS) return 0;
    char cpus[64];
    dp_cpuset_format(mine, cpus, sizeof cpus);
    snprintf(msg, cap,
             "warning: --backend nccl: rank %d may run on %d CPU%s only (its affinity mask: %s), shared by its "
             "main thread, NCCL's proxy thread, the watchdog and the data loaders; give each rank at least %d "
             "(mpirun --bind-to none, or --map-by ppr:N:node:pe=K with K >= %d)",
             rank, n, n == 1 ? "" : "s", cpus, DP_NCCL_MIN_CPUS, DP_NCCL_MIN_CPUS);
    return 1;
}
