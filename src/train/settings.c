/* settings.c: the table of every setting (settings.h says what a row holds), dp_config_defaults
 * read from it, and the walks the log, checkpoints and the ranks' check take over it. */
#include "train/settings.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backends/backend_kind.h"
#include "data/chunks.h"
#include "exec/devices.h"
#include "exec/launch.h"

#define OFF(f) offsetof(dp_config, f)
#define STR_(x) #x
#define STR(x) STR_(x)
#define T_ DP_CMD_TRAIN
#define TP_ (DP_CMD_TRAIN | DP_CMD_PREDICT)
#define TE_ (DP_CMD_TRAIN | DP_CMD_EVAL)
#define TEP_ (DP_CMD_TRAIN | DP_CMD_EVAL | DP_CMD_PREDICT)
#define TEC_ (DP_CMD_TRAIN | DP_CMD_EVAL | DP_CMD_CALIBRATE)
/* where a value goes: the log's config line, a checkpoint (checked to resume, or recorded only),
 * the ranks' check; the numbers order each list */
#define LOG(n) .log = (n)
#define CKPT(n) .ckpt = (n), .resume = 1
#define CKPT_INFO(n) .ckpt = (n)
#define RANKS(n) .cons = (n)
#define FILES .files = 1

static const char *const datasets[] = {"fashion-mnist", "mnist", "cifar10", "synthetic", NULL};

static const char *const modes[] = {"ddp", "dp", NULL};
static const char *const scales[] = {"none", "linear", NULL};
static const char *const algos[] = {"ordered", "ring", "tree", NULL};
static const char *const nan_modes[] = {"stop", "skip", NULL};
static const char *const precisions[] = {"fp32", "bf16", NULL};

