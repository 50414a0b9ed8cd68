/* trainer.c: setting a run up (backend, data, model, replicas, loader: everything checked
 * before a file is written), the epoch loop, and tearing it down. */
#include "train/trainer.h"

#include "backends/launch_env.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cpu_count.h"
#include "core/sysmem.h"
#include "core/timer.h"
#include "dp_config.h"
#include "io/atomic.h"
#include "io/checkpoint.h"
#include "io/ckpt_dir.h"
#include "kernels/conv_algos.h"
#include "report/progress.h"
#include "exec/devices.h"
#include "exec/launch.h"
#include "exec/memory.h"
#include "train/settings.h"
#include "train/signals.h"
#include "train/strategy.h"

static dp_status load_data(dp_trainer *t) {
    dp_config *c = &t->cfg;
    /* the weights' file first: a directory (its newest checkpoint named), a FIFO or a missing file
       there is named before a missing data set */
    const char *from = c->eval_only ? c->load_path : c->init_path;
    if (from) DP_TRY(dp_checkpoint_check_path(c->eval_only ? "--load" : "--init-from", from));
    if (!c->eval_only) {
        DP_TRY(dp_dataset_load(&c->data, 1, &t->train));
        t->have_train = 1;
    }
    DP_TRY(dp_dataset_load(&c->data, 0, &t->test));
    if (t->have_train && (t->test.c != t->train.c || t->test.h != t->train.h || t->test.w != t->train.w ||
                          t->test.n_classes != t->train.n_classes))
        return dp_fail(DP_ERR_FORMAT, "%s: the test images are %dx%dx%d but the training images %dx%dx%d", c->data.dir,
                       t->test.c, t->test.h, t->test.w, t->train.c, t->train.h, t->train.w);
    return DP_OK;
}

/* Rank 0's parameters (fresh, or from --load) copied to every replica, as DDP does at start. */
static dp_status init_params(dp_trainer *t) {
    const dp_model *m = &t->model;
    dp_rng rng;
    dp_rng_seed(&rng, t->cfg.seed, 0x1A17);
    const char *from = t->cfg.eval_only ? t->cfg.load_path : t->cfg.init_path;
    for (int r = 0; r < dp_exec_n_local(t->ex); r++) {
        if (dp_exec_rank(t->ex, r) != 0) continue;
        /* num_batches_tracked goes on from the file's, as PyTorch's load_state_dict does; only rank 0
         * writes checkpoints, so only its process needs the count */
        if (from)
            DP_TRY(dp_checkpoint_load_weights(t->cfg.eval_only ? "--load" : "--init-from", from, m, dp_exec_replica(t->ex, r)->h_params,
                                              dp_exec_replica(t->ex, r)->h_buffers, &t->bn_batches));
        else
            dp_model_init_params(m, dp_exec_replica(t->ex, r)->h_params, dp_exec_replica(t->ex, r)->h_buffers, &rng);
        DP_TRY(dp_replica_push(dp_exec_replica(t->ex, r), m)); /* a device's arenas from the host copies */
    }
    DP_TRY(dp_exec_broadcast(t->ex, dp_exec_slices(t->ex, DP_ARENA_PARAMS, 0), m->params.n, 0));
    if (m->buffers.n) DP_TRY(dp_exec_broadcast(t->ex, dp_exec_slices(t->ex, DP_ARENA_BUFFERS, 0), m->buffers.n, 0));
    return DP_OK;
}

/* The lanes, activation slots and samples per slot the replicas need: from the sampler's plan
 * when training (n_train > 0; s is initialised), from the thread count for evaluation only. */
typedef struct { int lanes, slots, lane_batch, max_local; } lane_plan;

static dp_status plan_lanes(dp_trainer *t, dp_sampler *s, int n_train, lane_plan *p) {
    const dp_config *c = &t->cfg;
    if (n_train > 0) {
        DP_TRY(dp_sampler_init(s, n_train, t->world, c->batch_size, c->shuffle, c->drop_last, c->seed));
        if (s->n_batches < 1)
            return dp_fail(DP_ERR_USAGE, "--batch-size %d: the %d training samples give no full batch with --drop-last",
                           c->batch_size, n_train);
        s->contiguous = t->strategy->contiguous_sampler; /* nn.DataParallel scatters contiguous blocks */
        dp_sampler_set_plan(s, c->chunks, c->accumulate);
        p->lanes = s->plan.lanes;
        p->slots = s->max_lanes;
        p->lane_batch = dp_chunk_max_lane(&s->plan);
        p->max_local = dp_sampler_max_local(s);
    } else { /* evaluation only: slots for the threads, batches of the training size */
        p->lanes = 1;
        const int n_local = dp_backend_n_local(t->backend);
        p->slots = n_local < c->threads ? c->threads / n_local : 1;
        p->lane_batch = (c->batch_size + t->world - 1) / t->world;
        p->max_local = p->lane_batch;
    }
    return DP_OK;
}

static dp_status check_memory(dp_trainer *t, int n_local, const dp_model *m, const dp_dataset *train,
                              const dp_dataset *test, const lane_plan *p, int data_loaded) {
    const dp_config *c = &t->cfg;
    dp_mem_estimate me;
    dp_mem_shape sh = {.n_local = n_local, .n_lanes = p->lanes, .n_slots = p->slots, .lane_batch = p->lane_batch,
                       .max_local = p->max_local,
                       .loader_slots = train ? (c->workers > 0 ? 2 * c->workers + 1 : 1) : 0, .k = t->dev->k,
                       .per_device = t->n_devs > 1 ? 1 : 0};
    dp_estimate_memory(m, train, test, &sh, &me);
    return dp_exec_check_memory(t->devs, t->n_devs, t->backend, &me, &sh, data_loaded);
}

/* Synthetic data's size is known from the flags: estimate the whole run before generating
 * gigabytes of it (files are checked by their readers, then the run after loading). */
