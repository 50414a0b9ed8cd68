/* persist.c: a run's checkpoints: what they record (position, settings, a CRC-32 of the training
 * data), writing them from rank 0, choosing the newest good one on --resume and restoring it on
 * every replica, and the collective stop decision of SIGINT/SIGTERM. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/crc.h"
#include "core/printable.h"
#include "dp_config.h"
#include "io/atomic.h"
#include "io/checkpoint.h"
#include "io/ckpt_dir.h"
#include "kernels/conv_algos.h"
#include "kernels/kernels.h"
#include "optim/sgd.h"
#include "train/settings.h"
#include "train/signals.h"
#include "train/strategy.h"
#include "train/trainer.h"

dp_status dp_persist_setup(dp_trainer *t) {
    const dp_config *c = &t->cfg;
    t->next_epoch = t->start_epoch = 1;
    atomic_init(&t->nonfinite, 0);
    t->sgd.nonfinite = &t->nonfinite;
    /* the tests' fault injections (config.h: dp_test_hooks) */
    t->inject_nan_step = c->test.nan_step;
    t->inject_inf_grad_step = c->test.inf_grad_step;
    t->inject_eval_signal = c->test.eval_signal;
    t->inject_sigterm_step = c->test.sigterm_step;
    DP_ALLOC(t->stop_bufs, dp_exec_n_local(t->ex), "stop flags");
    for (int r = 0; r < dp_exec_n_local(t->ex); r++) DP_ALLOC(t->stop_bufs[r], 2, "stop flags");
    if (c->on_nan_skip && t->model.buffers.n) {
        DP_ALLOC(t->bn_snapshot, dp_exec_n_local(t->ex), "BN buffer snapshots");
        for (int r = 0; r < dp_exec_n_local(t->ex); r++)
            DP_TRY(dp_exec_alloc(t->ex, r, t->model.buffers.n, "BN buffer snapshot", &t->bn_snapshot[r]));
    }
    if (t->have_train && (c->checkpoint_dir || c->resume_path || c->save_path)) {
        const dp_dataset *d = &t->train;
        uint32_t crc = dp_crc32(0, d->pixels, (size_t)d->n * d->c * d->h * d->w);
        crc = dp_crc32(crc, d->labels, (size_t)d->n);
        snprintf(t->data_crc, sizeof t->data_crc, "%08x", (unsigned)crc);
    }
    /* only what a killed writer left: pruning to --keep waits for a new checkpoint (the newest may be damaged) */
    if (c->checkpoint_dir && dp_trainer_holds_rank0(t)) {
        /* before anything in it is read or removed: a second run (a requeued job while the first
           still runs) is refused instead of pruning the first one's temporary files */
        DP_TRY(dp_ckpt_dir_lock("--checkpoint", c->checkpoint_dir, &t->ckpt_lock_fd));
        DP_TRY(dp_ckpt_dir_prune(c->checkpoint_dir, 1000000000));
        char **paths;
        int n;
        DP_TRY(dp_ckpt_dir_list(c->checkpoint_dir, &paths, &n));
        /* a fresh run's checkpoints would mix with another run's, and --keep would delete the new ones first */
        if (n && !c->resume_path) {
            dp_status e = dp_fail(DP_ERR_USAGE, "--checkpoint %s already holds %d checkpoint(s) of a run (newest %s): "
                                  "add --resume %s to continue it, or give an empty or new directory", c->checkpoint_dir,
                                  n, paths[0], c->checkpoint_dir);
            dp_ckpt_dir_free(paths, n);
            return e;
        }
        dp_ckpt_dir_free(paths, n);
    }
    return DP_OK;
}

/* Whether this run sums in the canonical order (data/chunks.h): bitwise equal to every replica
 * count that divides --chunks. */
static int canonical(const dp_trainer *t) { return t->sampler.plan.canonical && t->backend->ordered; }

