/* executor.c: the executor's state (replicas, lanes' metrics, upload staging), the lane
 * assignment of a micro-step, zeroing, staging and graphs; the passes are in passes.c, the
 * collectives in coll.c and hostcoll.c. */
#include "exec/executor_impl.h"

#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "exec/launch.h"

static int host_memory(const dp_executor *ex) { return (ex->dev->caps & DP_CAP_HOST_MEMORY) != 0; }

int dp_exec_clock_times_work(const dp_executor *ex) { return !(ex->dev->caps & DP_CAP_ASYNC); }

int dp_exec_team_size(const dp_dev *d, int threads, int n_local, int n_slots) {
    if (d->caps & DP_CAP_ASYNC) return 1; /* the host only queues */
    const long wide = (long)n_local * n_slots;
    const int t = wide < threads ? (int)wide : threads;
    return t > 1 ? t : 1;
}

int dp_exec_dev_team(const dp_executor *ex) {
    return ex->multi_dev && (ex->dev->caps & DP_CAP_ASYNC) ? ex->n_local : 1;
}
int dp_exec_team(const dp_executor *ex, int n) { return n > 1 ? ex->team : 1; }

int dp_exec_default_workers(const dp_dev *d, int threads, int cores) {
    return !(d->caps & DP_CAP_ASYNC) && threads >= cores ? 0 : 1;
}

/* The node after whose backward each bucket's gradients are all written. */
static dp_status map_buckets(dp_executor *ex) {
    const dp_layout *L = &ex->model->params;
    DP_ALLOC(ex->bucket_node, L->n_buckets, "bucket table");
    DP_ALLOC(ex->bucket_req, L->n_buckets, "bucket requests");
    for (int b = 0; b < L->n_buckets; b++) ex->bucket_node[b] = dp_model_bucket_node(ex->model, b);
    return DP_OK;
}

/* The staging events of each device (executor.h: stage_ev), where its events can be waited for. */
static dp_status alloc_stage_events(dp_executor *ex) {
    const int nd = dp_exec_n_devs(ex);
    DP_ALLOC(ex->stage_ev, nd, "staging events");
    DP_ALLOC(ex->stage_rec, (size_t)nd * DP_EXEC_STAGE_EVENTS, "staging events");
    for (int i = 0; i < nd; i++) {
        const dp_dev *d = dp_exec_dev(ex, i);
        if (d->events_create && d->event_record && d->event_wait)
            DP_TRY(d->events_create(d, DP_EXEC_STAGE_EVENTS, &ex->stage_ev[i]));
    }
    return DP_OK;
}

static void free_stage_events(dp_executor *ex) {
    for (int i = 0; ex->stage_ev && i < dp_exec_n_devs(ex); i++)
        if (ex->stage_ev[i]) dp_exec_dev(ex, i)->events_free(dp_exec_dev(ex, i), ex->stage_ev[i], DP_EXEC_STAGE_EVENTS);
    free(ex->stage_ev), free(ex->stage_rec);
    ex->stage_ev = NULL, ex->stage_rec = NULL;
}

dp_status dp_exec_staging_ready(dp_executor *ex, int i, int slot) {
    unsigned char *rec = &ex->stage_rec[(size_t)i * DP_EXEC_STAGE_EVENTS + (size_t)slot];
    if (!*rec) return DP_OK;
    const dp_dev *d = dp_exec_dev(ex, i);
    /* without events: every upload of the device done */
    DP_TRY(ex->stage_ev[i] ? d->event_wait(d, ex->stage_ev[i], slot) : d->wait(d));
    *rec = 0;
    return DP_OK;
}

dp_status dp_exec_staging_queued(dp_executor *ex, int i, int slot) {
    const dp_dev *d = dp_exec_dev(ex, i);
    ex->stage_rec[(size_t)i * DP_EXEC_STAGE_EVENTS + (size_t)slot] = 1;
    return ex->stage_ev[i] ? d->event_record(d, ex->stage_ev[i], slot) : DP_OK;
}

/* Each lane's loss and hits, and on an async device the batches' copies and their staging, on
 * each replica's device. */
