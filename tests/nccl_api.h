/* nccl_api.h: the NCCL test double (tests/nccl_double/) called directly, through dlopen of
 * $DP_NCCL_DOUBLE (ranks.h: rk_double), by the suites that test the double itself (test_nccl_double,
 * test_nccl_gpus): the calls they make, looked up once. Include after <nccl.h> and testutil.h. */
#ifndef DP_TEST_NCCL_API_H
#define DP_TEST_NCCL_API_H

#include <dlfcn.h>

#include "ranks.h"

typedef struct {
    void *h; /* dlclose when done */
    ncclResult_t (*get_id)(ncclUniqueId *);
    ncclResult_t (*init)(ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *);
    ncclResult_t (*async_error)(ncclComm_t, ncclResult_t *);
    const char *(*last_error)(ncclComm_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
    ncclResult_t (*bcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*allgather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*allreduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*destroy)(ncclComm_t);
} rk_nccl_api;

/* The double's calls; fails the test if it or any call is missing. */
static inline rk_nccl_api rk_nccl_load(void) {
    rk_nccl_api a;
    a.h = dlopen(rk_double(), RTLD_NOW | RTLD_LOCAL);
    assert_non_null(a.h);
    *(void **)&a.get_id = dlsym(a.h, "ncclGetUniqueId");
    *(void **)&a.init = dlsym(a.h, "ncclCommInitRankConfig");
    *(void **)&a.async_error = dlsym(a.h, "ncclCommGetAsyncError");
    *(void **)&a.last_error = dlsym(a.h, "ncclGetLastError");
    *(void **)&a.group_start = dlsym(a.h, "ncclGroupStart");
    *(void **)&a.group_end = dlsym(a.h, "ncclGroupEnd");
    *(void **)&a.bcast = dlsym(a.h, "ncclBroadcast");
    *(void **)&a.allgather = dlsym(a.h, "ncclAllGather");
    *(void **)&a.allreduce = dlsym(a.h, "ncclAllReduce");
    *(void **)&a.destroy = dlsym(a.h, "ncclCommDestroy");
    assert_true(a.get_id && a.init && a.async_error && a.last_error && a.group_start && a.group_end && a.bcast &&
                a.allgather && a.allreduce && a.destroy);
    return a;
}

#endif
