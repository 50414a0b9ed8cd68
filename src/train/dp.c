/* dp.c: DataParallel (strategy.h): what PyTorch's nn.DataParallel moves each step. The master
 * (global rank 0) replicates its parameters and buffers (in 10 MiB chunks, as PyTorch
 * coalesces them), scatters the input, gathers the logits, computes the loss over the whole
 * batch, scatters the logits' gradients back, and after backward reduces the gradients to
 * itself and steps alone. All of it but the step's sums reads nothing from the host, so the
 * device part is recorded as one graph where the device can (exec/graph.h), and the optimizer
 * step as another. */
#include <stdlib.h>

#include "train/strategy.h"

typedef struct {
    float **send, **recv, **in; /* (n_local) on each replica's device: its gather record, the gathered
                                   records of all, its scattered input */
    float *in_all;           /* the master's whole batch */
    float *d_dlogits;        /* one lane's logit gradients */
    float *d_loss, *d_pairs; /* the master's lanes' losses and hits, and the step's sums' scratch */
    int32_t *d_correct;
} dp_state;

typedef struct {
    const dp_step_ctx *c;
    dp_state *s;
    int master; /* the local replica that is global rank 0; -1: none here */
} dp_args;

/* A gather record per replica: its logits (max_local, K), labels (max_local, int32 bit patterns:
 * the collectives move bytes) and a float left from when the count travelled too, kept so that
 * the bytes moved stay what they were. */
static size_t record_floats(const dp_step_ctx *c) {
    return (size_t)dp_exec_max_local(c->ex) * (size_t)(c->model->n_classes + 1) + 1;
}

/* On the master's device: global rank 0 is local replica 0 where it is local (ranks are
 * first + local index). */
#define MASTER_DEV 0

static dp_status dp_alloc_state(const dp_step_ctx *c, void **state) {
    dp_state *s = calloc(1, sizeof *s);
    *state = s;
    if (!s) return dp_fail(DP_ERR_NOMEM, "out of memory for the DataParallel state");
    dp_executor *ex = c->ex;
    const int n_local = dp_exec_n_local(ex), max_local = dp_exec_max_local(ex);
    const size_t rec = record_floats(c), in = (size_t)max_local * dp_shape_size(c->model->input);
    const size_t all = (size_t)c->world * (size_t)dp_exec_replica(ex, 0)->n_slots;
    DP_ALLOC(s->send, n_local, "DataParallel gather buffers");
    DP_ALLOC(s->recv, n_local, "DataParallel gather buffers");
    DP_ALLOC(s->in, n_local, "DataParallel input scatter buffers");
    for (int r = 0; r < n_local; r++) {
        DP_TRY(dp_exec_alloc(ex, r, rec, "DataParallel gather buffers", &s->send[r]));
        DP_TRY(dp_exec_alloc(ex, r, rec * (size_t)c->world, "DataParallel gather buffers", &s->recv[r]));
        DP_TRY(dp_exec_alloc(ex, r, in, "DataParallel input scatter buffers", &s->in[r]));
    }
    DP_TRY(dp_exec_alloc(ex, MASTER_DEV, (size_t)c->world * in, "DataParallel input scatter buffers", &s->in_all));
    DP_TRY(dp_exec_alloc(ex, MASTER_DEV, 2 * (size_t)c->world, "DataParallel step sums", &s->d_pairs));
    DP_TRY(dp_exec_alloc(ex, MASTER_DEV, (size_t)dp_chunk_max_lane(&c->sampler->plan) * (size_t)c->model->n_classes,
                         "DataParallel logit gradients", &s->d_dlogits));
    DP_TRY(dp_exec_alloc(ex, MASTER_DEV, all, "DataParallel lane losses", &s->d_loss));
    DP_TRY(dp_exec_alloc(ex, MASTER_DEV, all, "DataParallel lane hits", &s->d_correct));
    return DP_OK;
}

static void dp_free_state(const dp_step_ctx *c, void *state) {
    dp_state *s = state;
    if (!s) return;
    dp_executor *ex = c->ex;
    for (int r = 0; r < dp_exec_n_local(ex); r++) {
        if (s->send) dp_exec_dealloc(ex, r, s->send[r]);
        if (s->recv) dp_exec_dealloc(ex, r, s->recv[r]);
        if (s->in) dp_exec_dealloc(ex, r, s->in[r]);
    }
    float *dev_bufs[] = {s->in_all, s->d_pairs, s->d_dlogits, s->d_loss, (float *)s->d_correct};
    for (size_t i = 0; i < sizeof dev_bufs / sizeof *dev_bufs; i++) dp_exec_dealloc(ex, MASTER_DEV, dev_bufs[i]);
    free(s->send);
    free(s->recv);
    free(s->in);
    free(s);
}

