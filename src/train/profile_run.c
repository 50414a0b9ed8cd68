/* profile_run.c: the timing run behind `dptrain predict` and a sim run's --predict. */
#include "train/profile_run.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "core/treesum.h"
#include "kernels/cpu/loss.h"
#include "optim/sgd.h"
#include "train/replica.h"

dp_status dp_profile_describe(const dp_model *m, const int *bucket_node, dp_profile *p) {
    if (m->n_nodes > DP_PROFILE_MAX_NODES || m->params.n_buckets > DP_PROFILE_MAX_BUCKETS)
        return dp_fail(DP_ERR_UNSUPPORTED, "compute profile: model %s has %d nodes and %d buckets (at most %d and %d)",
                       m->name, m->n_nodes, m->params.n_buckets, DP_PROFILE_MAX_NODES, DP_PROFILE_MAX_BUCKETS);
    snprintf(p->model, sizeof p->model, "%s", m->name);
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

/* One worker: its own replica; times[s][slot] per step s, slots: fwd nodes, bwd nodes, loss, opt,
 * one lane's gradients added into another's (the lane tree's unit, with clearing). */
static dp_status worker_run(const dp_model *m, int batch, int steps, int warm, double *times, int w) {
    const int nn = m->n_nodes, slots = 2 * nn + 3;
    /* every worker passes the same barriers even when it failed, so no other waits forever */
    dp_replica rep;
    dp_status st = dp_replica_create(&rep, m, dp_dev_cpu(), w, batch, 2, 1);
    if (st != DP_OK) {
        for (int s = 0; s < warm + steps; s++) {
#pragma omp barrier
        }
        return st;
    }
    dp_rng rng;
    dp_rng_seed(&rng, 7, (uint64_t)w);
    dp_model_init_params(m, rep.params, rep.buffers, &rng);
    dp_replica_assign(&rep, 0, 1, &batch);
    dp_slot *ln = &rep.slots[0];
    const size_t in_n = (size_t)batch * dp_shape_size(m->input);
    float *x = malloc(in_n * sizeof *x);
    int32_t *y = malloc((size_t)batch * sizeof *y);
    if (!x || !y) st = dp_fail(DP_ERR_NOMEM, "out of memory for the timing run's input");
    for (size_t i = 0; i < in_n && x; i++) x[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    for (int i = 0; i < batch && y; i++) y[i] = i % m->n_classes;
    dp_exec ex = {.batch = batch, .stat_batch = batch, .training = 1, .update_stats = 1, .nthreads = 1,
                  .params = rep.params, .grads = rep.grads, .buffers = rep.buffers};
    dp_sgd sgd = {.lr = 1e-4f, .momentum = 0.9f};
    for (int s = 0; s < warm + steps; s++) {
        double *t = s >= warm ? times + (size_t)(s - warm) * slots : NULL, t0;
#pragma omp barrier
        if (st != DP_OK) continue;
        memset(rep.grads, 0, m->params.n * sizeof(float));
        for (int i = 0; i < nn && st == DP_OK; i++) {
            t0 = dp_now();
            dp_node_forward_sums(m, i, &ln->acts, &ex, x);
            st = dp_node_forward(m, i, &ln->acts, &ex, x);
            if (t) t[i] = dp_now() - t0;
        }
        int correct = 0;
        t0 = dp_now();
        softmax_xent_cpu(batch, m->n_classes, ln->acts.out[m->output], y, 1.0f / batch, ln->acts.dout[m->output],
                         &correct);
        if (t) t[2 * nn] = dp_now() - t0;
        for (int i = nn - 1; i >= 0 && st == DP_OK; i--) {
            t0 = dp_now();
            dp_node_backward_sums(m, i, &ln->acts, &ex, x);
            st = dp_node_backward(m, i, &ln->acts, &ex, x);
            if (t) t[nn + i] = dp_now() - t0;
        }
        t0 = dp_now();
        dp_sgd_step(&sgd, &m->params, rep.params, rep.grads, rep.momentum, sgd.lr);
        if (t) t[2 * nn + 1] = dp_now() - t0;
        t0 = dp_now();
        dp_tree_sum(rep.lane_grads, 2, 0, m->params.n, 1);
        if (t) t[2 * nn + 2] = dp_now() - t0;
    }
    free(x), free(y), dp_replica_free(&rep);
    return st;
}

dp_status dp_profile_measure(const dp_model *m, int batch, int concurrent, int steps, dp_profile *p) {
    const int nn = m->n_nodes, slots = 2 * nn + 3, warm = 2;
    if (nn > DP_PROFILE_MAX_NODES) return dp_fail(DP_ERR_UNSUPPORTED, "compute profile: too many nodes (%d)", nn);
    if (steps < 1 || batch < 1 || concurrent < 1)
        return dp_fail(DP_ERR_USAGE, "timing run: batch %d, %d workers, %d steps: all must be positive", batch,
                       concurrent, steps);
    double *times = calloc((size_t)concurrent * steps * slots, sizeof *times);
    if (!times) return dp_fail(DP_ERR_NOMEM, "out of memory for the timing run");
    dp_status st[concurrent];
    char err[512] = "";
#pragma omp parallel num_threads(concurrent)
    {
        int w = omp_get_thread_num();
        if (w < concurrent) {
            st[w] = worker_run(m, batch, steps, warm, times + (size_t)w * steps * slots, w);
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
