/* cpu_count.c: the usable cores, from the affinity mask and the cgroup CPU quota. */
#include "core/cpu_count.h"

#include <sched.h>
#include <stdio.h>
#include <unistd.h>

#include "core/cgroup.h"

/* Cores in the affinity mask, for any CPU count (a fixed cpu_set_t stops at 1024). */
static int mask_cores(void) {
    for (int n = 1024; n <= 1 << 18; n *= 2) {
        cpu_set_t *set = CPU_ALLOC(n);
        if (!set) break;
        const size_t size = CPU_ALLOC_SIZE(n);
        if (sched_getaffinity(0, size, set) == 0) {
            const int c = CPU_COUNT_S(size, set);
            CPU_FREE(set);
            return c > 0 ? c : 1;
        }
        CPU_FREE(set);
    }
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int)online : 1;
}

void dp_cpu_count_find(const char *root, int affinity, dp_cpu_count *out) {
    out->affinity = affinity > 0 ? affinity : mask_cores();
    char where[sizeof out->source - 64];
    out->quota = dp_cgroup_cpu_limit(root, where, sizeof where);
    if (out->quota > 0 && out->quota < out->affinity) {
        out->cores = out->quota;
        snprintf(out->source, sizeof out->source, "cgroup quota %s", where);
    } else {
        out->cores = out->affinity;
        snprintf(out->source, sizeof out->source, "affinity mask");
    }
}
