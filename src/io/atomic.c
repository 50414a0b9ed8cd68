/* atomic.c: mkstemp + fsync + rename + directory fsync, and the start-of-run path checks. */
#include "io/atomic.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Splits path into its directory ("." when none) and base name. */
static void split(const char *path, char *dir, size_t dn, const char **base) {
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(dir, dn, ".");
        *base = path;
    } else if (slash == path) {
        snprintf(dir, dn, "/");
        *base = slash + 1;
    } else {
        snprintf(dir, dn, "%.*s", (int)(slash - path), path);
        *base = slash + 1;
    }
}

static dp_status check_target(const char *flag, const char *path) {
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return dp_fail(DP_ERR_USAGE, "%s %s: exists and is not a regular file (%s); give a file name to write",
                       flag, path, S_ISLNK(st.st_mode)    ? "a symbolic link"
                       : S_ISDIR(st.st_mode)  ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)"
                                              : "a device or special file");
    return DP_OK;
}

static int make_temp(const char *path, char *tmp, size_t n) {
    char dir[PATH_MAX];
    const char *base;
    split(path, dir, sizeof dir, &base);
    if (snprintf(tmp, n, "%s/.%s.XXXXXX", dir, base) >= (int)n) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return mkstemp(tmp);
}

static void sync_dir(const char *path) {
    char dir[PATH_MAX];
    const char *base;
    split(path, dir, sizeof dir, &base);
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd); /* best effort: some file systems refuse fsync on directories */
        close(fd);
    }
}

dp_status dp_atomic_write(const char *flag, const char *path, dp_write_fn fill, void *ctx) {
    DP_TRY(check_target(flag, path));
    char tmp[PATH_MAX];
    int fd = make_temp(path, tmp, sizeof tmp);
    if (fd < 0) return dp_fail(DP_ERR_IO, "%s %s: cannot create a temporary file next to it: %s", flag, path, strerror(errno));
    /* mkstemp makes 0600: give the file the target's mode, or what the umask allows a new file */
    struct stat old;
    mode_t mode;
    if (stat(path, &old) == 0) mode = old.st_mode & 07777;
    else {
        mode_t mask = umask(0);
        umask(mask);
        mode = 0666 & ~mask;
    }
    fchmod(fd, mode);
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return dp_fail(DP_ERR_IO, "%s %s: %s", flag, path, strerror(e));
    }
    dp_status s = fill(f, ctx);
    int e = 0;
    if (s == DP_OK && (fflush(f) != 0 || fsync(fd) != 0)) e = errno;
    if (fclose(f) != 0 && s == DP_OK && !e) e = errno;
    if (s == DP_OK && !e && rename(tmp, path) != 0) e = errno;
    if (s != DP_OK || e) {
        char msg[DP_ERROR_MAX];
        snprintf(msg, sizeof msg, "%s", s != DP_OK ? dp_last_error() : strerror(e));
        unlink(tmp);
        return dp_fail(DP_ERR_IO, "%s %s: writing failed (%s); the previous file, if any, is kept", flag, path, msg);
    }
    sync_dir(path);
    return DP_OK;
}

dp_status dp_check_output_file(const char *flag, const char *path) {
    if (!*path) return dp_fail(DP_ERR_USAGE, "%s: empty file name", flag);
    DP_TRY(check_target(flag, path));
    char dir[PATH_MAX];
    const char *base;
    split(path, dir, sizeof dir, &base);
    if (!*base) return dp_fail(DP_ERR_USAGE, "%s %s: names a directory; give a file name", flag, path);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return dp_fail(DP_ERR_USAGE, "%s %s: directory %s does not exist", flag, path, dir);
    /* the only reliable test (root ignores permission bits; read-only mounts do not): create a file */
    char tmp[PATH_MAX];
    int fd = make_temp(path, tmp, sizeof tmp);
    if (fd < 0)
        return dp_fail(DP_ERR_USAGE, "%s %s: cannot create files in %s: %s", flag, path, dir, strerror(errno));
    close(fd);
    unlink(tmp);
    return DP_OK;
}

dp_status dp_check_output_dir(const char *flag, const char *dir) {
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno != ENOENT || mkdir(dir, 0777) != 0)
            return dp_fail(DP_ERR_USAGE, "%s %s: cannot create the directory: %s", flag, dir, strerror(errno));
    } else if (!S_ISDIR(st.st_mode)) {
        return dp_fail(DP_ERR_USAGE, "%s %s: exists and is not a directory", flag, dir);
    }
    char probe[PATH_MAX];
    snprintf(probe, sizeof probe, "%s/probe", dir);
    char tmp[PATH_MAX];
    int fd = make_temp(probe, tmp, sizeof tmp);
    if (fd < 0) return dp_fail(DP_ERR_USAGE, "%s %s: cannot create files there: %s", flag, dir, strerror(errno));
    close(fd);
    unlink(tmp);
    return DP_OK;
}

int dp_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    char da[PATH_MAX], db[PATH_MAX], ra[PATH_MAX], rb[PATH_MAX];
    const char *ba, *bb;
    split(a, da, sizeof da, &ba);
    split(b, db, sizeof db, &bb);
    if (!realpath(da, ra) || !realpath(db, rb)) return strcmp(a, b) == 0;
    return strcmp(ra, rb) == 0 && strcmp(ba, bb) == 0;
}