static dp_status alloc_lanes_and_staging(dp_executor *ex) {
    const size_t lanes = (size_t)ex->n_local * (size_t)ex->n_lanes, L = (size_t)ex->n_lanes;
    DP_ALLOC(ex->lane_loss, lanes, "lane losses");
    DP_ALLOC(ex->lane_correct, lanes, "lane accuracy counts");
    DP_ALLOC(ex->d_lane_loss, ex->n_local, "lane losses");
    DP_ALLOC(ex->d_lane_correct, ex->n_local, "lane accuracy counts");
    if (host_memory(ex)) {
        for (int r = 0; r < ex->n_local; r++)
            ex->d_lane_loss[r] = ex->lane_loss + (size_t)r * L, ex->d_lane_correct[r] = ex->lane_correct + (size_t)r * L;
        return DP_OK;
    }
    const size_t per = dp_shape_size(ex->model->input), xs = (size_t)ex->max_local * per;
    DP_ALLOC(ex->d_batches, ex->n_local, "device batches");
    DP_ALLOC(ex->h_stage, (size_t)DP_EXEC_STAGES * ex->n_local, "upload staging");
    for (int r = 0; r < ex->n_local; r++) {
        const dp_dev *d = dp_exec_dev(ex, r);
        DP_TRY(d->alloc(d, &ex->d_lane_loss[r], L, "lane losses"));
        DP_TRY(d->alloc(d, (float **)&ex->d_lane_correct[r], L, "lane accuracy counts"));
        DP_TRY(d->alloc(d, &ex->d_batches[r].x, xs, "the batch on the device"));
        DP_TRY(d->alloc(d, (float **)&ex->d_batches[r].y, (size_t)ex->max_local, "the labels on the device"));
        for (int k = 0; k < DP_EXEC_STAGES; k++) {
            dp_batch *hs = &ex->h_stage[k * ex->n_local + r];
            DP_TRY(d->host_alloc(d, (void **)&hs->x, xs * sizeof(float), "upload staging"));
            DP_TRY(d->host_alloc(d, (void **)&hs->y, (size_t)ex->max_local * sizeof(int32_t), "upload staging"));
        }
    }
    return alloc_stage_events(ex);
}

/* Replica r's device: one for all, or devs[r] (each replica its own: a device shared by some
 * replicas but not all is not a layout anyone asks for). */
static dp_status place_replicas(dp_executor *ex, const dp_exec_config *c, dp_dev **where) {
    for (int r = 0; r < ex->n_local; r++) where[r] = c->devs ? c->devs[r] : c->dev;
    for (int r = 1; r < ex->n_local; r++)
        if (where[r] != where[0]) ex->multi_dev = 1;
    for (int r = 0; r < ex->n_local && ex->multi_dev; r++)
        for (int q = r + 1; q < ex->n_local; q++)
            if (where[q] == where[r])
                return dp_fail(DP_ERR_INTERNAL, "replicas %d and %d share a device while others do not", r, q);
    return DP_OK;
}

/* multi_dev: where evaluation finds replica 0's weights on the other devices. */
static dp_status alloc_eval_copies(dp_executor *ex) {
    if (!ex->multi_dev) return DP_OK;
    DP_ALLOC(ex->eval_params, ex->n_local, "evaluation weights");
    DP_ALLOC(ex->eval_buffers, ex->n_local, "evaluation weights");
    for (int r = 1; r < ex->n_local; r++) {
        const dp_dev *d = dp_exec_dev(ex, r);
        DP_TRY(d->alloc(d, &ex->eval_params[r], ex->model->params.n, "replica 0's parameters for evaluation"));
        DP_TRY(d->alloc(d, &ex->eval_buffers[r], ex->model->buffers.n, "replica 0's BN buffers for evaluation"));
    }
    return DP_OK;
}

/* The training set on an async device, when it fits beside the run with room to spare: the
 * batches are then gathered there from their indices (a few hundred bytes a step instead of the
 * images). Where it does not fit, batches go up as before. */
static dp_status dev_alloc(dp_executor *ex, void *out, size_t n, const char *what) {
    return ex->dev->alloc(ex->dev, (float **)out, n, what);
}

/* What a device keeps besides the run's arenas: its own workspaces, and what the backend's library
 * may still allocate there (nccl: backend.h's comm_memory_reserved). */
