#include "nn/model.h"

#include "kernels/device.h"
#include "nn/fuse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


dp_status dp_layer_add_tensor(dp_layout *L, const dp_layer *l, const char *suffix, size_t count, int flags,
                              size_t *offset) {
    char name[sizeof L->tensors[0].name];
    snprintf(name, sizeof name, "%s.%s", l->name, suffix);
    int idx;
    DP_TRY(dp_layout_add(L, name, count, flags, &idx));
    *offset = L->tensors[idx].s.offset;
    return DP_OK;
}

void dp_model_init(dp_model *m, const char *name, dp_shape input, int n_classes) {
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    m->input = input;
    m->n_classes = n_classes;
    m->output = -1;
    m->head = &dp_head_softmax_xent; /* classification; a builder of another kind of model sets its own */
}

/* Appends a node of the given type and config reading from `in`, and plans it at once so the
 * next node knows its output shape. Returns the node id, or -1 with the error kept in m. */
static int add_node(dp_model *m, const dp_layer_ops *ops, const char *name, const int *in, int n_in,
                    const dp_layer *cfg) {
    if (m->error != DP_OK) return -1;
    for (int i = 0; i < n_in; i++) {
        if (in[i] < DP_INPUT || in[i] >= m->n_nodes) {
            m->error = dp_fail(DP_ERR_INTERNAL, "model %s: layer %s reads node %d, which does not exist", m->name,
                               name ? name : ops->kind, in[i]);
            return -1;
        }
    }
    if (m->n_nodes == m->cap) {
        int cap = m->cap ? 2 * m->cap : 16;
        dp_layer *n = realloc(m->nodes, (size_t)cap * sizeof *n);
        if (!n) {
            m->error = dp_fail(DP_ERR_NOMEM, "out of memory building model %s", m->name);
            return -1;
        }
        m->nodes = n;
        m->cap = cap;
    }
    dp_layer *l = &m->nodes[m->n_nodes];
    memset(l, 0, sizeof *l);
    if (cfg) l->cfg = cfg->cfg;
    l->ops = ops;
    if (name) snprintf(l->name, sizeof l->name, "%s", name);
    else snprintf(l->name, sizeof l->name, "%s%d", ops->kind, m->n_nodes);
    l->n_in = n_in;
    for (int i = 0; i < n_in; i++) {
        l->in[i] = in[i];
        l->in_shape[i] = in[i] == DP_INPUT ? m->input : m->nodes[in[i]].out;
    }
    l->tensor0 = m->params.n_tensors;
    dp_status s = ops->plan(l, &m->params, &m->buffers);
    if (s != DP_OK) {
        char msg[DP_ERROR_MAX];
        snprintf(msg, sizeof msg, "%s", dp_last_error());
        m->error = dp_fail(s, "model %s, layer %s: input %dx%dx%d: %s", m->name, l->name, l->in_shape[0].c,
                           l->in_shape[0].h, l->in_shape[0].w, msg);
        return -1;
    }
    l->n_tensors = m->params.n_tensors - l->tensor0;
    return m->n_nodes++;
}

int dp_model_conv2d(dp_model *m, const char *name, int in, int out_c, int k, int stride, int pad, int bias) {
    dp_layer c = {.cfg.conv = {out_c, k, stride, pad, bias}};
    return add_node(m, &dp_conv2d_ops, name, &in, 1, &c);
}

int dp_model_linear(dp_model *m, const char *name, int in, int out_f, int bias) {
    dp_layer c = {.cfg.linear = {out_f, bias}};
    return add_node(m, &dp_linear_ops, name, &in, 1, &c);
}

int dp_model_batchnorm(dp_model *m, const char *name, int in) {
    dp_layer c = {.cfg.bn = {0.1f, 1e-5f}}; /* PyTorch's defaults */
    return add_node(m, &dp_batchnorm_ops, name, &in, 1, &c);
}

int dp_model_relu(dp_model *m, int in) { return add_node(m, &dp_relu_ops, NULL, &in, 1, NULL); }

int dp_model_maxpool(dp_model *m, int in, int k, int stride, int pad) {
    dp_layer c = {.cfg.pool = {k, stride, pad}};
    return add_node(m, &dp_maxpool_ops, NULL, &in, 1, &c);
}

int dp_model_flatten(dp_model *m, int in) { return add_node(m, &dp_flatten_ops, NULL, &in, 1, NULL); }

int dp_model_add(dp_model *m, int a, int b) {
    int in[2] = {a, b};
    return add_node(m, &dp_add_ops, NULL, in, 2, NULL);
}

int dp_model_global_avgpool(dp_model *m, int in) { return add_node(m, &dp_global_avgpool_ops, NULL, &in, 1, NULL); }

