/* atomic.h: writing an output file so that a reader sees the old file or the whole new one,
 * never a part, and checking output paths before a run starts.
 * The temporary file is made by mkstemp (O_EXCL: a planted file or symlink at the temporary name
 * cannot redirect the write) in the target's own directory, written, fsync'd and renamed over the
 * target; then the directory is fsync'd so the rename survives a crash. */
#ifndef DP_ATOMIC_H
#define DP_ATOMIC_H

#include <stdio.h>

#include "core/status.h"

typedef dp_status (*dp_write_fn)(FILE *f, void *ctx);

/* Writes path through fill(f, ctx). `flag` names the option in messages ("--save"). On failure the
 * previous file at path is untouched and the temporary file is removed. */
dp_status dp_atomic_write(const char *flag, const char *path, dp_write_fn fill, void *ctx);

/* Checks at start that `path` can be written by dp_atomic_write: its directory exists and a file can
 * be created there, and path is not something other than a regular file (a device, a directory, a
 * symlink). Nothing is left behind. */
dp_status dp_check_output_file(const char *flag, const char *path);
/* Checks (creating it if missing, one level) that dir is a directory files can be created in. */
dp_status dp_check_output_dir(const char *flag, const char *dir);
/* 1 if a and b name the same file (same inode, or for files not yet there the same directory and name). */
int dp_same_file(const char *a, const char *b);

#endif
