/* devices.c: the devices --device can name. The build lists the ones it linked in
 * (generated dp_devices.h: one X(name) per device folder, whose kind is dp_<name>_device), the ones
 * in the GPU plugin, loaded when first named (backends/gpu_plugin.h), and the ones it left out, with
 * how to get them; tests may add their own. */
#include "exec/devices.h"

#include <stdio.h>
#include <string.h>

#include "backends/gpu_plugin.h"
#include "dp_config.h"
#include "dp_devices.h"

#define X(n) extern const dp_dev_kind dp_##n##_device;
DP_DEVICE_KINDS
#undef X

#define DP_MAX_DEVICE_KINDS 16
#define X(n) &dp_##n##_device,
static const dp_dev_kind *kinds[DP_MAX_DEVICE_KINDS] = {DP_DEVICE_KINDS};
#undef X

static int n_kinds(void) {
    int n = 0;
    while (n < DP_MAX_DEVICE_KINDS && kinds[n]) n++;
    return n;
}

dp_status dp_dev_register(const dp_dev_kind *kind) {
    const int n = n_kinds();
    for (int i = 0; i < n; i++)
        if (strcmp(kinds[i]->name, kind->name) == 0) {
            if (kinds[i] == kind) return DP_OK;
            return dp_fail(DP_ERR_INTERNAL, "device '%s' is registered twice", kind->name);
        }
    if (n == DP_MAX_DEVICE_KINDS) return dp_fail(DP_ERR_INTERNAL, "too many device kinds (%d)", n);
    kinds[n] = kind;
    return DP_OK;
}

static const dp_dev_kind *find(const char *name) {
    for (int i = 0; i < n_kinds(); i++)
        if (strcmp(kinds[i]->name, name) == 0) return kinds[i];
    return NULL;
}

dp_status dp_dev_open(const char *name, int ordinal, int tf32, const dp_wait_policy *waits, dp_dev **out) {
    *out = NULL;
    const int n = n_kinds();
    const dp_dev_kind *kind = find(name);
    if (kind) return kind->open(ordinal, tf32, waits, out);
#if DP_HAVE_CUDA /* in the plugin, loaded at the first open */
    if (strcmp(name, "cuda") == 0) {
        const dp_gpu_plugin *p;
        DP_TRY(dp_gpu_plugin_get("--device cuda", &p));
        return p->cuda->open(ordinal, tf32, waits, out);
    }
#endif
    /* a device this build left out: say how to get it */
    static const char *left_out[] = {DP_DEVICES_LEFT_OUT NULL};
    const size_t len = strlen(name);
    for (int i = 0; left_out[i]; i++)
        if (strncmp(left_out[i], name, len) == 0 && left_out[i][len] == ':')
            return dp_fail(DP_ERR_UNSUPPORTED, "--device %s", left_out[i]);
    char known[256] = "";
    for (int i = 0; i < n; i++) {
        const size_t at = strlen(known);
        snprintf(known + at, sizeof known - at, "%s%s", i ? ", " : "", kinds[i]->name);
    }
    if (DP_HAVE_CUDA && !find("cuda")) strncat(known, ", cuda", sizeof known - strlen(known) - 1);
    return dp_fail(DP_ERR_USAGE, "--device: unknown device '%s' (this build has: %s)", name, known);
}

void dp_dev_close(dp_dev *d) {
    if (d && d != dp_dev_cpu()) d->close(d);
}

int dp_dev_host_memory(const dp_dev *d) { return !d || (d->caps & DP_CAP_HOST_MEMORY) != 0; }
