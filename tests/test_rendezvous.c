/* The launch of a multi-process GPU job without a GPU: torchrun's variables parsed (missing,
 * bad and inconsistent ones named), mpirun's recognised, and rank 0's blob (NCCL's unique id)
 * handed to every rank over TCP on loopback, between real processes; a rank with another
 * WORLD_SIZE, a rank that never starts and a rank 0 that never answers end in messages, not
 * hangs; silent connections delay no rank; another job's rank (another job token) is refused,
 * both sides naming both tokens; a connection to a port that drops SYNs ends by the deadline.
 * Rank 0's port is bound to port 0 here and read back (no race for a free port). */
#include "testutil.h"

#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backends/netio.h"
#include "backends/rendezvous.h"
#include "core/timer.h"
#include "dp_config.h"

static const char *vars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                             "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"};

static void clear_env(void) {
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
}

static void torchrun_env(const char *rank, const char *world, const char *local, const char *addr, const char *port) {
    clear_env();
    if (rank) setenv("RANK", rank, 1);
    if (world) setenv("WORLD_SIZE", world, 1);
    if (local) setenv("LOCAL_RANK", local, 1);
    if (addr) setenv("MASTER_ADDR", addr, 1);
    if (port) setenv("MASTER_PORT", port, 1);
}

static void expect_refused(const char *needle) {
    dp_launch l;
    assert_int_equal(dp_launch_from_env(&l), DP_ERR_USAGE);
    if (!tu_contains(dp_last_error(), needle)) fail_msg("message '%s' does not name %s", dp_last_error(), needle);
}

static void test_launch_variables(void **state) {
    (void)state;
    dp_launch l;
    clear_env();
    assert_int_equal(dp_launch_from_env(&l), DP_OK);
    assert_int_equal(l.kind, DP_LAUNCH_SINGLE);
    assert_int_equal(l.world, 1);
    torchrun_env("2", "4", "0", "node7", "29500");
    assert_int_equal(dp_launch_from_env(&l), DP_OK);
    assert_int_equal(l.kind, DP_LAUNCH_TORCHRUN);
    assert_int_equal(l.rank, 2), assert_int_equal(l.world, 4), assert_int_equal(l.port, 29500);
    assert_string_equal(l.addr, "node7");
    torchrun_env("1", "4", "1", "node7", NULL), expect_refused("MASTER_PORT");
    torchrun_env("1", "4", "1", NULL, "29500"), expect_refused("MASTER_ADDR");
    torchrun_env("1", "4", NULL, "node7", "29500"), expect_refused("LOCAL_RANK");
    torchrun_env("1", NULL, "1", "node7", "29500"), expect_refused("WORLD_SIZE");
    torchrun_env(NULL, "4", "1", "node7", "29500"), expect_refused("RANK");
    torchrun_env("4", "4", "0", "node7", "29500"), expect_refused("RANK=4");
    torchrun_env("x", "4", "0", "node7", "29500"), expect_refused("RANK='x'");
    torchrun_env("1", "4", "0", "node7", "99999"), expect_refused("MASTER_PORT='99999'");
    torchrun_env("1", "0", "0", "node7", "29500"), expect_refused("WORLD_SIZE='0'");
    clear_env();
    setenv("OMPI_COMM_WORLD_RANK", "1", 1), setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    assert_int_equal(dp_launch_from_env(&l), DP_OK);
    assert_int_equal(l.kind, DP_LAUNCH_MPIRUN);
    assert_int_equal(l.rank, 1), assert_int_equal(l.local_rank, 1);
    clear_env();
}

static dp_launch launch(int rank, int world, int port) {
    dp_launch l = {.kind = DP_LAUNCH_TORCHRUN, .rank = rank, .world = world, .port = port};
    snprintf(l.addr, sizeof l.addr, "127.0.0.1");
    return l;
}

