/* nccl_memory.c: NCCL's allowance in the device reserve, and its NVLS default (nccl_memory.h). */
#include "backends/nccl_memory.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/printable.h"
#include "core/parse_num.h"

int dp_nccl_env_defaults(void) {
    const char *v = getenv("NCCL_NVLS_ENABLE");
    if (!v) {
        setenv("NCCL_NVLS_ENABLE", "0", 0);
        return 0;
    }
    return strcmp(v, "0") != 0;
}

dp_status dp_nccl_allowance(int world, int nvls, const char *override_mib, unsigned long long *bytes) {
    *bytes = 0;
    if (override_mib && *override_mib) {
        long long mib = 0;
        char shown[64];
        if (dp_parse_ll(override_mib, &mib) != 0 || mib < 0 || mib > (1ll << 30))
            return dp_fail(DP_ERR_USAGE, "DPTRAIN_NCCL_RESERVE_MIB='%s' is not a whole number of MiB (NCCL's device "
                           "memory besides the run's, e.g. 1024)", dp_printable(override_mib, shown, sizeof shown));
        *bytes = (unsigned long long)mib << 20;
        return DP_OK;
    }
    if (world <= 1) return DP_OK;
    const unsigned long long mib = 512ull + 16ull * (unsigned long long)(world - 1) + (nvls ? 1024ull : 0);
    *bytes = mib << 20;
    return DP_OK;
}

dp_status dp_nccl_allowance_measured(int world, int nvls, unsigned long long measured, const char *override_mib,
                                     unsigned long long *bytes) {
    if (override_mib && *override_mib) return dp_nccl_allowance(world, nvls, override_mib, bytes);
    *bytes = 0;
    if (world <= 1) return DP_OK;
    *bytes = measured + (DP_NCCL_MARGIN_MIB << 20) + (nvls ? 1024ull << 20 : 0);
    return DP_OK;
}
