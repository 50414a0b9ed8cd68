/* sim_backend.c: N logical replicas in this process, on the CPU or on one GPU. Collectives
 * run over the replicas' own buffers (sim/ring.c on the CPU; on a GPU the same ordered sums as
 * kernels, sim/ring_device.c), so the data really moves; the registry's wrappers record their
 * bytes and host time for the overhead model. */
#include <stdlib.h>
#include <string.h>

#include "backends/backend_kind.h"
#include "dp_config.h"
#include "kernels/device.h"
#include "sim/ring.h"

typedef struct {
    int n;
    int algo; /* ALGO_* */
    const dp_dev_stream *st; /* the stream of the device whose memory the buffers are (NULL: the host's) */
} sim_impl;

enum { ALGO_ORDERED = 0, ALGO_RING, ALGO_TREE };

static sim_impl *impl_of(dp_backend_t b) { return (sim_impl *)b->impl; }

static const char *sim_name(dp_backend_t b) {
    (void)b;
    return "sim";
}
static int sim_world(dp_backend_t b) { return impl_of(b)->n; }
static int sim_rank(dp_backend_t b, int local) {
    (void)b;
    return local;
}

/* Copies of n floats between replicas' buffers, on the host or queued on the device. */
static dp_status copy_floats(const sim_impl *s, float *dst, const float *src, size_t n) {
    if (dst == src || n == 0) return DP_OK;
    if (s->st) return s->st->copy(s->st, dst, src, n * sizeof(float));
    memcpy(dst, src, n * sizeof(float));
    return DP_OK;
}

static dp_status sim_allreduce_op(dp_backend_t b, float *const *bufs, size_t n, dp_redop op) {
    sim_impl *s = impl_of(b);
    if (s->st && op == DP_AVG) return dp_fail(DP_ERR_UNSUPPORTED, "sim on a device: all-reduce with averaging");
    if (s->st) return sim_device_ordered(s->st, bufs, s->n, n, -1);
    if (s->algo == ALGO_TREE) sim_tree_allreduce(bufs, s->n, n, b->threads);
    else if (s->algo == ALGO_RING) sim_ring_allreduce(bufs, s->n, n, b->threads);
    else sim_ordered_allreduce(bufs, s->n, n, b->threads);
    if (op == DP_AVG && s->n > 1) sim_scale(bufs, s->n, n, 1.0f / (float)s->n, b->threads);
    return DP_OK;
}

static dp_status sim_broadcast_op(dp_backend_t b, float *const *bufs, size_t n, int root) {
    sim_impl *s = impl_of(b);
    if (root < 0 || root >= s->n) return dp_fail(DP_ERR_INTERNAL, "sim broadcast: root %d of %d", root, s->n);
    if (s->st) {
        for (int r = 0; r < s->n; r++) DP_TRY(copy_floats(s, bufs[r], bufs[root], n));
        return DP_OK;
    }
    sim_broadcast(bufs, s->n, n, root, b->threads);
    return DP_OK;
}

static dp_status sim_reduce_op(dp_backend_t b, float *const *bufs, size_t n, dp_redop op, int root) {
    sim_impl *s = impl_of(b);
    if (root < 0 || root >= s->n) return dp_fail(DP_ERR_INTERNAL, "sim reduce: root %d of %d", root, s->n);
    if (s->st && op == DP_AVG) return dp_fail(DP_ERR_UNSUPPORTED, "sim on a device: reduce with averaging");
    if (s->st) return sim_device_ordered(s->st, bufs, s->n, n, root);
    if (s->algo == ALGO_TREE) sim_tree_reduce(bufs, s->n, n, root, b->threads);
    else if (s->algo == ALGO_RING) sim_reduce(bufs, s->n, n, root, b->threads);
    else sim_ordered_reduce(bufs, s->n, n, root, b->threads);
    if (op == DP_AVG && s->n > 1) sim_scale(bufs + root, 1, n, 1.0f / (float)s->n, b->threads);
    return DP_OK;
}

static dp_status sim_allgather(dp_backend_t b, const float *const *send, float *const *recv, size_t n) {
    sim_impl *s = impl_of(b);
    for (int dst = 0; dst < s->n; dst++)
        for (int r = 0; r < s->n; r++) DP_TRY(copy_floats(s, recv[dst] + (size_t)r * n, send[r], n));
    return DP_OK;
}

static dp_status sim_gather(dp_backend_t b, const float *const *send, float *const *recv, size_t n, int root) {
    sim_impl *s = impl_of(b);
    if (root < 0 || root >= s->n) return dp_fail(DP_ERR_INTERNAL, "sim gather: root %d of %d", root, s->n);
    for (int r = 0; r < s->n; r++)
        DP_TRY(copy_floats(s, recv[root] + (size_t)r * n, send[r], n));
    return DP_OK;
}

