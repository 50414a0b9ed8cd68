/* nccl_memory.h: the device memory NCCL takes after the start-time memory check has read the free
 * memory, and the NCCL setting dptrain changes to keep it small. No NCCL needed: the arithmetic is
 * tested on any machine (tests/test_memory.c).
 *
 * The check (src/exec/memory.c) compares the run's arenas and activations plus the device's reserve
 * (kernels/device.h: reserved, 256 MiB for the CUDA device's cuDNN handle, plans, graphs) with the free
 * memory read after ncclCommInitRankConfig. NCCL allocates more later, lazily: the buffers of each
 * point-to-point connection at the first send or receive to that peer, the ring and tree buffers at
 * the first collective that uses them (NCCL_RUNTIME_CONNECT, the default since 2.22), each of them
 * per channel and protocol (NCCL_BUFFSIZE 4 MiB for Simple, about 4.7 MiB for LL128, 0.5 MiB for LL),
 * and NVLS buffers (NVLink SHARP, NVSwitch systems), which can take GiBs. A run sized near the limit
 * would pass the check and then fail at its first bucket with NCCL's "out of memory". So
 * --backend nccl adds an allowance to the reserve, and turns NVLS off unless the user set it:
 * dptrain's all-reduce and reduce are point-to-point (the canonical-order sum), which NVLS does not
 * serve, and its broadcasts and all-gathers are small or once per run. */
#ifndef DP_NCCL_MEMORY_H
#define DP_NCCL_MEMORY_H

#include "core/status.h"

/* Sets NCCL_NVLS_ENABLE=0 unless the environment has it; returns whether NVLS may be on (the user
 * set it to something other than 0). Call before the first NCCL call that reads the environment. */
int dp_nccl_env_defaults(void);

/* The allowance at `world` ranks: 0 at one rank (no peer, every collective returns at once);
 * else 512 MiB for the ring and tree connections (up to 32 channels, two neighbours, three protocols)
 * and the point-to-point connections within a node, 16 MiB for each peer (two channels per peer
 * across machines, send and receive), and 1 GiB more when NVLS may be on. An estimate from NCCL's
 * default buffer sizes, not a measurement. override_mib (DPTRAIN_NCCL_RESERVE_MIB; NULL or "" when
 * unset) replaces it with that many MiB; one that is not a whole number of MiB is a usage error. */
dp_status dp_nccl_allowance(int world, int nvls, const char *override_mib, unsigned long long *bytes);

/* The allowance from a measurement (backends/nccl_warmup.c: the device memory NCCL took while the
 * warm-up at start connected every peer and ran each kind of collective once), where the devices
 * can say: 0 at one rank; else the measured bytes again, plus DP_NCCL_MARGIN_MIB, plus 1 GiB when
 * NVLS may be on. The memory check reads the free memory after the warm-up, so what it took is
 * already counted once; it is reserved again because the run's larger buckets may make NCCL
 * connect another algorithm or protocol of the same kind (ring or tree, LL128 or Simple) that the
 * warm-up's few floats did not, and the warm-up's connections are the best measure of what such a
 * set costs on this machine; the margin covers NCCL's smaller per-call allocations.
 * DPTRAIN_NCCL_RESERVE_MIB (override_mib) still replaces it. */
#define DP_NCCL_MARGIN_MIB 64ull
dp_status dp_nccl_allowance_measured(int world, int nvls, unsigned long long measured, const char *override_mib,
                                     unsigned long long *bytes);

#endif