/* A checkpoint's settings records, with room for their text. */
typedef struct {
    dp_st_meta m[DP_SETTINGS_MAX + 6]; /* + dptrain.conv_algos, whose text is its own (dp_persist_save) */
    char key[DP_SETTINGS_MAX + 5][64], val[DP_SETTINGS_MAX + 5][128], absent[DP_SETTINGS_MAX + 5][64];
    int n, n_checked;
} ckpt_settings;

static void put_row(ckpt_settings *r, const dp_setting *s, const dp_config *eff) {
    snprintf(r->key[r->n], sizeof r->key[r->n], "dptrain.arg.%s", dp_setting_key(s));
    dp_setting_text(s, eff, r->val[r->n], sizeof r->val[r->n]);
    r->m[r->n] = (dp_st_meta){.key = r->key[r->n], .value = r->val[r->n]};
    if (s->later) { /* a checkpoint from before the row: written with its default */
        dp_setting_default_text(s, r->absent[r->n], sizeof r->absent[r->n]);
        r->m[r->n].absent = r->absent[r->n];
    }
    r->n++;
    r->n_checked += s->resume;
}

#define PUT(r, k, ...) (snprintf((r)->val[(r)->n], 128, __VA_ARGS__), \
                        (r)->m[(r)->n] = (dp_st_meta){.key = (k), .value = (r)->val[(r)->n]}, (r)->n++)

/* The settings a checkpoint records: the table's rows with a checkpoint place (settings.h), with
 * the training data's CRC after the data's own. The first n_checked must be equal to resume (they
 * change the math or the data), the rest may differ (how the same math is spread over replicas and
 * threads); the last four records decide, with the above, whether a resumed run is bitwise the
 * uninterrupted one (note_inexact). */
static void settings(const dp_trainer *t, ckpt_settings *r) {
    const dp_config *c = &t->cfg;
    /* the values as this run took them: the model and training data it loaded, its replica count */
    dp_config eff = *c;
    eff.model = t->model.name;
    eff.data.name = t->train.name;
    eff.data.c = t->train.c, eff.data.h = t->train.h, eff.data.w = t->train.w;
    eff.data.n_classes = t->train.n_classes;
    eff.data.samples = t->train.n;
    eff.replicas = t->world;
    r->n = r->n_checked = 0;
    dp_settings_cursor cur = DP_SETTINGS_CURSOR(DP_LIST_CKPT);
    for (const dp_setting *s; (s = dp_settings_next(&cur, "samples"));) put_row(r, s, &eff);
    PUT(r, "dptrain.train_data_crc32", "%s", t->data_crc);
    r->n_checked++;
    for (const dp_setting *s; (s = dp_settings_next(&cur, NULL));) put_row(r, s, &eff);
    PUT(r, "dptrain.version", "%s", DP_VERSION);
    PUT(r, "dptrain.device", "%s", c->device ? c->device : "cpu");
    PUT(r, "dptrain.cpu_kernels", "%s", dp_cpu_kernel_variant());
    PUT(r, "dptrain.canonical_order", "%d", canonical(t));
}
#undef PUT

