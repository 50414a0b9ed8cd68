/* launch_affinity.h: whether the CPUs a launcher left a rank suit its GPU and NCCL's threads.
 * Two placements slow an NCCL run without failing it, so they are warned about, never refused:
 *  - the rank bound to CPUs of one socket while its GPU hangs off the other (Open MPI's
 *    --map-by socket alternates sockets while local rank i takes GPU i): every copy crosses the
 *    socket link. The GPU's CPUs are the kernel's /sys/bus/pci/devices/<bus id>/local_cpulist.
 *  - the rank bound to fewer than DP_NCCL_MIN_CPUS CPUs (Open MPI binds each of -np 2 to one core
 *    by default): the main thread, NCCL's proxy thread (which moves SHM and network transfers),
 *    the watchdog and the data loaders share them.
 * Anything unreadable or malformed (no sysfs, a GPU without a NUMA node's list) is no warning. */
#ifndef DP_LAUNCH_AFFINITY_H
#define DP_LAUNCH_AFFINITY_H

#include <stddef.h>

#define DP_CPUSET_MAX 8192 /* CPUs past this are not compared (the check says nothing) */
#define DP_NCCL_MIN_CPUS 4

typedef struct {
    unsigned long long w[DP_CPUSET_MAX / 64];
} dp_cpuset;

/* Parses a kernel cpulist ("0-15,32-47", "3", a trailing newline allowed) into *s: the number of
 * CPUs, or -1 when it is empty, malformed or names a CPU >= DP_CPUSET_MAX. */
int dp_cpuset_parse(const char *list, dp_cpuset *s);

/* The calling process's affinity mask: the number of CPUs in it, -1 when it cannot be read or
 * reaches past DP_CPUSET_MAX. */
int dp_cpuset_of_self(dp_cpuset *s);

/* Writes *s as a cpulist ("0-15,32-47") into buf, cut with "..." when it does not fit. */
void dp_cpuset_format(const dp_cpuset *s, char *buf, size_t cap);

/* Whether two sets share a CPU. */
int dp_cpuset_overlap(const dp_cpuset *a, const dp_cpuset *b);

/* The NUMA check for `rank` (the NCCL rank), whose GPU has PCI bus id `bus_id` (CUDA's
 * "0000:1B:00.0" or NVML's "00000000:1B:00.0"), against the CPUs `mine`: reads
 * <root>/sys/bus/pci/devices/<bus id, lower case, 4-digit domain>/local_cpulist ("" for the real
 * system; tests give a directory) and, when it shares no CPU with `mine`, writes the one-line
 * warning into msg and returns 1; else 0 (msg ""). */
int dp_numa_check(const char *root, int rank, const char *bus_id, const dp_cpuset *mine, char *msg, size_t cap);

/* The binding check for `rank` under --backend nccl: returns 1 with the one-line warning in msg
 * when `mine` holds fewer than DP_NCCL_MIN_CPUS CPUs, else 0 (msg ""). */
int dp_binding_check(int rank, const dp_cpuset *mine, char *msg, size_t cap);

#endif
