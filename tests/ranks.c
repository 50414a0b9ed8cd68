/* ranks.c: the multi-rank launch harness (ranks.h). */
#include "ranks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "testutil.h"

const char *rk_double(void) {
    const char *p = getenv("DP_NCCL_DOUBLE");
    assert_non_null(p);
    return p;
}

double rk_run(const rk_launch *l, int codes[], const char *args_fmt, ...) {
    char args[2048], cmd[16384];
    va_list ap;
    va_start(ap, args_fmt);
    vsnprintf(args, sizeof args, args_fmt, ap);
    va_end(ap);
    const int port = tu_free_port();
    size_t n = (size_t)snprintf(cmd, sizeof cmd, "mkdir -p %s && cd %s || exit 1; pids=; ", l->dir, l->dir);
    for (int p = 0; p < l->n && n < sizeof cmd; p++)
        n += (size_t)snprintf(cmd + n, sizeof cmd - n,
                              "RANK=%d WORLD_SIZE=%d LOCAL_RANK=%d LOCAL_WORLD_SIZE=%d MASTER_ADDR=127.0.0.1 "
                              "MASTER_PORT=%d LD_PRELOAD=%s ASAN_OPTIONS=verify_asan_link_order=0:$ASAN_OPTIONS %s%s "
                              "%s timeout -s KILL %d %s %s %s > %s%d.log 2>&1 & pids=\"$pids $!\"; ",
                              p, l->n, p, l->n, port, rk_double(), l->fault ? "DP_NCCL_DOUBLE_FAULT=" : "",
                              l->fault ? l->fault : "", l->env ? l->env : "", l->timeout_s, getenv("DPTRAIN"), args,
                              l->each ? l->each[p] : "", l->log, p);
    assert_true(n < sizeof cmd);
    snprintf(cmd + n, sizeof cmd - n, "p=0; for q in $pids; do wait $q; echo \"exit $p $?\"; p=$((p+1)); done");
    char *out = NULL;
    const double t0 = dp_now();
    tu_sh(&out, "%s", cmd);
    const double took = dp_now() - t0;
    for (int p = 0; p < l->n; p++) {
        char key[32];
        snprintf(key, sizeof key, "exit %d ", p);
        const char *at = out ? strstr(out, key) : NULL;
        codes[p] = at ? atoi(at + strlen(key)) : -1;
    }
    free(out);
    return took;
}

char *rk_log(const char *dir, const char *log, int p) {
    char *out = NULL;
    tu_sh(&out, "cat %s/%s%d.log", dir, log, p);
    return out;
}

void rk_expect_all_ok(const rk_launch *l, const int codes[]) {
    int bad = 0;
    for (int p = 0; p < l->n; p++) bad |= codes[p] != 0;
    for (int p = 0; p < l->n && bad; p++) {
        char *log = rk_log(l->dir, l->log, p);
        fprintf(stderr, "%s %d of %d exited %d:\n%s\n", l->log, p, l->n, codes[p], log ? log : "");
        free(log);
    }
    assert_false(bad);
}

void rk_expect_equal_to_sim(const char *dir, const char *what, const char *sim_args_fmt, ...) {
    char args[2048];
    va_list ap;
    va_start(ap, sim_args_fmt);
    vsnprintf(args, sizeof args, sim_args_fmt, ap);
    va_end(ap);
    char *out = NULL;
    const int rc = tu_run_dptrain(&out, "train --backend sim %s --save %s/sim.ckpt", args, dir);
    if (rc != 0) fail_msg("%s: the sim (%s): exit %d:\n%s", what, args, rc, out ? out : "");
    free(out);
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/nccl.ckpt", dir), snprintf(b, sizeof b, "%s/sim.ckpt", dir);
    const char *diff = tu_ckpt_diff(a, b);
    if (diff) fail_msg("%s against the sim (%s): %s", what, args, diff);
}