/* PyTorch coalesces DataParallel's broadcasts (and gradient reduces) in chunks of 10 MiB. */
#define COALESCE_FLOATS ((size_t)10 * 1024 * 1024 / sizeof(float))

static dp_status broadcast_coalesced(dp_executor *ex, int which, size_t n) {
    for (size_t off = 0; off < n; off += COALESCE_FLOATS)
        DP_TRY(dp_exec_broadcast(ex, dp_exec_slices(ex, which, off),
                                 n - off < COALESCE_FLOATS ? n - off : COALESCE_FLOATS, 0));
    return DP_OK;
}

/* DataParallel's scatter of the input from the master: the master's copy of the batch goes out
 * in shares, one per replica. A process that holds every replica on one device (sim) packs the
 * real shares and every replica computes on what it received. With one replica per process
 * (MPI) each rank reads its own shard from its data files, so the master holds only its own:
 * the scatter still moves a share's bytes to every rank (its cost is measured), and each rank
 * keeps its own shard, the same samples. Replicas on several devices of one process do the
 * same (their shares are staged on their own devices already). *in receives the batches to
 * compute on. */
static dp_status scatter_input(const dp_step_ctx *c, dp_state *s, const dp_batch *b, dp_batch *in) {
    dp_executor *ex = c->ex;
    const int n_local = dp_exec_n_local(ex);
    const size_t per = dp_shape_size(c->model->input), share = (size_t)dp_exec_max_local(ex) * per;
    const int all_here = dp_exec_in_process(ex) && dp_exec_n_devs(ex) == 1;
    const float *send[n_local];
    float *recv[n_local];
    for (int r = 0; r < n_local; r++) {
        in[r] = b[r];
        if (dp_exec_rank(ex, r) == 0) /* the shares on the master's device */
            for (int q = 0; q < n_local; q++)
                if (dp_exec_n_devs(ex) == 1 || q == MASTER_DEV) /* on several devices, one each */
                    DP_TRY(dp_exec_copy(ex, MASTER_DEV, s->in_all + (size_t)dp_exec_rank(ex, q) * share, b[q].x,
                                        (size_t)b[q].n * per * sizeof(float)));
        send[r] = dp_exec_rank(ex, r) == 0 ? s->in_all : NULL;
        recv[r] = s->in[r];
    }
    DP_TRY(dp_exec_scatter(ex, send, recv, share, 0));
    if (all_here)
        for (int r = 0; r < n_local; r++) in[r].x = recv[r];
    return DP_OK;
}

/* The master's loss over every replica's gathered record g (on its device): per lane, then the
 * lanes' tree, then the replicas' tree, the additions DDP makes in its lanes and its all-reduce
 * (dp_exec_set_step_loss). The record's logits are replaced by their gradients. */
static dp_status master_loss(const dp_step_ctx *c, dp_state *s, int master, float *g) {
    dp_executor *ex = c->ex;
    const dp_micro_info *mi = c->mi;
    const int K = c->model->n_classes, maxb = dp_exec_max_local(ex), world = c->world;
    const size_t rec = record_floats(c);
    const dp_sampler *sp = c->sampler;
    int first, count;
    dp_sampler_micro_lanes(sp, mi->batch, &first, &count);
    for (int q = 0; q < world; q++) {
        float *rq = g + (size_t)q * rec;
        const int32_t *labels = (const int32_t *)(rq + (size_t)maxb * K);
        for (int i = 0, lo = 0; i < count; i++) {
            const int ni = dp_chunk_lane_count(&sp->plan, mi->step_samples, q, first + i);
            const size_t at = (size_t)q * (size_t)count + (size_t)i;
            DP_TRY(dp_exec_loss(ex, master, ni, rq + (size_t)lo * K, labels + lo, 1.0f / (float)mi->step_samples,
                                s->d_dlogits, s->d_loss + at, s->d_correct + at));
            /* logits become their gradients */
            DP_TRY(dp_exec_copy(ex, master, rq + (size_t)lo * K, s->d_dlogits, (size_t)ni * K * sizeof(float)));
            lo += ni;
        }
    }
    /* the lanes of a DP step are all of the replica's (no accumulation) */
    return dp_exec_set_step_loss(ex, master, world, count, s->d_loss, s->d_correct, s->d_pairs);
}

/* Each replica's logits into its gather record, and its labels from where it computes. */
static dp_status pack_records(const dp_step_ctx *c, dp_state *s, const dp_batch *b) {
    dp_executor *ex = c->ex;
    const int K = c->model->n_classes, maxb = dp_exec_max_local(ex);
    for (int r = 0; r < dp_exec_n_local(ex); r++) {
        float *sr = s->send[r];
        DP_TRY(dp_exec_logits(ex, r, sr));
        DP_TRY(dp_exec_copy(ex, r, sr + (size_t)maxb * K, b[r].y, (size_t)b[r].n * sizeof(int32_t)));
    }
    return DP_OK;
}

