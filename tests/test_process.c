/* The process as tools see it: no re-execution through /proc/self/exe, so the process is named
 * dptrain (ps, top, pgrep, core files), valgrind can run the binary, and the OpenMP spin bound
 * still reaches libgomp (OMP_DISPLAY_ENV shows it) while a user's own setting wins. */
#include "testutil.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *bin(void) {
    const char *b = getenv("DPTRAIN");
    return b ? b : "./dptrain";
}

static void test_comm_is_dptrain(void **state) {
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout)) _exit(126);
        execl(bin(), bin(), "train", "--dataset", "synthetic", "--shape", "1x28x28", "--samples", "100000", "--epochs",
              "50", "--threads", "1", "--workers", "0", "--no-progress", (char *)NULL);
        _exit(127);
    }
    char path[64], comm[64] = "", exe[4096] = "";
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    /* a re-exec would change comm to "exe" within the first milliseconds: look for a while */
    for (int i = 0; i < 20; i++) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        FILE *f = fopen(path, "r");
        if (!f) break;
        if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = '\0';
        fclose(f);
        if (strcmp(comm, "dptrain") != 0) break;
    }
    snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(path, exe, sizeof exe - 1);
    if (n > 0) exe[n] = '\0';
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    assert_string_equal(comm, "dptrain");
    assert_non_null(strstr(exe, "dptrain"));
}

static void test_valgrind_runs_it(void **state) {
    (void)state;
#ifdef __SANITIZE_ADDRESS__
    skip(); /* valgrind and AddressSanitizer cannot run one process together */
#endif
    char *out;
    if (tu_sh(&out, "command -v valgrind") != 0) {
        free(out);
        skip();
    }
    free(out);
    int rc = tu_sh(&out, "valgrind --error-exitcode=0 %s --version", bin());
    if (rc != 0 || !tu_contains(out, "dptrain ") || tu_contains(out, "unrecognised instruction"))
        fail_msg("valgrind exit %d:\n%s", rc, out);
    free(out);
}

static void test_spin_bound_reaches_libgomp(void **state) {
    (void)state;
    char *out;
    tu_sh(&out, "env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY OMP_DISPLAY_ENV=verbose %s --version", bin());
    if (!tu_contains(out, "OPENMP DISPLAY ENVIRONMENT")) {
        free(out);
        skip(); /* not libgomp */
    }
    if (!tu_contains(out, "GOMP_SPINCOUNT = '3000'")) fail_msg("the spin bound did not reach libgomp:\n%s", out);
    free(out);
    tu_sh(&out, "env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=777 OMP_DISPLAY_ENV=verbose %s --version", bin());
    if (!tu_contains(out, "GOMP_SPINCOUNT = '777'")) fail_msg("a user's GOMP_SPINCOUNT was overridden:\n%s", out);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_comm_is_dptrain),
        cmocka_unit_test(test_valgrind_runs_it),
        cmocka_unit_test(test_spin_bound_reaches_libgomp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
