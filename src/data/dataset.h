/* dataset.h: a labelled image data set held in memory as raw bytes.
 * Every reader (IDX, CIFAR-10 binary, synthetic) produces this one shape; the loader
 * normalises and augments per batch, so the full set stays small (uint8, NCHW). */
#ifndef DP_DATASET_H
#define DP_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define DP_MAX_CLASSES 1000

typedef struct {
    char name[32];          /* "fashion-mnist", "mnist", "cifar10", "synthetic" */
    int n;                  /* number of samples */
    int c, h, w;            /* per-sample shape */
    int n_classes;
    uint8_t *pixels;        /* (n, c, h, w) raw 0..255 */
    uint8_t *labels;        /* (n) in [0, n_classes) -- synthetic with > 256 classes is refused */
    float mean[3], std[3];  /* per-channel normalisation of pixel/255 */
    const char *const *class_names; /* n_classes names, static storage; NULL -> "0", "1", ... */
} dp_dataset;

/* What the user asked for on the command line. */
typedef struct {
    const char *name;       /* mnist | fashion-mnist | cifar10 | synthetic */
    const char *dir;        /* directory with the files (ignored for synthetic) */
    int c, h, w;            /* synthetic only: sample shape */
    int n_classes;          /* synthetic only */
    int samples;            /* synthetic only: training samples (test set: samples/5, at least 1) */
    uint64_t seed;          /* synthetic only */
} dp_data_spec;

/* Loads the training split (train = 1) or the test split (train = 0).
 * mnist/fashion-mnist: {train,t10k}-{images-idx3,labels-idx1}-ubyte, raw or .gz.
 * cifar10: data_batch_1..5.bin / test_batch.bin (directly in dir or in dir/cifar-10-batches-bin).
 * Every failure names the file and, for corrupt content, what was expected and the byte offset. */
dp_status dp_dataset_load(const dp_data_spec *spec, int train, dp_dataset *out);
void dp_dataset_free(dp_dataset *d);
/* 1 if the name is a known data set. */
int dp_dataset_known(const char *name);
/* Default directory for a data set ("/usr/share/datasets/fashion-mnist" for fashion-mnist). */
const char *dp_dataset_default_dir(const char *name);

/* The i-th name, relative to its directory, of a file the reader of data set `name` may open
 * (0 <= i, until it returns 0): the outputs of a run are checked against these, so that no
 * --log-file or --save replaces a file of the data. 0 for synthetic. */
int dp_dataset_file_name(const char *name, int i, char *buf, size_t cap);
int dp_cifar10_file_name(int i, char *buf, size_t cap);

/* Individual readers (also used by the tests). */
dp_status dp_idx_load(const char *images_path, const char *labels_path, int n_classes, dp_dataset *out);
dp_status dp_cifar10_load(const char *dir, int train, dp_dataset *out);
dp_status dp_synthetic_make(int c, int h, int w, int n_classes, int samples, uint64_t seed, dp_dataset *out);

/* Augmentation settings for dp_batch_fill. */
typedef struct {
    int enabled;
    uint64_t seed;          /* with epoch and the sample's position: the same draw for any replica count */
    int epoch;
} dp_augment;

/* Fills x (n, c, h, w) with normalised floats and y (n) with labels for samples idx[0..n).
 * pos[i] is sample i's position in the epoch's order (keys its augmentation draw); pos may be
 * NULL when aug is NULL or disabled. 28x28: random affine (rotation +-10 deg, translation +-10%,
 * bilinear, fill 0; also every other shape but 32x32). 32x32: random crop from zero padding 4
 * plus horizontal flip p=0.5. */
void dp_batch_fill(const dp_dataset *d, const int *idx, const int *pos, int n, const dp_augment *aug,
                   float *x, int32_t *y);
/* The normalisation dp_batch_fill applies without augmentation, as a table: sample value v of
 * channel ch becomes lut[ch * 256 + v] (c * 256 floats), for a device that gathers batches itself. */
void dp_dataset_norm_lut(const dp_dataset *d, float *lut);

#endif
