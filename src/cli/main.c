/* dptrain: the command-line entry point. The only place that turns a status into an exit
 * code: 0 success, 2 bad usage, 1 any failure at run time, 130 / 143 stopped by SIGINT / SIGTERM. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend_kind.h"
#include "backends/launch_env.h"
#include "cli/options.h"
#include "cli/test_hooks.h"
#include "sim/predict.h"
#include "train/trainer.h"

/* OpenMP threads spin at barriers and between parallel regions (libgomp: 300000 iterations by
 * default). When another process holds one of the cores, a spinning thread burns the time slice
 * its partner needs; too short a spin puts the idle thread to sleep between the step's parallel
 * regions, and each region then pays a wake-up. 3000 is within 2% of the best on a quiet machine
 * and 1.3x faster than 10000 beside a busy process (docs/design.md). libgomp reads it once, in its own constructor; the build
 * links libgomp statically (CMakeLists.txt), so that constructor is in this executable's
 * .init_array and runs after this one (priority 101 goes first). With libgomp.so a constructor
 * here would run too late (shared libraries are initialised first), and a .preinit_array entry
 * too early (libc's initialiser then resets environ), which is why an earlier version
 * re-executed itself. A user's own setting is left alone. */
__attribute__((constructor(101))) static void bound_openmp_spinning(void) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    setenv("GOMP_SPINCOUNT", "3000", 1);
}

int main(int argc, char **argv) {
    /* a closed stdout (`dptrain | head`, a dead mpirun forwarder) is an EPIPE the reporter
     * turns into a message and a clean stop, not a silent kill */
    signal(SIGPIPE, SIG_IGN);
    dp_config cfg;
    dp_config_defaults(&cfg);
    dp_action action;
    dp_status s = dp_parse_args(argc, argv, &cfg, &action);
    if (s == DP_OK && action == DP_ACTION_RUN) s = dp_test_hooks_from_env(&cfg.test);
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
    /* before anything runs: a launch of N processes that this backend does not join would be N
       separate trainings writing the same files */
    dp_launch launch;
    s = dp_launch_from_env(&launch);
    if (s == DP_OK) s = dp_launch_check(&launch, dp_backend_kind_find(cfg.backend), dp_mpi_family_built());
    if (s != DP_OK) {
        fprintf(stderr, "dptrain: %s\n", dp_last_error());
        return dp_exit_code(s);
    }
    cfg.argc = &argc;
    cfg.argv = &argv;
    if (cfg.calibrate) return dp_exit_code(dp_predict_calibrate(&cfg));
    /* --predict / --save-profile / --compute: the overhead model after the run, or instead of one;
       its files are checked before any data is read (a typo must not cost the loading, let alone
       the training run), on the rank that will run it */
    if (launch.rank == 0) s = dp_predict_precheck(&cfg);
    if (s != DP_OK) {
        fprintf(stderr, "dptrain: %s\n", dp_last_error());
        return dp_exit_code(s);
    }
    if (cfg.predict_only && cfg.compute_profile) { /* nothing to time: no trainer */
        s = dp_predict_from_profile(&cfg);
        if (s != DP_OK) fprintf(stderr, "dptrain: %s\n", dp_last_error());
        return dp_exit_code(s);
    }
    dp_trainer *t = NULL;
    s = dp_trainer_create(&cfg, &t);
    if (s == DP_OK) {
        const int model = dp_trainer_holds_rank0(t);
        s = dp_trainer_train(t);
        if (s == DP_OK && model && !t->stop_signal) s = dp_predict_run(t);
        s = dp_trainer_close(t, s);
    }
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
