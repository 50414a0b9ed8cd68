/* cgroup.h: the memory and the CPU time this process may use under its own control groups. Inside Slurm,
 * systemd or a container the limit is on the job's group, not the machine: a run that ignores it
 * is OOM-killed (exit 137) with no message. Both cgroup versions: v2 (memory.max,
 * memory.current) and v1's memory controller (memory.limit_in_bytes, memory.usage_in_bytes). */
#ifndef DP_CGROUP_H
#define DP_CGROUP_H

#include <stddef.h>

/* The smallest headroom (limit less usage, the reclaimable inactive file cache not counted as
 * used) over every level from this process's own group up to the top of each cgroup mount it is
 * in; 0 when no level has a limit. `where` (may be NULL) gets the limit file of that level.
 * `root` prefixes every path read ("" for the real system; a test gives a directory holding
 * proc/self/cgroup, proc/self/mountinfo and the mounted trees). */
unsigned long long dp_cgroup_headroom(const char *root, char *where, size_t n);

/* The tightest CPU quota over the same levels (v2 cpu.max "QUOTA PERIOD", "max PERIOD" for none;
 * v1's cpu controller, cpu.cfs_quota_us (-1 for none) over cpu.cfs_period_us), in cores rounded up;
 * 0 when no level sets one or a file holds anything else. `where` gets that level's file and its
 * numbers. */
int dp_cgroup_cpu_limit(const char *root, char *where, size_t n);

/* The parsers of the limit files' text (a file's first bytes, NUL-terminated; tests/fuzz/fuzz_cgroup.c).
 * parse_number: the decimal number at the start (memory.max, memory.current, v1's *_in_bytes), 0 for
 * "max" or anything not a number, ULLONG_MAX past its range (read as no limit). parse_stat: the number
 * after the last "KEY " line of a memory.stat, 0 if none. parse_pair: 1 when the text is "A B" (b
 * given: cpu.max) or "A" (b NULL: cpu.cfs_quota_us, cpu.cfs_period_us), each in 1..2^50, then a newline
 * or the end; 0 otherwise ("max 100000", "-1"). */
unsigned long long dp_cgroup_parse_number(const char *text);
unsigned long long dp_cgroup_parse_stat(const char *text, const char *key);
int dp_cgroup_parse_pair(const char *text, long long *a, long long *b);

#endif