static unsigned long long dev_reserve(const dp_dev *d, dp_backend_t b) {
    return d->reserved + (b ? b->comm_memory_reserved : 0);
}

static dp_status make_resident(dp_executor *ex, const dp_dataset *d) {
    const dp_dev *dev = ex->dev;
    const size_t chw = (size_t)d->c * d->h * d->w, px = (size_t)d->n * chw;
    unsigned long long free_b = 0, total_b = 0;
    if (!dev->mem_info || dev->mem_info(dev, &free_b, &total_b) != DP_OK) return DP_OK;
    /* the spare is the device's reserve (its workspaces, and NCCL's connections still to come) */
    const unsigned long long reserve = dev_reserve(dev, ex->backend);
    const unsigned long long spare = reserve > (512ull << 20) ? reserve : 512ull << 20;
    if ((unsigned long long)px + spare > free_b) return DP_OK;
    ex->data_c = d->c, ex->data_hw = d->h * d->w;
    DP_TRY(dev_alloc(ex, &ex->d_pixels, (px + 3) / 4, "the training set on the device"));
    DP_TRY(dev_alloc(ex, &ex->d_labels, ((size_t)d->n + 3) / 4, "the training labels on the device"));
    DP_TRY(dev_alloc(ex, &ex->d_lut, (size_t)d->c * 256, "the normalisation table"));
    float lut[3 * 256];
    dp_dataset_norm_lut(d, lut);
    DP_TRY(dev->upload(dev, ex->d_pixels, d->pixels, px));
    DP_TRY(dev->upload(dev, ex->d_labels, d->labels, (size_t)d->n));
    DP_TRY(dev->upload(dev, ex->d_lut, lut, (size_t)d->c * 256 * sizeof(float)));
    DP_ALLOC(ex->d_idx, ex->n_local, "batch indices");
    DP_ALLOC(ex->h_idx, (size_t)DP_EXEC_STAGES * ex->n_local, "batch indices");
    for (int r = 0; r < ex->n_local; r++)
        DP_TRY(dev_alloc(ex, &ex->d_idx[r], (size_t)ex->max_local, "the batch's indices on the device"));
    for (int q = 0; q < DP_EXEC_STAGES * ex->n_local; q++)
        DP_TRY(dev->host_alloc(dev, (void **)&ex->h_idx[q], (size_t)ex->max_local * sizeof(int32_t), "upload staging"));
    DP_TRY(dev->wait(dev)); /* the uploads read the host's copies */
    ex->resident = 1;
    return DP_OK;
}

static void free_resident(dp_executor *ex) {
    const dp_dev *d = ex->dev;
    d->free(d, ex->d_pixels), d->free(d, ex->d_labels), d->free(d, ex->d_lut);
    for (int r = 0; ex->d_idx && r < ex->n_local; r++) d->free(d, ex->d_idx[r]);
    for (int q = 0; ex->h_idx && q < DP_EXEC_STAGES * ex->n_local; q++) d->host_free(d, ex->h_idx[q]);
    free(ex->d_idx), free(ex->h_idx);
}

