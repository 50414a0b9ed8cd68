/* predict.c: the overhead model run from the trainer: the compute profile (measured here by a
 * short timing run, or read with --compute), the topologies, the predictions for DP and DDP on
 * 1, 2, 4, 8 devices, and their report. */
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdio.h>

#include "backends/backend_kind.h"
#include "core/timer.h"
#include "data/sampler.h"
#include "dp_config.h"
#include "io/atomic.h"
#include "sim/predict_report.h"
#include "sim/calibrate.h"
#include "sim/framework.h"
#include "sim/profile_run.h"
#include "sim/predict.h"
#include "train/settings.h"

#define MAX_TOPOS 8
#define MAX_DEVS 8
#define TIMING_STEPS 30

typedef struct {
    int batch, concurrent;
} row_key;

/* Per device count on a shared host (CPU processes): the lanes of a device's share (the
 * --chunks plan: C / N when N divides C) and the threads that run them (the cores split over
 * the processes). A GPU runs its share as one lane. */
static int lanes_for(const dp_config *c, const dp_topology *topo, int n) {
    if (!topo->shared_memory_bus) return 1;
    return c->chunks / n > 1 ? c->chunks / n : 1;
}

static int workers_for(const dp_config *c, const dp_topology *topo, int n) {
    if (!topo->shared_memory_bus) return 1;
    return c->threads / n > 1 ? c->threads / n : 1;
}

static int min_int(int a, int b) { return a < b ? a : b; }

static dp_status load_framework(const char *arg, dp_framework *fw);

/* The --predict (or predict's --topology) list, each item loaded: sim/topology.h's rules. */
static dp_status split_topologies(const dp_config *c, dp_topology *topos, int *n) {
    return dp_topology_load_list(c->predict_only ? "--topology" : "--predict", c->predict_topos, topos, MAX_TOPOS, n);
}

dp_status dp_predict_precheck(const dp_config *c) {
    if (c->save_profile) DP_TRY(dp_check_output_file("--save-profile", c->save_profile));
    dp_topology *topos = c->predict_topos ? calloc(MAX_TOPOS, sizeof *topos) : NULL;
    dp_profile *p = c->compute_profile ? calloc(1, sizeof *p) : NULL;
    dp_status s = DP_OK;
    if ((c->predict_topos && !topos) || (c->compute_profile && !p))
        s = dp_fail(DP_ERR_NOMEM, "out of memory checking --predict and --compute");
    int n = 0;
    const char *flag = c->predict_only ? "--topology" : "--predict";
    if (s == DP_OK && topos) s = split_topologies(c, topos, &n);
    if (s == DP_OK && p) s = dp_profile_load(c->compute_profile, c->model, p), flag = "--compute";
    if (s != DP_OK && strncmp(dp_last_error(), "--", 2) != 0) { /* name the flag the file came from */
        char msg[DP_ERROR_MAX];
        snprintf(msg, sizeof msg, "%s", dp_last_error());
        s = dp_fail(s, "%s: %s", flag, msg);
    }
    if (s == DP_OK && c->framework) { /* before the data set is read */
        dp_framework fw;
        s = load_framework(c->framework, &fw);
    }
    if (s == DP_OK && p && strcmp(p->model, c->model) != 0)
        s = dp_fail(DP_ERR_USAGE, "--compute %s: a profile of model %s, but this run is %s", c->compute_profile,
                    p->model, c->model);
    free(topos), free(p);
    return s;
}

/* The rows every prediction needs, measured once each. */
static dp_status measure_rows(dp_trainer *t, const dp_topology *topos, int n_topos, const int *devs, int n_devs,
                              dp_profile *p) {
    row_key need[DP_PROFILE_MAX_ROWS];
    int n_need = 0;
    const int B = t->cfg.batch_size;
    for (int k = 0; k < n_topos; k++)
        for (int i = 0; i < n_devs; i++) {
            int n = devs[i], lanes = lanes_for(&t->cfg, &topos[k], n), b = (B + n - 1) / n;
            int workers = min_int(workers_for(&t->cfg, &topos[k], n), lanes);
            row_key r = {(b + lanes - 1) / lanes, topos[k].shared_memory_bus ? n * workers : 1};
            int have = 0;
            for (int j = 0; j < n_need; j++) have |= need[j].batch == r.batch && need[j].concurrent == r.concurrent;
            if (!have && n_need < DP_PROFILE_MAX_ROWS) need[n_need++] = r;
        }
    for (int j = 0; j < n_need; j++) {
        int have = 0; /* a row from the training run itself is kept */
        for (int i = 0; i < p->n_rows; i++)
            have |= p->rows[i].batch == need[j].batch && p->rows[i].concurrent == need[j].concurrent;
        if (!have) DP_TRY(dp_profile_measure(&t->model, t->dev, need[j].batch, need[j].concurrent, TIMING_STEPS, p));
    }
    return DP_OK;
}

