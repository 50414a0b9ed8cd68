/* sysmem.h: how much memory this process may still use, and the regular-file check every
 * reader makes before it reads (a directory or a FIFO given as a data file or checkpoint must
 * fail with a message, never hang or report a nonsense size). */
#ifndef DP_SYSMEM_H
#define DP_SYSMEM_H

#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>

#include "core/status.h"

typedef struct {
    unsigned long long bytes;   /* the smallest of the limits below that is known; 0: unknown */
    char source[400];           /* which limit that is, for messages ("MemAvailable", "cgroup memory.max") */
} dp_mem_avail;

/* MemAvailable from /proc/meminfo (else sysconf's free pages), bounded by the headroom of the
 * process's own cgroups, v2 or v1, at every level up to the top (core/cgroup.h), and by the
 * room left under RLIMIT_AS and RLIMIT_DATA (ulimit -v, -d). */
void dp_memory_available(dp_mem_avail *out);
/* Fails with DP_ERR_NOMEM when `bytes` for `what` cannot fit, naming both figures: checked
 * before a large allocation, because Linux overcommits and the OOM killer would end the
 * process later with no message. */
dp_status dp_memory_check(unsigned long long bytes, const char *what);
/* "1.5 GiB", "12.0 MiB", "512 bytes" into buf. */
const char *dp_format_bytes(unsigned long long bytes, char *buf, size_t cap);

/* Opens path for reading without blocking (O_NONBLOCK, then cleared) and refuses anything but
 * a regular file: "PATH: is a directory, expected a regular file" / "is a FIFO (named pipe)...".
 * `flag` ("--load", or NULL) prefixes the message. On success *fd is open and *st filled. */
dp_status dp_open_regular(const char *path, const char *flag, int *fd, struct stat *st);
/* The same, as a stdio stream for reading. */
dp_status dp_fopen_regular(const char *path, const char *flag, FILE **f, struct stat *st);

#endif