dp_status dp_model_finish(dp_model *m, int output) {
    if (m->error != DP_OK) return m->error;
    if (output < 0 || output >= m->n_nodes)
        return dp_fail(DP_ERR_INTERNAL, "model %s: output node %d does not exist", m->name, output);
    dp_shape o = m->nodes[output].out;
    if (o.c != m->n_classes || o.h != 1 || o.w != 1)
        return dp_fail(DP_ERR_INTERNAL, "model %s: output is %dx%dx%d, expected %d logits", m->name, o.c, o.h, o.w,
                       m->n_classes);
    m->output = output;
    /* Backward runs in reverse order: the last consumer of a node (in forward order) writes
     * its gradient first; earlier consumers add to it. */
    m->din_accumulate = calloc((size_t)m->n_nodes, sizeof *m->din_accumulate);
    int *written = calloc((size_t)m->n_nodes, sizeof *written);
    if (!m->din_accumulate || !written) {
        free(written);
        return dp_fail(DP_ERR_NOMEM, "out of memory planning model %s", m->name);
    }
    for (int i = m->n_nodes - 1; i >= 0; i--) {
        const dp_layer *l = &m->nodes[i];
        int n_acc = 0;
        for (int j = 0; j < l->n_in; j++) {
            if (l->in[j] == DP_INPUT) continue;
            m->din_accumulate[i][j] = written[l->in[j]];
            n_acc += written[l->in[j]];
            written[l->in[j]] = 1;
        }
        if (n_acc > 1) { /* dp_node_backward has one scratch buffer for an accumulated gradient */
            free(written);
            return dp_fail(DP_ERR_INTERNAL, "model %s: layer %s adds two gradients into earlier nodes at once",
                           m->name, l->name);
        }
    }
    free(written);
    return dp_fuse_plan(m);
}

void dp_model_set_precision(dp_model *m, int bf16) {
    for (int i = 0; i < m->n_nodes; i++)
        m->nodes[i].bf16 = bf16 && (m->nodes[i].ops == &dp_conv2d_ops || m->nodes[i].ops == &dp_linear_ops);
}

void dp_model_free(dp_model *m) {
    free(m->nodes);
    free(m->din_accumulate);
    free(m->fuse);
    dp_layout_free(&m->params);
    dp_layout_free(&m->buffers);
    memset(m, 0, sizeof *m);
}

void dp_model_init_params(const dp_model *m, float *params, float *buffers, dp_rng *rng) {
    for (int i = 0; i < m->n_nodes; i++)
        if (m->nodes[i].ops->init) m->nodes[i].ops->init(&m->nodes[i], params, buffers, rng);
}

static size_t out_floats(const dp_layer *l, int batch) { return (size_t)batch * dp_shape_size(l->out); }
static size_t ctx_floats(const dp_layer *l, int batch) { return l->ctx_fixed + (size_t)batch * l->ctx_per_sample; }
static size_t round16(size_t n) { return (n + 15) / 16 * 16; }

/* The one sum of what dp_acts_create allocates, so the memory estimate cannot drift from it. */
static size_t acts_floats(const dp_model *m, const dp_kernels *k, int max_batch, int nthreads, size_t *ws_out) {
    size_t total = 0, ws = 0, maxact = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const dp_layer *l = &m->nodes[i];
        total += 2 * round16(out_floats(l, max_batch)) + round16(ctx_floats(l, max_batch)) + round16(l->sync_floats);
        if (l->ops->ws_floats) {
            size_t w = l->ops->ws_floats(l, k, max_batch, nthreads);
            if (w > ws) ws = w;
        }
        if (out_floats(l, max_batch) > maxact) maxact = out_floats(l, max_batch);
    }
    if (ws_out) *ws_out = ws;
    return total + round16(ws) + round16(maxact);
}

size_t dp_acts_floats(const dp_model *m, int max_batch, int nthreads) {
    return acts_floats(m, &dp_cpu_kernels, max_batch, nthreads, NULL);
}

size_t dp_acts_floats_k(const dp_model *m, const dp_kernels *k, int max_batch, int nthreads) {
    return acts_floats(m, k ? k : &dp_cpu_kernels, max_batch, nthreads, NULL);
}

dp_status dp_acts_create(const dp_model *m, int max_batch, int nthreads, dp_acts *a) {
    return dp_acts_create_on(m, max_batch, nthreads, NULL, a);
}

dp_status dp_acts_create_on(const dp_model *m, int max_batch, int nthreads, const dp_dev *dev, dp_acts *a) {
    memset(a, 0, sizeof *a);
    a->dev = dev;
    a->max_batch = max_batch;
    size_t ws = 0, total = acts_floats(m, dev ? dev->k : &dp_cpu_kernels, max_batch, nthreads, &ws);
    a->ws_floats = ws;
    a->out = calloc((size_t)m->n_nodes, sizeof *a->out);
    a->dout = calloc((size_t)m->n_nodes, sizeof *a->dout);
    a->ctx = calloc((size_t)m->n_nodes, sizeof *a->ctx);
    a->sync = calloc((size_t)m->n_nodes, sizeof *a->sync);
    if (!a->out || !a->dout || !a->ctx || !a->sync) {
        dp_acts_free(a);
        return dp_fail(DP_ERR_NOMEM, "out of memory for the activation tables of model %s", m->name);
    }
    dp_status s = dev ? dev->alloc(dev, &a->mem, total, "activations") : dp_alloc_floats(&a->mem, total, "activations");
    if (s != DP_OK) {
        dp_acts_free(a);
        return s;
    }
    float *p = a->mem;
    for (int i = 0; i < m->n_nodes; i++) {
        const dp_layer *l = &m->nodes[i];
        a->out[i] = p, p += round16(out_floats(l, max_batch));
        a->dout[i] = p, p += round16(out_floats(l, max_batch));
        a->ctx[i] = p, p += round16(ctx_floats(l, max_batch));
        a->sync[i] = p, p += round16(l->sync_floats);
    }
    a->ws = p, p += round16(ws);
    a->din_tmp = p;
    return DP_OK;
}