static void default_workers(dp_trainer *t, const lane_plan *lp);

static dp_status precheck_synthetic(dp_trainer *t) {
    const dp_config *c = &t->cfg;
    if (strcmp(c->data.name, "synthetic") != 0) return DP_OK;
    dp_dataset train = {.n = c->data.samples, .c = c->data.c, .h = c->data.h, .w = c->data.w};
    dp_dataset test = train;
    test.n = c->data.samples / 5 > 0 ? c->data.samples / 5 : 1;
    dp_model m;
    if (dp_model_build(c->model, (dp_shape){c->data.c, c->data.h, c->data.w}, c->data.n_classes, &m) != DP_OK)
        return DP_OK; /* the same build after loading reports it, with the data's shape */
    dp_model_set_precision(&m, c->precision == DP_PRECISION_BF16);
    dp_sampler tmp;
    lane_plan lp;
    dp_status s = plan_lanes(t, &tmp, c->eval_only ? 0 : train.n, &lp);
    if (!c->eval_only) dp_sampler_free(&tmp);
    if (s == DP_OK) default_workers(t, &lp);
    if (s == DP_OK) s = check_memory(t, dp_backend_n_local(t->backend), &m, c->eval_only ? NULL : &train, &test, &lp, 0);
    dp_model_free(&m);
    return s;
}

/* The cores this process may use (the affinity mask and the cgroup CPU quota: core/cpu_count.h),
 * shared with the other ranks on its node: a launcher that bound each rank to its own cores has
 * already divided them (the affinity mask is smaller than the machine); one that did not
 * (torchrun, mpirun --bind-to none) leaves all of them to every rank, and the ranks would
 * oversubscribe the node. Says where the count came from in `from`. */
static int default_threads(char *from, size_t n) {
    dp_cpu_count cc;
    dp_cpu_count_find("", 0, &cc);
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    dp_launch l;
    snprintf(from, n, "%s", cc.source);
    if (cc.affinity < online || dp_launch_from_env(&l) != DP_OK || l.local_world <= 1) return cc.cores;
    const size_t at = strlen(from);
    snprintf(from + at, n - at, ", shared by %d ranks", l.local_world);
    return cc.cores / l.local_world > 0 ? cc.cores / l.local_world : 1;
}

int dp_default_threads(void) {
    char from[640]; /* as dp_trainer.cores_from */
    return default_threads(from, sizeof from);
}

/* --workers' default, once the lanes are known: the compute team is at most the local slots, so
 * threads beyond them leave cores a loader thread can fill ahead on. */
static void default_workers(dp_trainer *t, const lane_plan *lp) {
    dp_config *c = &t->cfg;
    if (c->workers >= 0) return;
    const int team = dp_exec_team_size(t->dev, c->threads, dp_backend_n_local(t->backend), lp->slots);
    c->workers = dp_exec_default_workers(t->dev, team, t->cores);
}

int dp_trainer_holds_rank0(const dp_trainer *t) {
    for (int r = 0; r < dp_exec_n_local(t->ex); r++)
        if (dp_exec_rank(t->ex, r) == 0) return 1;
    return 0;
}

/* The longest sum the backend runs on device buffers, for its receive buffers (backend.h: reserve),
 * which must not grow mid-run: DP reduces the whole gradient, DDP a bucket at a time; SyncBN its
 * nodes' sums; every step its metrics; the evaluation eval_floats (0: not known yet). A test hook
 * (config.h: dp_test_hooks.reserve_floats) sizes it wrongly on purpose, to show the backend's guard. */
static size_t largest_sum(const dp_trainer *t, size_t eval_floats) {
    size_t n = DP_EXEC_METRICS > eval_floats ? DP_EXEC_METRICS : eval_floats;
    const size_t coll = t->strategy->largest_collective(&t->model);
    n = coll > n ? coll : n;
    for (int i = 0; t->cfg.sync_bn && i < t->model.n_nodes; i++)
        n = t->model.nodes[i].sync_floats > n ? t->model.nodes[i].sync_floats : n;
    return t->cfg.test.reserve_floats ? t->cfg.test.reserve_floats : n;
}

