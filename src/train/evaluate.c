/* evaluate.c: accuracy (overall and per class) and mean loss on a data set, with rank 0's
 * parameters and running statistics. The set is cut into pieces of a slot's batch, spread over
 * every slot of every replica of every process; each piece's loss is kept apart and the pieces
 * are added with the fixed tree after one all-reduce, so the mean loss, like the counts, does
 * not depend on how many replicas or threads computed it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/treesum.h"
#include "train/trainer.h"

size_t dp_evaluate_floats(const dp_trainer *t, const dp_dataset *d) {
    const int piece = dp_exec_replica(t->ex, 0)->slots[0].acts.max_batch;
    return 2 * (size_t)t->model.n_classes + (size_t)((d->n + piece - 1) / piece);
}

dp_status dp_evaluate(dp_trainer *t, const dp_dataset *d, dp_step_metrics *m, long *per_class_correct,
                      long *per_class_count) {
    dp_executor *ex = t->ex;
    const dp_model *md = &t->model;
    const int n_local = dp_exec_n_local(ex);
    const int K = md->n_classes, piece = dp_exec_replica(ex, 0)->slots[0].acts.max_batch;
    const int ns = dp_exec_replica(ex, 0)->n_slots;
    const int n_pieces = (d->n + piece - 1) / piece, nq = n_local * ns;
    /* per local replica: correct[K], count[K], then one loss per piece (0 where another computed it) */
    const size_t nstat = dp_evaluate_floats(t, d);
    const size_t per = dp_shape_size(md->input);
    float *stats = calloc((size_t)n_local * nstat, sizeof *stats);
    int *idx = malloc((size_t)nq * (size_t)piece * sizeof *idx);
    float **bufs = malloc((size_t)n_local * sizeof *bufs);
    float *hlogits = malloc((size_t)piece * K * sizeof *hlogits); /* a device's logits, on the host */
    float **hx = calloc((size_t)nq, sizeof *hx);                    /* each slot's pieces, filled on the host */
    dp_status s = stats && idx && bufs && hlogits && hx ? DP_OK : dp_fail(DP_ERR_NOMEM, "out of memory for evaluation");
    if (s == DP_OK) s = dp_exec_eval_prepare(ex); /* replica 0's weights on every device */
    for (int q = 0; q < nq && s == DP_OK; q++)
        s = dp_exec_host_buffer(ex, dp_exec_replica(ex, q / ns)->slots[q % ns].eval_x, (size_t)piece * per, &hx[q]);
    dp_status st[nq > 0 ? nq : 1];
    for (int q = 0; q < nq; q++) st[q] = s;
#pragma omp parallel for num_threads(dp_exec_team(ex, nq)) schedule(static) if (nq > 1)
    for (int q = 0; q < nq; q++) {
        const int r = q / ns;
        dp_slot *sl = &dp_exec_replica(ex, r)->slots[q % ns];
        float *sr = stats + (size_t)r * nstat;
        int *my_idx = idx + (size_t)q * piece;
        float *params, *buffers;
        dp_exec_eval_weights(ex, r, &params, &buffers);
        dp_exec x = {.training = 0, .k = dp_exec_kernel_table(ex), .kc = dp_exec_dev(ex, r)->main.kc, .params = params,
                     .buffers = buffers};
        int32_t *ey = sl->eval_y;
        const int worker = dp_exec_rank(ex, r) * ns + q % ns;
        for (int c = worker; c < n_pieces && st[q] == DP_OK; c += t->world * ns) {
            int n = d->n - c * piece < piece ? d->n - c * piece : piece;
            for (int i = 0; i < n; i++) my_idx[i] = c * piece + i;
            dp_batch_fill(d, my_idx, NULL, n, NULL, hx[q], ey);
            st[q] = dp_exec_put(ex, r, sl->eval_x, hx[q], (size_t)n * per * sizeof(float));
            x.batch = x.stat_batch = n;
            if (st[q] == DP_OK) st[q] = dp_model_forward(md, &sl->acts, &x, sl->eval_x);
            const float *logits = NULL;
            if (st[q] == DP_OK)
                st[q] = dp_exec_view(ex, r, hlogits, sl->acts.out[md->output], (size_t)n * K * sizeof(float), &logits);
            if (st[q] != DP_OK) break;
            /* the loss on the host, from the logits: the CPU kernel, the same bits for any device's logits */
            int32_t hits;
            const dp_kctx hc = {.nthreads = 1};
            md->head->loss(&dp_cpu_kernels, &hc, n, K, logits, ey, 0.0f, NULL, &sr[2 * (size_t)K + (size_t)c], &hits);
            /* the slots of a replica share its counters: whole numbers, exact in any order */
            for (int i = 0; i < n; i++) {
                const int best = md->head->predict(logits + (size_t)i * K, K);
                int y = ey[i];
#pragma omp atomic
                sr[K + y] += 1.0f;
                if (best == y) {
#pragma omp atomic
                    sr[y] += 1.0f;
                }
            }
        }
    }
    for (int q = 0; q < nq && hx; q++)
        if (hx[q]) dp_exec_host_buffer_free(ex, dp_exec_replica(ex, q / ns)->slots[q % ns].eval_x, hx[q]);
    if (s != DP_OK) {
        free(stats), free(idx), free(bufs), free(hlogits), free(hx);
        return s;
    }
    for (int q = 0; q < nq && s == DP_OK; q++) s = st[q];
    for (int r = 0; r < n_local; r++) bufs[r] = stats + (size_t)r * nstat;
    if (s == DP_OK) s = dp_exec_host_allreduce(ex, bufs, nstat);
    if (s == DP_OK) {
        memset(m, 0, sizeof *m);
        for (int k = 0; k < K; k++) {
            m->correct += lrintf(bufs[0][k]);
            m->count += lrintf(bufs[0][K + k]);
            if (per_class_correct) per_class_correct[k] = lrintf(bufs[0][k]);
            if (per_class_count) per_class_count[k] = lrintf(bufs[0][K + k]);
        }
        m->loss_sum = dp_tree_sum_scalars(bufs[0] + 2 * K, n_pieces, 1);
    }
    free(stats), free(idx), free(bufs), free(hlogits), free(hx);
    return s;
}
