/* dptrain: the command-line entry point. The only place that turns a status into an exit
 * code: 0 success, 2 bad usage, 1 any failure at run time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/options.h"
#include "sim/calibrate.h"
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

/* `dptrain calibrate`: the backend's all-reduce sweep, a topology file for the model. */
static int calibrate(const dp_config *c) {
    dp_backend_config bc = {.name = c->backend, .replicas = c->replicas, .nthreads = c->threads > 0 ? c->threads : 1,
                            .algorithm = c->allreduce_algo, .timeout_s = c->timeout_s, .argc = c->argc,
                            .argv = c->argv};
    dp_backend_t b = NULL;
    dp_status s = dp_backend_create(&bc, &b);
    if (s == DP_OK) s = dp_calibrate(b, strcmp(c->backend, "sim") == 0 ? "sim" : "host", c->calibrate_out, stdout);
    if (s != DP_OK) {
        fprintf(stderr, "dptrain: %s\n", dp_last_error());
        if (b) b->failed = 1;
    }
    dp_backend_destroy(b);
    return dp_exit_code(s);
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
    if (cfg.calibrate) return calibrate(&cfg);
    dp_trainer *t = NULL;
    s = dp_trainer_create(&cfg, &t);
    if (s == DP_OK) s = dp_trainer_run(t);
    if (s != DP_OK) {
        fflush(stdout);
        fprintf(stderr, "dptrain: %s\n", dp_last_error());
        fflush(stderr);
    }
    /* after the message: a failed MPI run aborts the job here */
    if (t) dp_trainer_destroy(t);
    return dp_exit_code(s);
}
