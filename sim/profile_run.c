/* profile_run.c: the timing run behind `dptrain predict` and a sim run's --predict. */
#include "sim/profile_run.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "optim/sgd.h"
#include "exec/replica.h"

dp_status dp_profile_describe(const dp_model *m, const int *bucket_node, dp_profile *p) {
    if (m->n_nodes > DP_PROFILE_MAX_NODES || m->params.n_buckets > DP_PROFILE_MAX_BUCKETS)
        return dp_fail(DP_ERR_UNSUPPORTED, "compute profile: model %s has %d nodes and %d buckets (at most %d and %d)",
                       m->name, m->n_nodes, m->params.n_buckets, DP_PROFILE_MAX_NODES, DP_PROFILE_MAX_BUCKETS);
    snprintf(p->model, sizeof p->model, "%s", m->name);
    p->input_chw[0] = m->input.c, p->input_chw[1] = m->input.h, p->input_chw[2] = m->input.w;
    if (!p->device[0]) snprintf(p->device, sizeof p->device, "cpu");
    p->n_nodes = m->n_nodes;
    for (int i = 0; i < m->n_nodes; i++) {
        const dp_layer *l = &m->nodes[i];
        snprintf(p->node_names[i], sizeof p->node_names[i], "%s", l->name[0] ? l->name : l->ops->kind);
        /* what a CUDA version launches: the layer's kernel (+ a bias/affine kernel); backward
           one for the input gradient and one per parameter tensor */
        p->kernels_fwd[i] = 1 + (l->n_tensors > 1);
        p->kernels_bwd[i] = 1 + l->n_tensors;
    }
    p->input_floats = dp_shape_size(m->input);
    p->n_classes = m->n_classes;
    p->param_floats = m->params.n;
    p->buffer_floats = m->buffers.n;
    p->n_buckets = m->params.n_buckets;
    for (int k = 0; k < p->n_buckets; k++) {
        p->bucket_floats[k] = m->params.buckets[k].count;
        p->bucket_node[k] = bucket_node ? bucket_node[k] : 0;
    }
    return DP_OK;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A worker's clock. On the CPU a node runs while it is called, so the clock read after each call
 * marks its end. A GPU's kernels are queued: events recorded on the device's stream between the
 * nodes time them where they run, read back once the step's work is done. */
typedef struct {
    const dp_dev *dev;
    void *events; /* NULL on the CPU */
    double host[2 * DP_PROFILE_MAX_NODES + 4];
} step_clock;

static dp_status clock_mark(step_clock *c, int i) {
    if (c->events) return c->dev->event_record(c->dev, c->events, i);
    c->host[i] = dp_now();
    return DP_OK;
}

/* Seconds from mark i - 1 to mark i (after the device's work is done). */
static dp_status clock_span(step_clock *c, int i, double *s) {
    if (c->events) return c->dev->event_elapsed(c->dev, c->events, i - 1, i, s);
    *s = c->host[i] - c->host[i - 1];
    return DP_OK;
}

/* One step's pieces, in the order they run: each piece's slot in a step's times (fwd nodes,
 * bwd nodes, loss, opt, one lane's gradients added into another's, with clearing). Mark k + 1
 * ends piece k; mark 0 starts the step. */
static int piece_slot(int nn, int k) {
    if (k < nn) return k;                /* forward, node k */
    if (k == nn) return 2 * nn;          /* the loss */
    if (k <= 2 * nn) return nn + (2 * nn - k); /* backward, from the last node down */
    return k;                            /* 2nn + 1: the optimizer, 2nn + 2: the lane sum */
}

/* One worker on device dev: its own replica; times[s][slot] per step s (slots: piece_slot). */
static dp_status worker_run(const dp_model *m, const dp_dev *dev, int batch, int steps, int warm, double *times,
                            int w) {
    const int nn = m->n_nodes, slots = 2 * nn + 3;
    /* every worker passes the same barriers even when it failed, so no other waits forever */
    dp_replica rep;
    dp_status st = dp_replica_create(&rep, m, dev, w, batch, 2, 1);
    if (st != DP_OK) {
        for (int s = 0; s < warm + steps; s++) {
#pragma omp barrier
        }
        return st;
    }
    step_clock clk = {.dev = dev};
    dp_rng rng;
    dp_rng_seed(&rng, 7, (uint64_t)w);
    dp_model_init_params(m, rep.h_params, rep.h_buffers, &rng);
    st = dp_replica_push(&rep, m);
    dp_replica_assign(&rep, 0, 1, &batch);
    dp_slot *ln = &rep.slots[0];
    const size_t in_n = (size_t)batch * dp_shape_size(m->input);
    float *hx = malloc(in_n * sizeof *hx), *x = NULL, *dev_scalars = NULL;
    int32_t *hy = malloc((size_t)batch * sizeof *hy);
    float *dy = NULL; /* the labels in the device's memory (int32, allocated as floats) */
    if (!hx || !hy) st = dp_fail(DP_ERR_NOMEM, "out of memory for the timing run's input");
    for (size_t i = 0; i < in_n && hx; i++) hx[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    for (int i = 0; i < batch && hy; i++) hy[i] = i % m->n_classes;
    if (st == DP_OK && (dev->caps & DP_CAP_HOST_MEMORY)) x = hx, dy = (float *)hy;
    if (st == DP_OK && !(dev->caps & DP_CAP_HOST_MEMORY)) {
        st = dev->alloc(dev, &x, in_n, "the timing run's input");
        if (st == DP_OK) st = dev->alloc(dev, &dy, (size_t)batch, "the timing run's labels");
        if (st == DP_OK) st = dev->upload(dev, x, hx, in_n * sizeof *hx);
        if (st == DP_OK) st = dev->upload(dev, dy, hy, (size_t)batch * sizeof *hy);
        if (st == DP_OK) st = dev->events_create(dev, slots + 1, &clk.events);
    }
    if (st == DP_OK) st = dev->alloc(dev, &dev_scalars, 2, "the timing run's loss");
    if (st == DP_OK) st = dev->wait(dev);
    const dp_kernels *k = dev->k;
    dp_exec ex = {.batch = batch, .stat_batch = batch, .training = 1, .update_stats = 1, .k = k, .kc = dev->main.kc,
                  .params = rep.params, .grads = rep.grads, .buffers = rep.buffers};
    dp_sgd sgd = {.lr = 1e-4f, .momentum = 0.9f, .k = k, .kc = dev->main.kc,
                  .device_memory = !(dev->caps & DP_CAP_HOST_MEMORY)};
    for (int s = 0; s < warm + steps; s++) {
        double *t = s >= warm ? times + (size_t)(s - warm) * slots : NULL;
        int mk = 0;
#pragma omp barrier
        if (st != DP_OK) continue;
        st = dev->zero(dev, rep.grads, m->params.n * sizeof(float));
        if (st == DP_OK) st = clock_mark(&clk, mk++);
        for (int i = 0; i < nn && st == DP_OK; i++) {
            dp_node_forward_sums(m, i, &ln->acts, &ex, x);
            st = dp_node_forward(m, i, &ln->acts, &ex, x);
            if (st == DP_OK) st = clock_mark(&clk, mk++);
        }
        if (st == DP_OK) {
            m->head->loss(k, &dev->main.kc, batch, m->n_classes, ln->acts.out[m->output], (const int32_t *)dy,
                          1.0f / batch, ln->acts.dout[m->output], dev_scalars, (int32_t *)(dev_scalars + 1));
            st = clock_mark(&clk, mk++);
        }
        for (int i = nn - 1; i >= 0 && st == DP_OK; i--) {
            dp_node_backward_sums(m, i, &ln->acts, &ex, x);
            st = dp_node_backward(m, i, &ln->acts, &ex, x);
            if (st == DP_OK) st = clock_mark(&clk, mk++);
        }
        if (st == DP_OK) {
            dp_sgd_step(&sgd, &m->params, rep.params, rep.grads, rep.momentum, sgd.lr);
            st = clock_mark(&clk, mk++);
        }
        if (st == DP_OK) {
            k->tree_sum(&dev->main.kc, rep.lane_grads, 2, 0, m->params.n, 1);
            st = clock_mark(&clk, mk++);
        }
        if (st == DP_OK) st = dev->wait(dev); /* a kernel's failure surfaces here */
        for (int piece = 0; piece < slots && st == DP_OK && t; piece++)
            st = clock_span(&clk, piece + 1, &t[piece_slot(nn, piece)]);
    }
    if (clk.events) dev->events_free(dev, clk.events, slots + 1);
    if (!(dev->caps & DP_CAP_HOST_MEMORY)) {
        if (x) dev->free(dev, x);
        if (dy) dev->free(dev, dy);
    }
    if (dev_scalars) dev->free(dev, dev_scalars);
    free(hx), free(hy), dp_replica_free(&rep);
    return st;
}

dp_status dp_profile_measure(const dp_model *m, const dp_dev *dev, int batch, int concurrent, int steps,
                             dp_profile *p) {
    const int nn = m->n_nodes, slots = 2 * nn + 3, warm = 2;
    if (!dev) dev = dp_dev_cpu();
    if (!(dev->caps & DP_CAP_HOST_MEMORY) && concurrent != 1)
        return dp_fail(DP_ERR_USAGE, "timing run on %s: one worker per device (asked for %d at once)", dev->name,
                       concurrent);
    if (!(dev->caps & DP_CAP_HOST_MEMORY) && (!dev->events_create || !dev->event_record || !dev->event_elapsed || !dev->events_free))
        return dp_fail(DP_ERR_UNSUPPORTED, "timing run on %s: the device has no timing events", dev->name);
    if (nn > DP_PROFILE_MAX_NODES) return dp_fail(DP_ERR_UNSUPPORTED, "compute profile: too many nodes (%d)", nn);
    if (steps < 1 || batch < 1 || concurrent < 1)
        return dp_fail(DP_ERR_USAGE, "timing run: batch %d, %d workers, %d steps: all must be positive", batch,
                       concurrent, steps);
    double *times = calloc((size_t)concurrent * steps * slots, sizeof *times);
    if (!times) return dp_fail(DP_ERR_NOMEM, "out of memory for the timing run");
    dp_status st[concurrent];
    char err[DP_ERROR_MAX] = "";
#pragma omp parallel num_threads(concurrent)
    {
        int w = omp_get_thread_num();
        if (w < concurrent) {
            st[w] = worker_run(m, dev, batch, steps, warm, times + (size_t)w * steps * slots, w);
            if (st[w] != DP_OK) {
#pragma omp critical
                snprintf(err, sizeof err, "%s", dp_last_error());
            }
        }
    }
    for (int w = 0; w < concurrent; w++)
        if (st[w] != DP_OK) {
            free(times);
            dp_set_error(err);
            return st[w];
        }
    dp_profile_row *row = dp_profile_row_for(p, batch, concurrent);
    if (!row) return free(times), DP_ERR_INTERNAL;
    double v[steps];
    for (int k = 0; k < slots; k++) {
        double sum = 0;
        for (int w = 0; w < concurrent; w++) {
            for (int s = 0; s < steps; s++) v[s] = times[((size_t)w * steps + s) * slots + k];
            sum += median(v, steps);
        }
        double mean = sum / concurrent;
        if (k < nn) row->fwd_s[k] = mean;
        else if (k < 2 * nn) row->bwd_s[k - nn] = mean;
        else if (k == 2 * nn) row->loss_s = mean;
        else if (k == 2 * nn + 1) row->opt_s = mean;
        else row->sum_s = mean;
    }
    row->steps = steps;
    free(times);
    return DP_OK;
}