/* A TCP socket bound to a port of loopback that the kernel picked, not listened on yet: connections
 * to it are refused until it is, and no other program can take the port meanwhile. */
static int bound_socket(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = 0};
    socklen_t len = sizeof a;
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

static void fill_blob(unsigned char *blob) {
    for (int i = 0; i < 128; i++) blob[i] = (unsigned char)(i * 7 + 1);
}

/* Starts rank r in a child process, after `delay` seconds, with DPTRAIN_JOB_TOKEN=token (NULL: as
 * the parent has it), joining rank 0 at addr (NULL: 127.0.0.1): exits 0 if it received the expected
 * blob, 3 if the rendezvous failed (its message on stderr) with a message holding `expect` (when
 * given), 4 if it failed otherwise. */
static pid_t start_rank_at(const char *addr, int r, int world, int port, double timeout, const char *token,
                           const char *expect, double delay) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (token) setenv("DPTRAIN_JOB_TOKEN", token, 1);
        if (delay > 0) {
            struct timespec nap = {(time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9)};
            nanosleep(&nap, NULL);
        }
        dp_launch l = launch(r, world, port);
        if (addr) snprintf(l.addr, sizeof l.addr, "%s", addr);
        unsigned char blob[128] = {0}, want[128];
        fill_blob(want);
        if (dp_rendezvous_share(&l, blob, sizeof blob, timeout) != DP_OK) {
            fprintf(stderr, "rank %d: %s\n", r, dp_last_error());
            _exit(expect && !tu_contains(dp_last_error(), expect) ? 4 : 3);
        }
        _exit(memcmp(blob, want, sizeof blob) == 0 ? 0 : 1);
    }
    return pid;
}

static pid_t start_rank_as(int r, int world, int port, double timeout, const char *token, const char *expect,
                           double delay) {
    return start_rank_at(NULL, r, world, port, timeout, token, expect, delay);
}

static pid_t start_rank(int r, int world, int port, double timeout) {
    return start_rank_as(r, world, port, timeout, NULL, NULL, 0);
}

/* Rank 0 in a child process over the bound socket fd: exits 0 when every rank got the blob, 3 if
 * not (its message on stderr). */
static pid_t start_rank0(int fd, int world, double timeout) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        unsigned char blob[128];
        fill_blob(blob);
        dp_launch l = launch(0, world, 0);
        if (dp_rendezvous_serve_fd(fd, &l, blob, sizeof blob, timeout) != DP_OK) {
            fprintf(stderr, "rank 0: %s\n", dp_last_error());
            _exit(3);
        }
        _exit(0);
    }
    return pid;
}

static int exit_of(pid_t pid) {
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_blob_reaches_every_rank(void **state) {
    (void)state;
    int port;
    const int world = 4, fd = bound_socket(&port);
    setenv("DPTRAIN_JOB_TOKEN", "job-7", 1); /* every rank the same token */
    pid_t kids[3];
    for (int r = 1; r < world; r++) kids[r - 1] = start_rank(r, world, port, 10); /* before rank 0 listens */
    unsigned char blob[128];
    fill_blob(blob);
    dp_launch l = launch(0, world, port);
    if (dp_rendezvous_serve_fd(fd, &l, blob, sizeof blob, 10) != DP_OK) fail_msg("rank 0: %s", dp_last_error());
    unsetenv("DPTRAIN_JOB_TOKEN");
    for (int r = 1; r < world; r++) assert_int_equal(exit_of(kids[r - 1]), 0);
}

static void test_other_world_size_is_named(void **state) {
    (void)state;
    int port;
    const int fd = bound_socket(&port);
    pid_t kid = start_rank(1, 3, port, 5); /* thinks there are 3 */
    unsigned char blob[128] = {0};
    dp_launch l = launch(0, 2, port);
    assert_int_equal(dp_rendezvous_serve_fd(fd, &l, blob, sizeof blob, 5), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "rank 1 was started with WORLD_SIZE=3, rank 0 with 2"));
    assert_int_equal(exit_of(kid), 3);
}