static dp_status setup(dp_trainer *t) {
    dp_config *c = &t->cfg;
    /* every command that runs kernels (train, eval, predict) passes here, before a device opens or a
       resume's record replaces it (persist.c) */
    char why[160];
    if (dp_conv_algos_pin_env(why, sizeof why) < 0)
        return dp_fail(DP_ERR_USAGE, "DPTRAIN_CONV_ALGOS: %s; give \"time\" or a record of a run", why);
    t->strategy = dp_strategy_of(c->mode);
    t->cores = default_threads(t->cores_from, sizeof t->cores_from);
    if (c->threads <= 0) c->threads = t->cores;
    int ordinals[DP_MAX_LOCAL_DEVICES], n_ord = 0;
    DP_TRY(dp_backend_device(c->backend, c->device, c->gpu, c->gpus, c->n_gpus, &c->device, ordinals, &n_ord));
    /* --precision bf16 on CUDA: every matrix product multiplies bf16 values (nn/layers/bf16.h), which
       TF32's 10 mantissa bits hold exactly, so the tensor cores' TF32 path is exact on them and sums in
       fp32: the products of the CPU reference, only the order of the sums is the library's */
    const int tf32 = dp_config_uses_tf32(c);
    for (; t->n_devs < n_ord; t->n_devs++)
        DP_TRY(dp_dev_open(c->device, ordinals[t->n_devs], tf32, &t->waits, &t->devs[t->n_devs]));
    t->dev = t->devs[0];

    dp_backend_config bc = {.name = c->backend, .replicas = c->replicas, .nthreads = c->threads,
                            .algorithm = c->allreduce_algo, .timeout_s = c->timeout_s,
                            .argc = c->argc, .argv = c->argv, .dev = t->dev, .host_memory = dp_dev_host_memory(t->dev),
                            .waits = &t->waits, .devs = t->devs, .ordinals = ordinals, .n_devs = t->n_devs};
    DP_TRY(dp_backend_create(&bc, &t->backend));
    t->world = dp_backend_world(t->backend);
    const int n_local = dp_backend_n_local(t->backend);
    if (t->n_devs > 1 && n_local != t->n_devs)
        return dp_fail(DP_ERR_INTERNAL, "%d devices opened for %d local replicas", t->n_devs, n_local);
    /* checked here, not in the parser: each flag parses on its own (tests/test_options.c) */
    if ((c->save_every || c->save_every_epochs || c->keep) && !c->checkpoint_dir)
        return dp_fail(DP_ERR_USAGE, "--%s needs --checkpoint DIR", c->keep ? "keep" : "save-every");
    if (!c->keep) c->keep = 3;
    if (dp_backend_rank(t->backend, 0) == 0) {
        /* before hours of training, not after: only rank 0 writes */
        /* the directory first: --save may name a file in it; one this check creates is removed
           again if a later check refuses the run (a refused run leaves nothing behind) */
        struct stat st;
        const int made = c->checkpoint_dir && stat(c->checkpoint_dir, &st) != 0;
        dp_status s = c->checkpoint_dir ? dp_check_output_dir("--checkpoint", c->checkpoint_dir) : DP_OK;
        if (s == DP_OK && c->save_path) s = dp_check_output_file("--save", c->save_path);
        if (s == DP_OK && c->plot_path) s = dp_check_output_file("--plot", c->plot_path);
        /* before any data is read: a log that cannot be created is a start-time error (rank 0 writes it) */
        if (s == DP_OK) s = dp_report_check_path(c->log_flag, c->log_path);
        if (s != DP_OK && made) rmdir(c->checkpoint_dir); /* fails, as it should, if anything is in it */
        DP_TRY(s);
    }
    if (c->batch_size < t->world)
        return dp_fail(DP_ERR_USAGE, "--batch-size %d is smaller than the %d replicas: each replica needs a sample",
                       c->batch_size, t->world);

    DP_TRY(precheck_synthetic(t));
    DP_TRY(load_data(t));
    const dp_dataset *shape_src = t->have_train ? &t->train : &t->test;
    dp_shape in = {shape_src->c, shape_src->h, shape_src->w};
    DP_TRY(dp_model_build(c->model, in, shape_src->n_classes, &t->model));
    dp_model_set_precision(&t->model, c->precision == DP_PRECISION_BF16);
    DP_TRY(dp_layout_make_buckets(&t->model.params, (size_t)(c->bucket_mb * 1024 * 1024)));
    DP_TRY(dp_backend_reserve(t->backend, largest_sum(t, 0)));

    /* the sampler fixes the lanes: which samples each lane sums, so which additions happen */
    lane_plan lp;
    DP_TRY(plan_lanes(t, &t->sampler, t->have_train ? t->train.n : 0, &lp));
    default_workers(t, &lp);
    DP_TRY(check_memory(t, n_local, &t->model, t->have_train ? &t->train : NULL, &t->test, &lp, 1));
    const int timing = c->predict_topos || c->save_profile;
    const dp_exec_config xc = {.dev = t->dev, .devs = t->n_devs > 1 ? t->devs : NULL, .backend = t->backend,
                               .model = &t->model, .threads = c->threads,
                               .sync_bn = c->sync_bn, .n_lanes = lp.lanes, .n_slots = lp.slots,
                               .lane_batch = lp.lane_batch, .max_local = lp.max_local, .graphs = c->graphs,
                               .time_nodes = timing, .train = t->have_train ? &t->train : NULL,
                               /* the NaN test hook writes into the host's batch */
                               .resident = !c->augment && !c->test.nan_step};
    DP_TRY(dp_exec_create(&t->ex, &xc));
    t->backend->threads = dp_exec_threads_used(t->ex); /* its sums' regions the same size as the step's */
    DP_TRY(dp_exec_host_reserve(t->ex, dp_evaluate_floats(t, &t->test))); /* not mid-run (a free waits) */
    DP_TRY(dp_backend_reserve(t->backend, largest_sum(t, dp_evaluate_floats(t, &t->test))));
    DP_TRY(dp_check_consistency(t));
    DP_TRY(init_params(t));
    const dp_step_ctx sc = dp_train_step_ctx(t);
    DP_TRY(t->strategy->alloc(&sc, &t->strategy_state));
    /* several whole DDP steps a launch, where the device records them and holds the data; a
       setting that would do nothing is refused, not silently ignored */
    if (!c->graphs && !dp_exec_records_graphs(t->ex))
        return dp_fail(DP_ERR_USAGE, "--no-graph: --device %s records no graphs, so there are none to turn off; leave "
                       "it out", c->device ? c->device : "cpu");
    if (c->steps_per_graph > 1 && t->have_train) {
        const char *idle = strcmp(t->strategy->name, "ddp") != 0 ? "it is for --mode ddp"
                                                                   : dp_exec_no_launch_reason(t->ex);
        if (idle)
            return dp_fail(DP_ERR_USAGE, "--steps-per-graph %d would do nothing in this run: %s; leave it out",
                           c->steps_per_graph, idle);
        t->launch_k = c->steps_per_graph;
        DP_TRY(dp_exec_launch_alloc(t->ex, t->launch_k, t->launch_k * c->accumulate));
    }
    dp_exec_comm_reset(t->ex);
    if (timing) { /* record each step's collectives for the model */
        t->trace.cap = 1024;
        DP_ALLOC(t->trace.recs, t->trace.cap, "collective records");
        t->trace.ready_node = -1;
        t->trace.algorithm = t->backend->algorithm;
        t->backend->trace = &t->trace;
    }

    if (t->have_train) {
        int ranks[dp_exec_n_local(t->ex)];
        for (int r = 0; r < dp_exec_n_local(t->ex); r++) ranks[r] = dp_exec_rank(t->ex, r);
        dp_loader_config lc = {.data = &t->train, .sampler = &t->sampler, .n_local = dp_exec_n_local(t->ex), .ranks = ranks,
                               .workers = c->workers, .prefetch = c->workers > 0 ? 2 * c->workers + 1 : 1,
                               .fill_threads = dp_exec_threads_used(t->ex), /* the step's team: one pool size */
                               .augment = {.enabled = c->augment, .seed = c->seed},
                               .indices_only = dp_exec_resident(t->ex)};
        DP_TRY(dp_loader_create(&t->loader, &lc));
        int steps_per_epoch = (t->sampler.n_batches + c->accumulate - 1) / c->accumulate;
        t->sched = (dp_schedule){.lr = c->lr, .scale_linear = c->lr_scale_linear, .ref_batch = c->lr_ref_batch,
                                 .global_batch = c->batch_size * c->accumulate, .n_milestones = c->n_lr_steps,
                                 .gamma = c->lr_gamma,
                                 .warmup_steps = (long)ceil(c->warmup_epochs * steps_per_epoch)};
        memcpy(t->sched.milestones, c->lr_steps, sizeof c->lr_steps);
        t->sgd = (dp_sgd){.lr = c->lr, .momentum = c->momentum, .weight_decay = c->weight_decay, .nesterov = c->nesterov,
                          .k = t->dev->k}; /* each replica's step: its own device's stream (ddp.c, dp.c) */
    }
    DP_TRY(dp_persist_setup(t));
    if (t->have_train) DP_TRY(dp_persist_resume(t));
    /* Last: the log file, so that no bad flag or file leaves one behind. */
    int rank0 = dp_trainer_holds_rank0(t);
    int console = rank0 && !c->quiet;
    int progress = console && dp_progress_wanted(c->progress, STDOUT_FILENO);
    DP_TRY(dp_report_open(&t->report, c->log_flag, rank0 ? c->log_path : NULL, c->resume_path != NULL, console,
                          progress));
    return DP_OK;
}

