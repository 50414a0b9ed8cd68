#include "testutil.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <math.h>
#include <zlib.h>

#include "exec/devices.h"
#include "io/safetensors.h"
#include "kernels/device.h"

const char *tu_path(const char *name) {
    static char buf[8][512];
    static int next;
    const char *dir = getenv("DP_TEST_TMP");
    if (!dir || !*dir) dir = "/tmp";
    char *p = buf[next++ % 8];
    snprintf(p, 512, "%s/%d-%s", dir, (int)getpid(), name);
    return p;
}

void tu_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

void tu_write_gz(const char *path, const void *data, size_t n) {
    gzFile g = gzopen(path, "wb");
    assert_non_null(g);
    if (n) assert_int_equal(gzwrite(g, data, (unsigned)n), (int)n);
    assert_int_equal(gzclose(g), Z_OK);
}

static int run_captured(char **out, const char *cmd) {
    char full[8400];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    assert_non_null(p);
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += got;
        if (cap - len < 1024) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
    }
    buf[len] = '\0';
    int st = pclose(p);
    if (out) *out = buf; else free(buf);
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return -1;
}

int tu_sh(char **out, const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return run_captured(out, cmd);
}

int tu_run_dptrain(char **out, const char *args_fmt, ...) {
    const char *bin = getenv("DPTRAIN");
    if (!bin) bin = "./dptrain";
    char args[4096], cmd[8192];
    va_list ap;
    va_start(ap, args_fmt);
    vsnprintf(args, sizeof args, args_fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s %s", bin, args);
    return run_captured(out, cmd);
}

/* A port that was free a moment ago, for a dptrain rank 0 to listen on. Not one the kernel hands
 * out (its ephemeral range, 32768 and up by default, also serves every outgoing connection, which
 * could take it before rank 0 binds it): a random one below that range that binds now, from the
 * pid and the clock so that tests running at once pick different ones. */
int tu_free_port(void) {
    unsigned seed = (unsigned)getpid() * 2654435761u ^ (unsigned)time(NULL);
    for (int tries = 0; tries < 64; tries++) {
        seed = seed * 1103515245u + 12345u;
        const int port = 20000 + (int)((seed >> 8) % 12000u);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        assert_true(fd >= 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                                .sin_port = htons((uint16_t)port)};
        const int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
        close(fd);
        if (ok) return port;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0); /* a crowded range: the kernel's choice */
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = 0};
    socklen_t len = sizeof a;
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

int tu_contains(const char *haystack, const char *needle) { return haystack && strstr(haystack, needle) != NULL; }

double tu_rel_diff(const float *a, const float *b, size_t n) {
    double maxd = 0, maxb = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > maxd || isnan(d)) maxd = isnan(d) ? INFINITY : d;
        if (fabs((double)b[i]) > maxb) maxb = fabs((double)b[i]);
    }
    return maxd / maxb;
}

float *tu_ckpt_params(const char *path, size_t *n) {
    dp_st_file f;
    if (dp_st_read(path, &f) != DP_OK) fail_msg("%s", dp_last_error());
    size_t total = 0;
    for (int i = 0; i < f.n; i++)
        if (f.tensors[i].dtype == DP_ST_F32 && strncmp(f.tensors[i].name, "optimizer.", 10) != 0)
            total += f.tensors[i].nbytes / sizeof(float);
    float *p = malloc((total ? total : 1) * sizeof *p);
    assert_non_null(p);
    size_t k = 0;
    for (int i = 0; i < f.n; i++)
        if (f.tensors[i].dtype == DP_ST_F32 && strncmp(f.tensors[i].name, "optimizer.", 10) != 0) {
            memcpy(p + k, f.tensors[i].data, f.tensors[i].nbytes);
            k += f.tensors[i].nbytes / sizeof(float);
        }
    dp_st_free(&f);
    *n = total;
    return p;
}

const char *tu_ckpt_diff(const char *a, const char *b) {
    static char msg[512];
    dp_st_file fa, fb;
    if (dp_st_read(a, &fa) != DP_OK) return snprintf(msg, sizeof msg, "%s", dp_last_error()), msg;
    if (dp_st_read(b, &fb) != DP_OK) {
        dp_st_free(&fa);
        return snprintf(msg, sizeof msg, "%s", dp_last_error()), msg;
    }
    const char *r = NULL;
    if (fa.n != fb.n) r = (snprintf(msg, sizeof msg, "%d tensors vs %d", fa.n, fb.n), msg);
    for (int i = 0; i < fa.n && !r; i++) {
        const dp_st_tensor *x = &fa.tensors[i], *y = dp_st_find(&fb, x->name);
        if (!y) r = (snprintf(msg, sizeof msg, "%s missing in %s", x->name, b), msg);
        else if (x->nbytes != y->nbytes || memcmp(x->data, y->data, x->nbytes) != 0)
            r = (snprintf(msg, sizeof msg, "tensor %s differs between %s and %s", x->name, a, b), msg);
    }
    dp_st_free(&fa), dp_st_free(&fb);
    return r;
}

dp_status tu_status_in_child(dp_status (*fn)(void *), void *arg, char *msg, size_t cap, long *maxrss_kib) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        const dp_status s = fn(arg);
        char out[DP_ERROR_MAX + 8];
        int n = snprintf(out, sizeof out, "%d %s", (int)s, s == DP_OK ? "" : dp_last_error());
        _exit(write(fds[1], out, (size_t)n) == n ? 0 : 98);
    }
    close(fds[1]);
    char buf[DP_ERROR_MAX + 8];
    size_t got = 0;
    for (ssize_t r; (r = read(fds[0], buf + got, sizeof buf - 1 - got)) > 0;) got += (size_t)r;
    buf[got] = '\0';
    close(fds[0]);
    int st;
    struct rusage ru;
    assert_int_equal(wait4(pid, &st, 0, &ru), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail_msg("the child ended with status 0x%x: %s", st, buf);
    if (maxrss_kib) *maxrss_kib = ru.ru_maxrss;
    const char *sp = strchr(buf, ' ');
    snprintf(msg, cap, "%s", sp ? sp + 1 : "");
    return (dp_status)atoi(buf);
}

void tu_put(const char *root, const char *rel, const char *text) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
    tu_write_file(path, text, strlen(text));
}

const char *tu_fresh_dir(const char *name) {
    const char *r = tu_path(name);
    tu_sh(NULL, "rm -rf '%s'", r);
    assert_int_equal(mkdir(r, 0755), 0);
    return r;
}

const char *tu_fake_cgroup_v2(const char *name) {
    const char *r = tu_fresh_dir(name);
    tu_put(r, "proc/self/mountinfo", "25 1 0:22 / / rw - ext4 /dev/sda1 rw\n"
                                     "41 31 0:38 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n");
    tu_put(r, "proc/self/cgroup", "0::/job/step\n");
    return r;
}

int tu_have_gpu(void) {
    dp_dev *d;
    if (dp_dev_open("cuda", 0, 0, NULL, &d) != DP_OK) {
        fprintf(stderr, "skipped: %s\n", dp_last_error());
        return 0;
    }
    fprintf(stderr, "device: %s\n", d->desc);
    dp_dev_close(d);
    return 1;
}
