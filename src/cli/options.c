/* options.c: the command line -> dp_config. One table lists every flag with its kind, range,
 * default and help text; the parser, its error messages and --help are all generated from it,
 * so the ranges --help states are exactly the ones the parser accepts. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backends/backend.h"
#include "cli/options.h"
#include "core/parse_num.h"
#include "data/chunks.h"
#include "dp_config.h"
#include "io/atomic.h"
#include "kernels/kernels.h"
#include "nn/model.h"
#include "report/predict_report.h"
#include "train/strategy.h"

typedef enum {
    K_INT,      /* int field, integer range [lo, hi] */
    K_LONG,     /* long field */
    K_U64,      /* uint64_t field, integer range */
    K_FLOAT,    /* float field, real range with open/closed ends */
    K_DOUBLE,   /* double field */
    K_INDEX,    /* int field: index of the value in choices */
    K_CHOICE,   /* const char * field: one of choices */
    K_STRING,   /* const char * field, anything */
    K_SET,      /* no value: stores `set` into an int field */
    K_SPECIAL,  /* parsed by its own function (shape, lr-steps, model, dataset, help, version) */
} opt_kind;

typedef struct {
    const char *name, *meta;  /* "epochs", "E" */
    opt_kind kind;
    double lo, hi;            /* numeric range */
    int lo_open, hi_open;     /* reals: the bound itself is excluded */
    long long ilo, ihi;       /* integer range (a double cannot hold 2^63-1) */
    int pow2;                 /* integers: powers of two only */
    const char *const *choices;
    size_t off;               /* offsetof(dp_config, field) */
    int set;                  /* K_SET: the value stored */
    const char *def;          /* the default, as --help shows it (NULL: none) */
    const char *help;
    const char *section;      /* starts a new --help section when set */
    unsigned cmds;            /* the subcommands that read it (CMD_*); any other refuses it */
} opt_spec;

#define OFF(f) offsetof(dp_config, f)

/* The subcommands, as bits of opt_spec.cmds: a flag is accepted only by the subcommands whose
 * code reads it, so that `calibrate --device cuda` or `predict --save F` is refused, not ignored. */
enum { CMD_TRAIN = 1, CMD_EVAL = 2, CMD_PREDICT = 4, CMD_CALIBRATE = 8, CMD_ALL = 15 };
static const char *const cmd_names[] = {"train", "eval", "predict", "calibrate"};
#define T_ CMD_TRAIN
#define TP_ (CMD_TRAIN | CMD_PREDICT)
#define TE_ (CMD_TRAIN | CMD_EVAL)
#define TEP_ (CMD_TRAIN | CMD_EVAL | CMD_PREDICT)
#define TEC_ (CMD_TRAIN | CMD_EVAL | CMD_CALIBRATE)
static const char *const datasets[] = {"fashion-mnist", "mnist", "cifar10", "synthetic", NULL};
static const char *const backends[] = {"sim", "mpi", "nccl", NULL};
static const char *const modes[] = {"ddp", "dp", NULL};
static const char *const scales[] = {"none", "linear", NULL};
static const char *const algos[] = {"ordered", "ring", "tree", NULL};
static const char *const nan_modes[] = {"stop", "skip", NULL};
static const char *const devices[] = {"cpu", "cuda", NULL};

/* Limits of the flags with their own parsers, shared by the parser and the help text. */
#define SHAPE_MAX_C 3
#define SHAPE_MAX_HW 1024
#define LR_STEP_MAX 1000000
#define STR_(x) #x
#define STR(x) STR_(x)

enum { S_MODEL = 1, S_DATASET, S_SHAPE, S_LR_STEPS, S_SAVE_EVERY, S_GPUS, S_HELP, S_VERSION };