dp_status dp_exec_create(dp_executor **out, const dp_exec_config *c) {
    dp_executor *ex = *out = calloc(1, sizeof *ex);
    if (!ex) return dp_fail(DP_ERR_NOMEM, "out of memory for the executor");
    ex->dev = c->devs ? c->devs[0] : c->dev, ex->k = ex->dev->k, ex->kc = ex->dev->main.kc;
    ex->backend = c->backend, ex->model = c->model;
    ex->threads = c->threads, ex->sync_bn = c->sync_bn;
    ex->team = dp_exec_team_size(ex->dev, c->threads, dp_backend_n_local(c->backend), c->n_slots);
    ex->n_local = dp_backend_n_local(c->backend), ex->world = dp_backend_world(c->backend);
    ex->n_lanes = c->n_lanes, ex->max_local = c->max_local;
    dp_dev *where[ex->n_local];
    DP_TRY(place_replicas(ex, c, where));
    /* a recorded graph replays the backend's collectives too: only where the backend says they
       can be recorded; the clock cannot time a replay's nodes; one device's graph cannot hold
       another's work */
    ex->graphs_on = c->graphs && (ex->dev->caps & DP_CAP_GRAPHS) && c->backend->capturable && !c->time_nodes &&
                    !ex->multi_dev;
    DP_TRY(map_buckets(ex));
    DP_ALLOC(ex->rep, ex->n_local, "replicas");
    DP_ALLOC(ex->ptrs, ex->n_local, "replica pointers");
    DP_ALLOC(ex->hc_scratch, ex->n_local, "collective scratch");
    for (int r = 0; r < ex->n_local; r++)
        DP_TRY(dp_replica_create(&ex->rep[r], c->model, where[r], dp_backend_rank(c->backend, r), c->lane_batch,
                                 c->n_lanes, c->n_slots));
    DP_TRY(alloc_lanes_and_staging(ex));
    DP_TRY(dp_exec_metrics_alloc(ex));
    DP_TRY(alloc_eval_copies(ex));
    /* one device for every replica: with several, each would need its own copy of the data */
    if (c->resident && c->train && (ex->dev->caps & DP_CAP_ASYNC) && !host_memory(ex) && !ex->multi_dev)
        DP_TRY(make_resident(ex, c->train));
    DP_TRY(dp_exec_host_reserve(ex, 4096));
    DP_TRY(dp_exec_coll_timing_start(ex));
    /* the clock around a node call times its work only where it runs as called (the CPU); a
       GPU's profile comes from the timing run's events (sim/profile_run.c) */
    if (c->time_nodes && dp_exec_clock_times_work(ex))
        DP_ALLOC(ex->node_s, (size_t)ex->n_local * c->n_slots * 2 * c->model->n_nodes, "per-node times");
    return DP_OK;
}

/* What lives on replica r's device besides the replica itself (which must still be there). */
static void free_on_replica_devices(dp_executor *ex) {
    for (int r = 0; ex->rep && r < ex->n_local; r++) {
        const dp_dev *d = ex->rep[r].dev;
        if (!d) continue;
        if (!host_memory(ex) && ex->d_lane_loss) d->free(d, ex->d_lane_loss[r]);
        if (!host_memory(ex) && ex->d_lane_correct) d->free(d, ex->d_lane_correct[r]);
        if (ex->d_batches) d->free(d, ex->d_batches[r].x), d->free(d, ex->d_batches[r].y);
        for (int k = 0; ex->h_stage && k < DP_EXEC_STAGES; k++)
            d->host_free(d, ex->h_stage[k * ex->n_local + r].x), d->host_free(d, ex->h_stage[k * ex->n_local + r].y);
        if (ex->eval_params) d->free(d, ex->eval_params[r]);
        if (ex->eval_buffers) d->free(d, ex->eval_buffers[r]);
    }
}

void dp_exec_free(dp_executor *ex) {
    if (!ex) return;
    const dp_dev *d = ex->dev;
    if (!d) {
        free(ex);
        return;
    }
    dp_exec_host_coll_free(ex);
    dp_exec_metrics_free(ex);
    dp_exec_coll_timing_free(ex);
    free_stage_events(ex);
    dp_graph_cache_free(&ex->graphs, d);
    dp_exec_launch_free(ex);
    if (!host_memory(ex)) free_resident(ex);
    free_on_replica_devices(ex);
    for (int r = 0; ex->rep && r < ex->n_local; r++) dp_replica_free(&ex->rep[r]);
    free(ex->rep);
    free(ex->d_lane_loss);
    free(ex->d_lane_correct);
    free(ex->d_batches);
    free(ex->h_stage);
    free(ex->eval_params);
    free(ex->eval_buffers);
    free(ex->lane_loss);
    free(ex->lane_correct);
    free(ex->ptrs);
    free(ex->bucket_node);
    free(ex->bucket_req);
    free(ex->node_s);
    free(ex);
}

