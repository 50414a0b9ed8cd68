/* topology.h: what the overhead model knows about a machine it predicts for: per-link bandwidth
 * and latency (alpha, beta), the collective algorithm, host costs per collective call and per
 * kernel launch, the device count, and the host link that DataParallel's scatter and gather
 * cross. Read from small text files (sim/presets/, or any path): "key value  # source" per line. */
#ifndef DP_SIM_TOPOLOGY_H
#define DP_SIM_TOPOLOGY_H

#include <stddef.h>

#include "core/status.h"

typedef enum { DP_ALGO_RING = 0, DP_ALGO_TREE = 1 } dp_algo;

typedef struct {
    char name[64];
    char path[512];         /* the file it was read from */
    char device[64];        /* what one device is ("H100 SXM", "CPU core") */
    int devices;            /* the most devices the machine has (predictions above it are flagged) */
    dp_algo algorithm;
    double bus_bw;          /* bytes/s: ring bus bandwidth per device (nccl-tests busbw) */
    double latency_s;       /* alpha: seconds per ring step / message */
    double host_call_s;     /* host time per collective call (NCCL enqueue, MPI call) */
    double launch_s;        /* host time per kernel launch (0 on the CPU: no launches) */
    double host_bw;         /* bytes/s: one device's link to host memory (PCIe) for DP scatter/gather */
    double host_latency_s;
    int p2p;                /* 1: device-to-device copies go direct; 0: staged through host memory */
    int shared_memory_bus;  /* 1: the devices share one memory bus (CPU processes): compute per device
                               is taken from a profile measured with that many devices busy */
} dp_topology;

/* Reads `name_or_path`: a path (contains '/' or names an existing file) or a preset name looked
 * up in the preset directories (dp_topology_dirs). Fails naming the file and line. */
dp_status dp_topology_load(const char *name_or_path, dp_topology *t);
/* Parses the text of a topology file; `origin` names it in messages. */
dp_status dp_topology_parse(const char *text, const char *origin, dp_topology *t);
/* Writes t in the file format, with `comment` lines first. */
dp_status dp_topology_save(const char *path, const dp_topology *t, const char *comment);
/* Where presets are looked for, in order: $DPTRAIN_PRESETS, <exe dir>/presets,
 * <exe dir>/../share/dptrain/presets, the source tree's sim/presets/ (baked in at build time).
 * Writes them ':'-separated into buf (for messages). */
void dp_topology_dirs(char *buf, size_t n);
/* Reads a whole text file into *out (malloc'd, NUL-terminated). */
dp_status dp_read_text_file(const char *path, char **out);
/* Finds a file named `name` in the preset directories; 0 if none. */
int dp_preset_find(const char *name, char *path, size_t n);

#endif
