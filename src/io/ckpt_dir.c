/* ckpt_dir.c: listing and pruning the checkpoints of a --checkpoint directory. */
#include "io/ckpt_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/printable.h"

void dp_ckpt_dir_path(const char *dir, long step, char *buf, size_t n) {
    snprintf(buf, n, "%s/ckpt-%010ld.safetensors", dir, step);
}

static long step_of(const char *name) {
    long step;
    char tail[32];
    if (strlen(name) != strlen("ckpt-0000000000.safetensors")) return -1;
    if (sscanf(name, "ckpt-%10ld%31s", &step, tail) != 2 || strcmp(tail, ".safetensors") != 0) return -1;
    return step;
}

/* .ckpt-<10 digits>.safetensors.XXXXXX: a checkpoint writer's temporary file (atomic.c) */
static int is_temp(const char *nm) {
    size_t len = strlen(nm);
    return nm[0] == '.' && len == 1 + strlen("ckpt-0000000000.safetensors") + 7 && nm[len - 7] == '.' &&
           strncmp(nm + 1, "ckpt-", 5) == 0;
}

int dp_ckpt_dir_owns(const char *name) {
    return step_of(name) >= 0 || is_temp(name) || strcmp(name, ".dptrain.lock") == 0;
}

typedef struct {
    long step;
    char *path;
} item;

static int newest_first(const void *a, const void *b) {
    long x = ((const item *)a)->step, y = ((const item *)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;
}

dp_status dp_ckpt_dir_list(const char *dir, char ***paths, int *n_out) {
    *paths = NULL, *n_out = 0;
    DIR *d = opendir(dir);
    if (!d) return dp_fail(DP_ERR_IO, "%s: cannot read the checkpoint directory: %s", dir, strerror(errno));
    item *it = NULL;
    int n = 0, cap = 0;
    dp_status s = DP_OK;
    for (struct dirent *e; (e = readdir(d)) != NULL && s == DP_OK;) {
        long step = step_of(e->d_name);
        if (step < 0) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            item *bigger = realloc(it, (size_t)cap * sizeof *it);
            if (!bigger) {
                s = dp_fail(DP_ERR_NOMEM, "%s: out of memory listing checkpoints", dir);
                break;
            }
            it = bigger;
        }
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        it[n].path = malloc(len);
        if (!it[n].path) {
            s = dp_fail(DP_ERR_NOMEM, "%s: out of memory listing checkpoints", dir);
            break;
        }
        snprintf(it[n].path, len, "%s/%s", dir, e->d_name);
        it[n++].step = step;
    }
    closedir(d);
    char **p = s == DP_OK ? calloc((size_t)n + 1, sizeof *p) : NULL;
    if (s == DP_OK && !p) s = dp_fail(DP_ERR_NOMEM, "%s: out of memory listing checkpoints", dir);
    if (s != DP_OK) {
        for (int i = 0; i < n; i++) free(it[i].path);
        free(it);
        return s;
    }
    if (n > 1) qsort(it, (size_t)n, sizeof *it, newest_first);
    for (int i = 0; i < n; i++) p[i] = it[i].path;
    free(it);
    *paths = p, *n_out = n;
    return DP_OK;
}

void dp_ckpt_dir_free(char **paths, int n) {
    for (int i = 0; paths && i < n; i++) free(paths[i]);
    free(paths);
}

dp_status dp_ckpt_dir_prune(const char *dir, int keep) {
    char **p;
    int n;
    DP_TRY(dp_ckpt_dir_list(dir, &p, &n));
    for (int i = keep; i < n; i++) unlink(p[i]);
    dp_ckpt_dir_free(p, n);
    /* temporary files of a writer killed mid-write (atomic.c names them .<name>.XXXXXX) */
    DIR *d = opendir(dir);
    if (!d) return DP_OK;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const char *nm = e->d_name;
        if (is_temp(nm)) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", dir, nm);
            unlink(path);
        }
    }
    closedir(d);
    return DP_OK;
}

/* "another run is using this directory", naming the holder's line read from fd. */
static dp_status held_by_other(const char *flag, const char *dir, int fd) {
    char holder[256] = "", shown[300];
    ssize_t k = pread(fd, holder, sizeof holder - 1, 0);
    holder[k > 0 ? k : 0] = '\0';
    holder[strcspn(holder, "\n")] = '\0';
    return dp_fail(DP_ERR_USAGE, "%s %s: another run is using this directory (%s): two runs would interleave their "
                   "checkpoints; wait for it to end, or give another directory", flag, dir,
                   holder[0] ? dp_printable(holder, shown, sizeof shown) : "its lock file names no holder");
}

/* A plain file of one link only: a symlink or hard link planted at the name must not make us write another file. */
static dp_status plain_file(const char *flag, const char *dir, const char *path, int fd, struct stat *st) {
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode) || st->st_nlink != 1)
        return dp_fail(DP_ERR_IO, "%s %s: the lock file %s is not a plain file of its own (a link or a device?); "
                       "remove it", flag, dir, path);
    return DP_OK;
}

/* The lock file cannot be opened for writing: another user's, left by a finished run (their umask made it
 * 0644). Stale unless someone holds a lock on it: a read lock, which a read-only descriptor can take, tells
 * (and keeps anyone from write-locking it meanwhile); a stale one is removed, for the caller to create its own. */