static const opt_spec opts[] = {
    {"model", "M", K_SPECIAL, .set = S_MODEL, .def = "lenet", .help = "the network", .section = "model and data",
     .cmds = TEP_},
    {"dataset", "D", K_SPECIAL, .set = S_DATASET, .choices = datasets, .def = "fashion-mnist", .help = "the data set",
     .cmds = TEP_},
    {"data", "DIR", K_STRING, .off = OFF(data.dir), .def = "/usr/share/datasets/<dataset>",
     .help = "directory of the data files", .cmds = TEP_},
    {"shape", "CxHxW", K_SPECIAL, .set = S_SHAPE, .def = "3x32x32",
     .help = "synthetic: sample shape, C 1.." STR(SHAPE_MAX_C) ", H and W 1.." STR(SHAPE_MAX_HW), .cmds = TEP_},
    {"classes", "K", K_INT, .ilo = 2, .ihi = 256, .off = OFF(data.n_classes), .def = "10",
     .help = "synthetic: classes", .cmds = TEP_},
    {"samples", "N", K_INT, .ilo = 1, .ihi = 100000000, .off = OFF(data.samples), .def = "10000",
     .help = "synthetic: training samples (test set N/5)", .cmds = TEP_},
    {"augment", NULL, K_SET, .off = OFF(augment), .set = 1, .help = "random affine (28x28) or crop+flip (32x32)",
     .cmds = TP_},
    {"no-shuffle", NULL, K_SET, .off = OFF(shuffle), .set = 0, .help = "keep file order", .cmds = T_},
    {"drop-last", NULL, K_SET, .off = OFF(drop_last), .set = 1, .help = "drop samples so that every batch is full",
     .cmds = TP_},
    {"workers", "W", K_INT, .ilo = 0, .ihi = 64, .off = OFF(workers),
     .def = "auto: 0 on the CPU with every core computing (threads_used >= cores), else 1",
     .help = "loader threads; 0 = the compute threads fill each batch between steps", .cmds = TP_},
    {"epochs", "E", K_INT, .ilo = 1, .ihi = 100000, .off = OFF(epochs), .def = "10", .help = "epochs to train",
     .section = "optimisation (torch.optim.SGD semantics)", .cmds = T_},
    {"max-steps", "S", K_LONG, .ilo = 0, .ihi = 1000000000, .off = OFF(max_steps), .def = "0: no limit",
     .help = "stop after S optimizer steps", .cmds = T_},
    {"batch-size", "B", K_INT, .ilo = 1, .ihi = 1 << 20, .off = OFF(batch_size), .def = "64",
     .help = "global batch over all replicas", .cmds = TEP_},
    {"lr", "X", K_FLOAT, 0, 100, 1, 0, .off = OFF(lr), .def = "0.01", .help = "learning rate", .cmds = T_},
    {"momentum", "X", K_FLOAT, 0, 1, 0, 1, .off = OFF(momentum), .def = "0.9", .help = "SGD momentum", .cmds = TP_},
    {"weight-decay", "X", K_FLOAT, 0, 1, 0, 0, .off = OFF(weight_decay), .def = "0", .help = "L2 penalty", .cmds = TP_},
    {"nesterov", NULL, K_SET, .off = OFF(nesterov), .set = 1, .help = "Nesterov momentum (needs --momentum above 0)",
     .cmds = TP_},
    {"lr-steps", "E1,E2", K_SPECIAL, .set = S_LR_STEPS,
     .help = "multiply the LR by --lr-gamma after these epochs, increasing, range 1.." STR(LR_STEP_MAX), .cmds = T_},
    {"lr-gamma", "X", K_FLOAT, 0, 1, 1, 0, .off = OFF(lr_gamma), .def = "0.1",
     .help = "factor at each --lr-steps epoch", .cmds = T_},
    {"lr-scale", "S", K_INDEX, .choices = scales, .off = OFF(lr_scale_linear), .def = "none",
     .help = "LR scaling, linear = times global batch / --lr-ref-batch", .cmds = T_},
    {"lr-ref-batch", "B", K_INT, .ilo = 1, .ihi = 1 << 20, .off = OFF(lr_ref_batch), .def = "64",
     .help = "reference batch of --lr-scale", .cmds = T_},
    {"warmup-epochs", "X", K_DOUBLE, 0, 10000, .off = OFF(warmup_epochs), .def = "0",
     .help = "linear LR warm-up over X epochs", .cmds = T_},
    {"seed", "S", K_U64, .ilo = 0, .ihi = INT64_MAX, .off = OFF(seed), .def = "0",
     .help = "initialisation, order and augmentation", .cmds = T_},
    {"backend", "NAME", K_CHOICE, .choices = backends, .off = OFF(backend), .def = "sim",
     .help = "where replicas run (sim: all in this process; mpi: one per MPI rank, mpirun or srun --mpi=pmix; nccl: one "
             "per GPU, a process per GPU under torchrun --no-python or mpirun, or several GPUs in one process with "
             "--gpus; a launch the backend does not join is refused)",
     .section = "parallelism", .cmds = CMD_ALL},
    {"replicas", "N", K_INT, .ilo = 1, .ihi = 1024, .off = OFF(replicas), .def = "1", .help = "sim: logical replicas",
     .cmds = CMD_ALL},
    {"device", "D", K_CHOICE, .choices = devices, .off = OFF(device), .def = "cpu",
     .help = "sim and nccl: where the replicas compute (cuda: every replica on one GPU with sim)", .cmds = TEP_},
    {"gpu", "I", K_INT, .ilo = 0, .ihi = 1023, .off = OFF(gpu), .def = "0",
     .help = "--device cuda, or --backend nccl in one process: which GPU (under a launcher each process takes its local rank's)",
     .cmds = TEP_},
    {"gpus", "I,J,...", K_SPECIAL, .set = S_GPUS,
     .help = "nccl: this process drives these GPUs, one replica each, with one NCCL communicator per GPU (DDP or "
             "DataParallel within one process); under a launcher every process lists as many, one process per node; "
             "distinct ordinals 0..1023, at most " STR(DP_MAX_LOCAL_DEVICES), .cmds = TE_},
    {"tf32", NULL, K_SET, .off = OFF(tf32), .set = 1,
     .help = "--device cuda: let cuBLAS and cuDNN use TF32 (faster, 10 fewer mantissa bits; off: fp32 like the CPU)",
     .cmds = TEP_},
    {"no-graph", NULL, K_SET, .off = OFF(graphs), .set = 0,
     .help = "--device cuda: launch every kernel each step instead of replaying the step as one CUDA graph",
     .cmds = TEP_},
    {"mode", "M", K_INDEX, .choices = modes, .off = OFF(mode), .def = "ddp",
     .help = "DistributedDataParallel or DataParallel semantics", .cmds = TP_},
    {"bucket-mb", "X", K_DOUBLE, 0, 4096, 1, 0, .off = OFF(bucket_mb), .def = "25", .help = "DDP gradient bucket size",
     .cmds = TP_},
    {"no-overlap", NULL, K_SET, .off = OFF(overlap), .set = 0,
     .help = "DDP: all-reduce after backward instead of during it", .cmds = T_},
    {"accumulate", "K", K_INT, .ilo = 1, .ihi = 1024, .off = OFF(accumulate), .def = "1",
     .help = "micro-batches per optimizer step (DDP no_sync)", .cmds = T_},
    {"sync-bn", NULL, K_SET, .off = OFF(sync_bn), .set = 1, .help = "BatchNorm statistics over the global batch",
     .cmds = T_},
    {"allreduce", "ALG", K_CHOICE, .choices = algos, .off = OFF(allreduce_algo), .def = "ordered",
     .help = "sim: all-reduce algorithm (ordered: the fixed tree that makes any replica count give the same bits)",
     .cmds = TEC_},
    {"chunks", "C", K_INT, .ilo = 1, .ihi = DP_CHUNKS_MAX, .pow2 = 1, .off = OFF(chunks), .def = STR(DP_CHUNKS_DEFAULT),
     .help = "gradients are summed in C fixed chunks of each step: bitwise equal results for every replica "
             "count dividing C", .cmds = TP_},
    {"threads", "T", K_INT, .ilo = 1, .ihi = 1024, .off = OFF(threads), .def = "the usable cores: the affinity mask and the cgroup CPU quota, shared among the ranks on a machine",
     .help = "compute threads; a training step uses at most one per lane (replicas x lanes: --chunks C over the "
             "replicas), more stay idle (the log's config line: threads_used, cores, cores_from)",
     .cmds = CMD_ALL},
    {"timeout", "S", K_DOUBLE, 0, 86400, 1, 0, .off = OFF(timeout_s), .def = "300",
     .help = "mpi: seconds to wait for a dead rank", .cmds = TEC_},
    {"log-file", "FILE", K_STRING, .off = OFF(log_path),
     .help = "JSON lines: config, step, epoch, final events", .section = "output", .cmds = TEP_},
    /* the old spelling: torchrun 2 reads --log after the program as an ambiguous abbreviation of its
       own --log-dir / --logs-specs and stops before starting anything (tests/test_torchrun.c) */
    {"log", "FILE", K_STRING, .off = OFF(log_path),
     .help = "the same as --log-file (torchrun takes --log for one of its own flags: use --log-file there)",
     .cmds = TEP_},
    {"save", "FILE", K_STRING, .off = OFF(save_path), .help = "write a checkpoint (safetensors) at the end of training",
     .cmds = T_},
    {"load", "FILE", K_STRING, .off = OFF(load_path),
     .help = "eval: the checkpoint to evaluate (train: the same as --init-from, with a note)", .cmds = TE_},
    {"progress", NULL, K_SET, .off = OFF(progress), .set = 1, .help = "progress bar even when not on a terminal",
     .cmds = TE_},
    {"no-progress", NULL, K_SET, .off = OFF(progress), .set = 0,
     .help = "no progress bar (default: on a terminal, not under mpirun)", .cmds = TE_},
    {"quiet", NULL, K_SET, .off = OFF(quiet), .set = 1, .help = "no console output", .cmds = TEP_},
    {"checkpoint", "DIR", K_STRING, .off = OFF(checkpoint_dir),
     .help = "write checkpoints into DIR (created if missing, its parent must exist); Ctrl-C or SIGTERM finishes the "
             "step, writes one and exits 130 / 143 printing the resume command (a second Ctrl-C exits at once)",
     .section = "checkpoints and failures (docs/reliability.md)", .cmds = T_},
    {"save-every", "N|Ne", K_SPECIAL, .set = S_SAVE_EVERY, .def = "1e with --checkpoint",
     .help = "a checkpoint every N optimizer steps, or every N epochs with Ne; N 1..1000000000", .cmds = T_},
    {"keep", "K", K_INT, .ilo = 1, .ihi = 1000000, .off = OFF(keep), .def = "3", .help = "checkpoints kept in DIR",
     .cmds = T_},
    {"resume", "DIR|FILE", K_STRING, .off = OFF(resume_path),
     .help = "continue from the newest good checkpoint in DIR (damaged ones skipped with a warning) or from FILE, "
             "bitwise as if the run never stopped when --chunks, the device and CPU kernels are the same and the "
             "replica count is the same or divides --chunks (else a note says which differs); implies --checkpoint "
             "DIR; a new or empty DIR starts the run there "
             "(one command line starts or continues it)", .cmds = T_},
    {"init-from", "FILE", K_STRING, .off = OFF(init_path),
     .help = "initial weights and BN statistics from a safetensors state_dict (PyTorch's names: a dptrain "
             "checkpoint or one PyTorch wrote); epochs and momentum start afresh", .cmds = T_},
    {"on-nan", "A", K_INDEX, .choices = nan_modes, .off = OFF(on_nan_skip), .def = "stop",
     .help = "a NaN/Inf loss or gradient: stop (the last checkpoint stays the newest) or skip the step without "
             "updating (counted in the epoch line and log)", .cmds = T_},
    {"predict", "T1,T2", K_STRING, .off = OFF(predict_topos), .section = "overhead model (docs/overhead-model.md)",
     .help = "after training: DP and DDP on 1, 2, 4, 8 devices of each topology (presets pcie4, pcie4-p2p, "
             "nvlink3, nvlink4, ib, host, or a topology file)", .cmds = TP_},
    {"topology", "T1,T2", K_STRING, .off = OFF(predict_topos), .help = "dptrain predict: the same as --predict",
     .cmds = TP_},
    {"save-profile", "FILE", K_STRING, .off = OFF(save_profile), .help = "write the measured per-node compute profile",
     .cmds = TP_},
    {"compute", "FILE", K_STRING, .off = OFF(compute_profile),
     .help = "predict with a saved profile's compute (a path, or a device name next to the presets)", .cmds = TP_},
    {"measured-epoch", "S", K_DOUBLE, 0, 1e9, 1, 0, .off = OFF(measured_epoch_s), .def = "none",
     .help = "dptrain predict: another framework's measured epoch on one device, in seconds: DP and DDP are predicted "
             "from it (with --framework and --compute)", .cmds = CMD_PREDICT},
    {"measured-step", "S", K_DOUBLE, 0, 1e9, 1, 0, .off = OFF(measured_step_s), .def = "none",
     .help = "dptrain predict: the same as a step, in seconds (give this or --measured-epoch)", .cmds = CMD_PREDICT},
    {"measured-batch", "B", K_INT, .ilo = 1, .ihi = 1 << 24, .off = OFF(measured_batch), .def = "--batch-size",
     .help = "dptrain predict: the batch of the measured run", .cmds = CMD_PREDICT},
    {"framework", "FILE", K_STRING, .off = OFF(framework),
     .help = "dptrain predict: the measured framework's DP and DDP per-step costs (a .framework file, or a name "
             "next to the presets: pytorch-cpu)", .cmds = CMD_PREDICT},
    {"plot", "FILE", K_STRING, .off = OFF(plot_path), .help = "plot of predicted speedup against devices: F.svg, or F.png",
     .cmds = TP_},
    {"out", "FILE", K_STRING, .off = OFF(calibrate_out), .help = "dptrain calibrate: the topology file to write",
     .cmds = CMD_CALIBRATE},
    {"help", NULL, K_SPECIAL, .set = S_HELP, .help = "this text (also -h)", .cmds = CMD_ALL},
    {"version", NULL, K_SPECIAL, .set = S_VERSION, .help = "version, backends and devices compiled in",
     .cmds = CMD_ALL},
};
#define N_OPTS ((int)(sizeof opts / sizeof *opts))

