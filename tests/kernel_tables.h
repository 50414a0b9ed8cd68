/* kernel_tables.h: whether a kernel table fills every entry of kernels/kernels.def (the CPU's,
 * the recorder's and the fake GPU's in test_fakegpu_kernels, the CUDA one in test_cuda_kernels),
 * and whether kcall.h names each record kind as its entry. */
#ifndef DP_TEST_KERNEL_TABLES_H
#define DP_TEST_KERNEL_TABLES_H

#include <stdio.h>
#include <string.h>

#include "kernels/kcall.h"
#include "kernels/kernels.h"

/* The entries of k that are NULL, each named on stderr; 0 when the table is complete. */
static inline int kernel_table_missing(const dp_kernels *k) {
    int missing = !k->device;
#define DP_KERNEL_ENTRY_(name)                                                                                     \
    if (!k->name) fprintf(stderr, "kernel table %s: entry " #name " is NULL\n", k->device), missing++;
#define DP_KERNEL_SIZE(name, params, args) DP_KERNEL_ENTRY_(name)
#define DP_KERNEL_LAYER(name, KIND, items) DP_KERNEL_ENTRY_(name)
#define DP_KERNEL_CALL(name, KIND, items) DP_KERNEL_ENTRY_(name)
#define DP_KERNEL_OWN(name, params) DP_KERNEL_ENTRY_(name)
#include "kernels/kernels.def"
#undef DP_KERNEL_ENTRY_
    return missing;
}

/* The record kinds whose name (dp_kcall_name) is not their entry's; 0 when all are. */
static inline int kernel_kind_names_wrong(void) {
    int wrong = 0;
#define DP_KERNEL_SIZE(name, params, args)
#define DP_KERNEL_LAYER(name, KIND, items)                                                                         \
    if (strcmp(dp_kcall_name(DP_KC_##KIND), #name) != 0)                                                           \
        fprintf(stderr, "kind DP_KC_" #KIND " is named %s\n", dp_kcall_name(DP_KC_##KIND)), wrong++;
#define DP_KERNEL_CALL(name, KIND, items) DP_KERNEL_LAYER(name, KIND, items)
#define DP_KERNEL_OWN(name, params)
#include "kernels/kernels.def"
    return wrong;
}

#endif