static dp_status replace_foreign(const char *flag, const char *dir, const char *path) {
    int rfd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    struct stat st;
    if (rfd < 0 && errno == EACCES && lstat(path, &st) == 0) /* an older dptrain's file under umask 077 */
        return dp_fail(DP_ERR_IO, "%s %s: the lock file %s belongs to another user (uid %ld) and this user can neither "
                       "write nor read it, so cannot tell whether a run holds it; ask them to remove it, or give "
                       "another directory", flag, dir, path, (long)st.st_uid);
    if (rfd < 0) return dp_fail(DP_ERR_IO, "%s %s: cannot open the lock file %s: %s", flag, dir, path, strerror(errno));
    dp_status s = plain_file(flag, dir, path, rfd, &st);
    struct flock lk = {.l_type = F_RDLCK, .l_whence = SEEK_SET};
    if (s == DP_OK && fcntl(rfd, F_SETLK, &lk) != 0) {
        int e = errno;
        s = e == EACCES || e == EAGAIN ? held_by_other(flag, dir, rfd)
                                       : dp_fail(DP_ERR_IO, "%s %s: cannot lock %s: %s", flag, dir, path, strerror(e));
    }
    /* nobody can take it while we hold the read lock: remove it; a run that opened it before finds, once it
       holds its lock, that the name is no longer its file, and starts again (dp_ckpt_dir_lock) */
    if (s == DP_OK && unlink(path) != 0)
        s = dp_fail(DP_ERR_IO, "%s %s: the lock file %s of a finished run belongs to another user (uid %ld) and cannot "
                    "be replaced (%s); ask them to remove it, or give another directory", flag, dir, path,
                    (long)st.st_uid, strerror(errno));
    close(rfd); /* whoever locks the old file now finds another file (or none) at the name and starts again */
    return s;
}

dp_status dp_ckpt_dir_lock(const char *flag, const char *dir, int *fd_out) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/.dptrain.lock", dir) >= (int)sizeof path)
        return dp_fail(DP_ERR_USAGE, "%s %s: path too long", flag, dir);
    /* who may write the directory may replace the lock file anyway: they get to write (and lock) it too, so that
       another user's run in a shared directory is not blocked by a finished one's file, whatever the umask */
    struct stat dst;
    const mode_t mode = 0644 | (stat(dir, &dst) == 0 ? dst.st_mode & 0022 : 0);
    int fd = -1;
    struct stat st;
    for (int attempt = 0; fd < 0; attempt++) {
        if (attempt == 5)
            return dp_fail(DP_ERR_IO, "%s %s: the lock file %s keeps being replaced by another process; try again",
                           flag, dir, path);
        /* O_NOFOLLOW: a symlink planted at the lock's name must not make us truncate its target. An existing
           file is opened without O_CREAT: in a sticky world-writable directory (fs.protected_regular) O_CREAT
           refuses another user's file even when its mode lets us write it */
        fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        int creating = fd < 0 && errno == ENOENT;
        if (creating) {
            fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, mode);
            if (fd < 0 && errno == EEXIST) continue; /* made meanwhile by another run: open that one */
        }
        if (fd < 0 && errno == EACCES && !creating) { /* a file there that we may not write */
            DP_TRY(replace_foreign(flag, dir, path));
            continue;
        }
        if (fd < 0)
            return dp_fail(DP_ERR_IO, "%s %s: cannot %s the lock file %s: %s", flag, dir, creating ? "create" : "open",
                           path, strerror(errno));
        dp_status s = plain_file(flag, dir, path, fd, &st);
        if (s != DP_OK) {
            close(fd);
            return s;
        }
        if (st.st_uid == geteuid() && (st.st_mode & 07777) != mode) fchmod(fd, mode); /* ours: umask-independent */
        struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        if (fcntl(fd, F_SETLK, &lk) != 0) {
            int e = errno;
            /* no record locks there: run, saying what is unguarded */
            if (e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS) {
                fprintf(stderr, "dptrain: warning: %s %s: the file system does not support locks (%s); a second run on "
                        "this directory would not be refused\n", flag, dir, strerror(e));
                close(fd);
                *fd_out = -1;
                return DP_OK;
            }
            s = e == EACCES || e == EAGAIN
                    ? held_by_other(flag, dir, fd)
                    : dp_fail(DP_ERR_IO, "%s %s: cannot lock %s: %s", flag, dir, path, strerror(e));
            close(fd);
            return s;
        }
        /* the file we locked must still be the one at the name: another user's run may have replaced a stale
           one between our open and our lock (replace_foreign); then lock the new one */
        struct stat now;
        if (stat(path, &now) != 0 || now.st_dev != st.st_dev || now.st_ino != st.st_ino) close(fd), fd = -1;
    }
    char host[128] = "unknown", line[256];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = '\0';
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    int n = snprintf(line, sizeof line, "pid %ld on host %s since %04d-%02d-%02d %02d:%02d:%02d UTC\n", (long)getpid(),
                     host, tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)n, 0) != n) {
        int e = errno;
        close(fd);
        return dp_fail(DP_ERR_IO, "%s %s: cannot write the lock file %s: %s", flag, dir, path, strerror(e));
    }
    *fd_out = fd;
    return DP_OK;
}

void dp_ckpt_dir_unlock(int fd) {
    if (fd >= 0) close(fd); /* the lock goes with the descriptor; the file stays (removing it would race) */
}