static int is_integer(opt_kind k) { return k == K_INT || k == K_LONG || k == K_U64; }
static int is_real(opt_kind k) { return k == K_FLOAT || k == K_DOUBLE; }

/* "1..100000" or "(0, 100]": what --help shows and what a bad value's message quotes. */
static void range_text(const opt_spec *o, char *buf, size_t cap) {
    if (is_integer(o->kind)) snprintf(buf, cap, "%lld..%lld%s", o->ilo, o->ihi, o->pow2 ? ", a power of two" : "");
    else if (is_real(o->kind))
        snprintf(buf, cap, "%s%g, %g%s", o->lo_open ? "(" : "[", o->lo, o->hi, o->hi_open ? ")" : "]");
    else buf[0] = '\0';
}

static void choices_text(const char *const *c, char *buf, size_t cap) {
    buf[0] = '\0';
    for (int i = 0; c[i]; i++) {
        strncat(buf, c[i], cap - strlen(buf) - 1);
        if (c[i + 1]) strncat(buf, ", ", cap - strlen(buf) - 1);
    }
}

static dp_status parse_integer(const opt_spec *o, const char *s, long long *out) {
    char r[64];
    long long v = 0;
    if (dp_parse_ll(s, &v) != 0 || v < o->ilo || v > o->ihi || (o->pow2 && (v & (v - 1)))) {
        range_text(o, r, sizeof r);
        return dp_fail(DP_ERR_USAGE, "--%s: expected an integer in %s, got '%s'", o->name, r, s);
    }
    *out = v;
    return DP_OK;
}

