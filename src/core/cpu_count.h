/* cpu_count.h: how many cores this process may keep busy, and which limit says so: the CPU
 * affinity mask (taskset, a launcher's binding, a container's cpuset) and the CPU quota of its
 * cgroups (core/cgroup.h), whichever is smaller. nproc counts the mask only; a container given
 * 2 CPUs' quota on a 64-core host would otherwise start 64 threads that are throttled in turn. */
#ifndef DP_CPU_COUNT_H
#define DP_CPU_COUNT_H

typedef struct {
    int cores;        /* at least 1 */
    int affinity;     /* cores in the affinity mask */
    int quota;        /* the cgroup quota in cores, rounded up; 0: none */
    char source[600]; /* for the log: "affinity mask" or the quota's file and numbers */
} dp_cpu_count;

/* `root` prefixes the cgroup files read ("" for the real system; a test gives a directory holding
 * proc/self/cgroup, proc/self/mountinfo and the trees); `affinity` > 0 stands in for the mask
 * (tests), 0 reads it. */
void dp_cpu_count_find(const char *root, int affinity, dp_cpu_count *out);

#endif