static void test_missing_rank_times_out_named(void **state) {
    (void)state;
    int port;
    const int fd = bound_socket(&port);
    pid_t kid = start_rank(1, 3, port, 5);
    unsigned char blob[128];
    fill_blob(blob);
    dp_launch l = launch(0, 3, port);
    assert_int_equal(dp_rendezvous_serve_fd(fd, &l, blob, sizeof blob, 1.0), DP_ERR_BACKEND);
    if (!tu_contains(dp_last_error(), "ranks 2 did not connect")) fail_msg("%s", dp_last_error());
    assert_int_equal(exit_of(kid), 0); /* rank 1 got its blob before rank 0 gave up */
}

static void test_absent_rank0_times_out_named(void **state) {
    (void)state;
    int port;
    const int held = bound_socket(&port); /* bound, never listened on: every connection is refused */
    dp_launch l = launch(1, 2, port);
    unsigned char blob[128];
    assert_int_equal(dp_rendezvous_share(&l, blob, sizeof blob, 0.5), DP_ERR_BACKEND);
    assert_true(tu_contains(dp_last_error(), "rank 0 did not answer at 127.0.0.1"));
    snprintf(l.addr, sizeof l.addr, "no-such-host.invalid");
    assert_int_equal(dp_rendezvous_share(&l, blob, sizeof blob, 0.5), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "does not resolve"));
    close(held);
}

/* A connection to rank 0's port from loopback, non-blocking; data (if any) sent on it. */
static int connect_to(int port, const void *data, size_t n) {
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = htons(port)};
    assert_true(c >= 0);
    assert_int_equal(connect(c, (struct sockaddr *)&a, sizeof a), 0);
    if (n) assert_int_equal(send(c, data, n, MSG_NOSIGNAL), (ssize_t)n);
    return c;
}

/* Connections that never finish a hello (silent ones, a half hello, another protocol's request),
 * queued before any rank: every rank still joins at once, not after their 5 s each. */
static void test_silent_connections_hold_no_one(void **state) {
    (void)state;
    int port;
    const int world = 4, fd = bound_socket(&port);
    assert_int_equal(listen(fd, 128), 0);
    const uint32_t half[2] = {0x44505232u, 1}; /* the hello's magic and a rank, then nothing */
    int junk[6];
    for (int i = 0; i < 4; i++) junk[i] = connect_to(port, NULL, 0);
    junk[4] = connect_to(port, half, sizeof half);
    junk[5] = connect_to(port, "GET / HTTP/1.0\r\n\r\n", 18);
    pid_t kids[3];
    for (int r = 1; r < world; r++) kids[r - 1] = start_rank(r, world, port, 20);
    unsigned char blob[128];
    fill_blob(blob);
    dp_launch l = launch(0, world, port);
    const double t0 = dp_now();
    if (dp_rendezvous_serve_fd(fd, &l, blob, sizeof blob, 20) != DP_OK) fail_msg("rank 0: %s", dp_last_error());
    const double took = dp_now() - t0;
    for (int r = 1; r < world; r++) assert_int_equal(exit_of(kids[r - 1]), 0);
    if (took > 4.0) fail_msg("the ranks joined after %.1f s: the silent connections held them", took);
    for (int i = 0; i < 6; i++) close(junk[i]);
}

/* Two jobs on one port: a rank with another job token is refused, both sides naming both tokens,
 * and rank 0 goes on to serve its own rank 1, which then joins. */