static dp_status parse_real(const opt_spec *o, const char *s, double *out) {
    char r[64];
    double v = 0;
    int ok = dp_parse_double(s, &v) == 0 && (o->lo_open ? v > o->lo : v >= o->lo) &&
             (o->hi_open ? v < o->hi : v <= o->hi);
    if (!ok) {
        range_text(o, r, sizeof r);
        return dp_fail(DP_ERR_USAGE, "--%s: expected a number in %s, got '%s'", o->name, r, s);
    }
    *out = v;
    return DP_OK;
}

/* The integer from *p up to sep or the end of the string, in [lo, hi]; *p moves past it and its
 * separator. -1 when it is not one (an empty item included). */
static int next_item(const char **p, char sep, long long lo, long long hi, long long *v) {
    const char *e = strchr(*p, sep);
    size_t n = e ? (size_t)(e - *p) : strlen(*p);
    if (dp_parse_ll_n(*p, n, v) != 0 || *v < lo || *v > hi) return -1;
    *p += n + (e ? 1 : 0);
    return 0;
}

static dp_status one_of(const char *flag, const char *v, const char *const *allowed, int *idx) {
    for (int i = 0; allowed[i]; i++)
        if (strcmp(v, allowed[i]) == 0) return *idx = i, DP_OK;
    char list[256];
    choices_text(allowed, list, sizeof list);
    return dp_fail(DP_ERR_USAGE, "%s: unknown value '%s' (expected one of: %s)", flag, v, list);
}