const dp_setting dp_settings[] = {
    {"model", "M", DP_K_SPECIAL, .set = DP_S_MODEL, .off = OFF(model), .ds = "lenet", .help = "the network",
     .section = "model and data", .cmds = TEP_, LOG(10), CKPT(10), RANKS(20)},
    {"dataset", "D", DP_K_SPECIAL, .set = DP_S_DATASET, .choices = datasets, .off = OFF(data.name),
     .ds = "fashion-mnist", .help = "the data set", .cmds = TEP_, LOG(20), CKPT(20), RANKS(30)},
    {"data", "DIR", DP_K_STRING, .off = OFF(data.dir), .def = "/usr/share/datasets/<dataset>",
     .help = "directory of the data files", .cmds = TEP_, LOG(30)},
    {"shape", "CxHxW", DP_K_SPECIAL, .set = DP_S_SHAPE, .ds = "3x32x32",
     .help = "synthetic: sample shape, C 1.." STR(DP_SHAPE_MAX_C) ", H and W 1.." STR(DP_SHAPE_MAX_HW), .cmds = TEP_,
     CKPT(30)},
    {"classes", "K", DP_K_INT, .ilo = 2, .ihi = 256, .off = OFF(data.n_classes), .dv = 10,
     .help = "synthetic: classes", .cmds = TEP_, CKPT(40)},
    {"samples", "N", DP_K_INT, .ilo = 1, .ihi = 100000000, .off = OFF(data.samples), .dv = 10000,
     .help = "synthetic: training samples (test set N/5)", .cmds = TEP_, CKPT(50)},
    {"augment", NULL, DP_K_SET, .off = OFF(augment), .set = 1, .help = "random affine (28x28) or crop+flip (32x32)",
     .cmds = TP_, CKPT(200), RANKS(190)},
    {"no-shuffle", NULL, DP_K_SET, .off = OFF(shuffle), .set = 0, .dv = 1, .help = "keep file order", .cmds = T_,
     .key = "shuffle", CKPT(180), RANKS(170)},
    {"drop-last", NULL, DP_K_SET, .off = OFF(drop_last), .set = 1, .help = "drop samples so that every batch is full",
     .cmds = TP_, CKPT(190), RANKS(180)},
    {"workers", "W", DP_K_INT, .ilo = 0, .ihi = 64, .off = OFF(workers), .dv = -1 /* auto (setup) */,
     .def = "auto: 0 on the CPU with every core computing (threads_used >= cores), else 1",
     .help = "loader threads; 0 = the compute threads fill each batch between steps", .cmds = TP_, LOG(140),
     CKPT_INFO(270)},
    {"epochs", "E", DP_K_INT, .ilo = 1, .ihi = 100000, .off = OFF(epochs), .dv = 10, .help = "epochs to train",
     .section = "optimisation (torch.optim.SGD semantics)", .cmds = T_, LOG(70), CKPT_INFO(230), RANKS(40)},
    {"max-steps", "S", DP_K_LONG, .ilo = 0, .ihi = 1000000000, .off = OFF(max_steps), .def = "0: no limit",
     .help = "stop after S optimizer steps", .cmds = T_, RANKS(50)},
    {"batch-size", "B", DP_K_INT, .ilo = 1, .ihi = 1 << 20, .off = OFF(batch_size), .dv = 64,
     .help = "global batch over all replicas", .cmds = TEP_, LOG(60), CKPT(60), RANKS(60)},
    {"lr", "X", DP_K_FLOAT, 0, 100, 1, 0, .off = OFF(lr), .dv = 0.01, .help = "learning rate", .cmds = T_, LOG(80),
     CKPT(80), RANKS(70)},
    {"momentum", "X", DP_K_FLOAT, 0, 1, 0, 1, .off = OFF(momentum), .dv = 0.9, .help = "SGD momentum", .cmds = TP_,
     LOG(90), CKPT(90), RANKS(80)},
    {"weight-decay", "X", DP_K_FLOAT, 0, 1, 0, 0, .off = OFF(weight_decay), .help = "L2 penalty", .cmds = TP_,
     LOG(100), CKPT(100), RANKS(90)},
    {"nesterov", NULL, DP_K_SET, .off = OFF(nesterov), .set = 1, .help = "Nesterov momentum (needs --momentum above 0)",
     .cmds = TP_, LOG(110), CKPT(110), RANKS(100)},
    {"lr-steps", "E1,E2", DP_K_SPECIAL, .set = DP_S_LR_STEPS,
     .help = "multiply the LR by --lr-gamma after these epochs, increasing, range 1.." STR(DP_LR_STEP_MAX), .cmds = T_,
     CKPT(120), RANKS(110)},
    {"lr-gamma", "X", DP_K_FLOAT, 0, 1, 1, 0, .off = OFF(lr_gamma), .dv = 0.1, .help = "factor at each --lr-steps epoch",
     .cmds = T_, CKPT(130), RANKS(120)},
    {"lr-scale", "S", DP_K_INDEX, .choices = scales, .off = OFF(lr_scale_linear),
     .help = "LR scaling, linear = times global batch / --lr-ref-batch", .cmds = T_, CKPT(140), RANKS(130)},
    {"lr-ref-batch", "B", DP_K_INT, .ilo = 1, .ihi = 1 << 20, .off = OFF(lr_ref_batch), .dv = 64,
     .help = "reference batch of --lr-scale", .cmds = T_, CKPT(150), RANKS(140)},
    {"warmup-epochs", "X", DP_K_DOUBLE, 0, 10000, .off = OFF(warmup_epochs), .help = "linear LR warm-up over X epochs",
     .cmds = T_, CKPT(160), RANKS(150)},
    {"seed", "S", DP_K_U64, .ilo = 0, .ihi = INT64_MAX, .off = OFF(seed), .help = "initialisation, order and augmentation",
     .cmds = T_, LOG(120), CKPT(170), RANKS(160)},
    {"backend", "NAME", DP_K_CHOICE, .choices = dp_backend_names, .off = OFF(backend), .ds = "sim",
     .help = "where replicas run (sim: all in this process; mpi: one per MPI rank, mpirun or srun --mpi=pmix; nccl: one "
             "per GPU, a process per GPU under torchrun --no-python or mpirun, or several GPUs in one process with "
             "--gpus; a launch the backend does not join is refused)",
     .section = "parallelism", .cmds = DP_CMD_ALL, LOG(40), CKPT_INFO(240), RANKS(10)},
    {"replicas", "N", DP_K_INT, .ilo = 1, .ihi = 1024, .off = OFF(replicas), .dv = 1, .help = "sim: logical replicas",
     .cmds = DP_CMD_ALL, CKPT_INFO(250)},
    /* NULL: cpu, or cuda with --backend nccl */
    {"device", "D", DP_K_CHOICE, .choices = dp_device_names, .off = OFF(device), .def = "cpu",
     .help = "sim and nccl: where the replicas compute (cuda: every replica on one GPU with sim)", .cmds = TEP_},
    /* -1, not given: 0, or the launch's choice with nccl */
    {"gpu", "I", DP_K_INT, .ilo = 0, .ihi = 1023, .off = OFF(gpu), .dv = -1, .def = "0",
     .help = "--device cuda, or --backend nccl in one process: which GPU (under a launcher each process takes its local rank's)",
     .cmds = TEP_},
    {"gpus", "I,J,...", DP_K_SPECIAL, .set = DP_S_GPUS,
     .help = "nccl: this process drives these GPUs, one replica each, with one NCCL communicator per GPU (DDP or "
             "DataParallel within one process); under a launcher every process lists as many, one process per node; "
             "distinct ordinals 0..1023, at most " STR(DP_MAX_LOCAL_DEVICES), .cmds = TE_},
    {"tf32", NULL, DP_K_SET, .off = OFF(tf32), .set = 1,
     .help = "--device cuda: let cuBLAS and cuDNN use TF32 (faster, 10 fewer mantissa bits; off: fp32 like the CPU)",
     .cmds = TEP_},
    {"precision", "P", DP_K_INDEX, .choices = precisions, .off = OFF(precision), .dv = DP_PRECISION_FP32,
     .help = "bf16: convolutions and linear layers multiply bf16 copies of their inputs and weights and round "
             "their outputs to bf16 (as PyTorch's autocast), summing in fp32; weights, gradients, the optimizer, "
             "batch norm and the loss stay fp32 (docs/design.md)", .cmds = TEP_, LOG(195), CKPT(215), RANKS(205),
     .later = 1},
    {"no-graph", NULL, DP_K_SET, .off = OFF(graphs), .set = 0, .dv = 1,
     .help = "--device cuda: launch every kernel each step instead of replaying the step as one CUDA graph",
     .cmds = TEP_},
    {"steps-per-graph", "K", DP_K_INT, .ilo = 1, .ihi = DP_LAUNCH_MAX, .off = OFF(steps_per_graph), .dv = 1,
     .help = "DDP on a device that records graphs, with the training set on it: K steps recorded and replayed as "
             "one launch, their metrics read once per launch (1: one step a launch; the bits are the same)",
     .cmds = T_, RANKS(235)}, /* the collectives' order differs: every rank must launch alike */
    {"mode", "M", DP_K_INDEX, .choices = modes, .off = OFF(mode), .dv = DP_MODE_DDP,
     .help = "DistributedDataParallel or DataParallel semantics", .cmds = TP_, LOG(50), CKPT(210), RANKS(200)},
    {"bucket-mb", "X", DP_K_DOUBLE, 0, 4096, 1, 0, .off = OFF(bucket_mb), .dv = 25, .help = "DDP gradient bucket size",
     .cmds = TP_, CKPT_INFO(280), RANKS(210)},
    {"no-overlap", NULL, DP_K_SET, .off = OFF(overlap), .set = 0, .dv = 1,
     .help = "DDP: all-reduce after backward instead of during it", .cmds = T_, .key = "overlap", LOG(170),
     CKPT_INFO(290), RANKS(220)},
    {"accumulate", "K", DP_K_INT, .ilo = 1, .ihi = 1024, .off = OFF(accumulate), .dv = 1,
     .help = "micro-batches per optimizer step (DDP no_sync)", .cmds = T_, LOG(150), CKPT(70), RANKS(230)},
    {"sync-bn", NULL, DP_K_SET, .off = OFF(sync_bn), .set = 1, .help = "BatchNorm statistics over the global batch",
     .cmds = T_, LOG(160), CKPT(220), RANKS(240)},
    {"allreduce", "ALG", DP_K_CHOICE, .choices = algos, .off = OFF(allreduce_algo), .ds = "ordered",
     .help = "sim: all-reduce algorithm (ordered: the fixed tree that makes any replica count give the same bits)",
     .cmds = TEC_, LOG(180), CKPT_INFO(310)},
    {"chunks", "C", DP_K_INT, .ilo = 1, .ihi = DP_CHUNKS_MAX, .pow2 = 1, .off = OFF(chunks), .dv = DP_CHUNKS_DEFAULT,
     .help = "gradients are summed in C fixed chunks of each step: bitwise equal results for every replica "
             "count dividing C", .cmds = TP_, LOG(190), CKPT_INFO(300), RANKS(250)},
    {"threads", "T", DP_K_INT, .ilo = 1, .ihi = 1024, .off = OFF(threads),
     .def = "the usable cores: the affinity mask and the cgroup CPU quota, shared among the ranks on a machine",
     .help = "compute threads; a training step uses at most one per lane (replicas x lanes: --chunks C over the "
             "replicas), more stay idle (the log's config line: threads_used, cores, cores_from)",
     .cmds = DP_CMD_ALL, LOG(130), CKPT_INFO(260)},
    {"timeout", "S", DP_K_DOUBLE, 0, 86400, 1, 0, .off = OFF(timeout_s), .dv = 300,
     .help = "mpi: seconds to wait for a dead rank", .cmds = TEC_},
    {"log-file", "FILE", DP_K_STRING, .off = OFF(log_path), .help = "JSON lines: config, step, epoch, final events",
     .section = "output", .cmds = TEP_, FILES},
    /* the old spelling: torchrun 2 reads --log after the program as an ambiguous abbreviation of its
       own --log-dir / --logs-specs and stops before starting anything (tests/test_torchrun.c) */
    {"log", "FILE", DP_K_STRING, .off = OFF(log_path),
     .help = "the same as --log-file (torchrun takes --log for one of its own flags: use --log-file there)",
     .cmds = TEP_, FILES},
    {"save", "FILE", DP_K_STRING, .off = OFF(save_path), .help = "write a checkpoint (safetensors) at the end of training",
     .cmds = T_, FILES},
    {"load", "FILE", DP_K_STRING, .off = OFF(load_path),
     .help = "eval: the checkpoint to evaluate (train: the same as --init-from, with a note)", .cmds = TE_, FILES},
    /* -1: auto (a terminal) */
    {"progress", NULL, DP_K_SET, .off = OFF(progress), .set = 1, .dv = -1,
     .help = "progress bar even when not on a terminal", .cmds = TE_},
    {"no-progress", NULL, DP_K_SET, .off = OFF(progress), .set = 0, .dv = -1,
     .help = "no progress bar (default: on a terminal, not under mpirun)", .cmds = TE_},
    {"quiet", NULL, DP_K_SET, .off = OFF(quiet), .set = 1, .help = "no console output", .cmds = TEP_},
    {"checkpoint", "DIR", DP_K_STRING, .off = OFF(checkpoint_dir),
     .help = "write checkpoints into DIR (created if missing, its parent must exist); Ctrl-C or SIGTERM finishes the "
             "step, writes one and exits 130 / 143 printing the resume command (a second Ctrl-C exits at once)",
     .section = "checkpoints and failures (docs/reliability.md)", .cmds = T_, FILES},
    {"save-every", "N|Ne", DP_K_SPECIAL, .set = DP_S_SAVE_EVERY, .def = "1e with --checkpoint",
     .help = "a checkpoint every N optimizer steps, or every N epochs with Ne; N 1..1000000000", .cmds = T_, FILES},
    {"keep", "K", DP_K_INT, .ilo = 1, .ihi = 1000000, .off = OFF(keep), .def = "3" /* 0: set in setup */, .help = "checkpoints kept in DIR",
     .cmds = T_, FILES},
    {"resume", "DIR|FILE", DP_K_STRING, .off = OFF(resume_path),
     .help = "continue from the newest good checkpoint in DIR (damaged ones skipped with a warning) or from FILE, "
             "bitwise as if the run never stopped when --chunks, the device and CPU kernels are the same and the "
             "replica count is the same or divides --chunks (else a note says which differs); implies --checkpoint "
             "DIR; a new or empty DIR starts the run there "
             "(one command line starts or continues it)", .cmds = T_, FILES},
    {"init-from", "FILE", DP_K_STRING, .off = OFF(init_path),
     .help = "initial weights and BN statistics from a safetensors state_dict (PyTorch's names: a dptrain "
             "checkpoint or one PyTorch wrote); epochs and momentum start afresh", .cmds = T_, FILES},
    {"on-nan", "A", DP_K_INDEX, .choices = nan_modes, .off = OFF(on_nan_skip),
     .help = "a NaN/Inf loss or gradient: stop (the last checkpoint stays the newest) or skip the step without "
             "updating (counted in the epoch line and log)", .cmds = T_, CKPT_INFO(320)},
    {"predict", "T1,T2", DP_K_STRING, .off = OFF(predict_topos), .section = "overhead model (docs/overhead-model.md)",
     .help = "after training: DP and DDP on 1, 2, 4, 8 devices of each topology (presets pcie4, pcie4-p2p, "
             "nvlink3, nvlink4, ib, host, or a topology file)", .cmds = TP_, FILES},
    {"topology", "T1,T2", DP_K_STRING, .off = OFF(predict_topos), .help = "dptrain predict: the same as --predict",
     .cmds = TP_, FILES},
    {"save-profile", "FILE", DP_K_STRING, .off = OFF(save_profile), .help = "write the measured per-node compute profile",
     .cmds = TP_, FILES},
    {"compute", "FILE", DP_K_STRING, .off = OFF(compute_profile),
     .help = "predict with a saved profile's compute (a path, or a device name next to the presets)", .cmds = TP_,
     FILES},
    {"measured-epoch", "S", DP_K_DOUBLE, 0, 1e9, 1, 0, .off = OFF(measured_epoch_s), .def = "none",
     .help = "dptrain predict: another framework's measured epoch on one device, in seconds: DP and DDP are predicted "
             "from it (with --framework and --compute)", .cmds = DP_CMD_PREDICT},
    {"measured-step", "S", DP_K_DOUBLE, 0, 1e9, 1, 0, .off = OFF(measured_step_s), .def = "none",
     .help = "dptrain predict: the same as a step, in seconds (give this or --measured-epoch)", .cmds = DP_CMD_PREDICT},
    {"measured-batch", "B", DP_K_INT, .ilo = 1, .ihi = 1 << 24, .off = OFF(measured_batch), .def = "--batch-size",
     .help = "dptrain predict: the batch of the measured run", .cmds = DP_CMD_PREDICT},
    {"framework", "FILE", DP_K_STRING, .off = OFF(framework),
     .help = "dptrain predict: the measured framework's DP and DDP per-step costs (a .framework file, or a name "
             "next to the presets: pytorch-cpu)", .cmds = DP_CMD_PREDICT},
    {"plot", "FILE", DP_K_STRING, .off = OFF(plot_path),
     .help = "plot of predicted speedup against devices: F.svg, or F.png", .cmds = TP_, FILES},
    {"out", "FILE", DP_K_STRING, .off = OFF(calibrate_out), .help = "dptrain calibrate: the topology file to write",
     .cmds = DP_CMD_CALIBRATE},
    {"help", NULL, DP_K_SPECIAL, .set = DP_S_HELP, .help = "this text (also -h)", .cmds = DP_CMD_ALL},
    {"version", NULL, DP_K_SPECIAL, .set = DP_S_VERSION, .help = "version, backends and devices compiled in",
     .cmds = DP_CMD_ALL},
};
const int dp_n_settings = (int)(sizeof dp_settings / sizeof *dp_settings);
_Static_assert(sizeof dp_settings / sizeof *dp_settings <= DP_SETTINGS_MAX, "raise DP_SETTINGS_MAX");

