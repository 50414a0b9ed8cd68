#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backends/backend.h"
#include "cli/options.h"
#include "data/chunks.h"
#include "dp_config.h"
#include "io/atomic.h"
#include "nn/model.h"

static dp_status parse_long(const char *flag, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno == ERANGE || v < lo || v > hi)
        return dp_fail(DP_ERR_USAGE, "%s: expected an integer from %ld to %ld, got '%s'", flag, lo, hi, s);
    *out = v;
    return DP_OK;
}

static dp_status parse_int(const char *flag, const char *s, long lo, long hi, int *out) {
    long v = 0;
    DP_TRY(parse_long(flag, s, lo, hi, &v));
    *out = (int)v;
    return DP_OK;
}

/* lo_open / hi_open: the bound itself is excluded. */
static dp_status parse_double(const char *flag, const char *s, double lo, int lo_open, double hi, int hi_open,
                              double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    int ok = *s && !*end && errno != ERANGE && isfinite(v) && (lo_open ? v > lo : v >= lo) &&
             (hi_open ? v < hi : v <= hi);
    if (!ok)
        return dp_fail(DP_ERR_USAGE, "%s: expected a number in %s%g, %g%s, got '%s'", flag, lo_open ? "(" : "[", lo,
                       hi, hi_open ? ")" : "]", s);
    *out = v;
    return DP_OK;
}

static dp_status parse_float(const char *flag, const char *s, double lo, int lo_open, double hi, int hi_open,
                             float *out) {
    double v = 0;
    DP_TRY(parse_double(flag, s, lo, lo_open, hi, hi_open, &v));
    *out = (float)v;
    return DP_OK;
}

static dp_status parse_shape(const char *s, dp_data_spec *d) {
    int c, h, w;
    char tail;
    if (sscanf(s, "%dx%dx%d%c", &c, &h, &w, &tail) != 3 || c < 1 || c > 3 || h < 1 || h > 1024 || w < 1 || w > 1024)
        return dp_fail(DP_ERR_USAGE, "--shape: expected CxHxW with C in 1..3 and H, W in 1..1024, got '%s'", s);
    d->c = c, d->h = h, d->w = w;
    return DP_OK;
}

static dp_status parse_lr_steps(const char *s, dp_config *c) {
    c->n_lr_steps = 0;
    const char *p = s;
    int prev = 0;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 1 || v > 1000000 || v <= prev || (*end && *end != ',') ||
            c->n_lr_steps == DP_MAX_LR_STEPS)
            return dp_fail(DP_ERR_USAGE,
                           "--lr-steps: expected up to %d increasing epoch numbers separated by commas (e.g. 10,20), "
                           "got '%s'", DP_MAX_LR_STEPS, s);
        c->lr_steps[c->n_lr_steps++] = prev = (int)v;
        p = *end ? end + 1 : end;
        if (*end == ',' && !*p) return dp_fail(DP_ERR_USAGE, "--lr-steps: trailing comma in '%s'", s);
    }
    if (!c->n_lr_steps) return dp_fail(DP_ERR_USAGE, "--lr-steps: empty list");
    return DP_OK;
}

/* --save-every N (steps) or Ne (epochs). */
static dp_status parse_save_every(const char *s, dp_config *c) {
    char num[32];
    size_t n = strlen(s);
    int epochs = n > 1 && s[n - 1] == 'e';
    if (n == 0 || n >= sizeof num)
        return dp_fail(DP_ERR_USAGE, "--save-every: expected N (steps) or Ne (epochs), N in 1..1000000000, got '%s'", s);
    snprintf(num, sizeof num, "%.*s", (int)(n - (size_t)epochs), s);
    long v = 0;
    if (parse_long("--save-every", num, 1, 1000000000L, &v) != DP_OK)
        return dp_fail(DP_ERR_USAGE, "--save-every: expected N (steps) or Ne (epochs), N in 1..1000000000, got '%s'", s);
    c->save_every = epochs ? 0 : v;
    c->save_every_epochs = epochs ? (int)v : 0;
    return DP_OK;
}

static dp_status one_of(const char *flag, const char *v, const char *const *allowed, int n, int *idx) {
    for (int i = 0; i < n; i++)
        if (strcmp(v, allowed[i]) == 0) return *idx = i, DP_OK;
    char list[256] = "";
    for (int i = 0; i < n; i++) {
        strncat(list, allowed[i], sizeof list - strlen(list) - 1);
        if (i + 1 < n) strncat(list, ", ", sizeof list - strlen(list) - 1);
    }
    return dp_fail(DP_ERR_USAGE, "%s: unknown value '%s' (expected one of: %s)", flag, v, list);
}