static dp_status parse_shape(const char *s, dp_data_spec *d) {
    long long c = 0, h = 0, w = 0;
    const char *p = s;
    if (!strchr(s, 'x') || next_item(&p, 'x', 1, SHAPE_MAX_C, &c) || !strchr(p, 'x') ||
        next_item(&p, 'x', 1, SHAPE_MAX_HW, &h) || strchr(p, 'x') || next_item(&p, 'x', 1, SHAPE_MAX_HW, &w))
        return dp_fail(DP_ERR_USAGE, "--shape: expected CxHxW with C in 1..%d and H, W in 1..%d, got '%s'", SHAPE_MAX_C,
                       SHAPE_MAX_HW, s);
    d->c = (int)c, d->h = (int)h, d->w = (int)w;
    return DP_OK;
}

static dp_status parse_lr_steps(const char *s, dp_config *c) {
    c->n_lr_steps = 0;
    const char *p = s;
    if (!*s) return dp_fail(DP_ERR_USAGE, "--lr-steps: empty list");
    while (*p) {
        long long v = 0;
        if (next_item(&p, ',', 1, LR_STEP_MAX, &v) || (c->n_lr_steps && v <= c->lr_steps[c->n_lr_steps - 1]) ||
            c->n_lr_steps == DP_MAX_LR_STEPS)
            return dp_fail(DP_ERR_USAGE,
                           "--lr-steps: expected up to %d increasing epoch numbers separated by commas (e.g. 10,20), "
                           "got '%s'", DP_MAX_LR_STEPS, s);
        c->lr_steps[c->n_lr_steps++] = (int)v;
        if (!*p && p[-1] == ',') return dp_fail(DP_ERR_USAGE, "--lr-steps: trailing comma in '%s'", s);
    }
    return DP_OK;
}

/* --gpus 0,1,2,3: distinct ordinals, at least one, at most DP_MAX_LOCAL_DEVICES. */
static dp_status parse_gpus(const char *s, dp_config *c) {
    c->n_gpus = 0;
    const char *p = s;
    do {
        long long v = 0;
        if (next_item(&p, ',', 0, 1023, &v) || (!*p && p[-1] == ','))
            return dp_fail(DP_ERR_USAGE, "--gpus: expected GPU ordinals 0..1023 separated by commas (e.g. 0,1,2,3), "
                           "got '%s'", s);
        for (int i = 0; i < c->n_gpus; i++)
            if (c->gpus[i] == (int)v) return dp_fail(DP_ERR_USAGE, "--gpus %s: GPU %lld is listed twice", s, v);
        if (c->n_gpus == DP_MAX_LOCAL_DEVICES)
            return dp_fail(DP_ERR_USAGE, "--gpus %s: at most %d GPUs per process", s, DP_MAX_LOCAL_DEVICES);
        c->gpus[c->n_gpus++] = (int)v;
    } while (*p);
    return DP_OK;
}

/* --save-every N (steps) or Ne (epochs). */
static dp_status parse_save_every(const char *s, dp_config *c) {
    size_t n = strlen(s);
    int epochs = n > 1 && s[n - 1] == 'e';
    long long v = 0;
    if (dp_parse_ll_n(s, n - (size_t)epochs, &v) != 0 || v < 1 || v > 1000000000L)
        return dp_fail(DP_ERR_USAGE, "--save-every: expected N (steps) or Ne (epochs), N in 1..1000000000, got '%s'", s);
    c->save_every = epochs ? 0 : (long)v;
    c->save_every_epochs = epochs ? (int)v : 0;
    return DP_OK;
}

void dp_print_usage(FILE *f) {
    fprintf(f, "usage: dptrain [train|eval|predict|calibrate] [options]\n\n"
               "Trains (or evaluates) a CNN with data parallelism over N replicas; predicts and calibrates:\n"
               "  dptrain predict --model M --batch-size B [--replicas N] --topology T1,T2 [--plot F.svg|F.png]\n"
               "      predictions without training (a short timing run of the model here)\n"
               "  dptrain calibrate --backend sim|mpi [--out FILE]\n"
               "      all-reduce latency and bandwidth over a sweep of sizes; writes a topology file\n"
               "A subcommand takes the flags it reads; another is refused, naming the subcommands it is for.\n"
               "Under a launcher (torchrun, mpirun) a \"--\" may come before the subcommand or its flags.\n");
    for (int i = 0; i < N_OPTS; i++) {
        const opt_spec *o = &opts[i];
        if (o->section) fprintf(f, "\n%s:\n", o->section);
        char left[64], range[320] = "", list[256];
        snprintf(left, sizeof left, "--%s%s%s", o->name, o->meta ? " " : "", o->meta ? o->meta : "");
        if (is_integer(o->kind) || is_real(o->kind)) {
            char r[64];
            range_text(o, r, sizeof r);
            snprintf(range, sizeof range, ", range %s", r);
        } else if (o->choices) {
            choices_text(o->choices, list, sizeof list);
            snprintf(range, sizeof range, ": %s", list);
        } else if (o->kind == K_SPECIAL && o->set == S_MODEL) {
            snprintf(range, sizeof range, ": %s", dp_model_names());
        } else if (o->kind == K_SPECIAL && o->set == S_LR_STEPS) {
            snprintf(range, sizeof range, ", at most %d of them", DP_MAX_LR_STEPS);
        }
        fprintf(f, "  %-20s %s%s", left, o->help, range);
        if (o->def) fprintf(f, " (default %s)", o->def);
        fputc('\n', f);
    }
}