/* Real steps of a one-replica trainer t: their mean period. The mean, not the median: an epoch is
 * the sum of its steps, and the slow tail (a loader refill, a preemption) is in that sum: on this
 * 2-core machine an epoch was 4-8 % longer than its median step x steps. */
static dp_status step_period(dp_trainer *t, double *out) {
    /* up to 1000 steps (LeNet: about a second), but no more than 3 s of them once 5 are in: a
       large model's step dwarfs its overhead, and ResNet-18 on a CPU would take 40 minutes */
    enum { WARM = 5, STEPS = 1000, MIN_STEPS = 5 };
    const double budget_s = 3.0;
    double first = 0, last = 0;
    int k = 0;
    const dp_batch *batches;
    dp_status s;
    *out = 0;
    DP_TRY(dp_loader_start_epoch(t->loader, 0));
    for (int b = 0; (s = dp_loader_next(t->loader, &batches, NULL)) == DP_OK; b++) {
        last = dp_now();
        if (b == WARM) first = last;
        if (b > WARM && (++k >= STEPS || (k >= MIN_STEPS && last - first > budget_s))) break;
        dp_step_metrics m = {0};
        DP_TRY(dp_train_micro(t, batches, b, t->cfg.lr, &m));
    }
    if (s != DP_OK && s != DP_DONE) return s;
    if (k < MIN_STEPS) return DP_OK; /* too few batches in an epoch to tell */
    *out = (last - first) / k;
    return DP_OK;
}

/* The start signal of the processes of a shape: 0 wait, 1 run, -1 give up. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int go;
} co_start;

/* One of the processes of a shape, run on a thread of its own (co_main). */
typedef struct {
    dp_trainer *t;
    co_start *start;
    double period;
    dp_status s;
} co_run;

static void *co_main(void *arg) {
    co_run *r = arg;
    pthread_mutex_lock(&r->start->mu);
    while (!r->start->go) pthread_cond_wait(&r->start->cv, &r->start->mu);
    const int go = r->start->go;
    pthread_mutex_unlock(&r->start->mu);
    r->s = go > 0 ? step_period(r->t, &r->period) : DP_OK;
    if (r->s != DP_OK) fprintf(stderr, "dptrain predict: a step-overhead companion failed: %s\n", dp_last_error());
    return NULL;
}

static void co_signal(co_start *st, int go) {
    pthread_mutex_lock(&st->mu);
    st->go = go;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
}

/* The CPU trainer's cost per step beyond the nodes, for `devices` processes each running
 * `lanes` lanes of its `batch` samples on `workers` threads (one device of a shared-memory
 * topology of `cores` cores): `devices` one-replica sim trainers of that shape (--batch-size batch
 * --chunks lanes --threads workers), all at once (the others on threads of their own, as the
 * other processes would be), run up to 1000 real steps each, an epoch and 3 s at most (loader,
 * lane trees, thread barriers, logging included); the mean period of the first, less the model's compute for the same
 * shape and concurrency, is the overhead. Running them together puts in what a process pays for
 * sharing the host with the others (its loader's CPU, the others' traffic) beyond the nodes. */
