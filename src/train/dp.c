/* dp.c: DataParallel (strategy.h): what PyTorch's nn.DataParallel moves each step. The master
 * (global rank 0) replicates its parameters and buffers (in 10 MiB chunks, as PyTorch
 * coalesces them), scatters the input, gathers the logits, computes the loss over the whole
 * batch, scatters the logits' gradients back, and after backward reduces the gradients to
 * itself and steps alone. */
#include <stdlib.h>
#include <string.h>

#include "core/treesum.h"
#include "train/strategy.h"
#include "train/trainer.h"

typedef struct {
    float **send, **recv, **in; /* (n_local) on each replica's device: its gather record, the gathered
                                   records of all, its scattered input */
    float *in_all;           /* the master's whole batch */
    float *host_rec, *tail;  /* the gathered records on the host; each replica's label tail */
    int32_t *h_labels, *d_labels; /* every replica's labels (host, device) */
    float *d_dlogits;        /* one lane's logit gradients */
    float *h_loss, *d_loss;  /* the master's lanes' losses and hits */
    int32_t *h_correct, *d_correct;
} dp_state;

/* A gather record per replica: its logits (max_local, K), labels (max_local) and count. */
static size_t record_floats(const dp_trainer *t) {
    return (size_t)t->ex.max_local * (size_t)(t->model.n_classes + 1) + 1;
}

/* On the master's device: global rank 0 is local replica 0 where it is local (ranks are
 * first + local index), and replica 0's device is the executor's. */
static dp_status dev_alloc(dp_trainer *t, void *out, size_t n, const char *what) {
    return t->ex.dev->alloc(t->ex.dev, (float **)out, n, what);
}

static dp_status dp_alloc_state(dp_trainer *t, void **state) {
    dp_state *s = calloc(1, sizeof *s);
    *state = s;
    if (!s) return dp_fail(DP_ERR_NOMEM, "out of memory for the DataParallel state");
    const dp_executor *ex = &t->ex;
    const size_t rec = record_floats(t), in = (size_t)ex->max_local * dp_shape_size(t->model.input);
    const size_t all = (size_t)t->world * (size_t)ex->rep[0].n_slots;
    DP_ALLOC(s->send, ex->n_local, "DataParallel gather buffers");
    DP_ALLOC(s->recv, ex->n_local, "DataParallel gather buffers");
    DP_ALLOC(s->in, ex->n_local, "DataParallel input scatter buffers");
    for (int r = 0; r < ex->n_local; r++) {
        const dp_dev *d = dp_exec_dev(ex, r);
        DP_TRY(d->alloc(d, &s->send[r], rec, "DataParallel gather buffers"));
        DP_TRY(d->alloc(d, &s->recv[r], rec * (size_t)t->world, "DataParallel gather buffers"));
        DP_TRY(d->alloc(d, &s->in[r], in, "DataParallel input scatter buffers"));
    }
    DP_TRY(dev_alloc(t, &s->in_all, (size_t)t->world * in, "DataParallel input scatter buffers"));
    DP_ALLOC(s->host_rec, rec * (size_t)t->world, "DataParallel master records");
    DP_ALLOC(s->tail, (size_t)ex->n_local * ((size_t)ex->max_local + 1), "DataParallel labels");
    DP_ALLOC(s->h_labels, (size_t)t->world * (size_t)ex->max_local, "DataParallel labels");
    DP_ALLOC(s->h_loss, all, "DataParallel lane losses");
    DP_ALLOC(s->h_correct, all, "DataParallel lane hits");
    DP_TRY(dev_alloc(t, &s->d_labels, (size_t)t->world * (size_t)ex->max_local, "DataParallel labels"));
    DP_TRY(dev_alloc(t, &s->d_dlogits, (size_t)dp_chunk_max_lane(&t->sampler.plan) * (size_t)t->model.n_classes,
                     "DataParallel logit gradients"));
    DP_TRY(dev_alloc(t, &s->d_loss, all, "DataParallel lane losses"));
    DP_TRY(dev_alloc(t, &s->d_correct, all, "DataParallel lane hits"));
    return DP_OK;
}

