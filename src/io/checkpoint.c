/* checkpoint.c: the model's state in and out of safetensors files (layout in checkpoint.h). */
#include "io/checkpoint.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>
#include <unistd.h>

#include "core/printable.h"
#include "core/sysmem.h"
#include "io/atomic.h"
#include "io/ckpt_dir.h"
#include "io/state_dict.h"

#define MOMENTUM_PREFIX "optimizer.momentum."

typedef struct {
    dp_st_tensor *t;
    int n;
    const dp_st_meta *meta;
    int n_meta;
} save_job;

static dp_status write_job(FILE *f, void *ctx) {
    save_job *j = ctx;
    return dp_st_write(f, "checkpoint", j->t, j->n, j->meta, j->n_meta);
}

dp_status dp_checkpoint_save(const char *flag, const char *path, const dp_model *m, const float *params,
                             const float *buffers, const float *momentum, const dp_train_pos *pos,
                             const dp_st_meta *meta, int n_meta) {
    dp_sd_entry *e;
    int n;
    DP_TRY(dp_state_dict(m, &e, &n));
    dp_st_tensor *t = calloc((size_t)2 * n + 1, sizeof *t);
    enum { N_POS = 7 };
    dp_st_meta *all = calloc((size_t)n_meta + N_POS, sizeof *all);
    if (!t || !all) {
        free(e), free(t), free(all);
        return dp_fail(DP_ERR_NOMEM, "%s %s: out of memory", flag, path);
    }
    /* PyTorch's num_batches_tracked is an int64 tensor: one shared value, little-endian */
    int64_t nbt = pos ? pos->bn_batches : 0;
    int nt = 0;
    for (int i = 0; i < n; i++) {
        dp_st_tensor *x = &t[nt++];
        snprintf(x->name, sizeof x->name, "%s", e[i].name);
        x->ndim = e[i].ndim;
        memcpy(x->shape, e[i].shape, sizeof e[i].shape);
        if (e[i].kind == DP_SD_COUNTER) {
            x->dtype = DP_ST_I64, x->data = &nbt, x->nbytes = sizeof nbt;
        } else {
            x->dtype = DP_ST_F32;
            x->data = (e[i].kind == DP_SD_PARAM ? params : buffers) + e[i].offset;
            x->nbytes = e[i].count * sizeof(float);
        }
    }
    for (int i = 0; momentum && i < n; i++) {
        if (e[i].kind != DP_SD_PARAM) continue;
        dp_st_tensor *x = &t[nt++];
        snprintf(x->name, sizeof x->name, MOMENTUM_PREFIX "%s", e[i].name);
        x->dtype = DP_ST_F32, x->ndim = e[i].ndim;
        memcpy(x->shape, e[i].shape, sizeof e[i].shape);
        x->data = momentum + e[i].offset;
        x->nbytes = e[i].count * sizeof(float);
    }
    char v[N_POS][32];
    int k = 0;
    all[k++] = (dp_st_meta){.key = "format", .value = "pt"};
    all[k++] = (dp_st_meta){.key = "dptrain.format", .value = "dptrain-checkpoint/1"};
    all[k++] = (dp_st_meta){.key = "dptrain.model", .value = m->name};
    if (pos) {
        snprintf(v[0], sizeof v[0], "%d", pos->epoch);
        snprintf(v[1], sizeof v[1], "%d", pos->next_batch);
        snprintf(v[2], sizeof v[2], "%ld", pos->step);
        snprintf(v[3], sizeof v[3], "%ld", pos->skipped);
        all[k++] = (dp_st_meta){.key = "dptrain.epoch", .value = v[0]};
        all[k++] = (dp_st_meta){.key = "dptrain.next_batch", .value = v[1]};
        all[k++] = (dp_st_meta){.key = "dptrain.step", .value = v[2]};
        all[k++] = (dp_st_meta){.key = "dptrain.skipped_steps", .value = v[3]};
    }
    for (int i = 0; i < n_meta; i++) all[k++] = meta[i];
    save_job j = {t, nt, all, k};
    dp_status s = dp_atomic_write(flag, path, write_job, &j);
    free(e), free(t), free(all);
    return s;
}