void dp_print_version(FILE *f) {
    char be[256];
    dp_backend_describe(be, sizeof be);
    fprintf(f, "dptrain %s\nbackends: %s\ndevices: cpu (OpenMP)%s\ncpu kernels: %s\n", DP_VERSION, be,
            DP_HAVE_CUDA ? (DP_HAVE_CUDNN ? ", cuda (cuBLAS, cuDNN; --device cuda; loaded on use)"
                                          : ", cuda (cuBLAS; --device cuda; loaded on use)")
                         : "",
            dp_cpu_kernel_variant());
}

/* Stores one flag's value; *action set by --help / --version. */
static dp_status apply(const opt_spec *o, const char *v, dp_config *c, dp_action *action) {
    char *field = (char *)c + o->off;
    char flag[64];
    snprintf(flag, sizeof flag, "--%s", o->name);
    long long iv;
    double dv;
    int k = 0;
    switch (o->kind) {
    case K_INT: DP_TRY(parse_integer(o, v, &iv)); *(int *)(void *)field = (int)iv; break;
    case K_LONG: DP_TRY(parse_integer(o, v, &iv)); *(long *)(void *)field = (long)iv; break;
    case K_U64: DP_TRY(parse_integer(o, v, &iv)); *(uint64_t *)(void *)field = (uint64_t)iv; break;
    case K_FLOAT: DP_TRY(parse_real(o, v, &dv)); *(float *)(void *)field = (float)dv; break;
    case K_DOUBLE: DP_TRY(parse_real(o, v, &dv)); *(double *)(void *)field = dv; break;
    case K_INDEX: DP_TRY(one_of(flag, v, o->choices, &k)); *(int *)(void *)field = k; break;
    case K_CHOICE: DP_TRY(one_of(flag, v, o->choices, &k)); *(const char **)(void *)field = o->choices[k]; break;
    case K_STRING: *(const char **)(void *)field = v; break;
    case K_SET: *(int *)(void *)field = o->set; break;
    case K_SPECIAL:
        switch (o->set) {
        case S_MODEL:
            if (!dp_model_known(v))
                return dp_fail(DP_ERR_USAGE, "--model: unknown model '%s' (expected one of: %s)", v, dp_model_names());
            c->model = v;
            break;
        case S_DATASET:
            if (!dp_dataset_known(v)) {
                char list[256];
                choices_text(datasets, list, sizeof list);
                return dp_fail(DP_ERR_USAGE, "--dataset: unknown data set '%s' (expected one of: %s)", v, list);
            }
            c->data.name = v;
            break;
        case S_SHAPE: DP_TRY(parse_shape(v, &c->data)); break;
        case S_LR_STEPS: DP_TRY(parse_lr_steps(v, c)); break;
        case S_SAVE_EVERY: DP_TRY(parse_save_every(v, c)); break;
        case S_GPUS: DP_TRY(parse_gpus(v, c)); break;
        case S_HELP: *action = DP_ACTION_HELP; break;
        case S_VERSION: *action = DP_ACTION_VERSION; break;
        }
        break;
    }
    return DP_OK;
}

/* getopt's table, built from opts once (val = index + 256). */
static const struct option *long_options(void) {
    static struct option lo[N_OPTS + 1];
    if (!lo[0].name)
        for (int i = 0; i < N_OPTS; i++)
            lo[i] = (struct option){opts[i].name, opts[i].meta ? required_argument : no_argument, 0, 256 + i};
    return lo;
}

/* "train", "train and predict", "train, eval and predict": the subcommands in cmds. */
static void cmds_text(unsigned cmds, char *buf, size_t cap) {
    int n = 0, k = 0;
    for (int i = 0; i < 4; i++) n += (cmds >> i) & 1;
    buf[0] = '\0';
    for (int i = 0; i < 4; i++) {
        if (!((cmds >> i) & 1)) continue;
        k++;
        const size_t at = strlen(buf);
        snprintf(buf + at, cap - at, "%s%s", k == 1 ? "" : k == n ? " and " : ", ", cmd_names[i]);
    }
}

/* argv[i] is "--": torchrun's parser stops at it (each flag after it goes to the program unread),
 * so `torchrun ... dptrain -- train --log-file F` and `dptrain train -- ...` are accepted. */
static int is_dashdash(int argc, char **argv, int i) { return i < argc && strcmp(argv[i], "--") == 0; }

