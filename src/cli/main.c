/* dptrain: the command-line entry point. The only place that turns a status into an exit
 * code: 0 success, 2 bad usage, 1 any failure at run time, 130 / 143 stopped by SIGINT / SIGTERM. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli/options.h"
#include "train/trainer.h"

/* OpenMP threads spin at barriers by default (libgomp: up to ~300k iterations). When another
 * process holds one of the cores, a spinning thread burns the time slice its partner needs,
 * and a 2-thread step on 2 cores ran 8x slower than on one thread. A short spin keeps the
 * quiet-machine speed and avoids that. libgomp reads its environment when it is loaded,
 * before main, so the setting takes a re-exec; a user's own setting is left alone. */
static void bound_openmp_spinning(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || getenv("DPTRAIN_REEXECED")) return;
    setenv("GOMP_SPINCOUNT", "10000", 1);
    setenv("DPTRAIN_REEXECED", "1", 1);
    execv("/proc/self/exe", argv);
    /* exec failed (no /proc): carry on with the defaults */
    unsetenv("GOMP_SPINCOUNT");
}

int main(int argc, char **argv) {
    bound_openmp_spinning(argv);
    dp_config cfg;
    dp_config_defaults(&cfg);
    dp_action action;
    dp_status s = dp_parse_args(argc, argv, &cfg, &action);
    if (s != DP_OK) {
        fprintf(stderr, "dptrain: %s\n", dp_last_error());
        return dp_exit_code(s);
    }
    if (action == DP_ACTION_HELP) {
        dp_print_usage(stdout);
        return 0;
    }
    if (action == DP_ACTION_VERSION) {
        dp_print_version(stdout);
        return 0;
    }
    cfg.argc = &argc;
    cfg.argv = &argv;
    dp_trainer *t = NULL;
    s = dp_trainer_create(&cfg, &t);
    if (s == DP_OK) s = dp_trainer_run(t);
    if (s != DP_OK) {
        fflush(stdout);
        fprintf(stderr, "dptrain: %s\n", dp_last_error());
        fflush(stderr);
    }
    /* a run stopped by SIGINT/SIGTERM (after its checkpoint) exits as the signal would have: 130 / 143 */
    int code = s == DP_OK && t && t->stop_signal ? 128 + t->stop_signal : dp_exit_code(s);
    /* after the message: a failed MPI run aborts the job here */
    if (t) dp_trainer_destroy(t);
    return code;
}