static void test_other_jobs_rank_is_refused(void **state) {
    (void)state;
    int port;
    int fd = bound_socket(&port);
    setenv("DPTRAIN_JOB_TOKEN", "job-a", 1);
    const char *both = "its job token is 'DPTRAIN_JOB_TOKEN=job-a', this rank's 'DPTRAIN_JOB_TOKEN=job-b'";
    pid_t other = start_rank_as(1, 2, port, 5, "job-b", both, 0);
    unsigned char blob[128];
    fill_blob(blob);
    dp_launch l = launch(0, 2, port);
    assert_int_equal(dp_rendezvous_serve_fd(fd, &l, blob, sizeof blob, 1.5), DP_ERR_BACKEND);
    if (!tu_contains(dp_last_error(), "ranks 1 did not connect") ||
        !tu_contains(dp_last_error(), "1 connection of another job refused (the last: rank 1 with job token "
                                      "'DPTRAIN_JOB_TOKEN=job-b'; this job's token: 'DPTRAIN_JOB_TOKEN=job-a')"))
        fail_msg("%s", dp_last_error());
    assert_int_equal(exit_of(other), 3);
    /* the same with this job's rank 1 after the other job's: it joins */
    fd = bound_socket(&port);
    pid_t root = start_rank0(fd, 2, 10);
    close(fd);
    other = start_rank_as(1, 2, port, 5, "job-b", both, 0);
    assert_int_equal(exit_of(other), 3);
    pid_t own = start_rank(1, 2, port, 10);
    assert_int_equal(exit_of(own), 0);
    assert_int_equal(exit_of(root), 0);
    unsetenv("DPTRAIN_JOB_TOKEN");
}

/* A port that drops SYNs (a firewall, a wrong subnet): here a listener whose accept queue is full,
 * which Linux answers by dropping further SYNs. A connection attempt ends at its deadline, and a
 * rank waiting for rank 0 there ends at --timeout, not after the kernel's two-minute retries.
 * (10.255.255.1 is not used: a sandbox's network may answer it.) */
static void test_dropped_syns_end_by_the_deadline(void **state) {
    (void)state;
    int port;
    const int lis = bound_socket(&port);
    assert_int_equal(listen(lis, 0), 0);
    int queued[16], n_queued = 0, dropped = 0;
    while (n_queued < 16 && !dropped) { /* fill the accept queue until a connection stays pending */
        int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = htons(port)};
        assert_true(c >= 0);
        connect(c, (struct sockaddr *)&a, sizeof a);
        struct pollfd p = {.fd = c, .events = POLLOUT};
        dropped = poll(&p, 1, 300) == 0;
        queued[n_queued++] = c;
    }
    if (!dropped) {
        for (int i = 0; i < n_queued; i++) close(queued[i]);
        close(lis);
        skip(); /* this kernel accepts every SYN on loopback: nothing to test */
    }
    double t0 = dp_now();
    int resolved = 0;
    const int fd = dp_net_connect("127.0.0.1", port, t0 + 0.5, &resolved);
    double took = dp_now() - t0;
    if (fd >= 0) close(fd);
    assert_true(fd < 0);
    assert_true(resolved);
    if (took < 0.45 || took > 1.5) fail_msg("the connection attempt ended after %.2f s, its deadline was 0.5 s", took);
    dp_launch l = launch(1, 2, port);
    unsigned char blob[128];
    t0 = dp_now();
    assert_int_equal(dp_rendezvous_share(&l, blob, sizeof blob, 1.0), DP_ERR_BACKEND);
    took = dp_now() - t0;
    if (!tu_contains(dp_last_error(), "rank 0 did not answer at 127.0.0.1")) fail_msg("%s", dp_last_error());
    if (took > 2.0) fail_msg("rank 1 gave up after %.2f s, its --timeout was 1 s", took);
    for (int i = 0; i < n_queued; i++) close(queued[i]);
    close(lis);
}

/* torchrun's agent store where none answers: nothing listening, or a listener that is not a
 * TCPStore (it accepts and stays silent): a message naming the variable, within the deadline. Rank
 * 0 never binds MASTER_PORT then (the agent holds it). */
