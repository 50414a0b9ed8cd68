/* options.c: the command line -> dp_config. The settings table (train/settings.c) lists every
 * flag with its kind, range, default and help text; the parser, its error messages and --help are
 * all generated from it, so the ranges --help states are exactly the ones the parser accepts. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backends/backend_kind.h"
#include "cli/options.h"
#include "cli/paths_check.h"
#include "core/parse_num.h"
#include "dp_config.h"
#include "exec/devices.h"
#include "io/atomic.h"
#include "kernels/kernels.h"
#include "nn/model.h"
#include "sim/predict.h"
#include "train/settings.h"
#include "train/strategy.h"

#define OFF(f) offsetof(dp_config, f)
static const char *const cmd_names[] = {"train", "eval", "predict", "calibrate"};

static int is_integer(dp_setting_kind k) { return k == DP_K_INT || k == DP_K_LONG || k == DP_K_U64; }
static int is_real(dp_setting_kind k) { return k == DP_K_FLOAT || k == DP_K_DOUBLE; }

/* "1..100000" or "(0, 100]": what --help shows and what a bad value's message quotes. */
static void range_text(const dp_setting *o, char *buf, size_t cap) {
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

static dp_status parse_integer(const dp_setting *o, const char *s, long long *out) {
    char r[64];
    long long v = 0;
    if (dp_parse_ll(s, &v) != 0 || v < o->ilo || v > o->ihi || (o->pow2 && (v & (v - 1)))) {
        range_text(o, r, sizeof r);
        return dp_fail(DP_ERR_USAGE, "--%s: expected an integer in %s, got '%s'", o->name, r, s);
    }
    *out = v;
    return DP_OK;
}

static dp_status parse_real(const dp_setting *o, const char *s, double *out) {
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
    if (!strchr(s, 'x') || next_item(&p, 'x', 1, DP_SHAPE_MAX_C, &c) || !strchr(p, 'x') ||
        next_item(&p, 'x', 1, DP_SHAPE_MAX_HW, &h) || strchr(p, 'x') || next_item(&p, 'x', 1, DP_SHAPE_MAX_HW, &w))
        return dp_fail(DP_ERR_USAGE, "--shape: expected CxHxW with C in 1..%d and H, W in 1..%d, got '%s'", DP_SHAPE_MAX_C,
                       DP_SHAPE_MAX_HW, s);
    d->c = (int)c, d->h = (int)h, d->w = (int)w;
    return DP_OK;
}

static dp_status parse_lr_steps(const char *s, dp_config *c) {
    c->n_lr_steps = 0;
    const char *p = s;
    if (!*s) return dp_fail(DP_ERR_USAGE, "--lr-steps: empty list");
    while (*p) {
        long long v = 0;
        if (next_item(&p, ',', 1, DP_LR_STEP_MAX, &v) || (c->n_lr_steps && v <= c->lr_steps[c->n_lr_steps - 1]) ||
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
    for (int i = 0; i < dp_n_settings; i++) {
        const dp_setting *o = &dp_settings[i];
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
        } else if (o->kind == DP_K_SPECIAL && o->set == DP_S_MODEL) {
            snprintf(range, sizeof range, ": %s", dp_model_names());
        } else if (o->kind == DP_K_SPECIAL && o->set == DP_S_LR_STEPS) {
            snprintf(range, sizeof range, ", at most %d of them", DP_MAX_LR_STEPS);
        }
        fprintf(f, "  %-20s %s%s", left, o->help, range);
        char def[128];
        dp_setting_default_text(o, def, sizeof def);
        if (*def) fprintf(f, " (default %s)", def);
        fputc('\n', f);
    }
}

void dp_print_version(FILE *f) {
    char be[256], dev[256];
    dp_backend_describe(be, sizeof be);
    dp_dev_describe(dev, sizeof dev);
    fprintf(f, "dptrain %s\nbackends: %s\ndevices: %s\ncpu kernels: %s\n", DP_VERSION, be, dev,
            dp_cpu_kernel_variant());
}

/* Stores one flag's value; *action set by --help / --version. */
static dp_status apply(const dp_setting *o, const char *v, dp_config *c, dp_action *action) {
    char *field = (char *)c + o->off;
    char flag[64];
    snprintf(flag, sizeof flag, "--%s", o->name);
    long long iv;
    double dv;
    int k = 0;
    switch (o->kind) {
    case DP_K_INT: DP_TRY(parse_integer(o, v, &iv)); *(int *)(void *)field = (int)iv; break;
    case DP_K_LONG: DP_TRY(parse_integer(o, v, &iv)); *(long *)(void *)field = (long)iv; break;
    case DP_K_U64: DP_TRY(parse_integer(o, v, &iv)); *(uint64_t *)(void *)field = (uint64_t)iv; break;
    case DP_K_FLOAT: DP_TRY(parse_real(o, v, &dv)); *(float *)(void *)field = (float)dv; break;
    case DP_K_DOUBLE: DP_TRY(parse_real(o, v, &dv)); *(double *)(void *)field = dv; break;
    case DP_K_INDEX: DP_TRY(one_of(flag, v, o->choices, &k)); *(int *)(void *)field = k; break;
    case DP_K_CHOICE: DP_TRY(one_of(flag, v, o->choices, &k)); *(const char **)(void *)field = o->choices[k]; break;
    case DP_K_STRING: *(const char **)(void *)field = v; break;
    case DP_K_SET: *(int *)(void *)field = o->set; break;
    case DP_K_SPECIAL:
        switch (o->set) {
        case DP_S_MODEL:
            if (!dp_model_known(v))
                return dp_fail(DP_ERR_USAGE, "--model: unknown model '%s' (expected one of: %s)", v, dp_model_names());
            c->model = v;
            break;
        case DP_S_DATASET:
            if (!dp_dataset_known(v)) {
                char list[256];
                choices_text(o->choices, list, sizeof list);
                return dp_fail(DP_ERR_USAGE, "--dataset: unknown data set '%s' (expected one of: %s)", v, list);
            }
            c->data.name = v;
            break;
        case DP_S_SHAPE: DP_TRY(parse_shape(v, &c->data)); break;
        case DP_S_LR_STEPS: DP_TRY(parse_lr_steps(v, c)); break;
        case DP_S_SAVE_EVERY: DP_TRY(parse_save_every(v, c)); break;
        case DP_S_GPUS: DP_TRY(parse_gpus(v, c)); break;
        case DP_S_HELP: *action = DP_ACTION_HELP; break;
        case DP_S_VERSION: *action = DP_ACTION_VERSION; break;
        }
        break;
    }
    return DP_OK;
}

/* getopt's table, built from opts once (val = index + 256). */
static const struct option *long_options(void) {
    static struct option lo[DP_SETTINGS_MAX + 1];
    if (!lo[0].name)
        for (int i = 0; i < dp_n_settings; i++)
            lo[i] = (struct option){dp_settings[i].name, dp_settings[i].meta ? required_argument : no_argument, 0, 256 + i};
    return lo;
}

/* "--" or "--name[=...]" of a known flag: getopt takes the next word as a flag's value, so
 * `--save --quiet` wrote a file named --quiet and was not quiet */
static int names_a_flag(const char *v) {
    if (strncmp(v, "--", 2) != 0) return 0;
    const size_t n = strcspn(v + 2, "=");
    if (n == 0) return v[2] == '\0';
    for (int i = 0; i < dp_n_settings; i++)
        if (strlen(dp_settings[i].name) == n && strncmp(dp_settings[i].name, v + 2, n) == 0) return 1;
    return 0;
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
    *action = DP_ACTION_RUN;
    optind = 1;
    opterr = 0;
    int argi = 1;
    if (is_dashdash(argc, argv, argi)) argi++;
    unsigned cmd = DP_CMD_TRAIN;
    if (argi < argc && argv[argi][0] != '-') {
        if (strcmp(argv[argi], "train") == 0) c->eval_only = 0;
        else if (strcmp(argv[argi], "eval") == 0) c->eval_only = 1, cmd = DP_CMD_EVAL;
        else if (strcmp(argv[argi], "predict") == 0) c->predict_only = 1, cmd = DP_CMD_PREDICT;
        else if (strcmp(argv[argi], "calibrate") == 0) c->calibrate = 1, cmd = DP_CMD_CALIBRATE;
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
        if (opt >= 256 && opt < 256 + dp_n_settings) {
            const dp_setting *o = &dp_settings[opt - 256];
            if (!(o->cmds & cmd)) {
                char list[64];
                cmds_text(o->cmds, list, sizeof list);
                const char *sub = cmd_names[cmd == DP_CMD_TRAIN ? 0 : cmd == DP_CMD_EVAL ? 1 : cmd == DP_CMD_PREDICT ? 2 : 3];
                return dp_fail(DP_ERR_USAGE, "%s: --%s is for %s, not %s (it would do nothing here); leave it out", sub,
                               o->name, list, sub);
            }
            if (optarg && names_a_flag(optarg))
                return dp_fail(DP_ERR_USAGE, "--%s: missing value (the next word, '%s', is a flag; see dptrain --help)",
                               o->name, optarg);
            DP_TRY(apply(o, optarg, c, action));
            if (*action != DP_ACTION_RUN) return DP_OK;
            if (o->off == OFF(log_path) && o->kind == DP_K_STRING) c->log_flag = o->name[3] ? "--log-file" : "--log";
            have_shape |= o->kind == DP_K_SPECIAL && o->set == DP_S_SHAPE;
            have_classes |= o->off == OFF(data.n_classes) && o->kind == DP_K_INT;
            have_samples |= o->off == OFF(data.samples) && o->kind == DP_K_INT;
            have_data |= o->off == OFF(data.dir) && o->kind == DP_K_STRING;
            have_gpu |= o->off == OFF(gpu) && o->kind == DP_K_INT;
            continue;
        }
        if (opt == ':') {
            /* a known long option without its value */
            if (optopt >= 256 && optopt < 256 + dp_n_settings)
                return dp_fail(DP_ERR_USAGE, "--%s: missing value (see dptrain --help)", dp_settings[optopt - 256].name);
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
    const dp_backend_kind *bk = dp_backend_kind_find(c->backend); /* a choice: there */
    /* the backend that drives GPUs (--gpus: several in one process; --gpu across processes) and the
       device it computes on, from the backend table */
    const dp_backend_kind *gk = dp_backend_kind_taking_gpus();
    const char *gname = gk ? gk->name : NULL, *gdev = gk && gk->default_device ? gk->default_device : "a GPU";
    if (c->n_gpus && !bk->takes_gpus) {
        if (!gk) return dp_fail(DP_ERR_USAGE, "--gpus: no backend of this build drives several GPUs in one process");
        if (bk->in_process)
            return dp_fail(DP_ERR_USAGE, "--gpus is for --backend %s (one process driving several GPUs); with --backend "
                           "%s use --device %s --replicas N (N replicas on one GPU)", gname, c->backend, gdev);
        return dp_fail(DP_ERR_USAGE, "--gpus is for --backend %s (one process driving several GPUs); with --backend "
                       "%s use --backend %s --gpus, or one GPU per process with --backend %s", gname, c->backend,
                       gname, gname);
    }
    if (c->n_gpus && have_gpu) return dp_fail(DP_ERR_USAGE, "give --gpu or --gpus, not both");
    /* --gpu names a GPU to compute on: with neither a GPU --device nor a backend that computes on one there is none */
    const int on_gpu = (c->device && strcmp(c->device, "cpu") != 0) || bk->default_device;
    if (have_gpu && !on_gpu && bk->in_process)
        return dp_fail(DP_ERR_USAGE, "--gpu %d: this run computes on the CPU (--device %s), so no GPU is used; add "
                       "--device %s to compute on GPU %d, or leave --gpu out", c->gpu, c->device ? c->device : "cpu",
                       gdev, c->gpu);
    if (have_gpu && !on_gpu)
        return dp_fail(DP_ERR_USAGE, "--gpu %d: --backend %s computes on the CPU, so no GPU is used; leave --gpu out%s%s%s",
                       c->gpu, c->backend, gk ? " (GPUs across processes: --backend " : "", gk ? gname : "",
                       gk ? ")" : "");
    if (!bk->in_process && c->replicas != 1)
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
    /* before the checkpoint directory is created or anything is read */
    return dp_check_output_paths(c);
}