enum {
    OPT_MODEL = 256, OPT_DATASET, OPT_DATA, OPT_SHAPE, OPT_CLASSES, OPT_SAMPLES, OPT_EPOCHS, OPT_MAX_STEPS,
    OPT_BATCH, OPT_LR, OPT_MOMENTUM, OPT_WD, OPT_NESTEROV, OPT_LR_STEPS, OPT_LR_GAMMA, OPT_LR_SCALE, OPT_LR_REF,
    OPT_WARMUP, OPT_SEED, OPT_WORKERS, OPT_THREADS, OPT_NO_SHUFFLE, OPT_DROP_LAST, OPT_AUGMENT, OPT_BACKEND,
    OPT_REPLICAS, OPT_MODE, OPT_BUCKET, OPT_NO_OVERLAP, OPT_ACCUM, OPT_SYNC_BN, OPT_ALLREDUCE,
    OPT_CHUNKS, OPT_TIMEOUT, OPT_LOG,
    OPT_SAVE, OPT_LOAD, OPT_INIT_FROM, OPT_CHECKPOINT, OPT_SAVE_EVERY, OPT_KEEP, OPT_RESUME, OPT_ON_NAN,
    OPT_PROGRESS, OPT_NO_PROGRESS, OPT_QUIET, OPT_HELP, OPT_VERSION
};

static const struct option long_opts[] = {
    {"model", required_argument, 0, OPT_MODEL},
    {"dataset", required_argument, 0, OPT_DATASET},
    {"data", required_argument, 0, OPT_DATA},
    {"shape", required_argument, 0, OPT_SHAPE},
    {"classes", required_argument, 0, OPT_CLASSES},
    {"samples", required_argument, 0, OPT_SAMPLES},
    {"epochs", required_argument, 0, OPT_EPOCHS},
    {"max-steps", required_argument, 0, OPT_MAX_STEPS},
    {"batch-size", required_argument, 0, OPT_BATCH},
    {"lr", required_argument, 0, OPT_LR},
    {"momentum", required_argument, 0, OPT_MOMENTUM},
    {"weight-decay", required_argument, 0, OPT_WD},
    {"nesterov", no_argument, 0, OPT_NESTEROV},
    {"lr-steps", required_argument, 0, OPT_LR_STEPS},
    {"lr-gamma", required_argument, 0, OPT_LR_GAMMA},
    {"lr-scale", required_argument, 0, OPT_LR_SCALE},
    {"lr-ref-batch", required_argument, 0, OPT_LR_REF},
    {"warmup-epochs", required_argument, 0, OPT_WARMUP},
    {"seed", required_argument, 0, OPT_SEED},
    {"workers", required_argument, 0, OPT_WORKERS},
    {"threads", required_argument, 0, OPT_THREADS},
    {"no-shuffle", no_argument, 0, OPT_NO_SHUFFLE},
    {"drop-last", no_argument, 0, OPT_DROP_LAST},
    {"augment", no_argument, 0, OPT_AUGMENT},
    {"backend", required_argument, 0, OPT_BACKEND},
    {"replicas", required_argument, 0, OPT_REPLICAS},
    {"mode", required_argument, 0, OPT_MODE},
    {"bucket-mb", required_argument, 0, OPT_BUCKET},
    {"no-overlap", no_argument, 0, OPT_NO_OVERLAP},
    {"accumulate", required_argument, 0, OPT_ACCUM},
    {"sync-bn", no_argument, 0, OPT_SYNC_BN},
    {"allreduce", required_argument, 0, OPT_ALLREDUCE},
    {"chunks", required_argument, 0, OPT_CHUNKS},
    {"timeout", required_argument, 0, OPT_TIMEOUT},
    {"log", required_argument, 0, OPT_LOG},
    {"save", required_argument, 0, OPT_SAVE},
    {"load", required_argument, 0, OPT_LOAD},
    {"init-from", required_argument, 0, OPT_INIT_FROM},
    {"checkpoint", required_argument, 0, OPT_CHECKPOINT},
    {"save-every", required_argument, 0, OPT_SAVE_EVERY},
    {"keep", required_argument, 0, OPT_KEEP},
    {"resume", required_argument, 0, OPT_RESUME},
    {"on-nan", required_argument, 0, OPT_ON_NAN},
    {"progress", no_argument, 0, OPT_PROGRESS},
    {"no-progress", no_argument, 0, OPT_NO_PROGRESS},
    {"quiet", no_argument, 0, OPT_QUIET},
    {"help", no_argument, 0, OPT_HELP},
    {"version", no_argument, 0, OPT_VERSION},
    {0, 0, 0, 0},
};