dp_status dp_parse_args(int argc, char **argv, dp_config *c, dp_action *action) {
    int have_shape = 0, have_classes = 0, have_samples = 0, have_data = 0, have_gpu = 0;
    const char *log_flag = "--log-file";
    *action = DP_ACTION_RUN;
    optind = 1;
    opterr = 0;
    int argi = 1;
    if (is_dashdash(argc, argv, argi)) argi++;
    unsigned cmd = CMD_TRAIN;
    if (argi < argc && argv[argi][0] != '-') {
        if (strcmp(argv[argi], "train") == 0) c->eval_only = 0;
        else if (strcmp(argv[argi], "eval") == 0) c->eval_only = 1, cmd = CMD_EVAL;
        else if (strcmp(argv[argi], "predict") == 0) c->predict_only = 1, cmd = CMD_PREDICT;
        else if (strcmp(argv[argi], "calibrate") == 0) c->calibrate = 1, cmd = CMD_CALIBRATE;
        else return dp_fail(DP_ERR_USAGE, "unknown command '%s' (expected train, eval, predict or calibrate; see "
                            "dptrain --help)", argv[argi]);
        argi++;
        if (is_dashdash(argc, argv, argi)) argi++;
    }
    optind = argi;
    const struct option *lo = long_options();
    int opt, idx;
    while ((opt = getopt_long(argc, argv, ":h", lo, &idx)) != -1) {
        if (opt == 'h') {
            *action = DP_ACTION_HELP;
            return DP_OK;
        }
        if (opt >= 256 && opt < 256 + N_OPTS) {
            const opt_spec *o = &opts[opt - 256];
            if (!(o->cmds & cmd)) {
                char list[64];
                cmds_text(o->cmds, list, sizeof list);
                const char *sub = cmd_names[cmd == CMD_TRAIN ? 0 : cmd == CMD_EVAL ? 1 : cmd == CMD_PREDICT ? 2 : 3];
                return dp_fail(DP_ERR_USAGE, "%s: --%s is for %s, not %s (it would do nothing here); leave it out", sub,
                               o->name, list, sub);
            }
            DP_TRY(apply(o, optarg, c, action));
            if (*action != DP_ACTION_RUN) return DP_OK;
            if (o->off == OFF(log_path) && o->kind == K_STRING) log_flag = o->name[3] ? "--log-file" : "--log";
            have_shape |= o->kind == K_SPECIAL && o->set == S_SHAPE;
            have_classes |= o->off == OFF(data.n_classes) && o->kind == K_INT;
            have_samples |= o->off == OFF(data.samples) && o->kind == K_INT;
            have_data |= o->off == OFF(data.dir) && o->kind == K_STRING;
            have_gpu |= o->off == OFF(gpu) && o->kind == K_INT;
            continue;
        }
        if (opt == ':') {
            /* a known long option without its value */
            if (optopt >= 256 && optopt < 256 + N_OPTS)
                return dp_fail(DP_ERR_USAGE, "--%s: missing value (see dptrain --help)", opts[optopt - 256].name);
            return dp_fail(DP_ERR_USAGE, "%s: missing value (see dptrain --help)", argv[optind - 1]);
        }
        if (optopt && optopt < 256)
            return dp_fail(DP_ERR_USAGE, "unknown option '-%c' (see dptrain --help)", optopt);
        return dp_fail(DP_ERR_USAGE, "unknown option '%s' (see dptrain --help)", argv[optind - 1]);
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
    if (c->predict_topos && !*c->predict_topos)
        return dp_fail(DP_ERR_USAGE, "--predict: expected topology names or paths");
    if (c->predict_only) {
        if (!c->predict_topos) return dp_fail(DP_ERR_USAGE, "predict: --topology T[,T...] is required (presets: pcie4, "
                                              "pcie4-p2p, nvlink3, nvlink4, ib, host)");
        if (strcmp(c->backend, "sim") != 0) return dp_fail(DP_ERR_USAGE, "predict: runs on the sim backend only");
        c->predict_replicas = c->replicas, c->replicas = 1; /* the timing run needs one replica */
    }
    if (c->measured_epoch_s > 0 && c->measured_step_s > 0)
        return dp_fail(DP_ERR_USAGE, "predict: give --measured-epoch or --measured-step, not both");
    const int measured = c->measured_epoch_s > 0 || c->measured_step_s > 0;
    if (measured && (!c->framework || !c->compute_profile))
        return dp_fail(DP_ERR_USAGE, "--measured-%s needs --framework F (the framework's DP and DDP costs) and --compute "
                       "P (the device's profile)", c->measured_epoch_s > 0 ? "epoch" : "step");
    if (!measured && (c->framework || c->measured_batch))
        return dp_fail(DP_ERR_USAGE, "--%s needs --measured-epoch S or --measured-step S",
                       c->framework ? "framework" : "measured-batch");
    if (c->plot_path) DP_TRY(dp_plot_kind(c->plot_path)); /* before the run it would follow */
    if ((c->plot_path || c->compute_profile) && !c->predict_topos)
        return dp_fail(DP_ERR_USAGE, "--%s needs --predict T (or dptrain predict --topology T)",
                       c->plot_path ? "plot" : "compute");
    const dp_strategy *strategy = dp_strategy_of(c->mode);
    if (c->predict_topos && !strategy->no_accumulate && c->accumulate > 1)
        return dp_fail(DP_ERR_USAGE, "--predict: the model predicts steps without --accumulate");
    if (c->n_gpus && strcmp(c->backend, "nccl") != 0)
        return dp_fail(DP_ERR_USAGE, "--gpus is for --backend nccl (one process driving several GPUs); with --backend "
                       "%s use %s", c->backend, strcmp(c->backend, "sim") == 0 ? "--device cuda --replicas N (N replicas "
                       "on one GPU)" : "--backend nccl --gpus, or one GPU per process with --backend nccl");
    if (c->n_gpus && have_gpu) return dp_fail(DP_ERR_USAGE, "give --gpu or --gpus, not both");
    /* --gpu names a GPU to compute on: with neither --device cuda nor --backend nccl there is none */
    const int on_gpu = (c->device && strcmp(c->device, "cuda") == 0) || strcmp(c->backend, "nccl") == 0;
    if (have_gpu && !on_gpu && strcmp(c->backend, "sim") == 0)
        return dp_fail(DP_ERR_USAGE, "--gpu %d: this run computes on the CPU (--device %s), so no GPU is used; add "
                       "--device cuda to compute on GPU %d, or leave --gpu out", c->gpu, c->device ? c->device : "cpu",
                       c->gpu);
    if (have_gpu && !on_gpu)
        return dp_fail(DP_ERR_USAGE, "--gpu %d: --backend %s computes on the CPU, so no GPU is used; leave --gpu out "
                       "(GPUs across processes: --backend nccl)", c->gpu, c->backend);
    if (strcmp(c->backend, "sim") != 0 && c->replicas != 1)
        return dp_fail(DP_ERR_USAGE, "--replicas is for --backend sim; with %s the number of processes or devices "
                       "sets the replica count", c->backend);
    if (strategy->no_accumulate && c->accumulate > 1)
        return dp_fail(DP_ERR_USAGE, "--accumulate is for --mode ddp (%s)", strategy->no_accumulate);
    if (strategy->no_sync_bn && c->sync_bn)
        return dp_fail(DP_ERR_USAGE, "--sync-bn is for --mode ddp (%s)", strategy->no_sync_bn);
    if (c->eval_only) {
        if (!c->load_path)
            return dp_fail(DP_ERR_USAGE, "eval: --load FILE is required (a checkpoint written by train --save or "
                           "--checkpoint, or a safetensors state_dict)");
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
        /* a directory, or a path not there yet that does not look like a checkpoint file (*.safetensors,
           ckpt-*): the run's directory, so that one command line starts the run or continues it */
        struct stat st;
        size_t n = strlen(c->resume_path);
        int there = stat(c->resume_path, &st) == 0;
        const char *base = strrchr(c->resume_path, '/') ? strrchr(c->resume_path, '/') + 1 : c->resume_path;
        int file_like = (n >= 12 && strcmp(c->resume_path + n - 12, ".safetensors") == 0) || strncmp(base, "ckpt-", 5) == 0;
        if (there ? S_ISDIR(st.st_mode) : errno == ENOENT && !file_like) c->checkpoint_dir = c->resume_path;
    }
    if (c->checkpoint_dir && !c->save_every && !c->save_every_epochs) c->save_every_epochs = 1;
    if (c->on_nan_skip && c->accumulate > 1)
        return dp_fail(DP_ERR_USAGE, "--on-nan skip needs --accumulate 1 (a step of several micro-batches cannot be "
                       "skipped halfway)");
    /* no output may replace another output or an input; the same file under two spellings ("x" and
       "./x") counts too: compared by inode or real directory. Checked here, before the checkpoint
       directory is created: a refused run leaves nothing behind. */
    enum { N_OUTS = 6, N_INS = 5 };
    const char *outs[N_OUTS] = {c->log_path, c->save_path, c->save_profile, c->plot_path, c->calibrate_out,
                                c->checkpoint_dir};
    const char *const out_flags[N_OUTS] = {log_flag, "--save", "--save-profile", "--plot", "--out",
                                           c->resume_path == c->checkpoint_dir ? "--resume" : "--checkpoint"};
    const char *ins[N_INS] = {c->load_path, c->init_path, c->resume_path, c->compute_profile, c->framework};
    static const char *const in_flags[N_INS] = {"--load", "--init-from", "--resume", "--compute", "--framework"};
    for (int i = 0; i < N_OUTS; i++) {
        if (!outs[i]) continue;
        for (int j = i + 1; j < N_OUTS; j++)
            if (outs[j] && dp_same_file(outs[i], outs[j]))
                return dp_fail(DP_ERR_USAGE, "%s and %s name the same %s ('%s' and '%s'); give each its own",
                               out_flags[i], out_flags[j], j == N_OUTS - 1 ? "path" : "file", outs[i], outs[j]);
        for (int j = 0; j < N_INS && i < N_OUTS - 1; j++) /* --resume DIR is --checkpoint DIR on purpose */
            if (ins[j] && dp_same_file(outs[i], ins[j]))
                return dp_fail(DP_ERR_USAGE, "%s would overwrite the file given to %s ('%s')", out_flags[i], in_flags[j],
                               outs[i]);
    }
    return DP_OK;
}