static void test_agent_store_that_does_not_answer(void **state) {
    (void)state;
    int port;
    const int held = bound_socket(&port); /* nothing listens there */
    dp_launch l = launch(0, 2, port);
    l.agent_store = 1;
    unsigned char blob[128] = {0};
    assert_int_equal(dp_rendezvous_share(&l, blob, sizeof blob, 0.5), DP_ERR_BACKEND);
    if (!tu_contains(dp_last_error(), "nothing answered as torchrun's agent store") ||
        !tu_contains(dp_last_error(), "TORCHELASTIC_USE_AGENT_STORE=True"))
        fail_msg("%s", dp_last_error());
    close(held);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = 0};
    socklen_t len = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 8), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    l = launch(1, 2, ntohs(a.sin_port));
    l.agent_store = 1;
    assert_int_equal(dp_rendezvous_share(&l, blob, sizeof blob, 1.0), DP_ERR_BACKEND);
    if (!tu_contains(dp_last_error(), "rank 1: nothing answered as torchrun's agent store")) fail_msg("%s", dp_last_error());
    close(fd);
}

/* Whether this machine has an IPv6 loopback (::1 can be bound). */
static int have_ipv6_loopback(void) {
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = in6addr_loopback, .sin6_port = 0};
    const int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0) close(fd);
    return ok;
}

/* MASTER_ADDR=::1 (or [::1], as some launchers write it): rank 0 listens on IPv6 and IPv4 alike,
 * so a rank given ::1 and a rank given 127.0.0.1 both join, at once; messages show [::1]:port. */
static void test_ipv6_master_addr_joins(void **state) {
    (void)state;
    if (!have_ipv6_loopback()) skip(); /* no IPv6 here: nothing to test */
    dp_launch l;
    torchrun_env("1", "3", "1", "[::1]", "29500");
    assert_int_equal(dp_launch_from_env(&l), DP_OK);
    assert_string_equal(l.addr, "::1");
    clear_env();
    const int port = tu_free_port();
    pid_t six = start_rank_at("::1", 1, 3, port, 5, NULL, NULL, 0), four = start_rank_at("127.0.0.1", 2, 3, port, 5, NULL, NULL, 0);
    unsigned char blob[128];
    fill_blob(blob);
    l = launch(0, 3, port);
    snprintf(l.addr, sizeof l.addr, "::1");
    const double t0 = dp_now();
    if (dp_rendezvous_share(&l, blob, sizeof blob, 5) != DP_OK) fail_msg("rank 0: %s", dp_last_error());
    const double took = dp_now() - t0;
    assert_int_equal(exit_of(six), 0);
    assert_int_equal(exit_of(four), 0);
    if (took > 4.0) fail_msg("the ranks joined after %.1f s", took);
    int held_port;
    const int held = bound_socket(&held_port); /* nothing listens: rank 0 never answers */
    l = launch(1, 2, held_port);
    snprintf(l.addr, sizeof l.addr, "::1");
    assert_int_equal(dp_rendezvous_share(&l, blob, sizeof blob, 0.3), DP_ERR_BACKEND);
    char want[64];
    snprintf(want, sizeof want, "rank 0 did not answer at [::1]:%d", held_port);
    if (!tu_contains(dp_last_error(), want)) fail_msg("%s", dp_last_error());
    close(held);
}

/* Job tokens are compared whole: two that differ only after character 109 of the value (where an
 * earlier version cut them) or after 200 are two jobs, refused with where they differ (the shown
 * part is cut); a token longer than the maximum (1000 characters) is refused, not cut. */
