/* dptrain's flags through the launchers' own parsers: every flag of --help, after the program name,
 * reaches dptrain unchanged through torchrun's argparse (any torch) and through mpirun; no flag is
 * an abbreviation of a launcher option (torchrun 2 refuses `--log` as ambiguous, so --log-file is the
 * spelling to use, --log its alias), with and without a "--" between the program and its flags.
 * torchrun's agent store: the rendezvous as a client of PyTorch's own c10d TCPStore (started here by
 * the Python of whichever torch is installed: torch 1.x and 2.x speak different dialects), with the
 * rank that never comes, the duplicate rank and the world-size mismatch named; and, where torch 2 is
 * installed, an unmodified `torchrun --nproc-per-node 3 --no-python` of this binary (each rank
 * exchanges a blob through the agent's store, which holds MASTER_PORT) and of dptrain with backends
 * that do not join torchrun (refused). Exits 77 (skipped) when no Python imports torch; set
 * DP_TORCH_PYTHON to a Python with torch 2 for the real torchrun (see README). */
#include "testutil.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/rendezvous.h"

static char python[PATH_MAX];
static int torch_major;
static int have_torch;

/* The first Python that imports torch's TCPStore: $DP_TORCH_PYTHON, python3, Debian's python3. */
static int find_torch(void) {
    const char *cands[] = {getenv("DP_TORCH_PYTHON"), "python3", "/usr/bin/python3"};
    for (size_t i = 0; i < sizeof cands / sizeof *cands; i++) {
        if (!cands[i] || !*cands[i]) continue;
        char *out = NULL;
        int rc = tu_sh(&out, "%s -c 'from torch.distributed import TCPStore; import torch; "
                       "print(\"torch\", torch.__version__.split(\".\")[0])' 2>/dev/null", cands[i]);
        const char *v = out ? strstr(out, "torch ") : NULL;
        if (rc == 0 && v) {
            torch_major = atoi(v + 6);
            snprintf(python, sizeof python, "%s", cands[i]);
            free(out);
            return 1;
        }
        free(out);
    }
    return 0;
}

#define BLOB 128

/* One rank's exchange; 0 if it got rank 0's blob, 3 on a refusal (its message on stderr). */
static int exchange(const dp_launch *l, double timeout) {
    unsigned char blob[BLOB] = {0};
    if (l->rank == 0)
        for (int i = 0; i < BLOB; i++) blob[i] = (unsigned char)(i * 7 + 1);
    if (dp_rendezvous_share(l, blob, sizeof blob, timeout) != DP_OK) {
        fprintf(stderr, "rank %d: %s\n", l->rank, dp_last_error());
        return 3;
    }
    for (int i = 0; i < BLOB; i++)
        if (blob[i] != (unsigned char)(i * 7 + 1)) return 1;
    return 0;
}

/* ---- against torch's TCPStore, started by Python ---- */

static int store_port;
static pid_t store_pid;

static int start_store(void **state) {
    (void)state;
    const char *script = tu_path("store.py");
    const char *py = "import os, sys, time\n"
                     "from torch.distributed import TCPStore\n"
                     "s = TCPStore('127.0.0.1', 0, 1, True, wait_for_workers=False)\n"
                     "print(s.port, os.getpid(), flush=True)\n"
                     "t = time.time()\n"
                     "while time.time() - t < 240 and os.getppid() != 1: time.sleep(0.1)\n";
    tu_write_file(script, py, strlen(py));
    char cmd[PATH_MAX * 2 + 32];
    snprintf(cmd, sizeof cmd, "exec %s %s", python, script);
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    int pid = 0;
    if (fscanf(f, "%d %d", &store_port, &pid) != 2) {
        pclose(f);
        return -1;
    }
    store_pid = pid;
    /* the pipe stays open (the server never writes again); the server goes when it is killed */
    return 0;
}

static int stop_store(void **state) {
    (void)state;
    if (store_pid > 0) kill(store_pid, SIGTERM);
    return 0;
}

static dp_launch agent_launch(int rank, int world, int attempt) {
    dp_launch l = {.kind = DP_LAUNCH_TORCHRUN, .rank = rank, .world = world, .port = store_port, .agent_store = 1,
                   .restart = attempt};
    snprintf(l.addr, sizeof l.addr, "127.0.0.1");
    return l;
}

