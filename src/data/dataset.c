/* dataset.c: maps a data set name to its reader, files, class names and normalisation. */
#include "data/dataset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/rng.h"

static const char *const fashion_names[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                              "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
static const char *const digit_names[10] = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};
static const char *const cifar_names[10] = {"airplane", "automobile", "bird", "cat",  "deer",
                                            "dog",      "frog",       "horse", "ship", "truck"};

typedef struct {
    const char *name, *dir;
    const char *const *class_names;
    float mean[3], std[3];  /* of pixel/255 over the training set */
    const char *where;      /* how to get the files */
} known_set;

static const known_set sets[] = {
    {"fashion-mnist", "/usr/share/datasets/fashion-mnist", fashion_names, {0.2860f}, {0.3530f},
     "install the Debian package dataset-fashion-mnist (it puts them in /usr/share/datasets/fashion-mnist), or "
     "download the files from https://github.com/zalandoresearch/fashion-mnist and pass their directory with --data"},
    {"mnist", "/usr/share/datasets/mnist", digit_names, {0.1307f}, {0.3081f},
     "MNIST is not packaged for Debian: download the four IDX files from a yann.lecun.com mirror on a machine "
     "with network access and pass their directory with --data"},
    {"cifar10", "/usr/share/datasets/cifar10", cifar_names, {0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f},
     "download cifar-10-binary.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html and unpack it"},
    {"synthetic", "", NULL, {0}, {0}, ""},
};

static const known_set *find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof sets / sizeof *sets; i++)
        if (strcmp(sets[i].name, name) == 0) return &sets[i];
    return NULL;
}

int dp_dataset_known(const char *name) { return find(name) != NULL; }

const char *dp_dataset_default_dir(const char *name) {
    const known_set *k = find(name);
    return k ? k->dir : "";
}

int dp_dataset_file_name(const char *name, int i, char *buf, size_t cap) {
    const known_set *k = find(name);
    if (!k || !*k->dir || i < 0) return 0;
    if (strcmp(k->name, "cifar10") == 0) return dp_cifar10_file_name(i, buf, cap);
    static const char *const prefix[] = {"train", "t10k"}, *const kind[] = {"images-idx3", "labels-idx1"};
    if (i >= 8) return 0; /* {train,t10k} x {images,labels} x {raw, .gz} */
    snprintf(buf, cap, "%s-%s-ubyte%s", prefix[i / 4], kind[(i / 2) % 2], i % 2 ? ".gz" : "");
    return 1;
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* DIR/<prefix>-<kind>-ubyte.gz if present, else the raw name; neither: an error naming both. */
static dp_status idx_path(const known_set *k, const char *dir, const char *prefix, const char *kind, char *out,
                          size_t cap) {
    char gz[4200];
    snprintf(gz, sizeof gz, "%s/%s-%s-ubyte.gz", dir, prefix, kind);
    snprintf(out, cap, "%s/%s-%s-ubyte", dir, prefix, kind);
    if (exists(gz)) {
        snprintf(out, cap, "%s", gz);
        return DP_OK;
    }
    if (exists(out)) return DP_OK;
    return dp_fail(DP_ERR_IO, "%s: neither %s nor %s exists: %s", k->name, gz, out, k->where);
}

static dp_status load(const known_set *k, const dp_data_spec *spec, int train, dp_dataset *out) {
    if (strcmp(k->name, "synthetic") == 0) {
        if (train) return dp_synthetic_make(spec->c, spec->h, spec->w, spec->n_classes, spec->samples, spec->seed, out);
        /* The test split: a fifth of the size, from its own stream of the seed. */
        int n = spec->samples / 5 > 0 ? spec->samples / 5 : 1;
        return dp_synthetic_make(spec->c, spec->h, spec->w, spec->n_classes, n, dp_rng_mix(spec->seed, 0x7E57ull),
                                 out);
    }
    const char *dir = spec->dir && *spec->dir ? spec->dir : k->dir;
    if (strlen(dir) > 4000) return dp_fail(DP_ERR_USAGE, "--data: directory name longer than 4000 bytes");
    if (strcmp(k->name, "cifar10") == 0) return dp_cifar10_load(dir, train, out);
    const char *prefix = train ? "train" : "t10k";
    char images[4200], labels[4200];
    DP_TRY(idx_path(k, dir, prefix, "images-idx3", images, sizeof images));
    DP_TRY(idx_path(k, dir, prefix, "labels-idx1", labels, sizeof labels));
    return dp_idx_load(images, labels, 10, out);
}

dp_status dp_dataset_load(const dp_data_spec *spec, int train, dp_dataset *out) {
    memset(out, 0, sizeof *out);
    const known_set *k = find(spec->name);
    if (!k)
        return dp_fail(DP_ERR_USAGE, "--dataset: unknown data set '%s' (expected one of: fashion-mnist, mnist, cifar10, "
                       "synthetic)", spec->name ? spec->name : "(null)");
    DP_TRY(load(k, spec, train, out));
    snprintf(out->name, sizeof out->name, "%s", k->name);
    if (k->class_names) {
        out->class_names = k->class_names;
        for (int ch = 0; ch < out->c; ch++) {
            /* One-channel sets list one value; cifar10 one per channel. */
            out->mean[ch] = k->mean[out->c == 1 ? 0 : ch];
            out->std[ch] = k->std[out->c == 1 ? 0 : ch];
        }
    }
    return DP_OK;
}

void dp_dataset_free(dp_dataset *d) {
    if (!d) return;
    free(d->pixels);
    free(d->labels);
    memset(d, 0, sizeof *d);
}
