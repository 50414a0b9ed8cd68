/* exe_dir.c: the running executable's directory (exe_dir.h), from /proc/self/exe. */
#include "core/exe_dir.h"

#include <string.h>
#include <unistd.h>

void dp_exe_dir(char *buf, size_t n) {
    buf[0] = '\0';
    if (n < 2) return;
    ssize_t k = readlink("/proc/self/exe", buf, n - 1);
    if (k <= 0) {
        buf[0] = '\0';
        return;
    }
    buf[k] = '\0';
    char *slash = strrchr(buf, '/');
    if (slash) *slash = '\0';
}