static pid_t start_rank(dp_launch l, double timeout) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(exchange(&l, timeout));
    return pid;
}

static int exit_of(pid_t pid) {
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_blob_through_torch_store(void **state) {
    (void)state;
    pid_t kids[8];
    for (int r = 0; r < 4; r++) { /* two jobs at once on one store, told apart by TORCHELASTIC_RUN_ID */
        dp_launch a = agent_launch(r, 4, 0), b = agent_launch(r, 4, 0);
        snprintf(a.run_id, sizeof a.run_id, "job-a"), snprintf(b.run_id, sizeof b.run_id, "job-b");
        kids[r] = start_rank(a, 30), kids[4 + r] = start_rank(b, 30);
    }
    for (int r = 0; r < 8; r++) assert_int_equal(exit_of(kids[r]), 0);
}

static void test_store_names_what_went_wrong(void **state) {
    (void)state;
    /* each case under its own attempt number, as a torchrun restart would be */
    dp_launch l = agent_launch(0, 2, 1);
    pid_t kid = start_rank(agent_launch(1, 3, 1), 10); /* thinks there are 3 */
    unsigned char blob[BLOB] = {0};
    assert_int_equal(dp_rendezvous_share(&l, blob, sizeof blob, 10), DP_ERR_USAGE);
    if (!tu_contains(dp_last_error(), "rank 1 was started with WORLD_SIZE=3, rank 0 with 2")) fail_msg("%s", dp_last_error());
    assert_int_equal(exit_of(kid), 3); /* and rank 1 says so too */

    l = agent_launch(0, 3, 2);
    for (int i = 0; i < BLOB; i++) blob[i] = (unsigned char)(i * 7 + 1);
    kid = start_rank(agent_launch(1, 3, 2), 10);
    assert_int_equal(dp_rendezvous_share(&l, blob, sizeof blob, 1.5), DP_ERR_BACKEND);
    if (!tu_contains(dp_last_error(), "rank 2 (and perhaps later ones) did not join through torchrun's agent store"))
        fail_msg("%s", dp_last_error());
    assert_int_equal(exit_of(kid), 0);

    l = agent_launch(1, 2, 3); /* no rank 0 */
    assert_int_equal(dp_rendezvous_share(&l, blob, sizeof blob, 1.0), DP_ERR_BACKEND);
    if (!tu_contains(dp_last_error(), "rank 0 did not publish its id")) fail_msg("%s", dp_last_error());
    l = agent_launch(1, 2, 3); /* a second process with RANK=1 */
    assert_int_equal(dp_rendezvous_share(&l, blob, sizeof blob, 1.0), DP_ERR_USAGE);
    if (!tu_contains(dp_last_error(), "another process was started with RANK=1")) fail_msg("%s", dp_last_error());
}

/* ---- a real torchrun (torch 2) ---- */

static void torchrun(char **out, int nproc, const char *what) {
    tu_sh(out, "cd '%s' && %s -m torch.distributed.run --nproc-per-node %d --no-python %s", getenv("DP_TEST_TMP") ?
          getenv("DP_TEST_TMP") : "/tmp", python, nproc, what);
}

static void test_real_torchrun(void **state) {
    (void)state;
    if (torch_major < 2) {
        printf("torch %d's torchrun does not start workers on this Python: set DP_TORCH_PYTHON to a torch 2\n",
               torch_major);
        skip();
    }
    char self[PATH_MAX], what[PATH_MAX + 16];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = '\0';
    snprintf(what, sizeof what, "'%s' --rank", self);
    char *out = NULL;
    torchrun(&out, 3, what);
    for (int r = 0; r < 3; r++) {
        char line[64];
        snprintf(line, sizeof line, "rank %d of 3: ok through the agent store", r);
        if (!tu_contains(out, line)) fail_msg("torchrun --nproc-per-node 3: no '%s':\n%s", line, out);
    }
    free(out);
    const char *dptrain = getenv("DPTRAIN") ? getenv("DPTRAIN") : "./dptrain";
    static const char *const backends[] = {"sim", "mpi"};
    for (int b = 0; b < 2; b++) {
        /* the log flag and a "--" as README writes them: they reach dptrain, which refuses the launch */
        snprintf(what, sizeof what, "'%s' %strain --backend %s --log-file refused.jsonl --model lenet --dataset synthetic "
                 "--samples 64 --epochs 1", dptrain, b == 0 ? "-- " : "", backends[b]);
        torchrun(&out, 2, what);
        const char *expect = b == 0 ? "(a torchrun launch of 2 processes) but --backend sim runs in one process"
                                    : "(a torchrun launch of 2 processes) but --backend mpi cannot join it";
        if (!tu_contains(out, expect) && !tu_contains(out, "not compiled into this build"))
            fail_msg("torchrun of dptrain --backend %s: not refused:\n%s", backends[b], out);
        free(out);
    }
}

/* ---- dptrain's option table through the launchers' parsers ---- */

static const char *dptrain_bin(void) { return getenv("DPTRAIN") ? getenv("DPTRAIN") : "./dptrain"; }

/* Every --help flag: its name and whether it takes a value ("--epochs E": yes). */
#define MAX_FLAGS 128
static int option_table(char flags[][48], int *takes_value) {
    char *out = NULL;
    int rc = tu_sh(&out, "'%s' --help", dptrain_bin());
    if (rc != 0) fail_msg("dptrain --help: exit %d\n%s", rc, out ? out : "");
    int n = 0;
    for (char *line = strtok(out, "\n"); line && n < MAX_FLAGS; line = strtok(NULL, "\n")) {
        char meta[64] = "";
        if (strncmp(line, "  --", 4) != 0 || sscanf(line + 2, "%47s %63s", flags[n], meta) < 1) continue;
        takes_value[n] = meta[0] >= 'A' && meta[0] <= 'Z'; /* METAs are upper case, help text is not */
        n++;
    }
    free(out);
    assert_true(n >= 50);
    return n;
}

static const char *const argv_check_py =
    "import re, subprocess, sys\n"
    "import torch\n"
    "from torch.distributed.run import get_args_parser\n"
    "dptrain, alias = sys.argv[1], '--log'\n"
    "p = get_args_parser()\n"
    "class Refused(Exception): pass\n"
    "def error(msg): raise Refused(msg)\n"
    "p.error = error\n"
    "text = subprocess.run([dptrain, '--help'], capture_output=True, text=True, check=True).stdout\n"
    "table = [(m.group(1), m.group(2) is not None) for m in\n"
    "         (re.match(r'  (--[a-z0-9-]+)(?: ([A-Z][^ ]*))? ', l) for l in text.splitlines()) if m]\n"
    "assert len(table) >= 50, text\n"
    "assert ('--log-file', True) in table, 'no --log-file, the log flag no launcher takes'\n"
    "launcher = sorted(o for o in p._option_string_actions if o.startswith('--'))\n"
    "bad = []\n"
    "for flag, value in table:\n"
    "    # an abbreviation of a launcher option: passes while unique, fails once torchrun adds a second\n"
    "    near = [o for o in launcher if o.replace('_', '-').startswith(flag) and o.replace('_', '-') != flag]\n"
    "    if near and flag != alias: bad.append('%s abbreviates torchrun %s' % (flag, ', '.join(near)))\n"
    "    forms = [[flag, 'v1'], [flag + '=v1']] if value else [[flag]]\n"
    "    for form in forms:\n"
    "        for sep in ([], ['--']):\n"
    "            args = sep + ['train'] + form\n"
    "            try:\n"
    "                a = p.parse_args(['--nproc_per_node', '1', '--no_python', dptrain] + args)\n"
    "                got = [a.training_script] + a.training_script_args\n"
    "                ok = got in ([dptrain] + args, [dptrain] + args[len(sep):])\n"
    "                why = 'reaches dptrain as %r' % got[1:]\n"
    "            except Refused as e:\n"
    "                ok, why = False, 'torchrun: %s' % e\n"
    "            if ok: continue\n"
    "            if flag == alias and not sep: print('alias %s: %s (the safe spelling: --log-file)' % (' '.join(args), why))\n"
    "            else: bad.append('%s: %s' % (' '.join(args), why))\n"
    "print('torch %s: %d flags checked against %d torchrun options' % (torch.__version__, len(table), len(launcher)))\n"
    "for b in bad: print('COLLISION', b)\n"
    "sys.exit(1 if bad else 0)\n";

static void test_option_table_through_torchrun_parser(void **state) {
    (void)state;
    if (!have_torch) {
        printf("no Python imports torch: torchrun's parser not checked (set DP_TORCH_PYTHON)\n");
        skip();
    }
    const char *script = tu_path("argv_check.py");
    tu_write_file(script, argv_check_py, strlen(argv_check_py));
    char *out = NULL;
    int rc = tu_sh(&out, "%s '%s' '%s' 2>&1", python, script, dptrain_bin());
    printf("%s", out ? out : "");
    if (rc != 0) fail_msg("dptrain's flags through torchrun's parser (%s): exit %d\n%s", python, rc, out ? out : "");
    assert_true(tu_contains(out, "flags checked against"));
    free(out);
}

/* mpirun stops reading its own options at the program: every flag at once, after "--" too, comes
 * through to the program (this test binary, which prints what it got). */
static void test_option_table_through_mpirun(void **state) {
    (void)state;
    char *out = NULL;
    if (tu_sh(&out, "command -v mpirun") != 0) {
        free(out);
        printf("no mpirun: its parser not checked\n");
        skip();
    }
    free(out);
    static char flags[MAX_FLAGS][48];
    int takes[MAX_FLAGS];
    const int n = option_table(flags, takes);
    char self[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(k > 0);
    self[k] = '\0';
    size_t cap = 16384, at = 0;
    char *args = malloc(cap), *expect = malloc(cap);
    assert_non_null(args);
    assert_non_null(expect);
    at = (size_t)snprintf(args, cap, "-- train --");
    size_t ex = (size_t)snprintf(expect, cap, "arg --\narg train\narg --\n");
    for (int i = 0; i < n; i++) {
        at += (size_t)snprintf(args + at, cap - at, " %s%s", flags[i], takes[i] ? " v1" : "");
        ex += (size_t)snprintf(expect + ex, cap - ex, "arg %s\n%s", flags[i], takes[i] ? "arg v1\n" : "");
        assert_true(at < cap - 64 && ex < cap - 64);
    }
    int rc = tu_sh(&out, "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 mpirun --oversubscribe "
                   "--bind-to none -np 1 '%s' --echo-args %s 2>&1", self, args);
    if (rc != 0 || !tu_contains(out, expect))
        fail_msg("mpirun -np 1 PROGRAM %s: exit %d; expected the program to get\n%s\ngot:\n%s", args, rc, expect,
                 out ? out : "");
    free(out), free(args), free(expect);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--rank") == 0) { /* a worker under torchrun */
        dp_launch l;
        if (dp_launch_from_env(&l) != DP_OK) {
            fprintf(stderr, "%s\n", dp_last_error());
            return 2;
        }
        int rc = exchange(&l, 60);
        if (rc == 0) printf("rank %d of %d: ok through the %s\n", l.rank, l.world, l.agent_store ? "agent store" : "own server");
        return rc;
    }
    if (argc > 1 && strcmp(argv[1], "--echo-args") == 0) { /* the program under mpirun: what it was given */
        for (int i = 2; i < argc; i++) printf("arg %s\n", argv[i]);
        return 0;
    }
    have_torch = find_torch();
    const struct CMUnitTest launchers[] = {
        cmocka_unit_test(test_option_table_through_torchrun_parser),
        cmocka_unit_test(test_option_table_through_mpirun),
    };
    int failed = cmocka_run_group_tests(launchers, NULL, NULL);
    if (!have_torch) {
        printf("no Python imports torch (set DP_TORCH_PYTHON): skipping the torchrun tests\n");
        return failed;
    }
    printf("torch %d from %s\n", torch_major, python);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blob_through_torch_store),
        cmocka_unit_test(test_store_names_what_went_wrong),
        cmocka_unit_test(test_real_torchrun),
    };
    return failed + cmocka_run_group_tests(tests, start_store, stop_store);
}
