/* fuzz_topology.c: any bytes as a topology file (--predict, --topology, calibrate's output read
 * back) and as a --predict / --topology list. Must never crash or hit undefined behaviour (an int
 * overflow, an index past a table); refusing is fine. An accepted file has each key once (a
 * second one is refused) and sane numbers; an accepted list has no empty item and is the input
 * split at its commas. Seeds: the topology presets in sim/presets, a key given twice, lists. */
#include <stdlib.h>
#include <string.h>

#include "dp_config.h"
#include "fuzz.h"
#include "seed_files.h"
#include "sim/topology.h"

static void check_list(const char *text) {
    static char items[8][DP_TOPO_ITEM];
    int n = 0;
    if (dp_topology_split("--topology", text, items, 8, &n) != DP_OK) return;
    /* the items joined with commas are the input again, and none is empty */
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(items[i]);
        if (!len || strchr(items[i], ',') || strncmp(text + at, items[i], len) != 0) abort();
        at += len;
        if (text[at] != (i + 1 < n ? ',' : '\0')) abort();
        at++;
    }
    if (n < 1) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) abort();
    memcpy(text, data, size);
    text[size] = '\0';
    size = strlen(text); /* what the parsers see: the text up to a NUL */
    dp_topology t;
    if (dp_topology_parse(text, "fuzz", &t) == DP_OK) {
        if (!(t.devices >= 1 && t.bus_bw > 0 && t.bus_bw < 1e300)) abort();
        /* the same file with its first line again refused: each key once */
        const char *nl = strchr(text, '\n');
        size_t first = nl ? (size_t)(nl - text) + 1 : size;
        char *twice = malloc(size + first + 2);
        if (!twice) abort();
        memcpy(twice, text, first);
        if (!nl) twice[first++] = '\n';
        memcpy(twice + first, text, size + 1);
        dp_topology u;
        int has_key = 0; /* the first line sets something (not blank or a comment) */
        for (const char *c = text; c < text + first && *c != '#'; c++) has_key |= *c != ' ' && *c != '\t' && *c != '\r' && *c != '\n';
        if (has_key && dp_topology_parse(twice, "fuzz", &u) == DP_OK) abort();
        free(twice);
    }
    check_list(text);
    free(text);
    return 0;
}

void dp_fuzz_seeds(void (*add)(const uint8_t *data, size_t size)) {
    static const char *const presets[] = {"pcie4", "pcie4-p2p", "pcie3", "nvlink3", "nvlink4", "ib", "host"};
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) dp_fuzz_seed_file(add, DP_SOURCE_PRESETS, presets[i]);
    static const char *const seeds[] = {
        "name nvlink4\ndevice H100-SXM\ndevices 8  # HGX\nalgorithm ring\nbus_bandwidth_GBps 370\nlatency_us 2\n"
        "host_call_us 5\nlaunch_us 4\nhost_bandwidth_GBps 50\nhost_latency_us 10\np2p 1\nshared_memory_bus 0\n"
        "gather_latency_us 3\ngather_bandwidth_GBps 20\nsync_jitter_us 1.5\ntouch_allreduce_us_per_MB 12\n",
        "bus_bandwidth_GBps 10\nlatency_us 1\nlatency_us 2\n", /* a key twice */
        "pcie4,nvlink4,./my.topo", "pcie4,", "a,,b",
    };
    for (size_t i = 0; i < sizeof seeds / sizeof *seeds; i++) add((const uint8_t *)seeds[i], strlen(seeds[i]));
}
