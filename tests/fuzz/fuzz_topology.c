/* fuzz_topology.c: any bytes as a topology file and as a compute profile (the parsers behind
 * --predict, --topology and --compute). Must never crash or hit undefined behaviour (an int
 * overflow, an index past a table); refusing is fine. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "sim/profile.h"
#include "sim/topology.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    static dp_profile *p;
    if (!p) p = malloc(sizeof *p);
    if (!text || !p) abort();
    memcpy(text, data, size);
    text[size] = '\0';
    dp_topology t;
    if (dp_topology_parse(text, "fuzz", &t) == DP_OK && !(t.devices >= 1 && t.bus_bw > 0 && t.bus_bw < 1e300)) abort();
    dp_profile_parse(text, "fuzz", p);
    free(text);
    return 0;
}

void dp_fuzz_seeds(void (*add)(const uint8_t *data, size_t size)) {
    static const char *const seeds[] = {
        "name nvlink4\ndevice H100-SXM\ndevices 8  # HGX\nalgorithm ring\nbus_bandwidth_GBps 370\nlatency_us 2\n"
        "host_call_us 5\nlaunch_us 4\nhost_bandwidth_GBps 50\nhost_latency_us 10\np2p 1\nshared_memory_bus 0\n"
        "gather_latency_us 3\ngather_bandwidth_GBps 20\nsync_jitter_us 1.5\ntouch_allreduce_us_per_MB 12\n",
        "model lenet\ndevice cpu\ninput_floats 784\nclasses 10\nparams 61706\nbuffers 0\nnodes 2\n"
        "overhead 4 2 1.5e-04\nnode 0 conv1 1 2\nnode 1 fc1 1 2\nbuckets 1\nbucket 0 61706 0\n"
        "row 64 1 30 1.0e-05 2.0e-05 3.0e-06\ntime 0 1.0e-04 2.0e-04\ntime 1 3.0e-05 4.0e-05\n",
    };
    for (size_t i = 0; i < sizeof seeds / sizeof *seeds; i++) add((const uint8_t *)seeds[i], strlen(seeds[i]));
}