/* Whether path is an old DPCKPT01 file. Opened as a regular file only (a FIFO must not block:
 * anything else is left to the safetensors reader to refuse with its message). */
static int is_v1(const char *path) {
    int fd;
    struct stat st;
    dp_status s = dp_open_regular(path, NULL, &fd, &st);
    if (s != DP_OK) {
        dp_clear_error();
        return 0;
    }
    char magic[8] = {0};
    int v1 = read(fd, magic, 8) == 8 && memcmp(magic, "DPCKPT01", 8) == 0;
    close(fd);
    return v1;
}

/* Tensors a checkpoint of a model may hold besides the model's own and their momentum (keys that
 * loaders ignore, such as another optimizer's state). */
#define OTHER_TENSORS 1024

/* path read with its header bounded by model m (safetensors.h): a header far bigger than any file
 * of m is refused before it is read, one of too many entries before it is parsed. */
static dp_status read_for_model(const char *path, const dp_model *m, dp_st_file *f) {
    dp_sd_entry *e;
    int n;
    DP_TRY(dp_state_dict(m, &e, &n));
    free(e);
    char why[200];
    snprintf(why, sizeof why, "model %s: its %d tensors, their momentum and %d others", m->name, n, OTHER_TENSORS);
    const dp_st_limits lim = {.max_tensors = 2L * n + OTHER_TENSORS, .why = why};
    return dp_st_read_limited(path, &lim, f);
}

static int ignored_key(const char *name) {
    return strncmp(name, "optimizer.", 10) == 0 || strncmp(name, "dptrain.", 8) == 0;
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && k < n; d++) k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* Copies tensor `name` (shape and dtype checked) into dst. */
static dp_status take(const char *path, const dp_st_file *f, const char *name, int ndim, const int64_t *shape,
                      float *dst) {
    const dp_st_tensor *x = dp_st_find(f, name);
    if (!x) return dp_fail(DP_ERR_USAGE, "%s: tensor %s is missing (is the file for another model?)", path, name);
    int same = x->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = x->shape[d] == shape[d];
    if (!same || x->dtype != DP_ST_F32) {
        char a[96], b[96];
        shape_str(a, sizeof a, x->ndim, x->shape);
        shape_str(b, sizeof b, ndim, shape);
        return dp_fail(DP_ERR_USAGE, "%s: tensor %s is %s %s in the file; the model needs F32 %s", path, name,
                       x->dtype == DP_ST_F32 ? "F32" : "I64", a, b);
    }
    memcpy(dst, x->data, x->nbytes);
    return DP_OK;
}

/* num_batches_tracked: an I64 scalar ([] as PyTorch writes it; [1] tolerated), 0 .. 2^47. */
static dp_status take_counter(const char *path, const dp_st_file *f, const char *name, const char *model, long *out) {
    const dp_st_tensor *x = dp_st_find(f, name);
    if (!x) return dp_fail(DP_ERR_USAGE, "%s: tensor %s is missing (is the file for model %s?)", path, name, model);
    if (x->dtype != DP_ST_I64 || x->nbytes != sizeof(int64_t) || x->ndim > 1)
        return dp_fail(DP_ERR_USAGE, "%s: tensor %s should be an I64 scalar", path, name);
    int64_t v;
    memcpy(&v, x->data, sizeof v); /* little-endian in the file, as on every host dptrain builds for */
    if (v < 0 || v > DP_CKPT_MAX_COUNT)
        return dp_fail(DP_ERR_FORMAT, "%s: tensor %s is %lld, outside 0..%lld", path, name, (long long)v,
                       (long long)DP_CKPT_MAX_COUNT);
    *out = (long)v;
    return DP_OK;
}

