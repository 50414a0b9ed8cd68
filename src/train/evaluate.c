/* evaluate.c: accuracy (overall and per class) and mean loss on a data set, with rank 0's
 * parameters and running statistics. Chunks of the set are spread over every lane of every
 * replica of every process; the counts are summed with one all-reduce. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/loss.h"
#include "train/trainer.h"

dp_status dp_evaluate(dp_trainer *t, const dp_dataset *d, dp_step_metrics *m, long *per_class_correct,
                      long *per_class_count) {
    const dp_model *md = &t->model;
    const int K = md->n_classes, chunk = t->rep[0].lanes[0].acts.max_batch;
    const int n_chunks = (d->n + chunk - 1) / chunk, nq = t->n_local * t->n_lanes;
    const size_t nstat = 2 * (size_t)K + 1; /* correct[K], count[K], loss */
    float *stats = calloc((size_t)nq * nstat, sizeof *stats);
    int *idx = malloc((size_t)nq * (size_t)chunk * sizeof *idx);
    float **bufs = malloc((size_t)t->n_local * sizeof *bufs);
    if (!stats || !idx || !bufs) {
        free(stats), free(idx), free(bufs);
        return dp_fail(DP_ERR_NOMEM, "out of memory for evaluation");
    }
    dp_status st[nq];
    for (int q = 0; q < nq; q++) st[q] = DP_OK;
#pragma omp parallel for num_threads(t->cfg.threads) schedule(static) if (nq > 1)
    for (int q = 0; q < nq; q++) {
        dp_lane *ln = &t->rep[q / t->n_lanes].lanes[q % t->n_lanes];
        float *s = stats + (size_t)q * nstat;
        int *my_idx = idx + (size_t)q * chunk;
        dp_exec x = {.training = 0, .nthreads = t->kthreads, .params = t->rep[0].params,
                     .buffers = t->rep[0].buffers};
        const int worker = t->rep[q / t->n_lanes].rank * t->n_lanes + q % t->n_lanes;
        for (int c = worker; c < n_chunks && st[q] == DP_OK; c += t->world * t->n_lanes) {
            int n = d->n - c * chunk < chunk ? d->n - c * chunk : chunk;
            for (int i = 0; i < n; i++) my_idx[i] = c * chunk + i;
            dp_batch_fill(d, my_idx, NULL, n, NULL, ln->eval_x, ln->eval_y);
            x.batch = x.stat_batch = n;
            st[q] = dp_model_forward(md, &ln->acts, &x, ln->eval_x);
            if (st[q] != DP_OK) break;
            const float *logits = ln->acts.out[md->output];
            s[2 * K] += (float)softmax_xent_cpu(n, K, logits, ln->eval_y, 0.0f, NULL, NULL);
            for (int i = 0; i < n; i++) {
                const float *z = logits + (size_t)i * K;
                int best = 0;
                for (int k = 1; k < K; k++)
                    if (z[k] > z[best]) best = k;
                int y = ln->eval_y[i];
                s[K + y] += 1.0f;
                if (best == y) s[y] += 1.0f;
            }
        }
    }
    dp_status s = DP_OK;
    for (int q = 0; q < nq && s == DP_OK; q++) s = st[q];
    /* lanes into their replica's first lane, then over replicas and processes */
    for (int r = 0; r < t->n_local; r++) {
        bufs[r] = stats + (size_t)r * t->n_lanes * nstat;
        for (int l = 1; l < t->n_lanes; l++)
            for (size_t k = 0; k < nstat; k++) bufs[r][k] += bufs[r][(size_t)l * nstat + k];
    }
    if (s == DP_OK) s = t->backend->iface->allreduce(t->backend, bufs, nstat, DP_SUM);
    if (s == DP_OK) {
        memset(m, 0, sizeof *m);
        for (int k = 0; k < K; k++) {
            m->correct += lrintf(bufs[0][k]);
            m->count += lrintf(bufs[0][K + k]);
            if (per_class_correct) per_class_correct[k] = lrintf(bufs[0][k]);
            if (per_class_count) per_class_count[k] = lrintf(bufs[0][K + k]);
        }
        m->loss_sum = bufs[0][2 * K];
    }
    free(stats), free(idx), free(bufs);
    return s;
}