static void *field(const dp_setting *s, dp_config *c) { return (char *)c + s->off; }
static const void *cfield(const dp_setting *s, const dp_config *c) { return (const char *)c + s->off; }

int dp_config_uses_tf32(const dp_config *c) {
    return c->tf32 || (c->precision == DP_PRECISION_BF16 && c->device && strcmp(c->device, "cuda") == 0);
}

void dp_config_defaults(dp_config *c) {
    memset(c, 0, sizeof *c);
    c->log_flag = "--log-file";
    for (int i = 0; i < dp_n_settings; i++) {
        const dp_setting *s = &dp_settings[i];
        void *f = field(s, c);
        switch (s->kind) {
        case DP_K_INT: case DP_K_INDEX: case DP_K_SET: *(int *)f = (int)s->dv; break;
        case DP_K_LONG: *(long *)f = (long)s->dv; break;
        case DP_K_U64: *(uint64_t *)f = (uint64_t)s->dv; break;
        case DP_K_FLOAT: *(float *)f = (float)s->dv; break;
        case DP_K_DOUBLE: *(double *)f = s->dv; break;
        case DP_K_CHOICE: case DP_K_STRING: *(const char **)f = s->ds; break;
        case DP_K_SPECIAL:
            if (s->set == DP_S_SHAPE) sscanf(s->ds, "%dx%dx%d", &c->data.c, &c->data.h, &c->data.w);
            else if (s->set == DP_S_MODEL || s->set == DP_S_DATASET) *(const char **)f = s->ds;
            break;
        }
    }
}