static dp_status measure_step_overhead(dp_trainer *t, dp_profile *p, int devices, int cores, int batch, int lanes,
                                       int workers) {
    enum { MAX_CO = 64 };
    if (dp_profile_has_overhead(p, lanes, workers) || !t->have_train) return DP_OK;
    if (devices > MAX_CO) devices = MAX_CO;
    dp_config one = t->cfg;
    one.backend = "sim", one.replicas = 1, one.chunks = lanes, one.threads = workers, one.accumulate = 1;
    /* on this process's first device (the rank's GPU under nccl, the first of --gpus), not --gpu's:
       the sim takes one device, by ordinal */
    one.n_gpus = 0, one.gpu = t->dev->main.kc.ordinal;
    one.batch_size = batch;
    dp_settings_drop_files(&one); /* the helper writes and reads none of the run's files */
    one.predict_only = 0, one.quiet = 1, one.progress = 0, one.epochs = 1;
    dp_trainer *tk[MAX_CO] = {0};
    co_run run[MAX_CO];
    pthread_t th[MAX_CO];
    co_start start = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .go = 0};
    dp_status s = DP_OK;
    int made = 0, started = 1;
    for (; made < devices && s == DP_OK; made++) s = dp_trainer_create(&one, &tk[made]);
    if (s != DP_OK) made--; /* the failed one was not made */
    if (s == DP_OK) {
        for (int k = 0; k < devices; k++) run[k] = (co_run){.t = tk[k], .start = &start};
        for (; started < devices; started++)
            if (pthread_create(&th[started], NULL, co_main, &run[started]) != 0) break;
        if (started < devices) s = dp_fail(DP_ERR_INTERNAL, "predict: cannot start the step-overhead companions");
        co_signal(&start, s == DP_OK ? 1 : -1);
        if (s == DP_OK) co_main(&run[0]), s = run[0].s;
        for (int k = 1; k < started; k++) pthread_join(th[k], NULL);
    }
    for (int k = 0; k < made; k++) dp_trainer_destroy(tk[k]);
    DP_TRY(s);
    /* the model's compute of that shape at that concurrency, with free links */
    const dp_topology here = {.bus_bw = 1e30, .host_bw = 1e30, .devices = cores, .shared_memory_bus = 1};
    const dp_predict_query q = {.mode = DP_PREDICT_DDP, .devices = devices, .global_batch = batch * devices,
                                .steps_per_epoch = 1, .lanes = lanes, .workers = workers};
    dp_prediction pr;
    DP_TRY(dp_profile_set_overhead(p, lanes, workers, 0));
    DP_TRY(dp_predict(p, &here, &q, &pr));
    const double step = run[0].period, model = pr.compute_s;
    return dp_profile_set_overhead(p, lanes, workers, step > model ? step - model : 0);
}

/* Overheads for every device count of every shared-memory topology up to its cores (beyond,
 * processes take turns on the cores and the nearest shape's overhead is used). */
static dp_status measure_overheads(dp_trainer *t, const dp_topology *topos, int n_topos, const int *devs, int n_devs,
                                   dp_profile *p) {
    for (int k = 0; k < n_topos; k++)
        for (int i = 0; i < n_devs && topos[k].shared_memory_bus && devs[i] <= topos[k].devices; i++)
            DP_TRY(measure_step_overhead(t, p, devs[i], topos[k].devices, (t->cfg.batch_size + devs[i] - 1) / devs[i],
                                         lanes_for(&t->cfg, &topos[k], devs[i]), workers_for(&t->cfg, &topos[k], devs[i])));
    return DP_OK;
}

/* The run's last step's collectives, as recorded, into the log. */
static dp_status log_collectives(dp_trainer *t) {
    static const char *const kinds[DP_COLL_KINDS] = {"allreduce", "broadcast", "reduce", "allgather", "gather",
                                                     "scatter", "barrier"};
    if (t->cfg.predict_only) return DP_OK;
    for (int i = 0; i < t->trace.n; i++) {
        const dp_coll_record *r = &t->trace.recs[i];
        if (!dp_report_logging(&t->report)) return DP_OK;
        dp_json j = dp_json_begin("collective");
        dp_json_int(&j, "step", t->step);
        dp_json_int(&j, "index", i);
        dp_json_str(&j, "kind", kinds[r->kind]);
        dp_json_real(&j, "bytes", "%.0f", r->bytes);
        dp_json_str(&j, "algorithm", r->algorithm);
        dp_json_real(&j, "t_issue_s", "%.9g", r->t_issue);
        dp_json_real(&j, "seconds", "%.9g", r->seconds);
        dp_json_int(&j, "ready_node", r->ready_node);
        DP_TRY(dp_report_json(&t->report, &j, 0));
    }
    return DP_OK;
}