/* The device part of a micro-step: everything from the replication to the gradients' reduce. */
static dp_status device_part(void *arg) {
    const dp_args *a = arg;
    const dp_step_ctx *c = a->c;
    dp_state *s = a->s;
    dp_executor *ex = c->ex;
    const dp_model *md = c->model;
    const dp_micro_info *mi = c->mi;
    const int n_local = dp_exec_n_local(ex), master = a->master;
    const size_t rec = record_floats(c);
    const dp_batch *b = c->b;
    /* replicate: the master's parameters and buffers to every replica, every step */
    dp_batch in[n_local];
    if (c->world > 1) {
        DP_TRY(broadcast_coalesced(ex, DP_ARENA_PARAMS, md->params.n));
        if (md->buffers.n) DP_TRY(broadcast_coalesced(ex, DP_ARENA_BUFFERS, md->buffers.n));
        DP_TRY(scatter_input(c, s, b, in));
        b = in;
    }
    DP_TRY(dp_exec_zero_grads(ex));
    /* the slots' own loss is not used: the master computes it over the whole batch */
    DP_TRY(dp_exec_forward(ex, b, mi, 1.0f));
    /* gather outputs and labels to the master */
    DP_TRY(pack_records(c, s, b));
    const float *send[n_local];
    float *recv[n_local];
    for (int r = 0; r < n_local; r++) send[r] = s->send[r], recv[r] = s->recv[r];
    DP_TRY(dp_exec_gather(ex, send, recv, rec, 0));
    /* the loss over the whole batch, on the master (a NaN/Inf is caught after the step's sums, on
       every rank); its logit gradients are scattered back */
    DP_TRY(master >= 0 ? master_loss(c, s, master, recv[master])
                       : dp_exec_set_step_loss(ex, -1, 0, 0, NULL, NULL, NULL));
    const float *from[n_local];
    float *back[n_local];
    for (int r = 0; r < n_local; r++) {
        from[r] = r == master ? recv[r] : NULL;
        back[r] = s->send[r]; /* sent already: reused for the gradients */
    }
    DP_TRY(dp_exec_scatter(ex, from, back, rec, 0));
    for (int r = 0; r < n_local; r++) DP_TRY(dp_exec_set_dlogits(ex, r, back[r]));
    DP_TRY(dp_exec_backward(ex, b, mi, NULL, NULL));
    /* reduce the gradients to the master, which alone steps: before the metrics, which check them */
    if (c->world > 1) DP_TRY(dp_exec_reduce(ex, dp_exec_slices(ex, DP_ARENA_GRADS, 0), md->params.n, 0));
    return DP_OK;
}

static dp_status dp_micro(const dp_step_ctx *c, void *state) {
    dp_executor *ex = c->ex;
    const int n_local = dp_exec_n_local(ex);
    dp_args a = {c, state, -1};
    for (int r = 0; r < n_local; r++)
        if (dp_exec_rank(ex, r) == 0) a.master = r;
    DP_TRY(dp_exec_run_graph(ex, c->b, c->mi, device_part, &a));
    int count[n_local], check[n_local];
    for (int r = 0; r < n_local; r++) count[r] = r == a.master ? c->mi->step_samples : 0, check[r] = r == a.master;
    dp_step_in sin = c->in;
    sin.count = count, sin.host_lanes = DP_LANES_GIVEN, sin.check = check;
    DP_TRY(dp_exec_step_sums(ex, &sin, c->sums));
    if (a.master >= 0 && dp_step_sums_apply(c->sums)) /* NaN/Inf: nothing is applied */
        DP_TRY(dp_exec_optimizer_step(ex, a.master, c->sgd, c->lr));
    return DP_OK;
}

static dp_status dp_finish(const dp_step_ctx *c, void *state) {
    (void)state;
    /* the replicas hold last step's copies; evaluation and checkpoints read the master's */
    if (c->world == 1) return DP_OK;
    dp_executor *ex = c->ex;
    DP_TRY(dp_exec_broadcast(ex, dp_exec_slices(ex, DP_ARENA_PARAMS, 0), c->model->params.n, 0));
    if (c->model->buffers.n) DP_TRY(dp_exec_broadcast(ex, dp_exec_slices(ex, DP_ARENA_BUFFERS, 0), c->model->buffers.n, 0));
    return DP_OK;
}

static size_t dp_largest(const dp_model *m) { return m->params.n; }

const dp_strategy dp_strategy_dp = {.name = "dp", .title = "DP", .contiguous_sampler = 1, .loss_on_master = 1,
                                    .no_accumulate = "DataParallel has no no_sync",
                                    .no_sync_bn = "DataParallel has no SyncBatchNorm",
                                    .largest_collective = dp_largest, .alloc = dp_alloc_state, .micro_step = dp_micro,
                                    .finish = dp_finish, .free = dp_free_state};