/* The model's tensors out of an open file, strictly, looked up by the model's own names; *bn_batches
 * gets the first BatchNorm's num_batches_tracked (0 without BatchNorm). */
static dp_status take_model(const char *path, const dp_st_file *f, const dp_model *m, float *params, float *buffers,
                            float *momentum, long *bn_batches) {
    const char *written_for = dp_st_meta_get(f, "dptrain.model");
    char shown[100];
    if (written_for && strcmp(written_for, m->name) != 0)
        return dp_fail(DP_ERR_USAGE, "%s: the checkpoint is for model %s; this run has model %s", path,
                       dp_printable(written_for, shown, sizeof shown), m->name);
    dp_sd_entry *e;
    int n;
    DP_TRY(dp_state_dict(m, &e, &n));
    dp_status s = DP_OK;
    int have_count = 0;
    *bn_batches = 0;
    for (int i = 0; i < n && s == DP_OK; i++) {
        if (e[i].kind == DP_SD_COUNTER) {
            long v = 0;
            s = take_counter(path, f, e[i].name, m->name, &v);
            if (s == DP_OK && !have_count++) *bn_batches = v;
            continue;
        }
        s = take(path, f, e[i].name, e[i].ndim, e[i].shape, (e[i].kind == DP_SD_PARAM ? params : buffers) + e[i].offset);
        if (s == DP_OK && momentum && e[i].kind == DP_SD_PARAM) {
            char mn[128];
            snprintf(mn, sizeof mn, MOMENTUM_PREFIX "%s", e[i].name);
            s = take(path, f, mn, e[i].ndim, e[i].shape, momentum + e[i].offset);
        }
    }
    /* strict: every other key must be one of the model's */
    for (int i = 0; i < f->n && s == DP_OK; i++) {
        if (ignored_key(f->tensors[i].name)) continue;
        int found = 0;
        for (int j = 0; j < n && !found; j++) found = strcmp(e[j].name, f->tensors[i].name) == 0;
        if (!found)
            s = dp_fail(DP_ERR_USAGE, "%s: unexpected tensor %s: model %s has no such tensor (is the file for another "
                        "model?)", path, dp_printable(f->tensors[i].name, shown, sizeof shown), m->name);
    }
    free(e);
    return s;
}

dp_status dp_checkpoint_check_path(const char *flag, const char *path) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) { /* a --checkpoint directory: say which file to give */
        char **paths;
        int n;
        DP_TRY(dp_ckpt_dir_list(path, &paths, &n));
        dp_status s = n ? dp_fail(DP_ERR_USAGE, "%s %s: is a directory; give a checkpoint file, e.g. %s (the newest "
                                  "there)", flag, path, paths[0])
                        : dp_fail(DP_ERR_USAGE, "%s %s: is a directory, not a checkpoint file", flag, path);
        dp_ckpt_dir_free(paths, n);
        return s;
    }
    FILE *f;
    DP_TRY(dp_fopen_regular(path, flag, &f, &st));
    fclose(f);
    return DP_OK;
}

dp_status dp_checkpoint_load_weights(const char *flag, const char *path, const dp_model *m, float *params,
                                     float *buffers, long *bn_batches) {
    long nbt_unused;
    if (!bn_batches) bn_batches = &nbt_unused;
    *bn_batches = 0;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return dp_checkpoint_check_path(flag, path);
    dp_status s;
    if (is_v1(path)) s = dp_checkpoint_v1_load(path, m, params, buffers, NULL, NULL);
    else {
        dp_st_file f;
        s = read_for_model(path, m, &f);
        if (s == DP_OK) {
            s = take_model(path, &f, m, params, buffers, NULL, bn_batches);
            dp_st_free(&f);
        }
    }
    if (s != DP_OK) { /* every message of this file under one prefix: the flag that named it */
        char msg[DP_ERROR_MAX];
        snprintf(msg, sizeof msg, "%s", dp_last_error());
        return dp_fail(s, "%s %s", flag, msg);
    }
    return DP_OK;
}