/* The training run's own per-node times, as the row of its lane size and concurrency: each
 * lane's work on its own, timed around every node call (step.c), averaged over the run. */
static dp_status row_from_run(dp_trainer *t, dp_profile *p) {
    /* a GPU's nodes are queued, not run, while the trainer's clock reads them: its rows come
       from the timing run's events */
    if (!dp_exec_clock_times_work(t->ex)) return DP_OK;
    long runs, samples;
    const double *node_s = dp_exec_node_times(t->ex, &runs, &samples);
    if (!node_s || runs < 1 || t->cfg.predict_only) return DP_OK;
    const int nn = t->model.n_nodes, slots = dp_exec_n_local(t->ex) * dp_exec_replica(t->ex, 0)->n_slots;
    const int lane_batch = (int)((samples + runs / 2) / runs);
    const int conc = min_int(t->cfg.threads, slots);
    /* the loss, the optimizer step and the lane sum of that row come from the timing run */
    DP_TRY(dp_profile_measure(&t->model, t->dev, lane_batch, conc, TIMING_STEPS, p));
    dp_profile_row *row = dp_profile_row_for(p, lane_batch, conc);
    if (!row) return DP_ERR_INTERNAL;
    for (int i = 0; i < nn; i++) {
        double f = 0, b = 0;
        for (int q = 0; q < slots; q++) f += node_s[((size_t)q * 2) * nn + i], b += node_s[((size_t)q * 2 + 1) * nn + i];
        row->fwd_s[i] = f / runs, row->bwd_s[i] = b / runs;
    }
    row->steps = t->step;
    snprintf(p->device, sizeof p->device, "cpu-run");
    return DP_OK;
}

/* The profile's device name, one word: the GPU's name ("NVIDIA-H100-80GB-HBM3"). */
static void device_token(const dp_dev *d, char *out, size_t size) {
    const char *src = d->desc[0] ? d->desc : d->name, *paren = strstr(src, " (");
    size_t n = paren ? (size_t)(paren - src) : strlen(src);
    if (n >= size) n = size - 1;
    memcpy(out, src, n);
    out[n] = 0;
    for (char *c = out; *c; c++)
        if (*c == ' ' || *c == '\t') *c = '-';
}

/* The device counts predicted: 1, 2, 4, 8 and --replicas, none above the global batch. */
static int device_counts(const dp_config *c, int *devs) {
    int n_devs = 4;
    devs[0] = 1, devs[1] = 2, devs[2] = 4, devs[3] = 8;
    if (c->predict_replicas > 1 && c->predict_replicas != 2 && c->predict_replicas != 4 && c->predict_replicas != 8) {
        int k = n_devs++;
        while (k > 0 && devs[k - 1] > c->predict_replicas) devs[k] = devs[k - 1], k--;
        devs[k] = c->predict_replicas;
    }
    /* a device needs a sample: a global batch of 4 is predicted on 1, 2 and 4 devices */
    while (n_devs > 1 && devs[n_devs - 1] > c->batch_size) n_devs--;
    return n_devs;
}

/* The numerics a profile's times are of, from this run's flags (dp_profile_match compares them). */
static void describe_numerics(const dp_config *c, dp_profile *p) {
    p->bf16 = c->precision == DP_PRECISION_BF16;
    p->tf32 = dp_config_uses_tf32(c); /* as the devices were opened: bf16 on CUDA is TF32 */
}

/* A measured single-device time of another framework (--measured-epoch / --measured-step): its step,
 * its epoch, its batch and steps, and the framework's costs. */
typedef struct {
    const dp_framework *fw;
    dp_framework_shape shape;
    int batch, n_batches, from_epoch;
    double step_s, epoch_s;
} measured_run;

/* The query's prediction made the framework's (framework.h): the measured step's compute split by
 * the samples a device takes, the model's communication, the framework's costs; the speedup is
 * against the measured epoch. */
