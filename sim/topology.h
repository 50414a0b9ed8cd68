/* topology.h: what the overhead model knows about a machine it predicts for: per-link bandwidth
 * and latency (alpha, beta), the collective algorithm, host costs per collective call and per
 * kernel launch, the device count, and the host link that DataParallel's scatter and gather
 * cross. Read from small text files (sim/presets/, or any path): "key value  # source" per line,
 * each key at most once (sim/settings_file.h). */
#ifndef DP_SIM_TOPOLOGY_H
#define DP_SIM_TOPOLOGY_H

#include <stddef.h>

#include "core/status.h"

typedef enum { DP_ALGO_RING = 0, DP_ALGO_TREE = 1 } dp_algo;

#define DP_TOPO_KINDS 4

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
    /* DataParallel's collectives, each with its own fit (dptrain calibrate): broadcast, reduce,
       gather, scatter (dp_topology_kind_index); a bandwidth of 0 (the key absent) means the
       all-reduce's latency_us and bus_bandwidth_GBps, as before */
    double kind_latency_s[DP_TOPO_KINDS], kind_bw[DP_TOPO_KINDS];
    double sync_jitter_s;   /* sigma of a rank's arrival at a synchronisation point: each one that
                               follows the ranks' own compute waits sigma x E[max of N normals] */
    double touch_allreduce_s_per_byte; /* DDP: the optimizer's first pass over gradients the all-reduce
                                          just wrote, beyond the same pass in cache */
    double touch_broadcast_s_per_byte; /* DP: the master's optimizer writing parameters the replicas
                                          just read (the step's broadcast), beyond the same pass again */
} dp_topology;

/* The index into kind_latency_s / kind_bw of a dp_coll_kind (backends/backend.h): broadcast 0,
 * reduce 1, gather 2, scatter 3; -1 for a kind without its own fit. */
int dp_topology_kind_index(int kind);

/* Reads `name_or_path`: a path (contains '/' or names an existing file) or a preset name looked
 * up in the preset directories (dp_topology_dirs). Fails naming the file and line. */
dp_status dp_topology_load(const char *name_or_path, dp_topology *t);
/* The file a topology item names into path (n bytes): the item itself when it has a '/' or names
 * a file, else the preset of that name. 0 when it names neither. */
int dp_topology_file(const char *name_or_path, char *path, size_t n);
/* A --predict / --topology list: names or paths separated by single commas; an empty item
 * ("pcie4,", "a,,b", ""), more than `max` items or one of DP_TOPO_ITEM characters or more is
 * refused naming `flag`. dp_topology_load_list then loads each (*n: those loaded). */
#define DP_TOPO_ITEM 512
dp_status dp_topology_split(const char *flag, const char *list, char (*items)[DP_TOPO_ITEM], int max, int *n);
dp_status dp_topology_load_list(const char *flag, const char *list, dp_topology *topos, int max, int *n);
/* Parses the text of a topology file (each key at most once); `origin` names it in messages. */
dp_status dp_topology_parse(const char *text, const char *origin, dp_topology *t);
/* Writes t in the file format, with `comment` lines first, atomically (io/atomic.h: a regular file
 * only, never through a symlink or into a device); `flag` names the option in messages. */
dp_status dp_topology_save(const char *flag, const char *path, const dp_topology *t, const char *comment);
/* Where presets are looked for, in order: $DPTRAIN_PRESETS, <exe dir>/presets,
 * <exe dir>/../share/dptrain/presets, the source tree's sim/presets/ (baked in at build time).
 * Writes them ':'-separated into buf (for messages). */
void dp_topology_dirs(char *buf, size_t n);
/* Reads a whole text file into *out (malloc'd, NUL-terminated): a regular file of at most 16 MiB
 * holding printable ASCII outside '#' comments. */
dp_status dp_read_text_file(const char *path, char **out);
/* Finds a file named `name` in the preset directories; 0 if none. */
int dp_preset_find(const char *name, char *path, size_t n);

#endif
