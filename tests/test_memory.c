/* The start-time memory check of a run whose replicas live on a device: arenas and activations
 * against the device's free memory (named in the message), the data and loader against the
 * host's; without a GPU, with synthetic figures. */
#include "testutil.h"

#include <string.h>

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

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_device_check)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
