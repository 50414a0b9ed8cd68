/* nccl_kind.c: the NCCL backend's row of the backend table (backend_kind.h), in the core: the
 * backend itself (nccl.c, nccl_coll.c, nccl_precheck.c) is in the GPU plugin (gpu_plugin.h), which
 * this row loads when a run names it, so a CPU run never maps the CUDA libraries. */
#include "backends/backend_kind.h"
#include "backends/gpu_plugin.h"
#include "dp_config.h"

extern const dp_backend_kind dp_nccl_backend;

/* The backend's work, in the plugin (nccl_plugin.c: dp_nccl_plugin_backend), loaded now. */
static dp_status nccl_create(const dp_backend_config *cfg, dp_backend_t *out) {
    const dp_gpu_backend *g;
    DP_TRY(dp_gpu_plugin_backend("nccl", &g));
    return g->create(cfg, out);
}

/* One GPU per process (the launch says which), or the ones --gpus lists: asked of the GPUs, so in
   the plugin too. */
static dp_status nccl_devices_ok(const dp_device_request *r, int *ordinals, int *n) {
    if (!DP_HAVE_NCCL)
        return dp_fail(DP_ERR_UNSUPPORTED, "--backend nccl: not compiled into this build (%s)", dp_nccl_backend.how_to_get);
    const dp_gpu_backend *g;
    DP_TRY(dp_gpu_plugin_backend("nccl", &g));
    return g->devices_ok(r, ordinals, n);
}

/* Under torchrun it meets over TCP or its store; under an MPI launcher, over MPI. */
static dp_status nccl_joins_launch(const dp_launch *l, dp_mpi_family fam, const char *replicas, const char *mpi_cannot) {
    (void)replicas;
    if (!DP_HAVE_NCCL || l->kind == DP_LAUNCH_TORCHRUN) return DP_OK;
    if (fam == DP_MPI_NONE)
        return dp_fail(DP_ERR_USAGE, "%s (%s) but --backend nccl hands NCCL's unique id around over MPI or torchrun's "
                       "variables, and this build has no MPI; launch with torchrun (or set RANK, WORLD_SIZE, "
                       "LOCAL_RANK, MASTER_ADDR, MASTER_PORT)", l->seen, l->what);
    if (mpi_cannot)
        return dp_fail(DP_ERR_USAGE, "%s (%s) but --backend nccl hands NCCL's unique id around over MPI, and %s",
                       l->seen, l->what, mpi_cannot);
    return DP_OK;
}

const dp_backend_kind dp_nccl_backend = {
    .name = "nccl",
    .built = DP_HAVE_NCCL,
    .how_to_get = "needs the CUDA toolkit and NCCL at build time; set NCCL_ROOT and rebuild",
    .describe = "cuda, one process per GPU or several GPUs per process; loaded on use from " DP_GPU_PLUGIN_FILE,
    .takes_gpus = 1,
    .default_device = "cuda",
    .create = nccl_create,
    .devices_ok = nccl_devices_ok,
    .joins_launch = nccl_joins_launch,
};