dp_status dp_persist_save(dp_trainer *t, const char *flag, const char *path) {
    const dp_step_ctx sc = dp_train_step_ctx(t);
    DP_TRY(t->strategy->finish(&sc, t->strategy_state)); /* DP: replica 0 must hold the master's weights (collective) */
    if (!dp_trainer_holds_rank0(t)) return DP_OK;
    dp_replica *r0 = NULL;
    for (int r = 0; r < dp_exec_n_local(t->ex); r++)
        if (dp_exec_rank(t->ex, r) == 0) r0 = dp_exec_replica(t->ex, r);
    DP_TRY(dp_replica_pull(r0, &t->model)); /* a device's arenas into the host copies */
    char buf[4096];
    if (!path) {
        dp_ckpt_dir_path(t->cfg.checkpoint_dir, t->step, buf, sizeof buf);
        path = buf;
    }
    /* a checkpoint is a state to go back to: never one with NaN/Inf in it */
    if (!dp_all_finite(r0->h_params, t->model.params.n) || !dp_all_finite(r0->h_buffers, t->model.buffers.n))
        return dp_fail(DP_ERR_NUMERIC, "%s %s: not written: the parameters hold NaN or Inf at step %ld%s%s", flag, path,
                       t->step, t->last_ckpt[0] ? "; the last good checkpoint is " : "", t->last_ckpt);
    ckpt_settings set;
    settings(t, &set);
    /* the convolution algorithms this run used (or replayed): a resume replays them (kernels/conv_algos.h) */
    static char algos[DP_CONV_ALGOS_RECORD_MAX]; /* the longest record the parser takes, written back */
    if (dp_conv_algos_current(algos, sizeof algos) >= sizeof algos)
        return dp_fail(DP_ERR_INTERNAL, "%s %s: the convolution algorithm record is longer than %zu bytes", flag, path,
                       sizeof algos - 1);
    set.m[set.n++] = (dp_st_meta){.key = "dptrain.conv_algos", .value = algos};
    dp_train_pos pos = {.epoch = t->next_epoch, .next_batch = t->next_batch, .step = t->step, .skipped = t->skipped,
                        .bn_batches = t->bn_batches};
    dp_status s = dp_checkpoint_save(flag, path, &t->model, r0->h_params, r0->h_buffers,
                                     t->cfg.momentum > 0 ? r0->h_momentum : NULL, &pos, set.m, set.n);
    if (s != DP_OK) {
        char msg[DP_ERROR_MAX];
        snprintf(msg, sizeof msg, "%s", dp_last_error());
        return dp_fail(s, "%s%s%s", msg, t->last_ckpt[0] ? "; the last good checkpoint is " : "", t->last_ckpt);
    }
    snprintf(t->last_ckpt, sizeof t->last_ckpt, "%s", path);
    dp_json f = dp_json_begin("checkpoint");
    dp_json_int(&f, "epoch", t->next_epoch);
    dp_json_int(&f, "next_batch", t->next_batch);
    dp_json_int(&f, "step", t->step);
    dp_json_str(&f, "path", path);
    DP_TRY(dp_report_json(&t->report, &f, 1));
    if (path == buf) DP_TRY(dp_ckpt_dir_prune(t->cfg.checkpoint_dir, t->cfg.keep));
    return DP_OK;
}

/* The recorded settings note_inexact compares, in this order. */
static const char *const exact_keys[] = {"dptrain.arg.chunks", "dptrain.arg.replicas", "dptrain.arg.allreduce",
                                         "dptrain.arg.backend", "dptrain.canonical_order", "dptrain.device",
                                         "dptrain.cpu_kernels", "dptrain.conv_algos"};
enum { N_EXACT = sizeof exact_keys / sizeof exact_keys[0] };

/* The checkpoint's convolution algorithm record (its last recorded entry), replayed by this process's
 * GPU convolutions (kernels/conv_algos.h); "" in older checkpoints and CPU runs. alone: the file was
 * named (--resume FILE), not found in a directory that may hold an older one. */
static dp_status replay_algos(const char *path, const dp_ckpt_recorded *r, int alone) {
    char why[160];
    if (*r[N_EXACT - 1].value && dp_conv_algos_pin(r[N_EXACT - 1].value, why, sizeof why) != 0)
        return dp_fail(DP_ERR_FORMAT, "%s%s: the convolution algorithm record (dptrain.conv_algos) is damaged: %s%s",
                       alone ? "--resume " : "", path, why, alone ? "; resume from an earlier checkpoint" : "");
    return DP_OK;
}

/* --resume promises the uninterrupted run's bits when the sums run in the same order on the same
 * kernels: the same --chunks, and either the canonical order on both sides (any replica count that
 * divides --chunks, --allreduce ordered) or the same replicas and all-reduce; the same device and
 * CPU kernel variant. One note line saying which setting breaks it (a checkpoint older than a
 * record is not judged on it). */
