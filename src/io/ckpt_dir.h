/* ckpt_dir.h: a --checkpoint directory: files ckpt-<step, 10 digits>.safetensors, the newest
 * first, the oldest removed beyond --keep. */
#ifndef DP_CKPT_DIR_H
#define DP_CKPT_DIR_H

#include <stddef.h>

#include "core/status.h"

/* The file name of the checkpoint after `step` optimizer steps. */
void dp_ckpt_dir_path(const char *dir, long step, char *buf, size_t n);
/* The checkpoint files in dir, newest (highest step) first; *paths is malloc'd (free with
 * dp_ckpt_dir_free). A missing directory is an error naming it. */
dp_status dp_ckpt_dir_list(const char *dir, char ***paths, int *n);
void dp_ckpt_dir_free(char **paths, int n);
/* 1 when a file of this name (no directory) in a checkpoint directory is one the directory's
 * writer replaces, prunes or locks: a checkpoint, a writer's temporary file, the lock. */
int dp_ckpt_dir_owns(const char *name);
/* Removes all but the newest `keep` checkpoints and any temporary file a killed writer left. */
dp_status dp_ckpt_dir_prune(const char *dir, int keep);

/* Locks dir for this process (a POSIX record lock on DIR/.dptrain.lock, which the kernel drops when
 * the process ends, also on NFS) and writes "pid P on host H since T" into it. Another run holding
 * it is refused naming that line: two runs on one directory would interleave checkpoints and
 * delete each other's temporary files. *fd stays open for the lock's lifetime. The file is made
 * writable by whoever may write the directory (its mode follows the directory's group/other write
 * bits, whatever the umask), and a stale one we cannot write (another user's, from a finished run
 * or an older dptrain) is replaced: a stale lock never blocks a run. */
dp_status dp_ckpt_dir_lock(const char *flag, const char *dir, int *fd);
void dp_ckpt_dir_unlock(int fd);

#endif