static void dp_free_state(dp_trainer *t, void *state) {
    dp_state *s = state;
    if (!s) return;
    const dp_executor *ex = &t->ex;
    for (int r = 0; r < ex->n_local; r++) {
        const dp_dev *d = dp_exec_dev(ex, r);
        if (s->send) d->free(d, s->send[r]);
        if (s->recv) d->free(d, s->recv[r]);
        if (s->in) d->free(d, s->in[r]);
    }
    const dp_dev *d = ex->dev;
    float *dev_bufs[] = {s->in_all, (float *)s->d_labels, s->d_dlogits, s->d_loss, (float *)s->d_correct};
    for (size_t i = 0; i < sizeof dev_bufs / sizeof *dev_bufs; i++) d->free(d, dev_bufs[i]);
    free(s->send);
    free(s->recv);
    free(s->in);
    free(s->host_rec);
    free(s->tail);
    free(s->h_labels);
    free(s->h_loss);
    free(s->h_correct);
    free(s);
}

/* PyTorch coalesces DataParallel's broadcasts (and gradient reduces) in chunks of 10 MiB. */
#define COALESCE_FLOATS ((size_t)10 * 1024 * 1024 / sizeof(float))

static dp_status broadcast_coalesced(dp_trainer *t, int which, size_t n) {
    for (size_t off = 0; off < n; off += COALESCE_FLOATS)
        DP_TRY(dp_exec_broadcast(&t->ex, dp_exec_slices(&t->ex, which, off),
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
static dp_status scatter_input(dp_trainer *t, dp_state *s, const dp_batch *b, dp_batch *in) {
    dp_executor *ex = &t->ex;
    const dp_dev *d = ex->dev;
    const size_t per = dp_shape_size(t->model.input), share = (size_t)ex->max_local * per;
    const int all_here = dp_backend_in_process(ex->backend) && !ex->multi_dev;
    const float *send[ex->n_local];
    float *recv[ex->n_local];
    for (int r = 0; r < ex->n_local; r++) {
        in[r] = b[r];
        if (ex->rep[r].rank == 0) /* the shares on the master's device */
            for (int q = 0; q < ex->n_local; q++)
                if (dp_exec_dev(ex, q) == d)
                    DP_TRY(d->copy(d, s->in_all + (size_t)ex->rep[q].rank * share, b[q].x,
                                   (size_t)b[q].n * per * sizeof(float)));
        send[r] = ex->rep[r].rank == 0 ? s->in_all : NULL;
        recv[r] = s->in[r];
    }
    DP_TRY(dp_exec_scatter(ex, send, recv, share, 0));
    if (all_here)
        for (int r = 0; r < ex->n_local; r++) in[r].x = recv[r];
    return DP_OK;
}

/* The master's loss over every replica's gathered record g (on the device): per lane, then the
 * lanes' tree, then the replicas' tree, the additions DDP makes in its lanes and its
 * all-reduce. The record's logits are replaced by their gradients. The labels and counts are
 * read from a host copy of the records; the lanes' losses are computed where the logits are. */
static dp_status master_loss(dp_trainer *t, dp_state *s, float *g, const dp_micro_info *mi, int b, float *loss,
                             int *correct) {
    dp_executor *ex = &t->ex;
    const dp_dev *d = ex->dev;
    const int K = t->model.n_classes, maxb = ex->max_local;
    const size_t rec = record_floats(t);
    const dp_sampler *sp = &t->sampler;
    int first, count;
    dp_sampler_micro_lanes(sp, b, &first, &count);
    float reps[t->world];
    const float *h = s->host_rec;
    DP_TRY(d->download(d, s->host_rec, g, rec * (size_t)t->world * sizeof(float)));
    for (int q = 0; q < t->world; q++) {
        const float *hq = h + (size_t)q * rec;
        const int n = (int)hq[rec - 1];
        for (int i = 0; i < n; i++) s->h_labels[(size_t)q * maxb + i] = (int32_t)hq[(size_t)maxb * K + i];
    }
    DP_TRY(d->upload(d, s->d_labels, s->h_labels, (size_t)t->world * (size_t)maxb * sizeof(int32_t)));
    for (int q = 0; q < t->world; q++) {
        float *rq = g + (size_t)q * rec;
        for (int i = 0, lo = 0; i < count; i++) {
            const int ni = dp_chunk_lane_count(&sp->plan, mi->step_samples, q, first + i);
            const size_t at = (size_t)q * (size_t)count + (size_t)i;
            ex->k->softmax_xent(&ex->kc, ni, K, rq + (size_t)lo * K, s->d_labels + (size_t)q * maxb + lo,
                                1.0f / (float)mi->step_samples, s->d_dlogits, s->d_loss + at, s->d_correct + at);
            /* logits become their gradients */
            DP_TRY(d->copy(d, rq + (size_t)lo * K, s->d_dlogits, (size_t)ni * K * sizeof(float)));
            lo += ni;
        }
    }
    const size_t nl = (size_t)t->world * (size_t)count;
    DP_TRY(d->download(d, s->h_loss, s->d_loss, nl * sizeof(float)));
    DP_TRY(d->download(d, s->h_correct, s->d_correct, nl * sizeof(int32_t)));
    *correct = 0;
    for (int q = 0; q < t->world; q++) {
        for (int i = 0; i < count; i++) *correct += s->h_correct[(size_t)q * count + i];
        /* the lanes of a DP step are all of the replica's (no accumulation) */
        reps[q] = dp_tree_sum_scalars(s->h_loss + (size_t)q * count, count, 1);
    }
    *loss = dp_tree_sum_scalars(reps, t->world, 1);
    return DP_OK;
}

/* Each replica's logits into its gather record, with its labels and count from the host. */
static dp_status pack_records(dp_trainer *t, dp_state *s, const dp_batch *hb) {
    dp_executor *ex = &t->ex;
    const dp_model *md = &t->model;
    const int K = md->n_classes, maxb = ex->max_local;
    for (int r = 0; r < ex->n_local; r++) {
        const dp_dev *d = dp_exec_dev(ex, r);
        float *sr = s->send[r];
        for (int l = 0; l < ex->rep[r].n_active; l++) {
            const dp_slot *sl = &ex->rep[r].slots[l];
            DP_TRY(d->copy(d, sr + (size_t)sl->lo * K, sl->acts.out[md->output], (size_t)sl->n * K * sizeof(float)));
        }
        /* a tail per replica: no upload reads memory the next one overwrites (the step's later
           downloads wait for all of them before the next step refills it) */
        float *tail = s->tail + (size_t)r * ((size_t)maxb + 1);
        memset(tail, 0, ((size_t)maxb + 1) * sizeof(float));
        for (int i = 0; i < hb[r].n; i++) tail[i] = (float)hb[r].y[i];
        tail[maxb] = (float)hb[r].n;
        DP_TRY(d->upload(d, sr + (size_t)maxb * K, tail, ((size_t)maxb + 1) * sizeof(float)));
    }
    return DP_OK;
}

static dp_status dp_micro(dp_trainer *t, void *state, const dp_batch *b, const dp_batch *hb, const dp_micro_info *mi,
                          float lr, dp_step_metrics *m) {
    dp_state *s = state;
    dp_executor *ex = &t->ex;
    const dp_model *md = &t->model;
    const int K = md->n_classes;
    const size_t rec = record_floats(t);
    int count[ex->n_local];
    /* replicate: the master's parameters and buffers to every replica, every step */
    dp_batch in[ex->n_local];
    if (t->world > 1) {
        DP_TRY(broadcast_coalesced(t, DP_ARENA_PARAMS, md->params.n));
        if (md->buffers.n) DP_TRY(broadcast_coalesced(t, DP_ARENA_BUFFERS, md->buffers.n));
        DP_TRY(scatter_input(t, s, b, in));
        b = in;
    }
    DP_TRY(dp_exec_zero_grads(ex));
    /* the slots' own loss is not used: the master computes it over the whole batch */
    DP_TRY(dp_exec_forward(ex, b, mi, 1.0f));
    /* gather outputs (and labels, as floats, from the host's copy) to the master */
    DP_TRY(pack_records(t, s, hb));
    const float *send[ex->n_local];
    float *recv[ex->n_local];
    for (int r = 0; r < ex->n_local; r++) send[r] = s->send[r], recv[r] = s->recv[r];
    DP_TRY(dp_exec_gather(ex, send, recv, rec, 0));
    /* the loss over the whole batch, on the master; its logit gradients are scattered back */
    int master = -1;
    for (int r = 0; r < ex->n_local; r++) {
        for (int l = 0; l < ex->n_lanes; l++) ex->lane_loss[(size_t)r * ex->n_lanes + l] = 0;
        for (int l = 0; l < ex->n_lanes; l++) ex->lane_correct[(size_t)r * ex->n_lanes + l] = 0;
        count[r] = 0;
        if (ex->rep[r].rank == 0) master = r;
    }
    if (master >= 0) {
        int correct = 0;
        float loss = 0;
        DP_TRY(master_loss(t, s, recv[master], mi, mi->batch, &loss, &correct));
        ex->lane_loss[(size_t)master * ex->n_lanes] = loss; /* the others' stay 0: x + 0 = x */
        ex->lane_correct[(size_t)master * ex->n_lanes] = correct;
        count[master] = mi->step_samples; /* a NaN/Inf is caught after the metrics' all-reduce, on every rank */
    }
    const float *from[ex->n_local];
    float *back[ex->n_local];
    for (int r = 0; r < ex->n_local; r++) {
        from[r] = r == master ? recv[r] : NULL;
        back[r] = s->send[r]; /* sent already: reused for the gradients */
    }
    DP_TRY(dp_exec_scatter(ex, from, back, rec, 0));
    for (int r = 0; r < ex->n_local; r++)
        for (int l = 0; l < ex->rep[r].n_active; l++) {
            const dp_dev *d = dp_exec_dev(ex, r);
            dp_slot *sl = &ex->rep[r].slots[l];
            DP_TRY(d->copy(d, sl->acts.dout[md->output], back[r] + (size_t)sl->lo * K, (size_t)sl->n * K * sizeof(float)));
        }
    DP_TRY(dp_exec_backward(ex, b, mi, NULL, NULL));
    /* reduce the gradients to the master, which alone steps: before the metrics, which check them */
    if (t->world > 1) DP_TRY(dp_exec_reduce(ex, dp_exec_slices(ex, DP_ARENA_GRADS, 0), md->params.n, 0));
    int check[ex->n_local];
    for (int r = 0; r < ex->n_local; r++) check[r] = r == master;
    DP_TRY(dp_step_add_metrics(t, count, 1, check, m));
    if (master >= 0 && !atomic_load(&t->nonfinite)) { /* a device's NaN/Inf gradients: nothing is applied */
        dp_replica *mr = &ex->rep[master];
        dp_sgd o = t->sgd;
        o.stream = mr->dev->kc.stream, o.device = mr->dev->kc.device; /* its device's */
        dp_sgd_step(&o, &md->params, mr->params, mr->grads, mr->momentum, lr);
    }
    return DP_OK;
}

static dp_status dp_finish(dp_trainer *t, void *state) {
    (void)state;
    /* the replicas hold last step's copies; evaluation and checkpoints read the master's */
    if (t->world == 1) return DP_OK;
    dp_executor *ex = &t->ex;
    DP_TRY(dp_exec_broadcast(ex, dp_exec_slices(ex, DP_ARENA_PARAMS, 0), t->model.params.n, 0));
    if (t->model.buffers.n) DP_TRY(dp_exec_broadcast(ex, dp_exec_slices(ex, DP_ARENA_BUFFERS, 0), t->model.buffers.n, 0));
    return DP_OK;
}

const dp_strategy dp_strategy_dp = {"dp", dp_alloc_state, dp_micro, dp_finish, dp_free_state};
