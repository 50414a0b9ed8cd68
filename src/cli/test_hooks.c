/* test_hooks.c: the tests' fault injections from the environment (test_hooks.h). */
#include "cli/test_hooks.h"

#include <limits.h>
#include <stdlib.h>

#include "core/parse_num.h"
#include "core/printable.h"

dp_status dp_test_hooks_from_env(dp_test_hooks *h) {
    const char *inj = getenv("DPTRAIN_INJECT_NAN_STEP"), *inf = getenv("DPTRAIN_INJECT_INF_GRAD_STEP");
    const char *sig = getenv("DPTRAIN_INJECT_SIGNAL_FINAL_EVAL"), *res = getenv("DPTRAIN_TEST_RESERVE_FLOATS");
    const char *term = getenv("DPTRAIN_INJECT_SIGTERM_STEP");
    long long step = 0, inf_step = 0, signo = 0, term_step = 0;
    char shown[64];
    if (inj && (dp_parse_ll(inj, &step) != 0 || step < 0 || step > LONG_MAX))
        return dp_fail(DP_ERR_USAGE, "DPTRAIN_INJECT_NAN_STEP='%s' is not a step number",
                       dp_printable(inj, shown, sizeof shown));
    if (inf && (dp_parse_ll(inf, &inf_step) != 0 || inf_step < 0 || inf_step > LONG_MAX))
        return dp_fail(DP_ERR_USAGE, "DPTRAIN_INJECT_INF_GRAD_STEP='%s' is not a step number",
                       dp_printable(inf, shown, sizeof shown));
    if (term && (dp_parse_ll(term, &term_step) != 0 || term_step < 0 || term_step > LONG_MAX))
        return dp_fail(DP_ERR_USAGE, "DPTRAIN_INJECT_SIGTERM_STEP='%s' is not a step number",
                       dp_printable(term, shown, sizeof shown));
    if (sig && (dp_parse_ll(sig, &signo) != 0 || signo < 0 || signo > 64))
        return dp_fail(DP_ERR_USAGE, "DPTRAIN_INJECT_SIGNAL_FINAL_EVAL='%s' is not a signal number",
                       dp_printable(sig, shown, sizeof shown));
    h->nan_step = (long)step;
    h->inf_grad_step = (long)inf_step;
    h->eval_signal = (int)signo;
    h->sigterm_step = (long)term_step;
    h->reserve_floats = res ? strtoul(res, NULL, 10) : 0;
    return DP_OK;
}
