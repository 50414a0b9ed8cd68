/* gpu_plugin.c: finds and loads the GPU plugin (gpu_plugin.h) on first use. */
#include "backends/gpu_plugin.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/elf_whole.h"
#include "core/exe_dir.h"
#include "dp_config.h"

/* Defined where a program links the plugin's objects (the test suites); absent from dptrain. */
extern const dp_gpu_plugin dp_gpu_plugin_table __attribute__((weak));

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static const dp_gpu_plugin *loaded;

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static dp_status check_table(const char *what, const char *path, const dp_gpu_plugin *p) {
    if (strcmp(p->version, DP_VERSION) != 0 || p->abi != DP_GPU_PLUGIN_ABI)
        return dp_fail(DP_ERR_UNSUPPORTED, "%s: %s is from another build of dptrain (%s, this one is %s); install "
                       "the two from one build", what, path, p->version, DP_VERSION);
    return DP_OK;
}

static dp_status load(const char *what, const dp_gpu_plugin **out) {
    /* what runs without the plugin */
    const char *instead = strncmp(what, "--backend", 9) == 0 ? "--backend sim or mpi" : "--device cpu";
    char dir[3072], paths[2][4096];
    dp_exe_dir(dir, sizeof dir);
    if (!dir[0]) return dp_fail(DP_ERR_UNSUPPORTED, "%s: cannot load %s: the executable's directory is unknown "
                                "(/proc/self/exe); use %s", what, DP_GPU_PLUGIN_FILE, instead);
    snprintf(paths[0], sizeof paths[0], "%s/%s", dir, DP_GPU_PLUGIN_FILE); /* the build tree */
    snprintf(paths[1], sizeof paths[1], "%s/%s/%s", dir, DP_PLUGIN_RELDIR, DP_GPU_PLUGIN_FILE); /* installed */
    const char *path = is_file(paths[0]) ? paths[0] : is_file(paths[1]) ? paths[1] : NULL;
    if (!path)
        return dp_fail(DP_ERR_UNSUPPORTED, "%s: cannot load the CUDA parts of this build: %s is neither in %s nor in "
                       "%s/%s; install dptrain with it, or use %s", what, DP_GPU_PLUGIN_FILE, dir, dir,
                       DP_PLUGIN_RELDIR, instead);
    char cut[256];
    if (dp_elf_whole(path, cut, sizeof cut) != 0)
        return dp_fail(DP_ERR_UNSUPPORTED, "%s: cannot load %s: %s; install dptrain with it again, or use %s", what,
                       path, cut, instead);
    /* global: the NCCL test double and the CUDA libraries find each other's symbols as they did
       when the executable linked them */
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        const char *why = dlerror();
        return dp_fail(DP_ERR_UNSUPPORTED, "%s: cannot load %s: %s; it needs the CUDA libraries dptrain was built "
                       "with (LD_LIBRARY_PATH may name their directory), or use %s", what, path,
                       why ? why : "unknown reason", instead);
    }
    const dp_gpu_plugin *p = dlsym(h, "dp_gpu_plugin_table");
    if (!p) return dp_fail(DP_ERR_UNSUPPORTED, "%s: %s is not dptrain's CUDA plugin (no dp_gpu_plugin_table)", what, path);
    DP_TRY(check_table(what, path, p));
    *out = p;
    return DP_OK; /* never unloaded: the CUDA libraries outlive every device */
}

dp_status dp_gpu_plugin_get(const char *what, const dp_gpu_plugin **out) {
    *out = NULL;
    if (&dp_gpu_plugin_table) { /* linked in */
        *out = &dp_gpu_plugin_table;
        return DP_OK;
    }
    pthread_mutex_lock(&mu);
    dp_status s = DP_OK;
    if (!loaded) s = load(what, &loaded);
    *out = loaded;
    pthread_mutex_unlock(&mu);
    return s;
}

dp_status dp_gpu_plugin_device(const char *name, const dp_dev_kind **out) {
    *out = NULL;
    char what[64];
    snprintf(what, sizeof what, "--device %s", name);
    const dp_gpu_plugin *p;
    DP_TRY(dp_gpu_plugin_get(what, &p));
    for (int i = 0; p->devices[i]; i++)
        if (strcmp(p->devices[i]->name, name) == 0) return *out = p->devices[i], DP_OK;
    return dp_fail(DP_ERR_UNSUPPORTED, "%s: the GPU plugin has no such device", what);
}

dp_status dp_gpu_plugin_backend(const char *name, const dp_gpu_backend **out) {
    *out = NULL;
    char what[64];
    snprintf(what, sizeof what, "--backend %s", name);
    const dp_gpu_plugin *p;
    DP_TRY(dp_gpu_plugin_get(what, &p));
    for (int i = 0; p->backends[i]; i++)
        if (strcmp(p->backends[i]->name, name) == 0) return *out = p->backends[i], DP_OK;
    return dp_fail(DP_ERR_UNSUPPORTED, "%s: the GPU plugin has no such backend", what);
}