const dp_dev *dp_exec_dev(const dp_executor *ex, int r) { return ex->rep[r].dev; }
int dp_exec_n_devs(const dp_executor *ex) { return ex->multi_dev ? ex->n_local : 1; }
int dp_exec_n_local(const dp_executor *ex) { return ex ? ex->n_local : 0; }
int dp_exec_rank(const dp_executor *ex, int r) { return ex->rep[r].rank; }
int dp_exec_holds_rank(const dp_executor *ex, int rank, int *r) {
    for (int q = 0; q < ex->n_local; q++)
        if (ex->rep[q].rank == rank) {
            if (r) *r = q;
            return 1;
        }
    return 0;
}
int dp_exec_n_lanes(const dp_executor *ex) { return ex->n_lanes; }
int dp_exec_max_local(const dp_executor *ex) { return ex->max_local; }
int dp_exec_threads_used(const dp_executor *ex) { return ex->team; }
int dp_exec_resident(const dp_executor *ex) { return ex->resident; }
int dp_exec_in_process(const dp_executor *ex) { return dp_backend_in_process(ex->backend); }
const dp_kernels *dp_exec_kernel_table(const dp_executor *ex) { return ex->k; }
dp_replica *dp_exec_replica(dp_executor *ex, int r) { return &ex->rep[r]; }
const int *dp_exec_bucket_nodes(const dp_executor *ex) { return ex->bucket_node; }
const double *dp_exec_node_times(const dp_executor *ex, long *runs, long *samples) {
    *runs = ex->node_runs, *samples = ex->node_samples;
    return ex->node_s;
}

dp_status dp_exec_alloc(dp_executor *ex, int r, size_t n, const char *what, void *out) {
    const dp_dev *d = dp_exec_dev(ex, r);
    return d->alloc(d, (float **)out, n, what);
}
void dp_exec_dealloc(dp_executor *ex, int r, void *p) {
    const dp_dev *d = dp_exec_dev(ex, r);
    d->free(d, p);
}
dp_status dp_exec_upload(dp_executor *ex, int r, void *dst, const void *host_src, size_t bytes) {
    const dp_dev *d = dp_exec_dev(ex, r);
    return d->upload(d, dst, host_src, bytes);
}
dp_status dp_exec_download(dp_executor *ex, int r, void *host_dst, const void *src, size_t bytes) {
    const dp_dev *d = dp_exec_dev(ex, r);
    return d->download(d, host_dst, src, bytes);
}
dp_status dp_exec_copy(dp_executor *ex, int r, void *dst, const void *src, size_t bytes) {
    const dp_dev *d = dp_exec_dev(ex, r);
    return d->copy(d, dst, src, bytes);
}

dp_status dp_exec_assign(dp_executor *ex, const dp_sampler *sp, const dp_batch *bt, int b, dp_micro_info *mi) {
    int first, count;
    dp_sampler_micro_lanes(sp, b, &first, &count);
    mi->step_samples = dp_sampler_step_samples(sp, b);
    mi->micro_samples = dp_sampler_batch_size(sp, b);
    mi->batch = b;
    mi->micro = b % sp->plan.accumulate;
    mi->last = mi->micro == dp_sampler_step_micro(sp, b) - 1;
    if (count > ex->rep[0].n_slots)
        return dp_fail(DP_ERR_INTERNAL, "batch %d runs %d lanes at once, more than the %d slots", b, count,
                       ex->rep[0].n_slots);
    for (int r = 0; r < ex->n_local; r++) {
        int counts[count > 0 ? count : 1], total = 0;
        for (int i = 0; i < count; i++)
            total += counts[i] = dp_chunk_lane_count(&sp->plan, mi->step_samples, ex->rep[r].rank, first + i);
        if (total != bt[r].n)
            return dp_fail(DP_ERR_INTERNAL, "replica %d got %d samples in batch %d, its lanes hold %d", ex->rep[r].rank,
                           bt[r].n, b, total);
        dp_replica_assign(&ex->rep[r], first, count, counts);
    }
    return DP_OK;
}

