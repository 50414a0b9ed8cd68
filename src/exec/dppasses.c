/* dppasses.c: DataParallel's device work in a micro-step (dppasses.h), what PyTorch's
 * nn.DataParallel moves each step. All of it but the step's sums reads nothing from the host, so
 * it is recorded as one graph where the device can. */
#include <stdlib.h>

#include "exec/dppasses.h"
#include "exec/executor_impl.h"

struct dp_exec_dp_s {
    int n_local;
    float **send, **recv, **in; /* (n_local) on each replica's device: its gather record, the gathered
                                   records of all, its scattered input */
    float *in_all;              /* the master's whole batch */
    float *d_dlogits;           /* one lane's logit gradients */
    float *d_loss, *d_pairs;    /* the master's lanes' losses and hits, and the step's sums' scratch */
    int32_t *d_correct;
};

/* A gather record per replica: its logits (max_local, K), labels (max_local, int32 bit patterns:
 * the collectives move bytes) and a float left from when the count travelled too, kept so that
 * the bytes moved stay what they were. */
static size_t record_floats(dp_executor *ex) {
    return (size_t)dp_exec_max_local(ex) * (size_t)(ex->model->n_classes + 1) + 1;
}

/* On the master's device: global rank 0 is local replica 0 where it is local (ranks are
 * first + local index). */
#define MASTER_DEV 0

dp_status dp_exec_dp_alloc(dp_executor *ex, const dp_exec_dp_plan *p, dp_exec_dp **out) {
    dp_exec_dp *s = calloc(1, sizeof *s);
    *out = s;
    if (!s) return dp_fail(DP_ERR_NOMEM, "out of memory for the DataParallel state");
    const dp_model *md = ex->model;
    const int n_local = dp_exec_n_local(ex), max_local = dp_exec_max_local(ex);
    const size_t rec = record_floats(ex), in = (size_t)max_local * dp_shape_size(md->input);
    const size_t all = (size_t)p->world * (size_t)dp_exec_replica(ex, 0)->n_slots;
    DP_ALLOC(s->send, n_local, "DataParallel gather buffers");
    DP_ALLOC(s->recv, n_local, "DataParallel gather buffers");
    DP_ALLOC(s->in, n_local, "DataParallel input scatter buffers");
    s->n_local = n_local;
    for (int r = 0; r < n_local; r++) {
        DP_TRY(dp_exec_alloc(ex, r, rec, "DataParallel gather buffers", &s->send[r]));
        DP_TRY(dp_exec_alloc(ex, r, rec * (size_t)p->world, "DataParallel gather buffers", &s->recv[r]));
        DP_TRY(dp_exec_alloc(ex, r, in, "DataParallel input scatter buffers", &s->in[r]));
    }
    DP_TRY(dp_exec_alloc(ex, MASTER_DEV, (size_t)p->world * in, "DataParallel input scatter buffers", &s->in_all));
    DP_TRY(dp_exec_alloc(ex, MASTER_DEV, 2 * (size_t)p->world, "DataParallel step sums", &s->d_pairs));
    DP_TRY(dp_exec_alloc(ex, MASTER_DEV, (size_t)dp_chunk_max_lane(&p->sampler->plan) * (size_t)md->n_classes,
                         "DataParallel logit gradients", &s->d_dlogits));
    DP_TRY(dp_exec_alloc(ex, MASTER_DEV, all, "DataParallel lane losses", &s->d_loss));
    DP_TRY(dp_exec_alloc(ex, MASTER_DEV, all, "DataParallel lane hits", &s->d_correct));
    return DP_OK;
}

void dp_exec_dp_free(dp_executor *ex, dp_exec_dp *s) {
    if (!s) return;
    for (int r = 0; r < s->n_local; r++) {
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

static dp_status broadcast_coalesced(dp_executor *ex, int which, size_t n, size_t chunk) {
    for (size_t off = 0; off < n; off += chunk)
        DP_TRY(dp_exec_broadcast(ex, dp_exec_slices(ex, which, off), n - off < chunk ? n - off : chunk, 0));
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
static dp_status scatter_input(dp_executor *ex, dp_exec_dp *s, const dp_batch *b, dp_batch *in) {
    const int n_local = s->n_local;
    const size_t per = dp_shape_size(ex->model->input), share = (size_t)dp_exec_max_local(ex) * per;
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
static dp_status master_loss(dp_executor *ex, dp_exec_dp *s, const dp_exec_dp_plan *p, const dp_micro_info *mi,
                             float *g) {
    const int K = ex->model->n_classes, maxb = dp_exec_max_local(ex), world = p->world, master = p->master;
    const size_t rec = record_floats(ex);
    const dp_sampler *sp = p->sampler;
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
static dp_status pack_records(dp_executor *ex, dp_exec_dp *s, const dp_batch *b) {
    const int K = ex->model->n_classes, maxb = dp_exec_max_local(ex);
    for (int r = 0; r < s->n_local; r++) {
        float *sr = s->send[r];
        DP_TRY(dp_exec_logits(ex, r, sr));
        DP_TRY(dp_exec_copy(ex, r, sr + (size_t)maxb * K, b[r].y, (size_t)b[r].n * sizeof(int32_t)));
    }
    return DP_OK;
}

typedef struct {
    dp_executor *ex;
    dp_exec_dp *s;
    const dp_exec_dp_plan *p;
    const dp_batch *b;
    const dp_micro_info *mi;
} dp_args;

static dp_status device_part(void *arg) {
    const dp_args *a = arg;
    dp_executor *ex = a->ex;
    dp_exec_dp *s = a->s;
    const dp_exec_dp_plan *p = a->p;
    const dp_model *md = ex->model;
    const dp_micro_info *mi = a->mi;
    const int n_local = s->n_local, master = p->master;
    const size_t rec = record_floats(ex);
    const dp_batch *b = a->b;
    /* replicate: the master's parameters and buffers to every replica, every step */
    dp_batch in[n_local];
    if (p->world > 1) {
        DP_TRY(broadcast_coalesced(ex, DP_ARENA_PARAMS, md->params.n, p->coalesce));
        if (md->buffers.n) DP_TRY(broadcast_coalesced(ex, DP_ARENA_BUFFERS, md->buffers.n, p->coalesce));
        DP_TRY(scatter_input(ex, s, b, in));
        b = in;
    }
    DP_TRY(dp_exec_zero_grads(ex));
    /* the slots' own loss is not used: the master computes it over the whole batch */
    DP_TRY(dp_exec_forward(ex, b, mi, 1.0f));
    /* gather outputs and labels to the master */
    DP_TRY(pack_records(ex, s, b));
    const float *send[n_local];
    float *recv[n_local];
    for (int r = 0; r < n_local; r++) send[r] = s->send[r], recv[r] = s->recv[r];
    DP_TRY(dp_exec_gather(ex, send, recv, rec, 0));
    /* the loss over the whole batch, on the master (a NaN/Inf is caught after the step's sums, on
       every rank); its logit gradients are scattered back */
    DP_TRY(master >= 0 ? master_loss(ex, s, p, mi, recv[master])
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
    if (p->world > 1) DP_TRY(dp_exec_reduce(ex, dp_exec_slices(ex, DP_ARENA_GRADS, 0), md->params.n, 0));
    return DP_OK;
}

dp_status dp_exec_dp_passes(dp_executor *ex, dp_exec_dp *d, const dp_exec_dp_plan *p, const dp_batch *b,
                            const dp_micro_info *mi) {
    dp_args a = {ex, d, p, b, mi};
    return dp_exec_run_graph(ex, b, mi, device_part, &a);
}