static dp_status from_measured(const measured_run *mr, const dp_profile *p, const dp_topology *topo,
                               const dp_predict_query *q, dp_prediction *out) {
    dp_predict_query one = *q;
    one.devices = 1, one.global_batch = mr->batch, one.steps_per_epoch = mr->n_batches;
    dp_prediction base, model = *out;
    DP_TRY(dp_predict(p, topo, &one, &base));
    const double share = (double)q->global_batch / q->devices / mr->batch;
    dp_status s = dp_framework_step(mr->fw, &mr->shape, q->mode, q->devices, share, mr->step_s, &base, &model,
                                    q->steps_per_epoch, out);
    if (s != DP_OK) {
        char msg[DP_ERROR_MAX];
        snprintf(msg, sizeof msg, "%s", dp_last_error());
        return dp_fail(s, "--measured-%s: %s", mr->from_epoch ? "epoch" : "step", msg);
    }
    out->speedup = mr->epoch_s / out->epoch_s;
    out->efficiency = out->speedup / q->devices;
    return DP_OK;
}

/* DP and DDP on every topology and device count from profile p (this run's model and buckets),
 * reported (console, log) and plotted; from a measured time when mr is set. */
static dp_status predict_and_report(const dp_config *c, dp_reporter *report, dp_profile *p, const char *model_name,
                                    int n_batches, const dp_topology *topos, int n_topos, const int *devs, int n_devs,
                                    const measured_run *mr) {
    dp_prediction *pred = calloc((size_t)MAX_TOPOS * 2 * MAX_DEVS, sizeof *pred);
    if (!pred) return dp_fail(DP_ERR_NOMEM, "out of memory for the overhead model");
    dp_status s = DP_OK;
    dp_predict_series series[MAX_TOPOS];
    char what[2 * 4096 + 512]; /* two paths of up to PATH_MAX (framework, profile), whole */
    if (mr)
        snprintf(what, sizeof what, "%s, global batch %d, %d steps/epoch, from %s's measured %.6g s %s on one device "
                 "(batch %d; speedup against its epoch), its costs %s, links and timeline: %s profile %s", model_name,
                 c->batch_size, n_batches, mr->fw->name, mr->from_epoch ? mr->epoch_s : mr->step_s,
                 mr->from_epoch ? "epoch" : "step", mr->batch,
                 mr->fw->path, p->device, c->compute_profile);
    else
        snprintf(what, sizeof what, "%s, global batch %d, %d steps/epoch, compute: %s profile%s%s", model_name,
                 c->batch_size, n_batches, p->device, c->compute_profile ? " " : " measured here",
                 c->compute_profile ? c->compute_profile : "");
    for (int k = 0; k < n_topos && s == DP_OK; k++) {
        series[k] = (dp_predict_series){.topo = &topos[k], .n = n_devs, .devices = devs};
        for (int m = 0; m < 2 && s == DP_OK; m++) {
            dp_prediction *out = pred + ((size_t)k * 2 + m) * MAX_DEVS;
            for (int i = 0; i < n_devs && s == DP_OK; i++) {
                /* lanes depend on n on a shared host: one sweep per device count, speedup vs 1 */
                dp_predict_query q = {.mode = m ? DP_PREDICT_DP : DP_PREDICT_DDP, .devices = devs[i],
                                      .global_batch = c->batch_size, .steps_per_epoch = n_batches,
                                      .lanes = lanes_for(c, &topos[k], devs[i]),
                                      .workers = workers_for(c, &topos[k], devs[i])};
                dp_predict_query one = q;
                one.devices = 1, one.lanes = lanes_for(c, &topos[k], 1), one.workers = workers_for(c, &topos[k], 1);
                dp_prediction base;
                s = dp_predict(p, &topos[k], &one, &base);
                if (s == DP_OK) s = dp_predict(p, &topos[k], &q, &out[i]);
                out[i].speedup = out[i].step_s > 0 ? base.step_s / out[i].step_s : 0;
                out[i].efficiency = out[i].speedup / devs[i];
                if (s == DP_OK && mr) s = from_measured(mr, p, &topos[k], &q, &out[i]);
            }
            series[k].pred[m] = out;
        }
        /* a GPU topology priced with a CPU profile: its compute column is this CPU's, said where it is read */
        char what_k[sizeof what + 256];
        const int cpu_profile = strncmp(p->device, "cpu", 3) == 0;
        snprintf(what_k, sizeof what_k, "%s%s%s%s", what, cpu_profile && !topos[k].shared_memory_bus
                 ? "; NOTE: the compute is this CPU's, not a " : "", cpu_profile && !topos[k].shared_memory_bus
                 ? topos[k].device : "", cpu_profile && !topos[k].shared_memory_bus
                 ? "'s (give --compute a profile recorded on one: --save-profile)" : "");
        if (s == DP_OK) s = dp_report_predictions(report, what_k, &series[k]);
    }
    if (s == DP_OK && c->plot_path && n_topos) {
        char title[160];
        snprintf(title, sizeof title, "%s, global batch %d: predicted speedup (DDP solid, DP dashed)", model_name,
                 c->batch_size);
        s = dp_plot_speedup(c->plot_path, title, series, n_topos);
    }
    free(pred);
    return s;
}