void dp_print_usage(FILE *f) {
    fprintf(f,
"usage: dptrain [train|eval] [options]\n"
"\n"
"Trains (or evaluates) a CNN with data parallelism over N replicas.\n"
"\n"
"model and data:\n"
"  --model M           %s (default lenet)\n"
"  --dataset D         fashion-mnist, mnist, cifar10, synthetic (default fashion-mnist)\n"
"  --data DIR          directory of the data files (default /usr/share/datasets/<dataset>)\n"
"  --shape CxHxW       synthetic: sample shape (default 3x32x32)\n"
"  --classes K         synthetic: classes, 2..256 (default 10)\n"
"  --samples N         synthetic: training samples (default 10000; test set N/5)\n"
"  --augment           random affine (28x28) or crop+flip (32x32)\n"
"  --no-shuffle        keep file order\n"
"  --drop-last         drop samples so that every batch is full\n"
"  --workers W         loader threads, 0 = load in the training thread (default 1)\n"
"\n"
"optimisation (torch.optim.SGD semantics):\n"
"  --epochs E          (default 10)      --max-steps S   stop after S optimizer steps\n"
"  --batch-size B      global batch over all replicas (default 64)\n"
"  --lr X (0.01)  --momentum X (0.9)  --weight-decay X (0)  --nesterov\n"
"  --lr-steps E1,E2    multiply the LR by --lr-gamma (0.1) after these epochs\n"
"  --lr-scale linear   scale the LR by global batch / --lr-ref-batch (default 64)\n"
"  --warmup-epochs X   linear LR warm-up over X epochs\n"
"  --seed S            (default 0)\n"
"\n"
"parallelism:\n"
"  --backend NAME      sim, mpi, nccl (default sim)\n"
"  --replicas N        sim: logical replicas (default 1)\n"
"  --mode ddp|dp       DistributedDataParallel or DataParallel semantics (default ddp)\n"
"  --bucket-mb X       DDP gradient bucket size (default 25)\n"
"  --no-overlap        DDP: all-reduce after backward instead of during it\n"
"  --accumulate K      K micro-batches per optimizer step (DDP no_sync)\n"
"  --sync-bn           BatchNorm statistics over the global batch\n"
"  --allreduce ALG     sim: ordered, ring or tree (default ordered: the fixed tree that\n"
"                      makes any replica count give the same bits; see --chunks)\n"
"  --chunks C          gradients are summed in C fixed chunks of each step, so results are\n"
"                      bitwise equal for every replica count dividing C (power of two\n"
"                      1..256, default 8)\n"
"  --threads T         compute threads (default: all cores)\n"
"  --timeout S         mpi: seconds to wait for a dead rank (default 300)\n"
"\n"
"output:\n"
"  --log FILE          JSON lines: config, step, epoch, final events\n"
"  --save FILE         write a checkpoint (safetensors) at the end of training\n"
"  --load FILE         eval: the checkpoint to evaluate (train: same as --init-from)\n"
"\n"
"checkpoints and failures (docs/reliability.md):\n"
"  --checkpoint DIR    write checkpoints into DIR (created if missing; its parent must exist)\n"
"  --save-every N|Ne   every N optimizer steps, or every N epochs with Ne; N in 1..1000000000 (default 1e)\n"
"  --keep K            checkpoints kept in DIR, 1..1000000 (default 3)\n"
"  --resume DIR|FILE   continue from the newest good checkpoint in DIR (damaged ones are skipped with a\n"
"                      warning) or from FILE: bitwise the run that was never stopped; implies\n"
"                      --checkpoint DIR when no --checkpoint is given\n"
"  --init-from FILE    initial weights and BN statistics from a safetensors state_dict (PyTorch's\n"
"                      names; a dptrain checkpoint or one PyTorch wrote); epochs and momentum start afresh\n"
"  --on-nan stop|skip  a NaN/Inf loss or gradient: stop (default; the last checkpoint stays the newest)\n"
"                      or skip the step without updating (counted in the epoch line and log)\n"
"  Ctrl-C / SIGTERM    finish the step, write a checkpoint (with --checkpoint), exit 130 / 143;\n"
"                      a second Ctrl-C exits at once\n"
"  --progress / --no-progress   progress bar (default: on a terminal)   --quiet  no console output\n"
"  --help, --version\n",
            dp_model_names());
}

