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

/* Reads and checks path as strictly as the reference reader: header length, then the header alone
 * (JSON with nothing after it but padding spaces, one __metadata__ of strings, unique names, F32 or
 * I64, whole-number shapes and offsets, the tensors tiling the data exactly), and only then, when
 * the memory is there, the data and its CRC when the file carries one. A crafted or huge file is
 * refused before its data is read. Every failure names the file. */
dp_status dp_st_read(const char *path, dp_st_file *out);
void dp_st_free(dp_st_file *f);
/* The tensor called name, or NULL (a binary search). */
const dp_st_tensor *dp_st_find(const dp_st_file *f, const char *name);
/* A metadata string, or NULL if absent. */
const char *dp_st_meta_get(const dp_st_file *f, const char *key);

#endif