static void note_inexact(const dp_trainer *t, const char *path, const dp_ckpt_recorded *r) {
    const dp_config *c = &t->cfg;
    const char *chunks = r[0].value, *reps = r[1].value, *algo = r[2].value, *backend = r[3].value;
    const char *canon = r[4].value, *device = r[5].value, *kernels = r[6].value;
    char why[1024] = "", shown[2][200], here[32];
    size_t k = 0;
#define WHY(...) (k += (size_t)snprintf(why + k, k < sizeof why ? sizeof why - k : 0, __VA_ARGS__))
    snprintf(here, sizeof here, "%d", c->chunks);
    if (*chunks && strcmp(chunks, here) != 0)
        WHY("%s--chunks is %s in the checkpoint but %d here", k ? "; " : "", dp_printable(chunks, shown[0], 200),
            c->chunks);
    else if (*chunks && *reps) {
        long was_n = atol(reps);
        /* older checkpoints: canonical when the replica count divided --chunks with the ordered sum */
        int was = *canon ? strcmp(canon, "1") == 0
                         : was_n > 0 && c->chunks % was_n == 0 && strcmp(algo, "ordered") == 0;
        int now = canonical(t), same_sum = was_n == t->world && strcmp(algo, c->allreduce_algo) == 0 &&
                                          strcmp(backend, c->backend) == 0;
        if (!(was && now) && !same_sum) {
            const char *sep = k ? "; " : "";
            dp_printable(reps, shown[0], 200);
            if (was_n == t->world)
                WHY("%sthe checkpoint's run summed with --backend %s --allreduce %s, this one with --backend %s "
                    "--allreduce %s, not both in the canonical order", sep, dp_printable(backend, shown[1], 200),
                    dp_printable(algo, shown[0], 200), c->backend, c->allreduce_algo);
            else if (!now && !t->backend->ordered)
                WHY("%sthe checkpoint's run had %s replicas, this one %d with --allreduce %s, which sums in its own "
                    "order", sep, shown[0], t->world, c->allreduce_algo);
            else if (!now)
                WHY("%sthe checkpoint's run had %s replicas, this one %d, which does not divide --chunks %d", sep,
                    shown[0], t->world, c->chunks);
            else
                WHY("%sthe checkpoint's run had %s replicas, this one %d, and it did not sum in the canonical order "
                    "(its replica count does not divide --chunks %d, or its --allreduce is not ordered)", sep,
                    shown[0], t->world, c->chunks);
        }
    }
    const char *dev = c->device ? c->device : "cpu";
    if (*device && strcmp(device, dev) != 0)
        WHY("%sthe checkpoint was computed on %s, this run on %s", k ? "; " : "", dp_printable(device, shown[0], 200),
            dev);
    else if (*kernels && strcmp(dev, "cpu") == 0 && strcmp(kernels, dp_cpu_kernel_variant()) != 0)
        WHY("%sthe CPU kernels were %s in the checkpoint, %s here", k ? "; " : "", dp_printable(kernels, shown[0], 200),
            dp_cpu_kernel_variant());
#undef WHY
    if (k && !c->quiet)
        fprintf(stderr, "dptrain: note: --resume %s: the result will not be bitwise the uninterrupted run's (only "
                "equal within float rounding): %s\n", path, why);
}

