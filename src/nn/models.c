/* The named models. LeNet adapts to its input (1x28x28 -> fc 256, 3x32x32 -> fc 400). */
#include <stdio.h>
#include <string.h>

#include "nn/model.h"

static int lenet(dp_model *m, int bn) {
    int x = DP_INPUT;
    x = dp_model_conv2d(m, "conv1", x, 6, 5, 1, 0, 1);
    if (bn) x = dp_model_batchnorm(m, "bn1", x);
    x = dp_model_relu(m, x);
    x = dp_model_maxpool(m, x, 2, 2, 0);
    x = dp_model_conv2d(m, "conv2", x, 16, 5, 1, 0, 1);
    if (bn) x = dp_model_batchnorm(m, "bn2", x);
    x = dp_model_relu(m, x);
    x = dp_model_maxpool(m, x, 2, 2, 0);
    x = dp_model_flatten(m, x);
    x = dp_model_linear(m, "fc1", x, 120, 1);
    if (bn) x = dp_model_batchnorm(m, "bn3", x);
    x = dp_model_relu(m, x);
    x = dp_model_linear(m, "fc2", x, 84, 1);
    if (bn) x = dp_model_batchnorm(m, "bn4", x);
    x = dp_model_relu(m, x);
    return dp_model_linear(m, "fc3", x, m->n_classes, 1);
}

/* torchvision's BasicBlock: conv3x3-bn-relu-conv3x3-bn, plus the input (or a strided 1x1
 * conv + bn of it when the shape changes), then relu. */
static int basic_block(dp_model *m, const char *prefix, int x, int planes, int stride) {
    char n[32];
    const dp_shape in = x == DP_INPUT ? m->input : (x >= 0 ? m->nodes[x].out : (dp_shape){0, 0, 0});
    snprintf(n, sizeof n, "%s.conv1", prefix);
    int y = dp_model_conv2d(m, n, x, planes, 3, stride, 1, 0);
    snprintf(n, sizeof n, "%s.bn1", prefix);
    y = dp_model_relu(m, dp_model_batchnorm(m, n, y));
    snprintf(n, sizeof n, "%s.conv2", prefix);
    y = dp_model_conv2d(m, n, y, planes, 3, 1, 1, 0);
    snprintf(n, sizeof n, "%s.bn2", prefix);
    y = dp_model_batchnorm(m, n, y);
    int shortcut = x;
    if (stride != 1 || in.c != planes) {
        snprintf(n, sizeof n, "%s.downsample.0", prefix);
        shortcut = dp_model_conv2d(m, n, x, planes, 1, stride, 0, 0);
        snprintf(n, sizeof n, "%s.downsample.1", prefix);
        shortcut = dp_model_batchnorm(m, n, shortcut);
    }
    return dp_model_relu(m, dp_model_add(m, y, shortcut));
}

static int resnet18(dp_model *m) {
    int x = dp_model_conv2d(m, "conv1", DP_INPUT, 64, 7, 2, 3, 0);
    x = dp_model_relu(m, dp_model_batchnorm(m, "bn1", x));
    x = dp_model_maxpool(m, x, 3, 2, 1);
    const int planes[4] = {64, 128, 256, 512};
    for (int s = 0; s < 4; s++) {
        for (int b = 0; b < 2; b++) {
            char prefix[16];
            snprintf(prefix, sizeof prefix, "layer%d.%d", s + 1, b);
            x = basic_block(m, prefix, x, planes[s], (s > 0 && b == 0) ? 2 : 1);
        }
    }
    x = dp_model_flatten(m, dp_model_global_avgpool(m, x));
    return dp_model_linear(m, "fc", x, m->n_classes, 1);
}

static const char *const model_names[] = {"lenet", "lenet-bn", "resnet18"};

int dp_model_bucket_node(const dp_model *m, int b) {
    const int ft = m->params.bucket_first_tensor[b];
    int node = 0;
    for (int i = 0; i < m->n_nodes; i++)
        if (ft >= m->nodes[i].tensor0 && ft < m->nodes[i].tensor0 + m->nodes[i].n_tensors) node = i;
    return node;
}

int dp_model_known(const char *name) {
    for (size_t i = 0; i < sizeof model_names / sizeof *model_names; i++)
        if (strcmp(name, model_names[i]) == 0) return 1;
    return 0;
}

const char *dp_model_names(void) { return "lenet, lenet-bn, resnet18"; }

dp_status dp_model_build(const char *name, dp_shape input, int n_classes, dp_model *m) {
    if (!dp_model_known(name))
        return dp_fail(DP_ERR_USAGE, "--model: unknown model '%s' (expected one of: %s)", name, dp_model_names());
    dp_model_init(m, name, input, n_classes);
    int out;
    if (strcmp(name, "resnet18") == 0) out = resnet18(m);
    else out = lenet(m, strcmp(name, "lenet-bn") == 0);
    dp_status s = dp_model_finish(m, out);
    if (s != DP_OK) dp_model_free(m);
    return s;
}