dp_status dp_trainer_create(const dp_config *cfg, dp_trainer **out) {
    *out = NULL;
    dp_trainer *t = calloc(1, sizeof *t);
    if (!t) return dp_fail(DP_ERR_NOMEM, "out of memory creating the trainer");
    t->cfg = *cfg;
    t->ckpt_lock_fd = -1;
    t->eval_step = -1;
    dp_status s = setup(t);
    if (s != DP_OK) {
        char msg[DP_ERROR_MAX];
        snprintf(msg, sizeof msg, "%s", dp_last_error());
        if (t->backend && dp_backend_n_local(t->backend) < dp_backend_world(t->backend)) {
            if (t->backend->ends_job) { /* say why before it aborts the job: main would say it too late */
                fprintf(stderr, "dptrain: rank %d: %s\n", dp_backend_rank(t->backend, 0), msg);
                fflush(stderr);
            } /* else main says it, once */
            t->backend->failed = 1; /* the other ranks are told, not waited for */
        }
        dp_trainer_destroy(t);
        dp_set_error(msg);
        return s;
    }
    *out = t;
    return DP_OK;
}

/* Whether this run sums in the canonical order (data/chunks.h): bitwise equal to every other
 * replica count that divides --chunks. */
static int canonical_order(const dp_trainer *t) {
    return t->have_train && t->sampler.plan.canonical && t->backend->ordered;
}

/* Strings go through dp_json_str: a path or name may hold any byte. */
/* The settings the table puts in the log (settings.h), in its order, through the one named `through`. */
static void log_settings(dp_json *b, const dp_config *c, dp_settings_cursor *at, const char *through) {
    for (const dp_setting *s; (s = dp_settings_next(at, through));) {
        char key[64];
        snprintf(key, sizeof key, "%s", dp_setting_key(s));
        for (char *p = key; *p; p++) *p = *p == '-' ? '_' : *p;
        dp_setting_value v;
        dp_setting_get(s, c, &v);
        switch (v.type) {
        case DP_SV_INT: dp_json_int(b, key, v.i); break;
        case DP_SV_UINT: dp_json_uint(b, key, v.u); break;
        case DP_SV_REAL: dp_json_real(b, key, "%.9g", v.r); break;
        case DP_SV_STR: dp_json_str(b, key, v.s); break;
        }
    }
}