/* Rank 0: the checkpoint to continue from, loaded into replica r0. */
static dp_status load_newest(dp_trainer *t, dp_replica *r0, dp_train_pos *pos) {
    const char *src = t->cfg.resume_path;
    ckpt_settings set;
    settings(t, &set);
    float *mom = t->cfg.momentum > 0 ? r0->h_momentum : NULL;
    dp_ckpt_recorded rec[N_EXACT];
    for (int i = 0; i < N_EXACT; i++) rec[i].key = exact_keys[i];
    struct stat st;
    if (stat(src, &st) != 0) return dp_fail(DP_ERR_USAGE, "--resume %s: no such file or directory", src);
    if (!S_ISDIR(st.st_mode)) {
        DP_TRY(dp_checkpoint_load_resume(src, &t->model, r0->h_params, r0->h_buffers, mom, pos, set.m, set.n_checked, rec,
                                         N_EXACT));
        DP_TRY(replay_algos(src, rec, 1));
        snprintf(t->last_ckpt, sizeof t->last_ckpt, "%s", src);
        note_inexact(t, src, rec);
        return DP_OK;
    }
    char **paths;
    int n;
    DP_TRY(dp_ckpt_dir_list(src, &paths, &n));
    dp_status s = DP_ERR_USAGE;
    int damaged = 0;
    for (int i = 0; i < n; i++) {
        s = dp_checkpoint_load_resume(paths[i], &t->model, r0->h_params, r0->h_buffers, mom, pos, set.m, set.n_checked,
                                      rec, N_EXACT);
        if (s == DP_OK) s = replay_algos(paths[i], rec, 0); /* a damaged record: damage like any other */
        if (s == DP_OK) {
            snprintf(t->last_ckpt, sizeof t->last_ckpt, "%s", paths[i]);
            note_inexact(t, paths[i], rec);
            break;
        }
        if (s == DP_ERR_USAGE) break; /* a different run: refuse rather than fall back to an older file */
        fprintf(stderr, "dptrain: warning: --resume: skipping a damaged checkpoint: %s\n", dp_last_error());
        damaged++;
    }
    dp_ckpt_dir_free(paths, n);
    if (n == 0) { /* a first run (or one killed before its first checkpoint): start it */
        *pos = (dp_train_pos){.epoch = 1};
        if (!t->cfg.quiet)
            fprintf(stderr, "dptrain: note: --resume %s: no checkpoint there yet; starting a fresh run (its checkpoints "
                    "go to %s)\n", src, t->cfg.checkpoint_dir ? t->cfg.checkpoint_dir : src);
        return DP_OK;
    }
    if (s == DP_OK || s == DP_ERR_USAGE) return s;
    return dp_fail(DP_ERR_FORMAT, "--resume %s: none of the %d checkpoints is readable (see the warnings above)", src,
                   damaged); /* every one: the loop breaks at the first that is not damaged */
}

/* Positions travel as floats (the broadcast's type): 20 bits a piece is exact. */
static void put_long(float *f, long v) {
    f[0] = (float)(v & 0xfffff), f[1] = (float)((v >> 20) & 0xfffff), f[2] = (float)(v >> 40);
}
static long get_long(const float *f) { return (long)f[0] | ((long)f[1] << 20) | ((long)f[2] << 40); }

dp_status dp_persist_resume(dp_trainer *t) {
    /* DPTRAIN_CONV_ALGOS was pinned at the start (dp_trainer's setup): a resume's record replaces it */
    if (!t->cfg.resume_path) return DP_OK;
    dp_train_pos pos = {0};
    float *enc[dp_exec_n_local(t->ex)], store[dp_exec_n_local(t->ex)][15];
    for (int r = 0; r < dp_exec_n_local(t->ex); r++) {
        enc[r] = store[r];
        memset(store[r], 0, sizeof store[r]);
        if (dp_exec_rank(t->ex, r) != 0) continue;
        DP_TRY(load_newest(t, dp_exec_replica(t->ex, r), &pos));
        DP_TRY(dp_replica_push(dp_exec_replica(t->ex, r), &t->model));
        put_long(store[r], pos.epoch), put_long(store[r] + 3, pos.next_batch), put_long(store[r] + 6, pos.step);
        put_long(store[r] + 9, pos.skipped), put_long(store[r] + 12, pos.bn_batches);
    }
    DP_TRY(dp_exec_host_broadcast(t->ex, enc, 15));
    pos.epoch = (int)get_long(enc[0]), pos.next_batch = (int)get_long(enc[0] + 3), pos.step = get_long(enc[0] + 6);
    pos.skipped = get_long(enc[0] + 9), pos.bn_batches = get_long(enc[0] + 12);
    const dp_model *m = &t->model;
    float *p[dp_exec_n_local(t->ex)];
    for (int r = 0; r < dp_exec_n_local(t->ex); r++) p[r] = dp_exec_replica(t->ex, r)->params;
    DP_TRY(dp_broadcast(t->backend, p, m->params.n, 0));
    for (int r = 0; r < dp_exec_n_local(t->ex); r++) p[r] = dp_exec_replica(t->ex, r)->momentum;
    DP_TRY(dp_broadcast(t->backend, p, m->params.n, 0));
    if (m->buffers.n) {
        for (int r = 0; r < dp_exec_n_local(t->ex); r++) p[r] = dp_exec_replica(t->ex, r)->buffers;
        DP_TRY(dp_broadcast(t->backend, p, m->buffers.n, 0));
    }
    if (pos.next_batch > t->sampler.n_batches)
        return dp_fail(DP_ERR_USAGE, "--resume %s: the checkpoint is at batch %d of epoch %d, but an epoch has %d batches "
                       "here", t->last_ckpt, pos.next_batch, pos.epoch, t->sampler.n_batches);
    t->start_epoch = t->next_epoch = pos.epoch;
    t->start_batch = t->next_batch = pos.next_batch;
    t->step = pos.step;
    t->skipped = pos.skipped;
    t->bn_batches = pos.bn_batches;
    return DP_OK;
}

