/* evaluate.c: accuracy (overall and per class) and mean loss on a data set, with rank 0's
 * parameters and running statistics. Chunks of the set are spread over every replica of
 * every process; the counts are summed with one all-reduce. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/loss.h"
#include "train/trainer.h"

dp_status dp_evaluate(dp_trainer *t, const dp_dataset *d, dp_step_metrics *m, long *per_class_correct,
                      long *per_class_count) {
    const dp_model *md = &t->model;
    const int K = md->n_classes, chunk = t->rep[0].acts.max_batch;
    const int n_chunks = (d->n + chunk - 1) / chunk;
    const size_t nstat = 2 * (size_t)K + 1; /* correct[K], count[K], loss */
    float *stats = calloc((size_t)t->n_local * nstat, sizeof *stats);
    int *idx = malloc((size_t)t->n_local * (size_t)chunk * sizeof *idx);
    float **bufs = malloc((size_t)t->n_local * sizeof *bufs);
    if (!stats || !idx || !bufs) {
        free(stats), free(idx), free(bufs);
        return dp_fail(DP_ERR_NOMEM, "out of memory for evaluation");
    }
    dp_status st[t->n_local];
    for (int r = 0; r < t->n_local; r++) st[r] = DP_OK;
#pragma omp parallel for num_threads(t->cfg.threads) schedule(static) if (t->n_local > 1)
    for (int r = 0; r < t->n_local; r++) {
        dp_replica *rep = &t->rep[r];
        float *s = stats + (size_t)r * nstat;
        int *my_idx = idx + (size_t)r * chunk;
        dp_exec x = {.training = 0, .nthreads = t->kthreads, .params = t->rep[0].params, .grads = NULL,
                     .buffers = t->rep[0].buffers};
        for (int c = rep->rank; c < n_chunks && st[r] == DP_OK; c += t->world) {
            int n = d->n - c * chunk < chunk ? d->n - c * chunk : chunk;
            for (int i = 0; i < n; i++) my_idx[i] = c * chunk + i;
            dp_batch_fill(d, my_idx, NULL, n, NULL, rep->eval_x, rep->eval_y);
            x.batch = x.global_batch = n;
            st[r] = dp_model_forward(md, &rep->acts, &x, rep->eval_x);
            if (st[r] != DP_OK) break;
            const float *logits = rep->acts.out[md->output];
            s[2 * K] += (float)softmax_xent_cpu(n, K, logits, rep->eval_y, 0.0f, NULL, NULL);
            for (int i = 0; i < n; i++) {
                const float *z = logits + (size_t)i * K;
                int best = 0;
                for (int k = 1; k < K; k++)
                    if (z[k] > z[best]) best = k;
                int y = rep->eval_y[i];
                s[K + y] += 1.0f;
                if (best == y) s[y] += 1.0f;
            }
        }
    }
    dp_status s = DP_OK;
    for (int r = 0; r < t->n_local && s == DP_OK; r++) s = st[r];
    for (int r = 0; r < t->n_local; r++) bufs[r] = stats + (size_t)r * nstat;
    if (s == DP_OK) s = t->backend->iface->allreduce(t->backend, bufs, nstat, DP_SUM);
    if (s == DP_OK) {
        memset(m, 0, sizeof *m);
        for (int k = 0; k < K; k++) {
            m->correct += lrintf(stats[k]);
            m->count += lrintf(stats[K + k]);
            if (per_class_correct) per_class_correct[k] = lrintf(stats[k]);
            if (per_class_count) per_class_count[k] = lrintf(stats[K + k]);
        }
        m->loss_sum = stats[2 * K];
    }
    free(stats), free(idx), free(bufs);
    return s;
}
