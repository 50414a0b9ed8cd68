/* devices.c: the devices --device can name. The build lists the ones it linked in, the ones in the
 * GPU plugin, loaded when first named (backends/gpu_plugin.h), and the ones it left out, with how to
 * get them (generated dp_devices.h: one X(name, ...) per device folder, whose kind is
 * dp_<name>_device); tests may add their own. */
#include "exec/devices.h"

#include <stdio.h>
#include <string.h>

#include "backends/gpu_plugin.h"
#include "dp_devices.h"

#define X(n, what) extern const dp_dev_kind dp_##n##_device;
DP_DEVICE_KINDS
#undef X

#define DP_MAX_DEVICE_KINDS 16
#define X(n, what) &dp_##n##_device,
static const dp_dev_kind *kinds[DP_MAX_DEVICE_KINDS] = {DP_DEVICE_KINDS};
#undef X

#define X(n, what) #n,
const char *const dp_device_names[] = {DP_DEVICE_KINDS DP_PLUGIN_DEVICE_KINDS DP_DEVICES_LEFT_OUT NULL};
static const char *const in_plugin[] = {DP_PLUGIN_DEVICE_KINDS NULL};
static const char *const left_out[] = {DP_DEVICES_LEFT_OUT NULL};
#undef X
#define X(n, what) what,
static const char *const left_out_how[] = {DP_DEVICES_LEFT_OUT NULL};
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

/* i of name in list, or -1 */
static int index_in(const char *const *list, const char *name) {
    for (int i = 0; list[i]; i++)
        if (strcmp(list[i], name) == 0) return i;
    return -1;
}

dp_status dp_dev_open(const char *name, int ordinal, int tf32, const dp_wait_policy *waits, dp_dev **out) {
    *out = NULL;
    const dp_dev_kind *kind = find(name);
    if (kind) return kind->open(ordinal, tf32, waits, out);
    if (index_in(in_plugin, name) >= 0) { /* loaded at the first open */
        DP_TRY(dp_gpu_plugin_device(name, &kind));
        return kind->open(ordinal, tf32, waits, out);
    }
    const int gone = index_in(left_out, name);
    if (gone >= 0) return dp_fail(DP_ERR_UNSUPPORTED, "--device %s: %s", name, left_out_how[gone]);
    char known[256] = "";
    for (int i = 0; i < n_kinds(); i++) {
        const size_t at = strlen(known);
        snprintf(known + at, sizeof known - at, "%s%s", i ? ", " : "", kinds[i]->name);
    }
    for (int i = 0; in_plugin[i]; i++) {
        const size_t at = strlen(known);
        snprintf(known + at, sizeof known - at, ", %s", in_plugin[i]);
    }
    return dp_fail(DP_ERR_USAGE, "--device: unknown device '%s' (this build has: %s)", name, known);
}

void dp_dev_close(dp_dev *d) {
    if (d && d != dp_dev_cpu()) d->close(d);
}

void dp_dev_describe(char *buf, size_t n) {
#define X(name, what) #name " (" what ")",
    static const char *const built[] = {DP_DEVICE_KINDS DP_PLUGIN_DEVICE_KINDS NULL};
#undef X
    buf[0] = '\0';
    int k = 0;
    for (int i = 0; built[i]; i++, k++) {
        const size_t at = strlen(buf);
        snprintf(buf + at, n - at, "%s%s", k ? ", " : "", built[i]);
    }
    for (int i = 0; left_out[i]; i++, k++) {
        const size_t at = strlen(buf);
        snprintf(buf + at, n - at, "%s%s (not built)", k ? ", " : "", left_out[i]);
    }
}

int dp_dev_host_memory(const dp_dev *d) { return !d || (d->caps & DP_CAP_HOST_MEMORY) != 0; }