dp_status dp_exec_stage(dp_executor *ex, const dp_batch *b, const dp_batch **out) {
    *out = b;
    if (host_memory(ex)) return DP_OK;
    if (dp_exec_launch_slot(ex) >= 0) return dp_exec_launch_stage(ex, b, out); /* its indices are up already */
    const size_t per = dp_shape_size(ex->model->input);
    /* through pinned staging, so the copies do not wait for the device; a staging copy is written
       again only once the uploads from it are done, which each device's event says */
    const int k = ex->stage_next;
    ex->stage_next = (k + 1) % DP_EXEC_STAGES;
    for (int r = 0; r < ex->n_local && ex->resident; r++) { /* one device (make_resident) */
        const dp_dev *d = ex->dev;
        dp_batch *db = &ex->d_batches[r];
        db->n = b[r].n;
        int32_t *hi = ex->h_idx[k * ex->n_local + r];
        if (r == 0) DP_TRY(dp_exec_staging_ready(ex, 0, k));
        memcpy(hi, b[r].idx, (size_t)b[r].n * sizeof(int32_t));
        DP_TRY(d->upload(d, ex->d_idx[r], hi, (size_t)b[r].n * sizeof(int32_t)));
        ex->k->gather_batch(&ex->kc, b[r].n, ex->data_c, ex->data_hw, ex->d_pixels, ex->d_labels, ex->d_idx[r],
                            ex->d_lut, db->x, db->y);
    }
    if (ex->resident) return (*out = ex->d_batches), dp_exec_staging_queued(ex, 0, k);
    for (int r = 0; r < ex->n_local; r++) {
        const dp_dev *d = dp_exec_dev(ex, r);
        const int i = ex->multi_dev ? r : 0;
        dp_batch *db = &ex->d_batches[r], *hs = &ex->h_stage[k * ex->n_local + r];
        const size_t nx = (size_t)b[r].n * per * sizeof(float), ny = (size_t)b[r].n * sizeof(int32_t);
        db->n = b[r].n;
        if (ex->multi_dev || r == 0) DP_TRY(dp_exec_staging_ready(ex, i, k));
        memcpy(hs->x, b[r].x, nx);
        memcpy(hs->y, b[r].y, ny);
        DP_TRY(d->upload(d, db->x, hs->x, nx));
        DP_TRY(d->upload(d, db->y, hs->y, ny));
        if (ex->multi_dev || r == ex->n_local - 1) DP_TRY(dp_exec_staging_queued(ex, i, k));
    }
    *out = ex->d_batches;
    return DP_OK;
}

dp_status dp_exec_begin_micro(dp_executor *ex, const dp_sampler *sp, const dp_batch *bt, int b, dp_micro_info *mi,
                              const dp_batch **out) {
    DP_TRY(dp_exec_assign(ex, sp, bt, b, mi));
    return dp_exec_stage(ex, bt, out);
}

dp_status dp_exec_zero_grads(dp_executor *ex) {
    const int lanes = ex->lanes_clear ? 1 : ex->n_lanes;
    const long total = (long)ex->n_local * lanes;
    const size_t nl = (size_t)ex->n_local * (size_t)ex->n_lanes, bytes = ex->model->params.n * sizeof(float);
    const size_t L = (size_t)ex->n_lanes;
    if (host_memory(ex)) {
#pragma omp parallel for num_threads(ex->team) schedule(static) if (total > 1)
        for (long q = 0; q < total; q++) memset(ex->rep[q / lanes].lane_grads[q % lanes], 0, bytes);
    } else {
        for (long q = 0; q < total; q++) {
            const dp_dev *d = dp_exec_dev(ex, (int)(q / lanes));
            DP_TRY(d->zero(d, ex->rep[q / lanes].lane_grads[q % lanes], bytes));
        }
        for (int r = 0; r < ex->n_local; r++) {
            const dp_dev *d = dp_exec_dev(ex, r);
            DP_TRY(d->zero(d, ex->d_lane_loss[r], L * sizeof(float)));
            DP_TRY(d->zero(d, ex->d_lane_correct[r], L * sizeof(int32_t)));
        }
    }
    ex->lanes_clear = 0;
    for (size_t i = 0; i < nl; i++) ex->lane_loss[i] = 0, ex->lane_correct[i] = 0;
    return DP_OK;
}

dp_status dp_exec_fetch_lane_losses(dp_executor *ex) {
    if (host_memory(ex)) return DP_OK;
    const size_t L = (size_t)ex->n_lanes;
    for (int r = 0; r < ex->n_local; r++) {
        const dp_dev *d = dp_exec_dev(ex, r);
        DP_TRY(d->download(d, ex->lane_loss + (size_t)r * L, ex->d_lane_loss[r], L * sizeof(float)));
        DP_TRY(d->download(d, ex->lane_correct + (size_t)r * L, ex->d_lane_correct[r], L * sizeof(int32_t)));
    }
    return DP_OK;
}