static void test_whole_job_token_is_compared(void **state) {
    (void)state;
    char mine[251], theirs[251], want[64];
    memset(mine, 'j', 250), mine[250] = '\0';
    const int differs_at[] = {109, 200};
    unsigned char blob[128];
    fill_blob(blob);
    for (int i = 0; i < 2; i++) {
        memcpy(theirs, mine, sizeof mine);
        theirs[differs_at[i]] = 'k';
        /* 18 characters of "DPTRAIN_JOB_TOKEN=", then the value: counted from 1 */
        snprintf(want, sizeof want, "; the two differ from character %d", 18 + differs_at[i] + 1);
        int port;
        const int fd = bound_socket(&port);
        setenv("DPTRAIN_JOB_TOKEN", mine, 1);
        pid_t other = start_rank_as(1, 2, port, 5, theirs, want, 0);
        dp_launch l = launch(0, 2, port);
        assert_int_equal(dp_rendezvous_serve_fd(fd, &l, blob, sizeof blob, 1.5), DP_ERR_BACKEND);
        if (!tu_contains(dp_last_error(), "1 connection of another job refused") || !tu_contains(dp_last_error(), want))
            fail_msg("tokens differing at %d: %s", differs_at[i], dp_last_error());
        assert_int_equal(exit_of(other), 3); /* refused, naming where */
    }
    char *big = malloc(1002);
    assert_non_null(big);
    memset(big, 'j', 1001), big[1001] = '\0';
    setenv("DPTRAIN_JOB_TOKEN", big, 1);
    free(big);
    dp_launch l = launch(1, 2, 1);
    assert_int_equal(dp_rendezvous_share(&l, blob, sizeof blob, 5), DP_ERR_USAGE);
    if (!tu_contains(dp_last_error(), "rank 1: DPTRAIN_JOB_TOKEN is 1001 characters long; a job token may have at most 1000"))
        fail_msg("%s", dp_last_error());
    int port;
    l = launch(0, 2, 0);
    assert_int_equal(dp_rendezvous_serve_fd(bound_socket(&port), &l, blob, sizeof blob, 5), DP_ERR_USAGE);
    assert_true(tu_contains(dp_last_error(), "rank 0: DPTRAIN_JOB_TOKEN is 1001 characters long"));
    unsetenv("DPTRAIN_JOB_TOKEN");
}

/* Fails unless every byte of m is printable ASCII. */
static void expect_plain(const char *m) {
    for (const unsigned char *p = (const unsigned char *)m; *p; p++)
        if (*p < 0x20 || *p >= 0x7f) fail_msg("byte 0x%02x at %d of '%s'", *p, (int)(p - (const unsigned char *)m), m);
}

/* Whatever answers on MASTER_PORT (here a program posing as rank 0 that refuses the job with a
 * "token" of terminal escape sequences) reaches the message escaped, never raw: so do a launcher's
 * variables, and anything else a message quotes (core/status.c escapes every message recorded). */
static void test_escape_sequences_are_not_printed(void **state) {
    (void)state;
    int port;
    const int lis = bound_socket(&port);
    assert_int_equal(listen(lis, 4), 0);
    pid_t fake = fork();
    assert_true(fake >= 0);
    if (fake == 0) {
        int c = accept(lis, NULL, NULL);
        char junk[4096];
        struct pollfd p = {.fd = c, .events = POLLIN};
        while (poll(&p, 1, 300) == 1 && recv(c, junk, sizeof junk, 0) > 0) {} /* the whole hello */
        const uint32_t refused = 4;  /* another job's token follows */
        char token[1024] = "DPTRAIN_JOB_TOKEN=\x1b]0;owned\x07\x1b[2J\x9b" "31m";
        send(c, &refused, sizeof refused, MSG_NOSIGNAL);
        send(c, token, sizeof token, MSG_NOSIGNAL);
        while (poll(&p, 1, 5000) == 1 && recv(c, junk, sizeof junk, 0) > 0) {} /* until the rank hangs up */
        _exit(0);
    }
    close(lis);
    dp_launch l = launch(1, 2, port);
    unsigned char blob[128];
    assert_int_equal(dp_rendezvous_share(&l, blob, sizeof blob, 5), DP_ERR_USAGE);
    expect_plain(dp_last_error());
    if (!tu_contains(dp_last_error(), "its job token is 'DPTRAIN_JOB_TOKEN=\\x1b]0;owned\\x07\\x1b[2J\\x9b31m', "
                                      "this rank's 'none'"))
        fail_msg("%s", dp_last_error());
    assert_int_equal(exit_of(fake), 0);
    torchrun_env("\x1b[31m1", "2", "0", "node7", "29500");
    expect_refused("RANK='\\x1b[31m1'");
    expect_plain(dp_last_error());
    clear_env();
    /* a message quoting a file name nobody escaped: controls and bytes that are not UTF-8 escaped,
       UTF-8 (here an e acute) and backslashes kept */
    dp_fail(DP_ERR_IO, "%s: cannot open", "runs/\x1b[2J\\a\xff\xc3\xa9\xc2\x9b.bin");
    assert_string_equal(dp_last_error(), "runs/\\x1b[2J\\a\\xff\xc3\xa9\\xc2\\x9b.bin: cannot open");
}

