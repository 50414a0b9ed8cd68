#include "trainrun.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakegpu/fakegpu.h"
#include "testutil.h"

static void read_losses(const char *log, tr_result *r) {
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    char line[4096];
    r->n_losses = 0;
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "\"event\":\"config\"") && strstr(line, "\"data_on_device\":1")) r->data_on_device = 1;
        if (strstr(line, "\"event\":\"config\"")) snprintf(r->config, sizeof r->config, "%s", line);
        char *p = strstr(line, "\"event\":\"step\"");
        if (!p) continue;
        p = strstr(line, "\"loss\":");
        assert_non_null(p);
        if (r->n_losses < 64) r->losses[r->n_losses++] = strtod(p + 7, NULL);
    }
    fclose(f);
}

void tr_base_config(dp_config *c, const char *model) {
    dp_config_defaults(c);
    c->model = model;
    c->data.name = "synthetic";
    c->data.dir = "";
    if (strcmp(model, "lenet") == 0) c->data.c = 1, c->data.h = 28, c->data.w = 28;
    else c->data.c = 3, c->data.h = 32, c->data.w = 32;
    c->data.n_classes = 10;
    c->data.samples = 64 * 24;
    c->data.seed = 5;
    c->seed = 7;
    c->epochs = 1;
    c->max_steps = 20;
    c->batch_size = 64;
    c->lr = 0.05f;
    c->momentum = 0.9f;
    c->weight_decay = 1e-4f;
    c->threads = 2;
    c->workers = 0;
    c->quiet = 1;
    /* DP_TEST_PRECISION=bf16: the same runs under --precision bf16 (the bitwise properties hold there too) */
    const char *prec = getenv("DP_TEST_PRECISION");
    if (prec && strcmp(prec, "bf16") == 0) c->precision = DP_PRECISION_BF16;
    /* DP_TEST_DEVICE=fakegpu: the same runs on the test device that behaves like a GPU */
    const char *dev = getenv("DP_TEST_DEVICE");
    if (dev && *dev) {
        if (strcmp(dev, "fakegpu") == 0 && dp_fakegpu_register() != DP_OK) fail_msg("%s", dp_last_error());
        c->device = dev;
    }
}

tr_result tr_run(dp_config *c) {
    tr_result r = {0};
    char log[600];
    snprintf(log, sizeof log, "%s", tu_path("trainrun.jsonl"));
    c->log_path = log;
    dp_trainer *t;
    if (dp_trainer_create(c, &t) != DP_OK) fail_msg("create: %s", dp_last_error());
    if (dp_trainer_run(t) != DP_OK) fail_msg("run: %s", dp_last_error());
    r.n = t->model.params.n;
    r.params = malloc(r.n * sizeof(float));
    r.momentum = malloc(r.n * sizeof(float));
    float *other = malloc(r.n * sizeof(float));
    assert_non_null(r.params), assert_non_null(r.momentum), assert_non_null(other);
    const dp_dev *d = dp_exec_replica(t->ex, 0)->dev; /* each replica's arenas through its own device */
    assert_int_equal(d->download(d, r.params, dp_exec_replica(t->ex, 0)->params, r.n * sizeof(float)), DP_OK);
    assert_int_equal(d->download(d, r.momentum, dp_exec_replica(t->ex, 0)->momentum, r.n * sizeof(float)), DP_OK);
    r.all_equal = 1;
    for (int i = 1; i < dp_exec_n_local(t->ex); i++) {
        d = dp_exec_replica(t->ex, i)->dev;
        assert_int_equal(d->download(d, other, dp_exec_replica(t->ex, i)->params, r.n * sizeof(float)), DP_OK);
        if (memcmp(other, r.params, r.n * sizeof(float)) != 0) r.all_equal = 0;
    }
    free(other);
    r.layout.n_tensors = t->model.params.n_tensors;
    r.layout.tensors = malloc((size_t)r.layout.n_tensors * sizeof *r.layout.tensors);
    memcpy(r.layout.tensors, t->model.params.tensors, (size_t)r.layout.n_tensors * sizeof *r.layout.tensors);
    dp_trainer_destroy(t);
    read_losses(log, &r);
    remove(log);
    return r;
}

void tr_free(tr_result *r) {
    free(r->params);
    free(r->momentum);
    free(r->layout.tensors);
}

void tr_assert_same(const tr_result *a, const tr_result *b, const char *what) {
    assert_int_equal(a->n, b->n);
    if (memcmp(a->params, b->params, a->n * sizeof(float)) != 0) {
        for (int i = 0; i < a->layout.n_tensors; i++) {
            const dp_tensor_info *ti = &a->layout.tensors[i];
            if (memcmp(a->params + ti->s.offset, b->params + ti->s.offset, ti->s.count * sizeof(float)))
                fail_msg("%s: tensor %s differs (%.3g relative)", what, ti->name,
                         tu_rel_diff(a->params + ti->s.offset, b->params + ti->s.offset, ti->s.count));
        }
        fail_msg("%s: the parameters differ", what);
    }
    if (memcmp(a->momentum, b->momentum, a->n * sizeof(float)) != 0) fail_msg("%s: the momentum differs", what);
    assert_int_equal(a->n_losses, b->n_losses);
    for (int i = 0; i < a->n_losses; i++)
        if (a->losses[i] != b->losses[i])
            fail_msg("%s: step %d loss %.9g vs %.9g", what, i + 1, a->losses[i], b->losses[i]);
}

double tr_round_tol(double fp32_tol) {
    const char *prec = getenv("DP_TEST_PRECISION");
    return prec && strcmp(prec, "bf16") == 0 ? 10 * fp32_tol : fp32_tol;
}

void tr_assert_close(const tr_result *a, const tr_result *b, double tol, const char *what) {
    assert_int_equal(a->n, b->n);
    double worst = 0;
    for (int i = 0; i < a->layout.n_tensors; i++) {
        const dp_tensor_info *ti = &a->layout.tensors[i];
        double rel = tu_rel_diff(a->params + ti->s.offset, b->params + ti->s.offset, ti->s.count);
        if (rel > worst) worst = rel;
        if (rel > tol) fail_msg("%s: tensor %s differs by %.3g relative (tolerance %.1g)", what, ti->name, rel, tol);
    }
    assert_int_equal(a->n_losses, b->n_losses);
    for (int i = 0; i < a->n_losses; i++)
        if (fabs(a->losses[i] - b->losses[i]) > tol * fabs(b->losses[i]) + 1e-7)
            fail_msg("%s: step %d loss %.9g vs %.9g", what, i + 1, a->losses[i], b->losses[i]);
    if (a->n_losses)
        print_message("%s: worst tensor %.3g relative, last loss %.9g vs %.9g\n", what, worst,
                      a->losses[a->n_losses - 1], b->losses[b->n_losses - 1]);
}