dp_status dp_persist_stop_requested(dp_trainer *t, int *sig) {
    int mine = dp_signals_pending();
    *sig = mine;
    if (dp_exec_n_local(t->ex) == t->world) return DP_OK; /* one process: nobody else to ask */
    /* under mpirun a Ctrl-C may reach only some ranks: every rank stops at the same step, the one
       whose metrics carried the request (a signal after them is seen at the next step) */
    if (t->stop_folded_valid) {
        *sig = t->stop_folded;
        t->stop_folded_valid = 0;
        return DP_OK;
    }
    for (int r = 0; r < dp_exec_n_local(t->ex); r++) {
        t->stop_bufs[r][0] = mine != 0;
        t->stop_bufs[r][1] = mine == SIGTERM;
    }
    DP_TRY(dp_exec_host_allreduce(t->ex, t->stop_bufs, 2));
    if (!mine && t->stop_bufs[0][0] > 0) *sig = t->stop_bufs[0][1] > 0 ? SIGTERM : SIGINT;
    return DP_OK;
}

/* Appends s quoted for a POSIX shell when it needs it. */
static void append_quoted(char *buf, size_t n, const char *s) {
    size_t k = strlen(buf);
    int plain = *s != '\0';
    for (const char *p = s; *p && plain; p++) plain = strchr("@%+=:,./-_", *p) || (*p >= '0' && *p <= '9') ||
                                                       (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z');
    if (plain) {
        snprintf(buf + k, n - k, "%s", s);
        return;
    }
    if (k < n - 1) buf[k++] = '\'', buf[k] = '\0';
    for (const char *p = s; *p && k < n - 5; p++) {
        if (*p == '\'') k += (size_t)snprintf(buf + k, n - k, "'\\''");
        else buf[k++] = *p, buf[k] = '\0';
    }
    snprintf(buf + k, n - k, "'");
}

void dp_persist_resume_command(const dp_trainer *t, char *buf, size_t n) {
    buf[0] = '\0';
    snprintf(buf, n, "%s", t->backend->relaunch);
    int argc = t->cfg.argc ? *t->cfg.argc : 0, has_resume = 0;
    char **argv = t->cfg.argv ? *t->cfg.argv : NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--resume") == 0 || strncmp(argv[i], "--resume=", 9) == 0) has_resume = 1;
        if (i) snprintf(buf + strlen(buf), n - strlen(buf), " ");
        append_quoted(buf, n, argv[i]);
    }
    if (!has_resume && t->cfg.checkpoint_dir) {
        snprintf(buf + strlen(buf), n - strlen(buf), " --resume ");
        append_quoted(buf, n, t->cfg.checkpoint_dir);
    }
}