/* --help states a value flag's typed default, or the row's .def where the field's value is not
 * what a user would read (auto, filled in later, "none"); flags without a value and free strings
 * state none unless .def gives one. */
void dp_setting_default_text(const dp_setting *s, char *buf, size_t cap) {
    const char *text = "";
    if (s->def) text = s->def;
    else if (s->kind == DP_K_INT || s->kind == DP_K_LONG || s->kind == DP_K_U64) {
        snprintf(buf, cap, "%lld", (long long)s->dv);
        return;
    } else if (s->kind == DP_K_FLOAT || s->kind == DP_K_DOUBLE) {
        snprintf(buf, cap, "%g", s->dv);
        return;
    } else if (s->kind == DP_K_INDEX) text = s->choices[(int)s->dv];
    else if ((s->kind == DP_K_CHOICE || s->kind == DP_K_SPECIAL) && s->ds) text = s->ds;
    snprintf(buf, cap, "%s", text);
}

const char *dp_setting_key(const dp_setting *s) { return s->key ? s->key : s->name; }

int dp_setting_pos(const dp_setting *s, dp_settings_list list) {
    return list == DP_LIST_LOG ? s->log : list == DP_LIST_CKPT ? s->ckpt : s->cons;
}

/* (pos, idx) of row i comes after (p, k) */
static int after(int pos_i, int i, int p, int k) { return pos_i > p || (pos_i == p && i > k); }

