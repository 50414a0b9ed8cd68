/* The start-time memory check of a run whose replicas live on a device: arenas and activations
 * against the device's free memory (named in the message), the data and loader against the
 * host's; without a GPU, with synthetic figures. And NCCL's allowance in the device's reserve
 * (backends/nccl_memory.h), with its NVLS default. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "backends/nccl_memory.h"

#include "core/status.h"
#include "exec/memory.h"

static void test_device_check(void **state) {
    (void)state;
    dp_mem_estimate e = {.data = 1000, .arenas = 4ull << 20, .acts = 60ull << 20, .loader = 1000};
    e.total = e.data + 2 * (e.arenas + e.acts) + e.loader;
    dp_mem_shape sh = {.n_local = 2, .n_lanes = 8, .n_slots = 8, .lane_batch = 8, .max_local = 32, .loader_slots = 1};
    /* 2 x 64 MiB + 16 MiB reserved fits in 1 GiB */
    assert_int_equal(dp_check_device_memory(&e, &sh, 1, 1ull << 30, 16ull << 20, "GPU X"), DP_OK);
    /* not in 100 MiB: refused, naming the device and what is free there */
    assert_int_equal(dp_check_device_memory(&e, &sh, 1, 100ull << 20, 16ull << 20, "GPU X"), DP_ERR_NOMEM);
    const char *msg = dp_last_error();
    if (!strstr(msg, "on GPU X") || !strstr(msg, "free there") || !strstr(msg, "2 replicas"))
        fail_msg("message: %s", msg);
    /* the reserved workspaces count: 2 x 64 MiB fits in 200 MiB, not with 100 MiB reserved */
    assert_int_equal(dp_check_device_memory(&e, &sh, 1, 200ull << 20, 0, "GPU X"), DP_OK);
    assert_int_equal(dp_check_device_memory(&e, &sh, 1, 200ull << 20, 100ull << 20, "GPU X"), DP_ERR_NOMEM);
}

static void test_nccl_allowance(void **state) {
    (void)state;
    unsigned long long a = 1;
    assert_int_equal(dp_nccl_allowance(1, 0, NULL, &a), DP_OK);
    assert_true(a == 0); /* one rank: no peer, nothing allocated later */
    assert_int_equal(dp_nccl_allowance(2, 0, NULL, &a), DP_OK);
    assert_true(a == 528ull << 20);
    assert_int_equal(dp_nccl_allowance(8, 0, "", &a), DP_OK);
    assert_true(a == 624ull << 20);
    assert_int_equal(dp_nccl_allowance(8, 1, NULL, &a), DP_OK);
    assert_true(a == (624ull + 1024) << 20); /* NVLS on: its buffers too */
    assert_int_equal(dp_nccl_allowance(8, 1, "300", &a), DP_OK);
    assert_true(a == 300ull << 20);
    assert_int_equal(dp_nccl_allowance(1, 0, "0", &a), DP_OK);
    assert_true(a == 0);
    const char *bad[] = {"12x", "-3", "1.5", " ", " 300", "300 ", "+300", "0x100"};
    for (int i = 0; i < 8; i++) {
        assert_int_equal(dp_nccl_allowance(2, 0, bad[i], &a), DP_ERR_USAGE);
        if (!strstr(dp_last_error(), "DPTRAIN_NCCL_RESERVE_MIB")) fail_msg("message: %s", dp_last_error());
    }
    /* measured at the warm-up: that again plus the margin (plus NVLS), nothing at one rank, the override first */
    assert_int_equal(dp_nccl_allowance_measured(1, 0, 100ull << 20, NULL, &a), DP_OK);
    assert_true(a == 0);
    assert_int_equal(dp_nccl_allowance_measured(4, 0, 100ull << 20, NULL, &a), DP_OK);
    assert_true(a == (100ull + DP_NCCL_MARGIN_MIB) << 20);
    assert_int_equal(dp_nccl_allowance_measured(4, 1, 100ull << 20, "", &a), DP_OK);
    assert_true(a == (100ull + DP_NCCL_MARGIN_MIB + 1024) << 20);
    assert_int_equal(dp_nccl_allowance_measured(4, 0, 100ull << 20, "300", &a), DP_OK);
    assert_true(a == 300ull << 20);
    assert_int_equal(dp_nccl_allowance_measured(4, 0, 0, "12x", &a), DP_ERR_USAGE);
    /* a run that fits beside the CUDA device's 256 MiB reserve, but not beside NCCL's buffers at 8 ranks */
    dp_mem_estimate e = {.data = 1000, .arenas = 4ull << 20, .acts = 60ull << 20, .loader = 1000};
    e.total = e.data + e.arenas + e.acts + e.loader;
    dp_mem_shape sh = {.n_local = 1, .n_lanes = 8, .n_slots = 8, .lane_batch = 8, .max_local = 32, .loader_slots = 1};
    assert_int_equal(dp_nccl_allowance(8, 0, NULL, &a), DP_OK);
    assert_int_equal(dp_check_device_memory(&e, &sh, 1, 900ull << 20, 256ull << 20, "GPU X"), DP_OK);
    assert_int_equal(dp_check_device_memory(&e, &sh, 1, 900ull << 20, (256ull << 20) + a, "GPU X"), DP_ERR_NOMEM);
}

static void test_nccl_nvls_default(void **state) {
    (void)state;
    const char *had = getenv("NCCL_NVLS_ENABLE");
    char *saved = had ? strdup(had) : NULL;
    unsetenv("NCCL_NVLS_ENABLE");
    assert_int_equal(dp_nccl_env_defaults(), 0); /* unset: turned off */
    assert_string_equal(getenv("NCCL_NVLS_ENABLE"), "0");
    setenv("NCCL_NVLS_ENABLE", "1", 1);
    assert_int_equal(dp_nccl_env_defaults(), 1); /* the user's choice stands */
    assert_string_equal(getenv("NCCL_NVLS_ENABLE"), "1");
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    assert_int_equal(dp_nccl_env_defaults(), 0);
    if (saved) setenv("NCCL_NVLS_ENABLE", saved, 1), free(saved);
    else unsetenv("NCCL_NVLS_ENABLE");
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_device_check), cmocka_unit_test(test_nccl_allowance),
                                       cmocka_unit_test(test_nccl_nvls_default)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