static dp_status sim_scatter(dp_backend_t b, const float *const *send, float *const *recv, size_t n, int root) {
    sim_impl *s = impl_of(b);
    if (root < 0 || root >= s->n) return dp_fail(DP_ERR_INTERNAL, "sim scatter: root %d of %d", root, s->n);
    for (int r = 0; r < s->n; r++)
        DP_TRY(copy_floats(s, recv[r], send[root] + (size_t)r * n, n));
    return DP_OK;
}

static dp_status sim_barrier(dp_backend_t b) {
    (void)b; /* the replicas advance in lockstep inside one process */
    return DP_OK;
}

static void sim_destroy(dp_backend_t b) {
    free(b->impl);
    free(b);
}

static const struct dp_backend_i sim_iface = {
    .name = sim_name,
    .world_size = sim_world,
    .n_local = sim_world,
    .rank = sim_rank,
    .allreduce = sim_allreduce_op,
    .broadcast = sim_broadcast_op,
    .reduce = sim_reduce_op,
    .allgather = sim_allgather,
    .gather = sim_gather,
    .scatter = sim_scatter,
    .barrier = sim_barrier,
    .allreduce_start = NULL, /* runs at once: the registry falls back to the blocking call */
    .wait = NULL,
    .destroy = sim_destroy,
};

static dp_status sim_create(const dp_backend_config *cfg, dp_backend_t *out) {
    if (cfg->replicas < 1)
        return dp_fail(DP_ERR_USAGE, "--replicas: must be at least 1 (got %d)", cfg->replicas);
    int algo = ALGO_ORDERED;
    if (cfg->algorithm && strcmp(cfg->algorithm, "tree") == 0) algo = ALGO_TREE;
    else if (cfg->algorithm && strcmp(cfg->algorithm, "ring") == 0) algo = ALGO_RING;
    else if (cfg->algorithm && strcmp(cfg->algorithm, "ordered") != 0)
        return dp_fail(DP_ERR_USAGE, "--allreduce: unknown algorithm '%s' (expected ordered, ring or tree)",
                       cfg->algorithm);
    const dp_dev *dev = cfg->dev && !cfg->host_memory ? cfg->dev : NULL;
    if (dev && algo != ALGO_ORDERED)
        return dp_fail(DP_ERR_USAGE, "--allreduce %s: runs on the CPU only; --device %s uses ordered (the default)",
                       cfg->algorithm, dev->name);
    dp_backend_t b = calloc(1, sizeof *b);
    sim_impl *s = calloc(1, sizeof *s);
    if (!b || !s) {
        free(b);
        free(s);
        return dp_fail(DP_ERR_NOMEM, "out of memory creating the sim backend");
    }
    s->n = cfg->replicas;
    s->algo = algo;
    s->st = dev ? dp_dev_coll(dev) : NULL; /* its sums and copies go on the collective stream */
    b->iface = &sim_iface;
    b->impl = s;
    b->threads = cfg->nthreads > 0 ? cfg->nthreads : 1;
    b->algorithm = algo == ALGO_TREE ? "tree" : algo == ALGO_RING ? "ring" : "ordered";
    b->ordered = algo == ALGO_ORDERED;
    b->host_buffers = dev == NULL;
    b->capturable = 1; /* its device collectives are kernels and copies: a graph records them */
    *out = b;
    return DP_OK;
}

/* It runs in one process: a launch of several is N separate trainings; say what joins it. */
static dp_status sim_joins_launch(const dp_launch *l, dp_mpi_family fam, const char *replicas, const char *mpi_cannot) {
    const char *use;
    if (l->kind == DP_LAUNCH_TORCHRUN || fam == DP_MPI_NONE)
        use = "--backend nccl under torchrun";
    else if (mpi_cannot && l->kind == DP_LAUNCH_SLURM)
        use = "--backend mpi or --backend nccl under srun --mpi=pmix";
    else if (mpi_cannot)
        use = "--backend mpi or --backend nccl under the mpirun of this dptrain's MPI";
    else
        use = "--backend mpi or --backend nccl";
    return dp_fail(DP_ERR_USAGE, "%s (%s) but --backend sim runs in one process; use %s, or one process with "
                   "--backend sim --replicas %s", l->seen, l->what, use, replicas);
}

const dp_backend_kind dp_sim_backend = {
    .name = "sim",
    .built = 1,
    .describe = DP_HAVE_CUDA ? "cpu, cuda" : "cpu",
    .in_process = 1,
    .create = sim_create,
    .joins_launch = sim_joins_launch,
};
