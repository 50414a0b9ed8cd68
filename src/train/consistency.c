/* consistency.c: ranks launched with different flags, models or data would hang at their
 * first mismatched collective; instead every rank hashes what must agree, the hashes are
 * all-gathered, and a difference fails at once naming the ranks and what differs. */
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "train/trainer.h"

enum { H_FLAGS, H_MODEL, H_DATA, H_KINDS };
static const char *const what[H_KINDS] = {"the training flags", "the model", "the data set"};

static uint32_t crc_of(uint32_t crc, const void *p, size_t n) {
    const unsigned char *b = p;
    while (n) {
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = (uint32_t)crc32(crc, b, k);
        b += k, n -= k;
    }
    return crc;
}

static uint32_t crc_str(uint32_t crc, const char *s) { return s ? crc_of(crc, s, strlen(s) + 1) : crc_of(crc, "", 1); }

static void hashes(const dp_trainer *t, uint32_t h[H_KINDS]) {
    const dp_config *c = &t->cfg;
    /* every value that changes the math or the collectives' shapes; not --log, --threads, --workers */
    double nums[] = {c->epochs, (double)c->max_steps, c->batch_size, c->lr, c->momentum, c->weight_decay,
                     c->nesterov, c->lr_gamma, c->lr_scale_linear, c->lr_ref_batch, c->warmup_epochs,
                     (double)c->seed, c->shuffle, c->drop_last, c->augment, c->mode, c->bucket_mb, c->overlap,
                     c->accumulate, c->sync_bn, c->n_lr_steps};
    h[H_FLAGS] = crc_of(0, nums, sizeof nums);
    h[H_FLAGS] = crc_of(h[H_FLAGS], c->lr_steps, sizeof c->lr_steps);
    h[H_FLAGS] = crc_str(h[H_FLAGS], c->backend);
    h[H_MODEL] = crc_str(0, t->model.name);
    size_t sizes[3] = {t->model.params.n, t->model.buffers.n, (size_t)t->model.params.n_buckets};
    h[H_MODEL] = crc_of(h[H_MODEL], sizes, sizeof sizes);
    h[H_DATA] = crc_str(0, c->data.name);
    const dp_dataset *sets[2] = {t->have_train ? &t->train : NULL, &t->test};
    for (int i = 0; i < 2; i++) {
        if (!sets[i]) continue;
        int shape[5] = {sets[i]->n, sets[i]->c, sets[i]->h, sets[i]->w, sets[i]->n_classes};
        h[H_DATA] = crc_of(h[H_DATA], shape, sizeof shape);
        h[H_DATA] = crc_of(h[H_DATA], sets[i]->labels, (size_t)sets[i]->n);
        h[H_DATA] = crc_of(h[H_DATA], sets[i]->pixels,
                           (size_t)sets[i]->n * sets[i]->c * sets[i]->h * sets[i]->w);
    }
}

dp_status dp_check_consistency(dp_trainer *t) {
    if (t->n_local == t->world) return DP_OK; /* one process: nothing can differ */
    uint32_t h[H_KINDS];
    hashes(t, h);
    /* 16-bit halves as floats: exact through any float collective */
    enum { PER = 2 * H_KINDS };
    float send[PER];
    for (int k = 0; k < H_KINDS; k++) send[2 * k] = (float)(h[k] >> 16), send[2 * k + 1] = (float)(h[k] & 0xffff);
    float recv[PER * t->world];
    const float *sp[1] = {send};
    float *rp[1] = {recv};
    if (t->n_local != 1) return dp_fail(DP_ERR_INTERNAL, "consistency check expects one replica per process");
    DP_TRY(t->backend->iface->allgather(t->backend, sp, rp, PER));
    for (int r = 1; r < t->world; r++)
        for (int k = 0; k < H_KINDS; k++)
            if (recv[r * PER + 2 * k] != recv[2 * k] || recv[r * PER + 2 * k + 1] != recv[2 * k + 1])
                return dp_fail(DP_ERR_USAGE,
                               "rank %d and rank 0 were started with different %s (checked at start, before any "
                               "training): launch every rank with the same flags and data", r, what[k]);
    return DP_OK;
}