void dp_print_version(FILE *f) {
    char be[256];
    dp_backend_describe(be, sizeof be);
    fprintf(f, "dptrain %s\nbackends: %s\ndevices: cpu (OpenMP)%s\n", DP_VERSION, be,
            DP_HAVE_CUDA ? ", cuda (toolkit found at build time; kernels not in this version)" : "");
}

dp_status dp_parse_args(int argc, char **argv, dp_config *c, dp_action *action) {
    static const char *const modes[] = {"ddp", "dp"};
    static const char *const scales[] = {"none", "linear"};
    static const char *const algos[] = {"ordered", "ring", "tree"};
    int have_shape = 0, have_classes = 0, have_samples = 0, have_data = 0;
    *action = DP_ACTION_RUN;
    optind = 1;
    opterr = 0;
    int argi = 1;
    if (argc > 1 && argv[1][0] != '-') {
        if (strcmp(argv[1], "train") == 0) c->eval_only = 0;
        else if (strcmp(argv[1], "eval") == 0) c->eval_only = 1;
        else return dp_fail(DP_ERR_USAGE, "unknown command '%s' (expected train or eval; see dptrain --help)", argv[1]);
        argi = 2;
    }
    optind = argi;
    int opt, idx;
    while ((opt = getopt_long(argc, argv, "h", long_opts, &idx)) != -1) {
        const char *v = optarg;
        int k = 0;
        long lv = 0;
        switch (opt) {
        case OPT_MODEL:
            if (!dp_model_known(v))
                return dp_fail(DP_ERR_USAGE, "--model: unknown model '%s' (expected one of: %s)", v, dp_model_names());
            c->model = v;
            break;
        case OPT_DATASET:
            if (!dp_dataset_known(v))
                return dp_fail(DP_ERR_USAGE,
                               "--dataset: unknown data set '%s' (expected one of: fashion-mnist, mnist, cifar10, "
                               "synthetic)", v);
            c->data.name = v;
            break;
        case OPT_DATA: c->data.dir = v, have_data = 1; break;
        case OPT_SHAPE: DP_TRY(parse_shape(v, &c->data)); have_shape = 1; break;
        case OPT_CLASSES: DP_TRY(parse_int("--classes", v, 2, 256, &c->data.n_classes)); have_classes = 1; break;
        case OPT_SAMPLES: DP_TRY(parse_int("--samples", v, 1, 100000000, &c->data.samples)); have_samples = 1; break;
        case OPT_EPOCHS: DP_TRY(parse_int("--epochs", v, 1, 100000, &c->epochs)); break;
        case OPT_MAX_STEPS: DP_TRY(parse_long("--max-steps", v, 0, 1000000000L, &c->max_steps)); break;
        case OPT_BATCH: DP_TRY(parse_int("--batch-size", v, 1, 1 << 20, &c->batch_size)); break;
        case OPT_LR: DP_TRY(parse_float("--lr", v, 0, 1, 100, 0, &c->lr)); break;
        case OPT_MOMENTUM: DP_TRY(parse_float("--momentum", v, 0, 0, 1, 1, &c->momentum)); break;
        case OPT_WD: DP_TRY(parse_float("--weight-decay", v, 0, 0, 1, 0, &c->weight_decay)); break;
        case OPT_NESTEROV: c->nesterov = 1; break;
        case OPT_LR_STEPS: DP_TRY(parse_lr_steps(v, c)); break;
        case OPT_LR_GAMMA: DP_TRY(parse_float("--lr-gamma", v, 0, 1, 1, 0, &c->lr_gamma)); break;
        case OPT_LR_SCALE: DP_TRY(one_of("--lr-scale", v, scales, 2, &k)); c->lr_scale_linear = k; break;
        case OPT_LR_REF: DP_TRY(parse_int("--lr-ref-batch", v, 1, 1 << 20, &c->lr_ref_batch)); break;
        case OPT_WARMUP: DP_TRY(parse_double("--warmup-epochs", v, 0, 0, 10000, 0, &c->warmup_epochs)); break;
        case OPT_SEED:
            DP_TRY(parse_long("--seed", v, 0, 0x7fffffffffffffffL, &lv));
            c->seed = (uint64_t)lv;
            break;
        case OPT_WORKERS: DP_TRY(parse_int("--workers", v, 0, 64, &c->workers)); break;
        case OPT_THREADS: DP_TRY(parse_int("--threads", v, 1, 1024, &c->threads)); break;
        case OPT_NO_SHUFFLE: c->shuffle = 0; break;
        case OPT_DROP_LAST: c->drop_last = 1; break;
        case OPT_AUGMENT: c->augment = 1; break;
        case OPT_BACKEND: {
            static const char *const backends[] = {"sim", "mpi", "nccl"};
            DP_TRY(one_of("--backend", v, backends, 3, &k));
            c->backend = v;
            break;
        }
        case OPT_REPLICAS: DP_TRY(parse_int("--replicas", v, 1, 1024, &c->replicas)); break;
        case OPT_MODE: DP_TRY(one_of("--mode", v, modes, 2, &k)); c->mode = (dp_mode)k; break;
        case OPT_BUCKET: DP_TRY(parse_double("--bucket-mb", v, 0, 1, 4096, 0, &c->bucket_mb)); break;
        case OPT_NO_OVERLAP: c->overlap = 0; break;
        case OPT_ACCUM: DP_TRY(parse_int("--accumulate", v, 1, 1024, &c->accumulate)); break;
        case OPT_SYNC_BN: c->sync_bn = 1; break;
        case OPT_ALLREDUCE: DP_TRY(one_of("--allreduce", v, algos, 3, &k)); c->allreduce_algo = v; break;
        case OPT_CHUNKS:
            DP_TRY(parse_int("--chunks", v, 1, DP_CHUNKS_MAX, &c->chunks));
            if (c->chunks & (c->chunks - 1))
                return dp_fail(DP_ERR_USAGE, "--chunks: expected a power of two from 1 to %d, got '%s'", DP_CHUNKS_MAX, v);
            break;
        case OPT_TIMEOUT: DP_TRY(parse_double("--timeout", v, 0, 1, 86400, 0, &c->timeout_s)); break;
        case OPT_LOG: c->log_path = v; break;
        case OPT_SAVE: c->save_path = v; break;
        case OPT_LOAD: c->load_path = v; break;
        case OPT_INIT_FROM: c->init_path = v; break;
        case OPT_CHECKPOINT: c->checkpoint_dir = v; break;
        case OPT_SAVE_EVERY: DP_TRY(parse_save_every(v, c)); break;
        case OPT_KEEP: DP_TRY(parse_int("--keep", v, 1, 1000000, &c->keep)); break;
        case OPT_RESUME: c->resume_path = v; break;
        case OPT_ON_NAN: {
            static const char *const nan_modes[] = {"stop", "skip"};
            DP_TRY(one_of("--on-nan", v, nan_modes, 2, &k));
            c->on_nan_skip = k;
            break;
        }
        case OPT_PROGRESS: c->progress = 1; break;
        case OPT_NO_PROGRESS: c->progress = 0; break;
        case OPT_QUIET: c->quiet = 1; break;
        case 'h':
        case OPT_HELP: *action = DP_ACTION_HELP; return DP_OK;
        case OPT_VERSION: *action = DP_ACTION_VERSION; return DP_OK;
        case ':':
            return dp_fail(DP_ERR_USAGE, "%s: missing value (see dptrain --help)", argv[optind - 1]);
        default:
            if (optopt && optopt < 256)
                return dp_fail(DP_ERR_USAGE, "unknown option '-%c' (see dptrain --help)", optopt);
            /* a known long option without its value, or an unknown one */
            for (const struct option *o = long_opts; o->name; o++)
                if (o->has_arg && optopt == o->val)
                    return dp_fail(DP_ERR_USAGE, "--%s: missing value (see dptrain --help)", o->name);
            return dp_fail(DP_ERR_USAGE, "unknown option '%s' (see dptrain --help)", argv[optind - 1]);
        }
    }
    if (optind < argc) return dp_fail(DP_ERR_USAGE, "unexpected argument '%s' (see dptrain --help)", argv[optind]);

    /* combinations */
    int synthetic = strcmp(c->data.name, "synthetic") == 0;
    if (!synthetic && (have_shape || have_classes || have_samples))
        return dp_fail(DP_ERR_USAGE, "--%s is only for --dataset synthetic",
                       have_shape ? "shape" : have_classes ? "classes" : "samples");
    if (!have_data) c->data.dir = dp_dataset_default_dir(c->data.name);
    if (c->nesterov && c->momentum <= 0)
        return dp_fail(DP_ERR_USAGE, "--nesterov needs a --momentum above 0 (as torch.optim.SGD)");
    if (strcmp(c->backend, "sim") != 0 && c->replicas != 1)
        return dp_fail(DP_ERR_USAGE, "--replicas is for --backend sim; with %s the number of processes or devices "
                       "sets the replica count", c->backend);
    if (c->eval_only) {
        if (!c->load_path)
            return dp_fail(DP_ERR_USAGE, "eval: --load FILE is required (a checkpoint written by train --save or "
                           "--checkpoint, or a safetensors state_dict)");
        /* eval changes no weight: a --save there would write nothing new, so say so instead of ignoring it */
        const char *bad = c->save_path ? "--save" : c->checkpoint_dir ? "--checkpoint" : c->resume_path ? "--resume"
                          : c->init_path ? "--init-from" : c->save_every || c->save_every_epochs ? "--save-every" : NULL;
        if (bad)
            return dp_fail(DP_ERR_USAGE, "eval: %s is for train (eval writes no checkpoint; copy the file given to "
                           "--load instead)", bad);
    } else if (c->load_path) {
        if (c->init_path) return dp_fail(DP_ERR_USAGE, "train: give --init-from or --load, not both");
        /* the old meaning, said out loud: weights only, not a continuation */
        fprintf(stderr, "dptrain: note: train --load FILE is --init-from FILE: weights and BN statistics are loaded, "
                "epochs, LR schedule and momentum start afresh (to continue a run exactly: --checkpoint DIR, then "
                "--resume DIR)\n");
        c->init_path = c->load_path;
        c->load_path = NULL;
    }
    if (c->resume_path && c->init_path)
        return dp_fail(DP_ERR_USAGE, "--resume and --init-from exclude each other (--resume restores the weights too)");
    if (c->resume_path && !c->checkpoint_dir) {
        struct stat st;
        if (stat(c->resume_path, &st) == 0 && S_ISDIR(st.st_mode)) c->checkpoint_dir = c->resume_path;
    }
    if ((c->save_every || c->save_every_epochs || c->keep) && !c->checkpoint_dir)
        return dp_fail(DP_ERR_USAGE, "--%s needs --checkpoint DIR", c->keep ? "keep" : "save-every");
    if (c->checkpoint_dir && !c->save_every && !c->save_every_epochs) c->save_every_epochs = 1;
    if (!c->keep) c->keep = 3;
    if (c->on_nan_skip && c->accumulate > 1)
        return dp_fail(DP_ERR_USAGE, "--on-nan skip needs --accumulate 1 (a step of several micro-batches cannot be "
                       "skipped halfway)");
    if (c->mode == DP_MODE_DP && c->accumulate > 1)
        return dp_fail(DP_ERR_USAGE, "--accumulate is for --mode ddp (DataParallel has no no_sync)");
    if (c->mode == DP_MODE_DP && c->sync_bn)
        return dp_fail(DP_ERR_USAGE, "--sync-bn is for --mode ddp (DataParallel has no SyncBatchNorm)");
    /* the same file under two spellings ("x" and "./x") counts too: compared by inode or real directory */
    const char *ins[3] = {c->load_path, c->init_path, c->resume_path};
    static const char *const in_flags[3] = {"--load", "--init-from", "--resume"};
    if (c->log_path && c->save_path && dp_same_file(c->log_path, c->save_path))
        return dp_fail(DP_ERR_USAGE, "--log and --save name the same file ('%s' and '%s')", c->log_path, c->save_path);
    for (int i = 0; i < 3 && c->log_path; i++)
        if (ins[i] && dp_same_file(c->log_path, ins[i]))
            return dp_fail(DP_ERR_USAGE, "--log would overwrite the checkpoint given to %s ('%s')", in_flags[i],
                           c->log_path);
    return DP_OK;
}
