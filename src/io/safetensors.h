/* safetensors.h: the safetensors container (https://github.com/huggingface/safetensors):
 * 8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets}, ...,
 * "__metadata__": {string: string}}, then the raw little-endian tensor bytes. The JSON is
 * written and parsed with cJSON. This module knows nothing about models or training. */
#ifndef DP_SAFETENSORS_H
#define DP_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/status.h"

#define DP_ST_MAX_DIMS 8

typedef enum { DP_ST_F32 = 0, DP_ST_I64 = 1 } dp_st_dtype;

typedef struct {
    char name[96];
    dp_st_dtype dtype;
    int ndim;
    int64_t shape[DP_ST_MAX_DIMS];
    const void *data;       /* writer: the bytes to write; reader: points into the file's buffer */
    size_t nbytes;
} dp_st_tensor;

typedef struct {
    const char *key, *value;
    const char *absent; /* a resume's expected setting only: the value a file without the key was written
                           with (a setting added after the file's version), NULL: the key must be there */
} dp_st_meta;

/* Writes a whole file to f. The data section's CRC-32 is added to the metadata as
 * "dptrain.data_crc32" so that a reader can tell a flipped byte. Fails naming `what`. */
dp_status dp_st_write(FILE *f, const char *what, const dp_st_tensor *t, int n, const dp_st_meta *meta, int n_meta);

/* The header's own CRC-32 (metadata "dptrain.header_crc32", 8 hex digits): over the 8 length bytes
 * and the header with those 8 digits taken as "00000000", so that a damaged header that still parses
 * (a changed name or shape) is told from a file of another model. Files without it are read as before. */
#define DP_ST_HEADER_CRC_KEY "dptrain.header_crc32"
/* The 8 digits' place in the header text of n bytes: the one occurrence of
 * "dptrain.header_crc32":"XXXXXXXX", or NULL when there is none or more than one. */
char *dp_st_header_crc_slot(const char *hdr, size_t n);
/* The CRC of head (the 8 length bytes, then the header; n bytes in all), the slot read as zeros. */
uint32_t dp_st_header_crc(const unsigned char *head, size_t n);

/* A parsed file, held in memory. */
typedef struct {
    unsigned char *buf;     /* the whole file */
    size_t size;
    dp_st_tensor *tensors;
    int n;
    void *meta_json;        /* cJSON object of __metadata__ (may be NULL) */
    void *root;             /* the whole header */
    int *by_name;           /* tensor indices sorted by name, for dp_st_find */
} dp_st_file;

/* What a header may hold, judged on its raw bytes before it is parsed (io/safetensors_scan.h): the
 * parse allocates per JSON value, so a header's cost is bounded by its entries, its nesting and
 * its bytes per tensor. A valid tensor entry has 14 values and under 1 KiB; dptrain writes about
 * 50 metadata keys. */
#define DP_ST_MAX_DEPTH 3              /* the root, a tensor's object, its shape or offsets */
#define DP_ST_MAX_ENTRY_BYTES 4096     /* one tensor's "name":{...} */
#define DP_ST_MAX_ENTRY_VALUES 32      /* JSON values in one tensor's entry */
#define DP_ST_MAX_META_KEYS 4096
#define DP_ST_MAX_META_BYTES (1u << 20)
#define DP_ST_MAX_TENSORS (1L << 17)   /* without a model to size it by */

typedef struct {
    long max_tensors;   /* 0: DP_ST_MAX_TENSORS */
    const char *why;    /* for messages: whose limit it is ("model lenet: its 10 tensors, ..."); NULL: this reader's */
} dp_st_limits;

/* Reads and checks path as strictly as the reference reader: header length, then the header alone
 * (JSON with nothing after it but padding spaces, one __metadata__ of strings, unique names, F32 or
 * I64, whole-number shapes and offsets, the tensors tiling the data exactly), and only then, when
 * the memory is there, the data and its CRC when the file carries one. A crafted or huge file is
 * refused before its data is read, and a header beyond the limits below before it is parsed (the
 * parse's cost counted in the memory check). No string may hold \u0000. Every failure names the file. */
dp_status dp_st_read(const char *path, dp_st_file *out);
/* The same with the header's limits given: a reader that knows the model sizes them by it, so
 * that a header far bigger than the model's is refused from its length alone. */
dp_status dp_st_read_limited(const char *path, const dp_st_limits *lim, dp_st_file *out);
void dp_st_free(dp_st_file *f);
/* The tensor called name, or NULL (a binary search). */
const dp_st_tensor *dp_st_find(const dp_st_file *f, const char *name);
/* A metadata string, or NULL if absent. */
const char *dp_st_meta_get(const dp_st_file *f, const char *key);

#endif
