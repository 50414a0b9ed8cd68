/* test_hooks.h: the tests' fault injections (train/config.h: dp_test_hooks), read from the
 * environment by the command line only, so that the trainer reads no test variable itself. */
#ifndef DP_CLI_TEST_HOOKS_H
#define DP_CLI_TEST_HOOKS_H

#include "train/config.h"

/* Fills h from DPTRAIN_INJECT_NAN_STEP, DPTRAIN_INJECT_INF_GRAD_STEP, DPTRAIN_INJECT_SIGNAL_FINAL_EVAL,
 * DPTRAIN_INJECT_SIGTERM_STEP and DPTRAIN_TEST_RESERVE_FLOATS, read as any number a user types (core/parse_num.h); a malformed
 * one is DP_ERR_USAGE naming the variable. */
dp_status dp_test_hooks_from_env(dp_test_hooks *h);

#endif