dp_status dp_predict_run(dp_trainer *t) {
    const dp_config *c = &t->cfg;
    if (!c->predict_topos && !c->save_profile) return DP_OK;
    DP_TRY(log_collectives(t));
    dp_topology topos[MAX_TOPOS];
    int n_topos = 0;
    if (c->predict_topos) DP_TRY(split_topologies(c, topos, &n_topos));
    for (int k = 0; k < n_topos && !dp_exec_clock_times_work(t->ex) && !c->compute_profile; k++)
        if (topos[k].shared_memory_bus)
            return dp_fail(DP_ERR_USAGE, "--predict %s: a topology of CPU processes sharing the host's memory, "
                                         "but this run computes on %s: predict it from a CPU run (--device cpu), or "
                                         "give --compute a CPU profile", topos[k].name, t->dev->name);
    int devs[MAX_DEVS];
    const int n_devs = device_counts(c, devs);
    dp_profile *p = calloc(1, sizeof *p);
    if (!p) return dp_fail(DP_ERR_NOMEM, "out of memory for the overhead model");
    dp_status s = DP_OK;
    if (c->compute_profile) {
        /* the times are this run's only if the profile describes this run's model exactly */
        dp_profile *run = calloc(1, sizeof *run);
        s = run ? dp_profile_load(c->compute_profile, t->model.name, p)
                : dp_fail(DP_ERR_NOMEM, "out of memory for the overhead model");
        if (s == DP_OK) s = dp_profile_describe(&t->model, dp_exec_bucket_nodes(t->ex), run);
        if (s == DP_OK) describe_numerics(c, run);
        if (s == DP_OK) s = dp_profile_match("--compute", p, run);
        free(run);
    } else {
        s = dp_profile_describe(&t->model, dp_exec_bucket_nodes(t->ex), p);
        describe_numerics(c, p);
        if (!dp_exec_clock_times_work(t->ex)) device_token(t->dev, p->device, sizeof p->device);
        if (s == DP_OK) s = row_from_run(t, p);
        if (s == DP_OK && n_topos) s = measure_rows(t, topos, n_topos, devs, n_devs, p);
        if (s == DP_OK && n_topos) s = measure_overheads(t, topos, n_topos, devs, n_devs, p);
        if (s == DP_OK && !n_topos) /* --save-profile alone: the rows of this run's shape */
            for (int n = 1; n <= 8 && s == DP_OK; n *= 2)
                s = dp_profile_measure(&t->model, t->dev, (c->batch_size + n - 1) / n, 1, TIMING_STEPS, p);
    }
    if (s == DP_OK && c->save_profile) s = dp_profile_save("--save-profile", c->save_profile, p);
    if (s == DP_OK) s = predict_and_report(c, &t->report, p, t->model.name, t->sampler.n_batches, topos, n_topos, devs,
                                           n_devs, NULL);
    free(p);
    return s;
}

/* What `predict --compute` needs of the data set: its sample shape, classes and training samples.
 * Synthetic data is described by its flags (none is generated); a file set is read once for them. */