dp_status dp_exec_for_replicas(dp_executor *ex, dp_status (*fn)(void *arg, int r), void *arg) {
    dp_status st[ex->n_local];
    /* replica r on thread r of a device team (its GPU's thread in the passes), else the CPU's */
    const int team = (ex->dev->caps & DP_CAP_ASYNC) ? dp_exec_dev_team(ex) : dp_exec_team(ex, ex->n_local);
#pragma omp parallel for num_threads(team) schedule(static) if (ex->n_local > 1)
    for (int r = 0; r < ex->n_local; r++) st[r] = fn(arg, r);
    for (int r = 0; r < ex->n_local; r++)
        if (st[r] != DP_OK) return st[r];
    return DP_OK;
}

float *const *dp_exec_slices(dp_executor *ex, int which, size_t offset) {
    for (int r = 0; r < ex->n_local; r++) {
        float *base = which == DP_ARENA_PARAMS ? ex->rep[r].params
                      : which == DP_ARENA_GRADS ? ex->rep[r].grads
                                                : ex->rep[r].buffers;
        ex->ptrs[r] = base + offset;
    }
    return ex->ptrs;
}

dp_status dp_exec_put(dp_executor *ex, int r, float *dst, const float *host_src, size_t bytes) {
    if (dst == host_src) return DP_OK;
    return dp_exec_dev(ex, r)->upload(dp_exec_dev(ex, r), dst, host_src, bytes);
}

dp_status dp_exec_view(dp_executor *ex, int r, float *host_buf, const float *src, size_t bytes, const float **out) {
    if (host_memory(ex)) {
        *out = src;
        return DP_OK;
    }
    *out = host_buf;
    return dp_exec_dev(ex, r)->download(dp_exec_dev(ex, r), host_buf, src, bytes);
}

dp_status dp_exec_host_buffer(dp_executor *ex, float *dst, size_t n, float **out) {
    *out = NULL;
    if (host_memory(ex)) {
        *out = dst;
        return DP_OK;
    }
    return dp_alloc_floats(out, n ? n : 1, "a host buffer for the device's data");
}

void dp_exec_host_buffer_free(dp_executor *ex, float *dst, float *buf) {
    (void)ex;
    if (buf != dst) dp_free(buf);
}

/* Replica 0's weights through its host copies (the values pull would give) to the other devices. */
dp_status dp_exec_eval_prepare(dp_executor *ex) {
    if (!ex->multi_dev) return DP_OK;
    const dp_model *m = ex->model;
    dp_replica *r0 = &ex->rep[0];
    const dp_dev *d0 = r0->dev;
    DP_TRY(d0->download(d0, r0->h_params, r0->params, m->params.n * sizeof(float)));
    DP_TRY(d0->download(d0, r0->h_buffers, r0->buffers, m->buffers.n * sizeof(float)));
    for (int r = 1; r < ex->n_local; r++) {
        const dp_dev *d = dp_exec_dev(ex, r);
        DP_TRY(d->upload(d, ex->eval_params[r], r0->h_params, m->params.n * sizeof(float)));
        DP_TRY(d->upload(d, ex->eval_buffers[r], r0->h_buffers, m->buffers.n * sizeof(float)));
    }
    return DP_OK;
}

void dp_exec_eval_weights(const dp_executor *ex, int r, float **params, float **buffers) {
    const int own = ex->multi_dev && r > 0;
    *params = own ? ex->eval_params[r] : ex->rep[0].params;
    *buffers = own ? ex->eval_buffers[r] : ex->rep[0].buffers;
}

dp_status dp_exec_check_memory(dp_dev *const *devs, int n_devs, dp_backend_t backend, const dp_mem_estimate *e,
                               const dp_mem_shape *sh, int data_loaded) {
    const dp_dev *d0 = devs[0];
    if ((d0->caps & DP_CAP_HOST_MEMORY) || !d0->mem_info) return dp_check_memory(e, sh, data_loaded);
    for (int i = 0; i < n_devs; i++) {
        unsigned long long free_b = 0, total_b = 0;
        DP_TRY(devs[i]->mem_info(devs[i], &free_b, &total_b));
        DP_TRY(dp_check_device_memory(e, sh, data_loaded, free_b, dev_reserve(devs[i], backend), devs[i]->desc));
    }
    return DP_OK;
}
