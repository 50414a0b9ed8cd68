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
        size_t len = strlen(nm);
        if (nm[0] == '.' && len == 1 + strlen("ckpt-0000000000.safetensors") + 7 && step_of(nm + 1) < 0 &&
            strncmp(nm + 1, "ckpt-", 5) == 0 && nm[len - 7] == '.') {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", dir, nm);
            unlink(path);
        }
    }
    closedir(d);
    return DP_OK;
}

dp_status dp_ckpt_dir_lock(const char *flag, const char *dir, int *fd_out) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/.dptrain.lock", dir) >= (int)sizeof path)
        return dp_fail(DP_ERR_USAGE, "%s %s: path too long", flag, dir);
    /* O_NOFOLLOW: a symlink planted at the lock's name must not make us truncate its target */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0666);
    if (fd < 0) return dp_fail(DP_ERR_IO, "%s %s: cannot open the lock file %s: %s", flag, dir, path, strerror(errno));
    /* a regular file of one link only: a hard link planted at the name must not make us truncate another file */
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
        close(fd);
        return dp_fail(DP_ERR_IO, "%s %s: the lock file %s is not a plain file of its own (a link or a device?); "
                       "remove it", flag, dir, path);
    }
    struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(fd, F_SETLK, &lk) != 0) {
        int e = errno;
        if (e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS) { /* no record locks there: run, saying what is unguarded */
            fprintf(stderr, "dptrain: warning: %s %s: the file system does not support locks (%s); a second run on "
                    "this directory would not be refused\n", flag, dir, strerror(e));
            close(fd);
            *fd_out = -1;
            return DP_OK;
        }
        char holder[256] = "", shown[300];
        ssize_t k = e == EACCES || e == EAGAIN ? pread(fd, holder, sizeof holder - 1, 0) : -1;
        close(fd);
        if (k < 0)
            return dp_fail(DP_ERR_IO, "%s %s: cannot lock %s: %s", flag, dir, path, strerror(e));
        holder[k] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        return dp_fail(DP_ERR_USAGE, "%s %s: another run is using this directory (%s): two runs would interleave their "
                       "checkpoints; wait for it to end, or give another directory", flag, dir,
                       holder[0] ? dp_printable(holder, shown, sizeof shown) : "its lock file names no holder");
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