static dp_status data_shape(const dp_config *c, dp_shape *in, int *classes, int *samples) {
    if (strcmp(c->data.name, "synthetic") == 0) {
        *in = (dp_shape){c->data.c, c->data.h, c->data.w};
        *classes = c->data.n_classes, *samples = c->data.samples;
        return DP_OK;
    }
    dp_dataset d = {0};
    DP_TRY(dp_dataset_load(&c->data, 1, &d));
    *in = (dp_shape){d.c, d.h, d.w};
    *classes = d.n_classes, *samples = d.n;
    dp_dataset_free(&d);
    return DP_OK;
}

/* The model's description and the epoch's steps: what the prediction reads of the run. */
static dp_status describe_only(const dp_config *c, dp_model *m, dp_profile *run, int *n_batches, int *n_samples) {
    dp_shape in;
    int classes, samples;
    DP_TRY(data_shape(c, &in, &classes, &samples));
    *n_samples = samples;
    DP_TRY(dp_model_build(c->model, in, classes, m));
    dp_model_set_precision(m, c->precision == DP_PRECISION_BF16);
    DP_TRY(dp_layout_make_buckets(&m->params, (size_t)(c->bucket_mb * 1024 * 1024)));
    int bucket_node[DP_PROFILE_MAX_BUCKETS] = {0};
    for (int b = 0; b < m->params.n_buckets && b < DP_PROFILE_MAX_BUCKETS; b++) bucket_node[b] = dp_model_bucket_node(m, b);
    DP_TRY(dp_profile_describe(m, bucket_node, run));
    describe_numerics(c, run);
    dp_sampler smp; /* the trainer's own count of an epoch's steps (padding, --drop-last) */
    DP_TRY(dp_sampler_init(&smp, samples, c->replicas, c->batch_size, 0, c->drop_last, c->seed));
    *n_batches = smp.n_batches;
    dp_sampler_free(&smp);
    if (*n_batches < 1)
        return dp_fail(DP_ERR_USAGE, "--batch-size %d: the %d training samples give no full batch with --drop-last",
                       c->batch_size, samples);
    return DP_OK;
}

/* The config line of a predict run that trains nothing: the model, the data and the batch. */
static dp_status log_predict_config(dp_reporter *r, const dp_config *c, const dp_model *m, int n_batches) {
    size_t n_params = 0; /* real parameters, not the arena's alignment padding */
    for (int i = 0; i < m->params.n_tensors; i++) n_params += m->params.tensors[i].s.count;
    dp_json b = dp_json_begin("config");
    dp_json_str(&b, "version", DP_VERSION);
    dp_json_str(&b, "model", m->name);
    dp_json_uint(&b, "params", n_params);
    dp_json_str(&b, "dataset", c->data.name);
    dp_json_str(&b, "data", strcmp(c->data.name, "synthetic") == 0 ? "" : c->data.dir);
    dp_json_int(&b, "batch_size", c->batch_size);
    dp_json_int(&b, "steps_per_epoch", n_batches);
    dp_json_int(&b, "buckets", m->params.n_buckets);
    dp_json_int(&b, "threads", c->threads);
    dp_json_int(&b, "chunks", c->chunks);
    dp_json_str(&b, "compute", c->compute_profile);
    return dp_report_json(r, &b, 1);
}

/* --framework's file: a bad one is bad input (exit 2), named with the flag. */
static dp_status load_framework(const char *arg, dp_framework *fw) {
    dp_status s = dp_framework_load(arg, fw);
    if (s == DP_OK) return s;
    char msg[DP_ERROR_MAX];
    snprintf(msg, sizeof msg, "%s", dp_last_error());
    return strncmp(msg, "--", 2) == 0 ? dp_fail(DP_ERR_USAGE, "%s", msg) : dp_fail(DP_ERR_USAGE, "--framework: %s", msg);
}

