/* nccl_precheck.c: what the trainer asks the NCCL backend before it opens a GPU (nccl.h): which
 * GPU a process of a launch drives, whether the GPUs --gpus lists are there, and whether the NCCL
 * loaded is the test double (which moves host memory and says how many GPUs it pretends to have). */
#include "dp_config.h"

#if DP_HAVE_NCCL

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/launch_env.h"
#include "backends/nccl.h"
#include "core/printable.h"

/* The test double's symbols, which real NCCL does not have (dptrain's own names differ from them, so
 * that these lookups cannot find dptrain's functions). Looked up once: a preloaded library does not
 * come or go while the process runs. */
static dp_nccl_which loaded;
static pthread_once_t loaded_once = PTHREAD_ONCE_INIT;

static void look_up(void) {
    int (*host)(void) = NULL, (*gpus)(void) = NULL;
    *(void **)&host = dlsym(RTLD_DEFAULT, "dp_nccl_double_host_memory");
    *(void **)&gpus = dlsym(RTLD_DEFAULT, "dp_nccl_double_gpu_count");
    loaded.is_double = host != NULL;
    loaded.host_memory = host && host();
    loaded.gpus = gpus ? gpus() : -1;
}

const dp_nccl_which *dp_nccl_loaded(void) {
    pthread_once(&loaded_once, look_up);
    return &loaded;
}

dp_status dp_nccl_precheck(int *gpu) {
    dp_launch l;
    DP_TRY(dp_launch_from_env(&l));
    /* the test double: its ranks move host memory, or stage CUDA memory through it, so every rank
       may share --gpu's device (0 unless given), which real NCCL refuses */
    if (dp_nccl_loaded()->host_memory) {
        if (*gpu < 0) *gpu = 0;
        return DP_OK;
    }
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    char shown[96];
    if (e != cudaSuccess || n < 1)
        return dp_fail(DP_ERR_BACKEND, "--backend nccl: rank %d: no usable CUDA device (%s; CUDA_VISIBLE_DEVICES%s%s)",
                       l.rank, e != cudaSuccess ? cudaGetErrorString(e) : "0 devices", visible ? "=" : " unset",
                       visible ? dp_printable(visible, shown, sizeof shown) : "");
    return dp_launch_pick_gpu(&l, n, visible, gpu);
}

dp_status dp_nccl_precheck_gpus(const int *gpus, int n) {
    dp_launch l;
    DP_TRY(dp_launch_from_env(&l));
    char list[128] = "";
    for (int i = 0; i < n; i++) {
        const size_t at = strlen(list);
        snprintf(list + at, sizeof list - at, "%s%d", i ? "," : "", gpus[i]);
    }
    int have = 0;
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    char where[160], shown[96];
    if (visible) visible = dp_printable(visible, shown, sizeof shown); /* the messages quote it */
    if (dp_nccl_loaded()->host_memory) {
        have = dp_nccl_loaded()->gpus;
        snprintf(where, sizeof where, "the NCCL test double says this machine has %d GPU%s (DP_NCCL_DOUBLE_GPUS)", have,
                 have == 1 ? "" : "s");
    } else {
        cudaError_t e = cudaGetDeviceCount(&have);
        if (e != cudaSuccess || have < 1)
            return dp_fail(DP_ERR_BACKEND, "--gpus %s: no usable CUDA device (%s; CUDA_VISIBLE_DEVICES%s%s)", list,
                           e != cudaSuccess ? cudaGetErrorString(e) : "0 devices", visible ? "=" : " unset",
                           visible ? visible : "");
        DP_TRY(dp_launch_check_gpus(&l, list, visible));
        snprintf(where, sizeof where, "this machine has %d CUDA device%s%s%s%s", have, have == 1 ? "" : "s",
                 visible ? " (CUDA_VISIBLE_DEVICES=" : "", visible ? visible : "", visible ? ")" : "");
    }
    for (int i = 0; i < n; i++)
        if (gpus[i] >= have)
            return dp_fail(DP_ERR_USAGE, "--gpus %s: there is no GPU %d: %s (ordinals 0..%d)", list, gpus[i], where,
                           have - 1);
    return DP_OK;
}

#endif