static dp_status meta_long(const char *path, const dp_st_file *f, const char *key, long lo, long hi, long *out) {
    const char *v = dp_st_meta_get(f, key);
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    char shown[64];
    if (!v || !*v || *end || errno || x < lo || x > hi)
        return dp_fail(DP_ERR_FORMAT, "%s: metadata %s is %s%s%s, expected %ld..%ld (not a dptrain training checkpoint?)",
                       path, key, v ? "'" : "missing", v ? dp_printable(v, shown, sizeof shown) : "", v ? "'" : "", lo, hi);
    *out = x;
    return DP_OK;
}

dp_status dp_checkpoint_load_resume(const char *path, const dp_model *m, float *params, float *buffers,
                                    float *momentum, dp_train_pos *pos, const dp_st_meta *expect, int n_expect,
                                    dp_ckpt_recorded *rec, int n_rec) {
    if (is_v1(path))
        return dp_fail(DP_ERR_USAGE, "%s: an old DPCKPT01 file holds no training position; continue from its weights "
                       "with --init-from %s (epochs and momentum start afresh)", path, path);
    dp_st_file f;
    DP_TRY(read_for_model(path, m, &f));
    dp_status s = DP_OK;
    long v[4] = {0};
    /* each field in the range a run can reach: a crafted value must not wrap an int (or resume at epoch 0) */
    static const char *const keys[4] = {"dptrain.epoch", "dptrain.next_batch", "dptrain.step",
                                        "dptrain.skipped_steps"};
    static const long lo[4] = {1, 0, 0, 0}, hi[4] = {DP_CKPT_MAX_EPOCH, INT_MAX, DP_CKPT_MAX_COUNT, DP_CKPT_MAX_COUNT};
    for (int i = 0; i < 4 && s == DP_OK; i++) s = meta_long(path, &f, keys[i], lo[i], hi[i], &v[i]);
    if (s == DP_OK && v[3] > v[2])
        s = dp_fail(DP_ERR_FORMAT, "%s: metadata dptrain.skipped_steps (%ld) exceeds dptrain.step (%ld)", path, v[3], v[2]);
    for (int i = 0; i < n_expect && s == DP_OK; i++) {
        const char *have = dp_st_meta_get(&f, expect[i].key);
        if (!have) have = expect[i].absent;
        if (have && strcmp(have, expect[i].value) == 0) continue;
        const char *k = expect[i].key;
        int is_arg = strncmp(k, "dptrain.arg.", 12) == 0;
        const char *label = is_arg ? k + 12 : strcmp(k, "dptrain.train_data_crc32") == 0 ? "the training data's CRC-32" : k;
        char shown[160];
        s = dp_fail(DP_ERR_USAGE, "%s: refusing to resume: %s%s is %s%s%s in the checkpoint but %s in this run (resume "
                    "with the same %s, or start afresh from its weights with --init-from)", path,
                    is_arg ? "--" : "", label, have ? "'" : "", have ? dp_printable(have, shown, sizeof shown) : "missing",
                    have ? "'" : "", expect[i].value, is_arg ? "value" : "data");
    }
    long nbt = 0;
    if (s == DP_OK) s = take_model(path, &f, m, params, buffers, momentum, &nbt);
    if (s == DP_OK && pos)
        pos->epoch = (int)v[0], pos->next_batch = (int)v[1], pos->step = v[2], pos->skipped = v[3], pos->bn_batches = nbt;
    for (int i = 0; i < n_rec && s == DP_OK; i++) {
        const char *have = dp_st_meta_get(&f, rec[i].key);
        if (snprintf(rec[i].value, sizeof rec[i].value, "%s", have ? have : "") >= (int)sizeof rec[i].value)
            s = dp_fail(DP_ERR_FORMAT, "%s: metadata %s is longer than the %zu bytes dptrain writes (damaged or "
                        "crafted)", path, rec[i].key, sizeof rec[i].value - 1); /* not cut: a cut value misleads */
    }
    dp_st_free(&f);
    return s;
}