const dp_setting *dp_settings_next(dp_settings_cursor *cur, const char *through) {
    int best = -1, bound = 0x7fff;
    for (int i = 0; i < dp_n_settings && through; i++)
        if (dp_setting_pos(&dp_settings[i], cur->list) && strcmp(dp_setting_key(&dp_settings[i]), through) == 0)
            bound = dp_setting_pos(&dp_settings[i], cur->list);
    for (int i = 0; i < dp_n_settings; i++) {
        const int p = dp_setting_pos(&dp_settings[i], cur->list);
        if (p && after(p, i, cur->pos, cur->idx) &&
            (best < 0 || after(dp_setting_pos(&dp_settings[best], cur->list), best, p, i)))
            best = i;
    }
    if (best < 0 || dp_setting_pos(&dp_settings[best], cur->list) > bound) return NULL;
    cur->pos = dp_setting_pos(&dp_settings[best], cur->list), cur->idx = best;
    return &dp_settings[best];
}

int dp_setting_given(const dp_setting *s, const dp_config *c) {
    if (s->kind == DP_K_SET) return *(const int *)cfield(s, c) == s->set;
    if (s->kind == DP_K_SPECIAL && s->set == DP_S_LR_STEPS) return c->n_lr_steps > 0;
    return 1;
}