static dp_status log_config(dp_trainer *t) {
    const dp_config *c = &t->cfg;
    size_t n_params = 0; /* real parameters, not the arena's alignment padding */
    for (int i = 0; i < t->model.params.n_tensors; i++) n_params += t->model.params.tensors[i].s.count;
    /* the settings as this run took them: the model and data set it loaded, the backend it opened */
    dp_config eff = *c;
    eff.model = t->model.name;
    eff.data.name = t->test.name;
    eff.data.dir = strcmp(c->data.name, "synthetic") == 0 ? "" : c->data.dir;
    eff.backend = dp_backend_name(t->backend);
    eff.allreduce_algo = t->backend->algorithm;
    dp_settings_cursor cur = DP_SETTINGS_CURSOR(DP_LIST_LOG);
    dp_json b = dp_json_begin("config");
    dp_json_str(&b, "version", DP_VERSION);
    log_settings(&b, &eff, &cur, "model");
    dp_json_uint(&b, "params", n_params);
    log_settings(&b, &eff, &cur, "data");
    dp_json_int(&b, "train_samples", t->have_train ? t->train.n : 0);
    dp_json_int(&b, "test_samples", t->test.n);
    log_settings(&b, &eff, &cur, "backend");
    char devices[1024] = "";
    for (int i = 0; i < t->n_devs; i++) { /* one line per device opened: the same text for --device cpu */
        const size_t at = strlen(devices);
        if (i == 0 || t->devs[i] != t->devs[0])
            snprintf(devices + at, sizeof devices - at, "%s%s", at ? "; " : "", t->devs[i]->desc);
    }
    dp_json_str(&b, "device", devices);
    dp_json_int(&b, "world", t->world);
    log_settings(&b, &eff, &cur, "threads");
    dp_json_int(&b, "threads_used", dp_exec_threads_used(t->ex));
    dp_json_int(&b, "cores", t->cores);
    log_settings(&b, &eff, &cur, "workers");
    dp_json_int(&b, "lanes", dp_exec_n_lanes(t->ex));
    dp_json_int(&b, "buckets", t->model.params.n_buckets);
    log_settings(&b, &eff, &cur, "overlap");
    dp_json_str(&b, "cores_from", t->cores_from);
    log_settings(&b, &eff, &cur, NULL);
    dp_json_int(&b, "canonical_order", canonical_order(t));
    dp_json_int(&b, "data_on_device", dp_exec_resident(t->ex));
    dp_json_int(&b, "steps_per_launch", t->launch_k ? t->launch_k : 1);
    const dp_backend_t be = t->backend;
    const double mib = 1.0 / (1 << 20);
    if (be->comm_memory_known) { /* NCCL's device memory, measured at start (backends/nccl_warmup.c) */
        dp_json_real(&b, "nccl_memory_init_mib", "%.1f", (double)be->comm_memory_init * mib);
        dp_json_real(&b, "nccl_memory_warmup_mib", "%.1f", (double)be->comm_memory_measured * mib);
        dp_json_real(&b, "nccl_memory_reserved_mib", "%.1f", (double)be->comm_memory_reserved * mib);
    }
    DP_TRY(dp_report_json(&t->report, &b, 1));
    if (t->report.console && be->comm_memory_known)
        printf("nccl: device memory measured at start: %.1f MiB for the communicator, %.1f MiB for the warm-up's "
               "connections; %.1f MiB more kept free for what NCCL may still take\n",
               (double)be->comm_memory_init * mib, (double)be->comm_memory_measured * mib,
               (double)be->comm_memory_reserved * mib);
    if (t->report.console && t->have_train && !canonical_order(t))
        printf("note: %s, so results equal other replica counts only within float rounding (bitwise for every "
               "replica count that divides --chunks %d, with --allreduce ordered)\n",
               !t->backend->ordered ? "--allreduce ring/tree sums in its own order"
                   : "the replica count does not divide --chunks",
               c->chunks);
    return DP_OK;
}

/* s with where it happened appended to its message ("... (epoch 2, step 31)"), for failures that
 * the layers below cannot place in the run: a collective, the device. */
