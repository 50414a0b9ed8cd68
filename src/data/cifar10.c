/* cifar10.c: reads the CIFAR-10 "binary version": records of 1 label byte then 3072 pixel
 * bytes (the R, G and B planes of 32x32), data_batch_1..5.bin for training, test_batch.bin
 * for testing, in DIR or DIR/cifar-10-batches-bin (where the tarball unpacks). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/sysmem.h"
#include "data/dataset.h"

#define CIFAR_PIXELS 3072
#define CIFAR_RECORD (1 + CIFAR_PIXELS)
#define CIFAR_MAX_FILES 5

/* Anything by that name: a directory or FIFO there is then refused by name, not "not found". */
static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* Size of one batch file in records, refusing sizes that are not whole records. */
static dp_status file_records(const char *path, long long *records) {
    struct stat st;
    int fd;
    DP_TRY(dp_open_regular(path, NULL, &fd, &st)); /* a directory or FIFO fails by name */
    close(fd);
    long long size = (long long)st.st_size;
    if (size <= 0 || size % CIFAR_RECORD != 0)
        return dp_fail(DP_ERR_FORMAT,
                       "%s: size %lld bytes is not a non-zero multiple of %d (one record: 1 label byte + 3x32x32 "
                       "pixels); is this the CIFAR-10 binary version?", path, size, CIFAR_RECORD);
    *records = size / CIFAR_RECORD;
    return DP_OK;
}

/* Reads `records` records of one file into pixels/labels. */
static dp_status read_file(const char *path, long long records, uint8_t *pixels, uint8_t *labels) {
    struct stat st;
    FILE *f;
    DP_TRY(dp_fopen_regular(path, NULL, &f, &st));
    unsigned char rec[CIFAR_RECORD];
    dp_status s = DP_OK;
    for (long long r = 0; r < records; r++) {
        if (fread(rec, 1, sizeof rec, f) != sizeof rec) {
            s = ferror(f) ? dp_fail(DP_ERR_IO, "%s: read failed at byte offset %lld: %s", path, r * CIFAR_RECORD,
                                    strerror(errno))
                          : dp_fail(DP_ERR_FORMAT, "%s: truncated at byte offset %lld (the file shrank while read)",
                                    path, r * CIFAR_RECORD);
            break;
        }
        if (rec[0] > 9) {
            s = dp_fail(DP_ERR_FORMAT, "%s: byte offset %lld: label %u is out of range 0..9", path, r * CIFAR_RECORD,
                        (unsigned)rec[0]);
            break;
        }
        labels[r] = rec[0];
        memcpy(pixels + (size_t)r * CIFAR_PIXELS, rec + 1, CIFAR_PIXELS);
    }
    fclose(f);
    return s;
}

/* data_batch_1..5.bin and test_batch.bin, directly in the directory or in cifar-10-batches-bin */
int dp_cifar10_file_name(int i, char *buf, size_t cap) {
    if (i < 0 || i >= 2 * (CIFAR_MAX_FILES + 1)) return 0;
    const char *sub = i >= CIFAR_MAX_FILES + 1 ? "cifar-10-batches-bin/" : "";
    const int f = i % (CIFAR_MAX_FILES + 1);
    if (f < CIFAR_MAX_FILES) snprintf(buf, cap, "%sdata_batch_%d.bin", sub, f + 1);
    else snprintf(buf, cap, "%stest_batch.bin", sub);
    return 1;
}

static dp_status load(const char *dir, int train, dp_dataset *out) {
    const int nf = train ? CIFAR_MAX_FILES : 1;
    char names[CIFAR_MAX_FILES][32];
    for (int i = 0; i < nf; i++) {
        if (train)
            snprintf(names[i], sizeof names[i], "data_batch_%d.bin", i + 1);
        else
            snprintf(names[i], sizeof names[i], "test_batch.bin");
    }
    /* The directory holding the first file is where all of them must be. */
    char base[4096], path[CIFAR_MAX_FILES][4096 + 256];
    if (strlen(dir) > 4000) return dp_fail(DP_ERR_USAGE, "--data: directory name longer than 4000 bytes");
    snprintf(base, sizeof base, "%s", dir);
    snprintf(path[0], sizeof path[0], "%s/%s", base, names[0]);
    if (!is_file(path[0])) {
        snprintf(base, sizeof base, "%s/cifar-10-batches-bin", dir);
        snprintf(path[0], sizeof path[0], "%s/%s", base, names[0]);
        if (!is_file(path[0]))
            return dp_fail(DP_ERR_IO,
                           "%s: cannot find %s there nor in %s/cifar-10-batches-bin: download cifar-10-binary.tar.gz "
                           "from https://www.cs.toronto.edu/~kriz/cifar.html, unpack it and pass the directory with "
                           "--data", dir, names[0], dir);
    }
    long long records[CIFAR_MAX_FILES], total = 0;
    for (int i = 0; i < nf; i++) {
        snprintf(path[i], sizeof path[i], "%s/%s", base, names[i]);
        DP_TRY(file_records(path[i], &records[i]));
        total += records[i];
    }
    if (total > 100000000LL)
        return dp_fail(DP_ERR_FORMAT, "%s: %lld records in all: absurd for CIFAR-10", base, total);
    char what[4200];
    snprintf(what, sizeof what, "%s: %lld CIFAR-10 records", base, total);
    DP_TRY(dp_memory_check((unsigned long long)total * CIFAR_RECORD, what));
    DP_ALLOC(out->pixels, (size_t)total * CIFAR_PIXELS, "CIFAR-10 images");
    DP_ALLOC(out->labels, total, "CIFAR-10 labels");
    long long at = 0;
    for (int i = 0; i < nf; i++) {
        DP_TRY(read_file(path[i], records[i], out->pixels + (size_t)at * CIFAR_PIXELS, out->labels + at));
        at += records[i];
    }
    out->n = (int)total;
    return DP_OK;
}

dp_status dp_cifar10_load(const char *dir, int train, dp_dataset *out) {
    memset(out, 0, sizeof *out);
    dp_status s = load(dir, train, out);
    if (s != DP_OK) {
        free(out->pixels), free(out->labels);
        memset(out, 0, sizeof *out);
        return s;
    }
    snprintf(out->name, sizeof out->name, "cifar10");
    out->c = 3, out->h = 32, out->w = 32, out->n_classes = 10;
    for (int ch = 0; ch < 3; ch++) out->mean[ch] = 0.0f, out->std[ch] = 1.0f; /* dataset.c sets the real ones */
    return DP_OK;
}