void dp_acts_free(dp_acts *a) {
    free(a->out);
    free(a->dout);
    free(a->ctx);
    free(a->sync);
    if (a->dev) a->dev->free(a->dev, a->mem);
    else dp_free(a->mem);
    memset(a, 0, sizeof *a);
}

static void gather_inputs(const dp_model *m, const dp_layer *l, const dp_acts *a, const float *input,
                          const float **in) {
    for (int j = 0; j < l->n_in; j++) in[j] = l->in[j] == DP_INPUT ? input : a->out[l->in[j]];
    (void)m;
}

static dp_exec with_ws(const dp_exec *x, const dp_acts *a) {
    dp_exec e = *x;
    e.ws = a->ws;
    return e;
}

void dp_node_forward_sums(const dp_model *m, int node, dp_acts *a, const dp_exec *x, const float *input) {
    const dp_layer *l = &m->nodes[node];
    if (!l->ops->forward_sums) return;
    const float *in[DP_MAX_INPUTS];
    gather_inputs(m, l, a, input, in);
    dp_exec e = with_ws(x, a);
    l->ops->forward_sums(l, &e, in, a->sync[node]);
}

dp_status dp_node_forward(const dp_model *m, int node, dp_acts *a, const dp_exec *x, const float *input) {
    const dp_layer *l = &m->nodes[node];
    const float *in[DP_MAX_INPUTS];
    gather_inputs(m, l, a, input, in);
    dp_exec e = with_ws(x, a);
    dp_status st;
    if (dp_fuse_forward(m, node, a, &e, in, &st)) return st;
    return l->ops->forward(l, &e, in, a->out[node], a->ctx[node], a->sync[node]);
}

void dp_node_backward_sums(const dp_model *m, int node, dp_acts *a, const dp_exec *x, const float *input) {
    const dp_layer *l = &m->nodes[node];
    if (!l->ops->backward_sums) return;
    const float *in[DP_MAX_INPUTS];
    gather_inputs(m, l, a, input, in);
    dp_exec e = with_ws(x, a);
    l->ops->backward_sums(l, &e, in, a->dout[node], a->ctx[node], a->sync[node]);
}

dp_status dp_node_backward(const dp_model *m, int node, dp_acts *a, const dp_exec *x, const float *input) {
    const dp_layer *l = &m->nodes[node];
    const float *in[DP_MAX_INPUTS];
    float *din[DP_MAX_INPUTS] = {NULL, NULL};
    gather_inputs(m, l, a, input, in);
    /* dp_model_finish guarantees at most one input of a node accumulates. */
    int tmp_used = -1;
    for (int j = 0; j < l->n_in; j++) {
        if (l->in[j] == DP_INPUT) continue;
        if (m->din_accumulate[node][j] && tmp_used < 0) {
            din[j] = a->din_tmp;
            tmp_used = j;
        } else {
            din[j] = a->dout[l->in[j]];
        }
    }
    dp_exec e = with_ws(x, a);
    dp_status st;
    if (dp_fuse_backward(m, node, a, &e, in, &st)) return st;
    DP_TRY(l->ops->backward(l, &e, in, a->out[node], a->dout[node], din, a->ctx[node], a->sync[node]));
    if (tmp_used >= 0) {
        const dp_layer *src = &m->nodes[l->in[tmp_used]];
        size_t n = (size_t)x->batch * dp_shape_size(src->out);
        float *dst = a->dout[l->in[tmp_used]];
        dp_exec_kernels(x)->add(&x->kc, n, dst, a->din_tmp, dst);
    }
    return DP_OK;
}

dp_status dp_model_forward(const dp_model *m, dp_acts *a, const dp_exec *x, const float *input) {
    for (int i = 0; i < m->n_nodes; i++) {
        dp_node_forward_sums(m, i, a, x, input);
        DP_TRY(dp_node_forward(m, i, a, x, input));
    }
    return DP_OK;
}

dp_status dp_model_backward(const dp_model *m, dp_acts *a, const dp_exec *x, const float *input) {
    for (int i = m->n_nodes - 1; i >= 0; i--) {
        dp_node_backward_sums(m, i, a, x, input);
        DP_TRY(dp_node_backward(m, i, a, x, input));
    }
    return DP_OK;
}
