/* test_hooks.c: the tests' fault injections from the environment (test_hooks.h). */
#include "cli/test_hooks.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/parse_num.h"
#include "core/printable.h"

/* every hook is a whole number in [0, hi], read with the strict parser like a flag's value */
typedef struct {
    const char *env, *noun;
    long long hi;
} hook;

static dp_status read_hook(const hook *k, long long *v) {
    const char *s = getenv(k->env);
    char shown[64];
    *v = 0;
    if (s && (dp_parse_ll(s, v) != 0 || *v < 0 || *v > k->hi))
        return dp_fail(DP_ERR_USAGE, "%s='%s' is not %s (a test setting; unset it)", k->env,
                       dp_printable(s, shown, sizeof shown), k->noun);
    return DP_OK;
}

dp_status dp_test_hooks_from_env(dp_test_hooks *h) {
    static const hook hooks[] = {
        {"DPTRAIN_INJECT_NAN_STEP", "a step number", LONG_MAX},
        {"DPTRAIN_INJECT_INF_GRAD_STEP", "a step number", LONG_MAX},
        {"DPTRAIN_INJECT_SIGNAL_FINAL_EVAL", "a signal number", 64},
        {"DPTRAIN_INJECT_SIGTERM_STEP", "a step number", LONG_MAX},
        /* floats of a buffer: at most what an address space of 2^48 bytes holds */
        {"DPTRAIN_TEST_RESERVE_FLOATS", "a number of floats", 1LL << 46},
    };
    long long v[sizeof hooks / sizeof *hooks];
    for (size_t i = 0; i < sizeof hooks / sizeof *hooks; i++) DP_TRY(read_hook(&hooks[i], &v[i]));
    h->nan_step = (long)v[0];
    h->inf_grad_step = (long)v[1];
    h->eval_signal = (int)v[2];
    h->sigterm_step = (long)v[3];
    h->reserve_floats = (size_t)v[4];
    return DP_OK;
}