void dp_setting_get(const dp_setting *s, const dp_config *c, dp_setting_value *v) {
    const void *f = cfield(s, c);
    v->type = DP_SV_STR, v->s = "", v->buf[0] = '\0';
    switch (s->kind) {
    case DP_K_INT: case DP_K_SET: v->type = DP_SV_INT, v->i = *(const int *)f; break;
    case DP_K_LONG: v->type = DP_SV_INT, v->i = *(const long *)f; break;
    case DP_K_U64: v->type = DP_SV_UINT, v->u = *(const uint64_t *)f; break;
    case DP_K_FLOAT: v->type = DP_SV_REAL, v->r = *(const float *)f; break;
    case DP_K_DOUBLE: v->type = DP_SV_REAL, v->r = *(const double *)f; break;
    case DP_K_INDEX: v->s = s->choices[*(const int *)f]; break;
    case DP_K_CHOICE: case DP_K_STRING: v->s = *(const char *const *)f; break;
    case DP_K_SPECIAL:
        if (s->set == DP_S_SHAPE) {
            snprintf(v->buf, sizeof v->buf, "%dx%dx%d", c->data.c, c->data.h, c->data.w);
            v->s = v->buf;
        } else if (s->set == DP_S_LR_STEPS) {
            for (int i = 0; i < c->n_lr_steps; i++)
                snprintf(v->buf + strlen(v->buf), sizeof v->buf - strlen(v->buf), "%s%d", i ? "," : "", c->lr_steps[i]);
            v->s = v->buf;
        } else if (s->set == DP_S_MODEL || s->set == DP_S_DATASET) {
            v->s = *(const char *const *)f;
        }
        break;
    }
}

void dp_setting_text(const dp_setting *s, const dp_config *c, char *buf, size_t cap) {
    dp_setting_value v;
    dp_setting_get(s, c, &v);
    switch (v.type) {
    case DP_SV_INT: snprintf(buf, cap, "%lld", v.i); break;
    case DP_SV_UINT: snprintf(buf, cap, "%llu", v.u); break;
    case DP_SV_REAL: snprintf(buf, cap, "%.9g", v.r); break;
    case DP_SV_STR: snprintf(buf, cap, "%s", v.s ? v.s : ""); break;
    }
}

void dp_settings_drop_files(dp_config *c) {
    for (int i = 0; i < dp_n_settings; i++) {
        const dp_setting *s = &dp_settings[i];
        if (!s->files) continue;
        if (s->kind == DP_K_SPECIAL && s->set == DP_S_SAVE_EVERY) c->save_every = 0, c->save_every_epochs = 0;
        else if (s->kind == DP_K_INT) *(int *)field(s, c) = 0;
        else *(const char **)field(s, c) = NULL;
    }
}