/* --measured-epoch / --measured-step, --measured-batch and --framework, read. */
static dp_status measured_from_flags(const dp_config *c, const dp_model *m, int samples, dp_framework *fw,
                                     measured_run *mr) {
    DP_TRY(load_framework(c->framework, fw));
    mr->batch = c->measured_batch ? c->measured_batch : c->batch_size;
    dp_sampler smp; /* the measured run's steps: one device, its batch */
    DP_TRY(dp_sampler_init(&smp, samples, 1, mr->batch, 0, c->drop_last, c->seed));
    mr->n_batches = smp.n_batches;
    dp_sampler_free(&smp);
    if (mr->n_batches < 1)
        return dp_fail(DP_ERR_USAGE, "--measured-batch %d: the %d training samples give no full batch with --drop-last",
                       mr->batch, samples);
    mr->from_epoch = c->measured_epoch_s > 0;
    mr->epoch_s = c->measured_epoch_s;
    mr->step_s = c->measured_epoch_s > 0 ? c->measured_epoch_s / mr->n_batches : c->measured_step_s;
    if (!(mr->epoch_s > 0)) mr->epoch_s = mr->step_s * mr->n_batches;
    mr->shape.tensors = m->params.n_tensors + m->buffers.n_tensors;
    mr->shape.buckets = m->params.n_buckets;
    return DP_OK;
}

dp_status dp_predict_from_profile(const dp_config *cfg) {
    dp_config c = *cfg;
    if (c.threads <= 0) c.threads = dp_default_threads();
    if (c.plot_path) DP_TRY(dp_check_output_file("--plot", c.plot_path));
    DP_TRY(dp_report_check_path(c.log_flag, c.log_path));
    dp_topology topos[MAX_TOPOS];
    int n_topos = 0, devs[MAX_DEVS], n_batches = 0, n_samples = 0;
    DP_TRY(split_topologies(&c, topos, &n_topos));
    const int n_devs = device_counts(&c, devs);
    dp_model m;
    memset(&m, 0, sizeof m);
    dp_profile *p = calloc(1, sizeof *p), *run = calloc(1, sizeof *run);
    dp_status s = p && run ? DP_OK : dp_fail(DP_ERR_NOMEM, "out of memory for the overhead model");
    if (s == DP_OK) s = describe_only(&c, &m, run, &n_batches, &n_samples);
    if (s == DP_OK) s = dp_profile_load(c.compute_profile, m.name, p);
    if (s == DP_OK) s = dp_profile_match("--compute", p, run);
    if (s == DP_OK && c.save_profile) s = dp_profile_save("--save-profile", c.save_profile, p);
    dp_reporter r;
    memset(&r, 0, sizeof r);
    int opened = 0;
    if (s == DP_OK) s = dp_report_open(&r, c.log_flag, c.log_path, 0, !c.quiet, 0), opened = s == DP_OK;
    if (s == DP_OK) s = log_predict_config(&r, &c, &m, n_batches);
    dp_framework fw;
    measured_run mr = {.fw = &fw};
    const int measured = c.measured_epoch_s > 0 || c.measured_step_s > 0;
    if (s == DP_OK && measured) s = measured_from_flags(&c, &m, n_samples, &fw, &mr);
    if (s == DP_OK) s = predict_and_report(&c, &r, p, m.name, n_batches, topos, n_topos, devs, n_devs,
                                           measured ? &mr : NULL);
    if (opened) {
        if (s != DP_OK) dp_report_error(&r, dp_last_error());
        dp_status cs = dp_report_close(&r);
        if (s == DP_OK) s = cs;
    }
    dp_model_free(&m);
    free(p), free(run);
    return s;
}

dp_status dp_predict_calibrate(const dp_config *c) {
    dp_backend_config bc = {.name = c->backend, .replicas = c->replicas, .nthreads = c->threads > 0 ? c->threads : 1,
                            .algorithm = c->allreduce_algo, .timeout_s = c->timeout_s, .argc = c->argc,
                            .argv = c->argv};
    dp_backend_t b = NULL;
    dp_status s = dp_backend_create(&bc, &b);
    /* before the sweep, not after: only rank 0 writes the file */
    if (s == DP_OK && c->calibrate_out && dp_backend_rank(b, 0) == 0) s = dp_check_output_file("--out", c->calibrate_out);
    /* the topology is named for where it was measured: the simulated links in this process, or the host's */
    if (s == DP_OK) s = dp_calibrate(b, b->kind && b->kind->in_process ? "sim" : "host", c->calibrate_out, stdout);
    if (s != DP_OK) {
        fprintf(stderr, "dptrain: %s\n", dp_last_error());
        if (b) b->failed = 1;
    }
    dp_backend_destroy(b);
    return s;
}