/* The CLI: --backend nccl on a machine without a GPU fails in one line (exit 1), and a torchrun
 * launch with a variable missing is refused (exit 2) naming it. */
static void test_nccl_cli_without_gpu(void **state) {
    (void)state;
    char *out;
    clear_env();
    int rc = tu_run_dptrain(&out, "train --backend nccl --dataset synthetic --samples 64 --epochs 1 --quiet");
    if (!DP_HAVE_NCCL) {
        assert_true(tu_contains(out, "not compiled into this build"));
    } else if (tu_contains(out, "no usable CUDA device")) {
        assert_int_equal(rc, 1);
        assert_true(tu_contains(out, "rank 0"));
    } else if (rc != 0) { /* a GPU machine: one rank trains */
        fail_msg("--backend nccl on a GPU machine: rc %d:\n%s", rc, out);
    }
    free(out);
    /* no GPU visible: the variable is quoted as set ("CUDA_VISIBLE_DEVICES=-1", not " =-1") */
    setenv("CUDA_VISIBLE_DEVICES", "-1", 1);
    rc = tu_run_dptrain(&out, "train --backend nccl --dataset synthetic --samples 64 --epochs 1 --quiet");
    unsetenv("CUDA_VISIBLE_DEVICES");
    if (DP_HAVE_NCCL && tu_contains(out, "no usable CUDA device") && !tu_contains(out, "; CUDA_VISIBLE_DEVICES=-1)"))
        fail_msg("rc %d: %s", rc, out);
    free(out);
    setenv("RANK", "1", 1), setenv("WORLD_SIZE", "2", 1), setenv("LOCAL_RANK", "1", 1);
    setenv("MASTER_PORT", "29500", 1);
    rc = tu_run_dptrain(&out, "train --backend nccl --dataset synthetic --samples 64 --epochs 1 --quiet");
    clear_env();
    if (DP_HAVE_NCCL) {
        assert_int_equal(rc, 2);
        if (!tu_contains(out, "MASTER_ADDR is not set")) fail_msg("%s", out);
    }
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_launch_variables),
        cmocka_unit_test(test_blob_reaches_every_rank),
        cmocka_unit_test(test_other_world_size_is_named),
        cmocka_unit_test(test_missing_rank_times_out_named),
        cmocka_unit_test(test_absent_rank0_times_out_named),
        cmocka_unit_test(test_silent_connections_hold_no_one),
        cmocka_unit_test(test_other_jobs_rank_is_refused),
        cmocka_unit_test(test_dropped_syns_end_by_the_deadline),
        cmocka_unit_test(test_agent_store_that_does_not_answer),
        cmocka_unit_test(test_nccl_cli_without_gpu),
        cmocka_unit_test(test_ipv6_master_addr_joins),
        cmocka_unit_test(test_whole_job_token_is_compared),
        cmocka_unit_test(test_escape_sequences_are_not_printed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