static dp_status in_context(dp_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static dp_status in_context(dp_status s, const char *fmt, ...) {
    if (s == DP_OK) return s;
    char why[1024], where[128];
    snprintf(why, sizeof why, "%s", dp_last_error());
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(where, sizeof where, fmt, ap);
    va_end(ap);
    return dp_fail(s, "%s (%s)", why, where);
}

/* The test set with per-class counts, kept for the final report (t->eval_*). */
static dp_status evaluate_test(dp_trainer *t, dp_step_metrics *m) {
    const int K = t->model.n_classes;
    if (!t->eval_correct) DP_ALLOC(t->eval_correct, K, "per-class counts");
    if (!t->eval_count) DP_ALLOC(t->eval_count, K, "per-class counts");
    t->eval_step = -1;
    DP_TRY(dp_evaluate(t, &t->test, m, t->eval_correct, t->eval_count));
    t->eval_m = *m;
    t->eval_step = t->step;
    return DP_OK;
}

static dp_status final_eval(dp_trainer *t, double *acc_out) {
    int K = t->model.n_classes;
    dp_step_metrics m = t->eval_m;
    if (t->cfg.eval_only || t->eval_step != t->step) DP_TRY(in_context(evaluate_test(t, &m), "the final evaluation"));
    const long *correct = t->eval_correct, *count = t->eval_count;
    double acc = m.count ? (double)m.correct / m.count : 0;
    DP_TRY(dp_report_final(&t->report, t->test.name, acc, K, correct, count, t->test.class_names));
    if (acc_out) *acc_out = acc;
    return DP_OK;
}

/* A NaN/Inf in the step just taken (loss: the status from dp_train_micro; gradients: the SGD step
 * refused them). Returns DP_OK when --on-nan skip absorbs it. */
static dp_status nonfinite_step(dp_trainer *t, dp_status s, int epoch) {
    int grads = atomic_exchange(&t->nonfinite, 0);
    if (s != DP_ERR_NUMERIC && !grads) return s;
    char msg[DP_ERROR_MAX];
    if (s == DP_ERR_NUMERIC) snprintf(msg, sizeof msg, "%s", dp_last_error());
    else
        snprintf(msg, sizeof msg, "epoch %d, step %ld: the all-reduced gradients hold NaN or Inf (the same on every "
                 "replica); the update was not applied", epoch, t->step + 1);
    if (t->cfg.on_nan_skip) {
        if (s == DP_ERR_NUMERIC && t->bn_snapshot) /* the forward pass moved the BN statistics: undo it */
            for (int r = 0; r < dp_exec_n_local(t->ex); r++)
                DP_TRY(dp_exec_copy(t->ex, r, dp_exec_replica(t->ex, r)->buffers, t->bn_snapshot[r],
                                                    t->model.buffers.n * sizeof(float)));
        t->skipped++;
        return DP_OK;
    }
    return dp_fail(DP_ERR_NUMERIC, "%s (--on-nan skip would skip such steps)%s%s", msg,
                   t->last_ckpt[0] ? "; the last good checkpoint is " : "; no checkpoint was written",
                   t->last_ckpt);
}

/* An epoch's running sums and times. */
typedef struct {
    dp_step_metrics em, sm; /* the epoch's, the step's so far */
    double wait_total, compute, t0, last_end;
    float lr;
} epoch_run;

enum { GO_ON = 0, STOP_SIGNAL = 1, STOP_MAX_STEPS = 2 };

/* The end of a step whose last micro-step (batch b) returned ss: NaN/Inf (--on-nan), the step's
 * log line (`now`: its end), the progress bar, checkpoints, and whether the run stops here
 * (*stop: STOP_SIGNAL, STOP_MAX_STEPS); ask_stop 0: a step inside a launch, whose state the
 * device has already left behind, where no signal can stop the run. */
static dp_status end_step(dp_trainer *t, int epoch, int b, dp_status ss, const dp_step_metrics *before, epoch_run *e,
                          double now, int ask_stop, int *stop) {
    const dp_config *c = &t->cfg;
    long skipped = t->skipped;
    DP_TRY(nonfinite_step(t, ss, epoch));
    if (t->skipped != skipped) e->sm = *before; /* a skipped step's loss stays out of the epoch's mean */
    t->step++;
    t->next_epoch = epoch, t->next_batch = b + 1;
    /* per-step times: a median the overhead model's check can use */
    if (e->sm.count) DP_TRY(dp_report_step(&t->report, epoch, t->step, e->sm.loss_sum / e->sm.count, e->lr, now - e->last_end));
    e->last_end = now;
    e->em.loss_sum += e->sm.loss_sum, e->em.correct += e->sm.correct, e->em.count += e->sm.count;
    memset(&e->sm, 0, sizeof e->sm);
    double el = dp_now() - e->t0;
    DP_TRY(dp_report_progress(&t->report, epoch, c->epochs, b + 1, t->sampler.n_batches,
                              e->em.count ? e->em.loss_sum / e->em.count : 0, el > 0 ? e->em.count / el : 0, el));
    int sig = 0;
    if (ask_stop) DP_TRY(in_context(dp_persist_stop_requested(t, &sig), "epoch %d, step %ld", epoch, t->step));
    if (sig || (c->checkpoint_dir && c->save_every && t->step % c->save_every == 0))
        if (c->checkpoint_dir) DP_TRY(dp_persist_save(t, "--checkpoint", NULL));
    *stop = sig ? STOP_SIGNAL : c->max_steps && t->step >= c->max_steps ? STOP_MAX_STEPS : GO_ON;
    if (sig) t->stop_signal = sig;
    return DP_OK;
}

/* Batch b's micro-step, one at a time; *stop as end_step's after a step's last micro-step. */
static dp_status one_micro(dp_trainer *t, int epoch, int b, const dp_batch *batches, epoch_run *e, int *stop) {
    const int K = t->cfg.accumulate;
    *stop = GO_ON;
    e->lr = dp_schedule_lr(&t->sched, epoch, t->step);
    if (t->bn_snapshot && b % K == 0) /* a step's state before its first micro-step */
        for (int r = 0; r < dp_exec_n_local(t->ex); r++)
            DP_TRY(dp_exec_copy(t->ex, r, t->bn_snapshot[r], dp_exec_replica(t->ex, r)->buffers,
                                t->model.buffers.n * sizeof(float)));
    if (t->inject_sigterm_step && t->step + 1 == t->inject_sigterm_step && b % K == 0 && !dp_signals_pending())
        raise(SIGTERM); /* DPTRAIN_INJECT_SIGTERM_STEP: a stop request while the step runs */
    if (t->inject_nan_step && t->step + 1 == t->inject_nan_step && batches[0].n > 0)
        batches[0].x[0] = NAN; /* fault injection for the tests: DPTRAIN_INJECT_NAN_STEP */
    double tc = dp_now();
    if (t->backend->trace && b % K == 0) t->trace.n = 0, t->trace.dropped = 0, t->trace.t0 = tc;
    dp_step_metrics before = e->sm;
    dp_status ss = dp_train_micro(t, batches, b, e->lr, &e->sm);
    e->compute += dp_now() - tc;
    if (ss != DP_OK && ss != DP_ERR_NUMERIC) /* a collective or the device failed: say where in the run */
        return in_context(ss, "epoch %d, step %ld", epoch, t->step + 1);
    t->bn_batches++;
    if (b % K != dp_sampler_step_micro(&t->sampler, b) - 1 && ss == DP_OK) return DP_OK;
    return end_step(t, epoch, b, ss, &before, e, dp_now(), 1, stop);
}

/* The steps the next launch may hold: up to --steps-per-graph, ending where a checkpoint or
 * --max-steps wants the state (the epoch's end ends it too, in the caller). */
static int launch_cap(const dp_trainer *t) {
    const dp_config *c = &t->cfg;
    long cap = t->launch_k;
    if (c->max_steps && c->max_steps - t->step < cap) cap = c->max_steps - t->step;
    if (c->checkpoint_dir && c->save_every && c->save_every - t->step % c->save_every < cap)
        cap = c->save_every - t->step % c->save_every;
    return cap > 1 ? (int)cap : 1;
}

/* Up to launch_cap steps from batch *b (a step's first) as one launch (exec/launch.h); *loader the
 * loader's status (DP_DONE at the epoch's end), *n the steps taken. A launch in which a step went
 * NaN/Inf is undone and its micro-steps run again one at a time, so that --on-nan stops at, or
 * skips, exactly that step. */
static dp_status one_launch(dp_trainer *t, int epoch, int *b, epoch_run *e, dp_status *loader, int *n, int *stop) {
    const int nl = dp_exec_n_local(t->ex), cap = launch_cap(t), A = t->cfg.accumulate;
    dp_batch kept[(size_t)cap * A * nl];
    float lr[cap];
    int micros = 0, in_step[cap];
    const dp_batch *batches;
    double wait;
    *n = 0, *stop = GO_ON, *loader = DP_OK;
    while (*n < cap && *loader == DP_OK) {
        const int m = dp_sampler_step_micro(&t->sampler, *b + micros);
        int i = 0;
        for (; i < m && (*loader = dp_loader_next(t->loader, &batches, &wait)) == DP_OK; i++) {
            e->wait_total += wait;
            DP_TRY(dp_exec_launch_put(t->ex, micros + i, *n, i == 0, batches, kept + (size_t)(micros + i) * nl));
        }
        if (i == 0) break;
        if (i < m) return dp_fail(DP_ERR_INTERNAL, "the epoch ended after %d of a step's %d batches", i, m);
        lr[*n] = dp_schedule_lr(&t->sched, epoch, t->step + *n);
        in_step[(*n)++] = m, micros += m;
    }
    if (*n == 0) return DP_OK;
    if (t->inject_sigterm_step > t->step && t->inject_sigterm_step <= t->step + *n && !dp_signals_pending())
        raise(SIGTERM); /* DPTRAIN_INJECT_SIGTERM_STEP: a stop request while the launch runs */
    dp_step_sums sums[*n];
    double tc = dp_now(), start = e->last_end;
    dp_status s = dp_train_launch(t, kept, *b, *n, micros, lr, sums);
    const double launch_end = dp_now();
    e->compute += launch_end - tc;
    if (s != DP_OK) return in_context(s, "epoch %d, steps %ld to %ld", epoch, t->step + 1, t->step + *n);
    int bad = 0;
    for (int j = 0; j < *n; j++) bad |= !dp_step_sums_apply(&sums[j]);
    if (bad) { /* from the launch's start, one micro-step at a time: the same bits up to the bad step */
        DP_TRY(dp_exec_launch_undo(t->ex));
        for (int q = 0; q < micros && !*stop; q++) DP_TRY(one_micro(t, epoch, *b + q, kept + (size_t)q * nl, e, stop));
        *b += micros;
        return DP_OK;
    }
    for (int j = 0, q = 0; j < *n && !*stop; q += in_step[j++]) {
        const dp_step_metrics before = e->sm;
        e->lr = lr[j];
        e->sm.loss_sum += sums[j].loss, e->sm.correct += sums[j].hits, e->sm.count += sums[j].count;
        t->bn_batches += in_step[j];
        if (j == *n - 1) t->stop_folded = sums[j].stop, t->stop_folded_valid = 1;
        /* the launch's time shared evenly by its steps */
        DP_TRY(end_step(t, epoch, *b + q + in_step[j] - 1, DP_OK, &before, e,
                        start + (launch_end - start) * (j + 1) / *n, j == *n - 1, stop));
    }
    *b += micros;
    return DP_OK;
}

/* One epoch from batch `first`; *stop is set when --max-steps is reached or a stop signal came. */
static dp_status run_epoch(dp_trainer *t, int epoch, int first, int *stop) {
    const dp_config *c = &t->cfg;
    t->epoch = epoch;
    DP_TRY(dp_loader_start_epoch_at(t->loader, epoch - 1, first));
    dp_exec_comm_reset(t->ex);
    const int nb = t->sampler.n_batches;
    epoch_run e = {0};
    e.t0 = e.last_end = dp_now();
    const dp_batch *batches;
    double wait;
    dp_status s = DP_OK;
    int why = GO_ON;
    if (t->launch_k)
        for (int b = first, n = 1; s == DP_OK && n > 0 && !why;) DP_TRY(one_launch(t, epoch, &b, &e, &s, &n, &why));
    else
        for (int b = first; !why && (s = dp_loader_next(t->loader, &batches, &wait)) == DP_OK; b++) {
            e.wait_total += wait;
            DP_TRY(one_micro(t, epoch, b, batches, &e, &why));
        }
    if (why == STOP_SIGNAL) {
        *stop = 1;
        return DP_OK;
    }
    if (why == STOP_MAX_STEPS) *stop = 1;
    else if (s != DP_OK && s != DP_DONE) return s;
    double seconds = dp_now() - e.t0;
    dp_epoch_report er = {.epoch = epoch, .epochs = c->epochs, .steps = t->step, .lr = e.lr, .seconds = seconds,
                          .data_wait_s = e.wait_total, .compute_s = e.compute, .skipped_steps = t->skipped,
                          .first_batch = first, .n_batches = nb};
    dp_exec_comm_read(t->ex, &er.comm, &er.comm_hidden_s);
    er.train_loss = e.em.count ? e.em.loss_sum / e.em.count : 0;
    er.train_acc = e.em.count ? (double)e.em.correct / e.em.count : 0;
    er.images_per_s = seconds > 0 ? e.em.count / seconds : 0;
    double te = dp_now();
    const dp_step_ctx sc = dp_train_step_ctx(t);
    DP_TRY(t->strategy->finish(&sc, t->strategy_state));
    dp_step_metrics tm;
    DP_TRY(in_context(evaluate_test(t, &tm), "evaluating epoch %d", epoch));
    er.eval_seconds = dp_now() - te;
    er.test_acc = tm.count ? (double)tm.correct / tm.count : 0;
    er.test_loss = tm.count ? tm.loss_sum / tm.count : 0;
    DP_TRY(dp_report_epoch(&t->report, &er));
    if (t->next_batch >= nb) t->next_epoch = epoch + 1, t->next_batch = 0; /* the epoch is complete */
    return DP_OK;
}

/* after_training: the signal came during the final evaluation, with training done. */
static dp_status say_stopped(dp_trainer *t, int after_training) {
    if (!dp_trainer_holds_rank0(t)) return DP_OK;
    char cmd[8192];
    dp_persist_resume_command(t, cmd, sizeof cmd);
    if (t->report.progress) printf("\n"); /* off the progress bar's line */
    fflush(stdout);
    if (after_training)
        fprintf(stderr, "dptrain: stopped by %s during the final evaluation, after training finished (step %ld)%s%s%s\n",
                dp_signal_name(t->stop_signal), t->step, t->last_ckpt[0] ? "; checkpoint " : "", t->last_ckpt,
                t->last_ckpt[0] ? " written" : "");
    else if (t->cfg.checkpoint_dir)
        fprintf(stderr, "dptrain: stopped by %s after step %ld (epoch %d); checkpoint %s written; resume with: %s\n",
                dp_signal_name(t->stop_signal), t->step, t->epoch, t->last_ckpt, cmd);
    else
        fprintf(stderr, "dptrain: stopped by %s after step %ld (epoch %d); nothing saved: add --checkpoint DIR to be "
                "able to resume\n", dp_signal_name(t->stop_signal), t->step, t->epoch);
    fflush(stderr);
    dp_json f = dp_json_begin("stopped");
    dp_json_str(&f, "signal", dp_signal_name(t->stop_signal));
    dp_json_int(&f, "epoch", t->epoch);
    dp_json_int(&f, "step", t->step);
    dp_json_str(&f, "checkpoint", t->last_ckpt);
    return dp_report_json(&t->report, &f, 1);
}

static dp_status run(dp_trainer *t) {
    DP_TRY(log_config(t));
    if (t->cfg.eval_only) return final_eval(t, NULL);
    if (t->cfg.predict_only) return DP_OK; /* the overhead model alone: the caller runs it */
    if (t->last_ckpt[0]) {
        dp_json f = dp_json_begin("resume");
        dp_json_int(&f, "epoch", t->start_epoch);
        dp_json_int(&f, "next_batch", t->start_batch);
        dp_json_int(&f, "step", t->step);
        dp_json_str(&f, "path", t->last_ckpt);
        DP_TRY(dp_report_json(&t->report, &f, 1));
    }
    if (t->last_ckpt[0] && dp_trainer_holds_rank0(t) && !t->cfg.quiet)
        printf("resuming from %s: epoch %d, batch %d, step %ld\n", t->last_ckpt, t->start_epoch, t->start_batch,
               t->step);
    dp_signals_install();
    int stop = 0, first = t->start_batch;
    if (t->cfg.max_steps && t->step >= t->cfg.max_steps) stop = 1;
    for (int epoch = t->start_epoch; epoch <= t->cfg.epochs && !stop; epoch++, first = 0) {
        DP_TRY(run_epoch(t, epoch, first, &stop));
        if (!stop && t->cfg.checkpoint_dir && t->cfg.save_every_epochs && epoch % t->cfg.save_every_epochs == 0)
            DP_TRY(dp_persist_save(t, "--checkpoint", NULL));
    }
    if (t->stop_signal) return say_stopped(t, 0);
    if (t->inject_eval_signal) raise(t->inject_eval_signal);
    DP_TRY(final_eval(t, NULL));
    /* a signal during the last evaluations: training is done, so its state is still saved below,
       but the run ends as a stopped one (128 + signal), without --predict's timing runs */
    int sig = 0;
    DP_TRY(dp_persist_stop_requested(t, &sig));
    /* the run's last state, so that --resume of a finished run (e.g. with more --epochs) goes on from here */
    if (t->cfg.checkpoint_dir) DP_TRY(dp_persist_save(t, "--checkpoint", NULL));
    if (t->cfg.save_path) DP_TRY(dp_persist_save(t, "--save", t->cfg.save_path));
    dp_signals_restore();
    if (sig) {
        t->stop_signal = sig;
        return say_stopped(t, 1);
    }
    return DP_OK;
}

dp_status dp_trainer_train(dp_trainer *t) { return run(t); }

dp_status dp_trainer_run(dp_trainer *t) { return dp_trainer_close(t, run(t)); }

dp_status dp_trainer_close(dp_trainer *t, dp_status s) {
    if (s != DP_OK) {
        dp_report_error(&t->report, dp_last_error());
        t->backend->failed = 1;
    }
    dp_status cs = dp_report_close(&t->report);
    return s != DP_OK ? s : cs;
}

void dp_trainer_destroy(dp_trainer *t) {
    if (!t) return;
    dp_backend_t aborted = NULL; /* destroyed after the devices close: its watchdog watches their frees and closes */
    if (t->backend && t->backend->failed) { /* abort the collectives first: freeing device memory would wait for them */
        t->backend->trace = NULL;
        if (dp_backend_abort(t->backend)) aborted = t->backend;
        else dp_backend_destroy(t->backend);
        t->backend = NULL;
    }
    dp_loader_destroy(t->loader);
    dp_sampler_free(&t->sampler);
    if (t->strategy && t->ex) {
        const dp_step_ctx sc = dp_train_step_ctx(t);
        t->strategy->free(&sc, t->strategy_state);
    }
    if (t->stop_bufs)
        for (int r = 0; r < dp_exec_n_local(t->ex); r++) free(t->stop_bufs[r]);
    free(t->stop_bufs);
    free(t->eval_correct);
    free(t->eval_count);
    dp_ckpt_dir_unlock(t->ckpt_lock_fd);
    for (int r = 0; t->bn_snapshot && t->ex && r < dp_exec_n_local(t->ex); r++) dp_exec_dealloc(t->ex, r, t->bn_snapshot[r]);
    free(t->bn_snapshot);
    dp_exec_free(t->ex);
    free(t->trace.recs);
    dp_report_discard(&t->report);
    dp_model_free(&t->model);
    if (t->have_train) dp_dataset_free(&t->train);
    dp_dataset_free(&t->test);
    if (t->backend) t->backend->trace = NULL;
    dp_backend_destroy(t->backend);
    for (int i = 0; i < t->n_devs; i++) dp_dev_close(t->devs[i]);
    dp_backend_destroy(aborted);
    free(t);
}
