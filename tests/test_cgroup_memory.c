/* test_cgroup_memory.c: the memory estimate honours the process's own cgroup limits, v2 and v1,
 * at the tightest level of a nested group (fake trees), and a run inside a real nested group with
 * a small limit is refused with a message instead of being OOM-killed (where groups can be made). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cgroup.h"
#include "testutil.h"


/* v2: the job's group has the limit, the step's below it none; reclaimable cache is not "used". */
static void test_v2_nested(void **state) {
    (void)state;
    const char *r = tu_fake_cgroup_v2("cg2");
    tu_put(r, "sys/fs/cgroup/cgroup.controllers", "memory\n"); /* the root has no memory.max */
    tu_put(r, "sys/fs/cgroup/job/memory.max", "1073741824\n");
    tu_put(r, "sys/fs/cgroup/job/memory.current", "209715200\n");
    tu_put(r, "sys/fs/cgroup/job/memory.stat", "anon 104857600\nfile 104857600\ninactive_file 52428800\n");
    tu_put(r, "sys/fs/cgroup/job/step/memory.max", "max\n");
    tu_put(r, "sys/fs/cgroup/job/step/memory.current", "209715200\n");
    char where[512];
    unsigned long long room = dp_cgroup_headroom(r, where, sizeof where);
    assert_int_equal(room, 1073741824ull - 209715200ull + 52428800ull);
    assert_string_equal(where, "/sys/fs/cgroup/job/memory.max");
    /* a tighter limit on the step wins; over it, 1 byte of room, never a wrapped huge number */
    tu_put(r, "sys/fs/cgroup/job/step/memory.max", "104857600\n");
    assert_int_equal(dp_cgroup_headroom(r, where, sizeof where), 1);
    assert_string_equal(where, "/sys/fs/cgroup/job/step/memory.max");
    /* no limit anywhere: 0 */
    tu_put(r, "sys/fs/cgroup/job/step/memory.max", "max\n");
    tu_put(r, "sys/fs/cgroup/job/memory.max", "max\n");
    assert_int_equal(dp_cgroup_headroom(r, NULL, 0), 0);
}

/* v1: the memory controller's mount, the hierarchy mounted from a sub-directory (a container's
 * view), the parent's limit tighter than the child's; "no limit" is a huge number. */
static void test_v1_nested(void **state) {
    (void)state;
    const char *r = tu_fresh_dir("cg1");
    tu_put(r, "proc/self/mountinfo", "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
                                  "35 31 0:32 /slurm /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n");
    tu_put(r, "proc/self/cgroup", "5:cpu:/\n4:memory:/slurm/uid_1/job_7/step_0\n0::/\n");
    tu_put(r, "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    tu_put(r, "sys/fs/cgroup/memory/uid_1/memory.limit_in_bytes", "9223372036854771712\n");
    tu_put(r, "sys/fs/cgroup/memory/uid_1/job_7/memory.limit_in_bytes", "2147483648\n");
    tu_put(r, "sys/fs/cgroup/memory/uid_1/job_7/memory.usage_in_bytes", "1073741824\n");
    tu_put(r, "sys/fs/cgroup/memory/uid_1/job_7/memory.stat", "cache 0\ntotal_inactive_file 0\n");
    tu_put(r, "sys/fs/cgroup/memory/uid_1/job_7/step_0/memory.limit_in_bytes", "4294967296\n");
    tu_put(r, "sys/fs/cgroup/memory/uid_1/job_7/step_0/memory.usage_in_bytes", "536870912\n");
    char where[512];
    assert_int_equal(dp_cgroup_headroom(r, where, sizeof where), 1073741824ull);
    assert_string_equal(where, "/sys/fs/cgroup/memory/uid_1/job_7/memory.limit_in_bytes");
    tu_put(r, "sys/fs/cgroup/memory/uid_1/job_7/memory.usage_in_bytes", "3147483648\n");
    assert_int_equal(dp_cgroup_headroom(r, NULL, 0), 1);
}

/* This process's memory group directory (v1 memory controller, or v2), or 0. */
static int own_group(char *dir, size_t n) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return 0;
    char line[1024];
    int ok = 0;
    while (!ok && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        if (strncmp(c1 + 1, "memory:", 7) == 0 || strstr(c1 + 1, ",memory:"))
            ok = snprintf(dir, n, "/sys/fs/cgroup/memory%s", c2 + 1) < (int)n;
    }
    fclose(f);
    struct stat st;
    return ok && stat(dir, &st) == 0;
}

/* A real nested group of 256 MiB (v1 memory controller): a run needing about 3 GB is refused
 * naming the group's limit; without the group's limit it was OOM-killed (137) with no message. */
static void test_refused_inside_nested_group(void **state) {
    (void)state;
    char parent[700], child[800];
    if (!own_group(parent, sizeof parent)) {
        print_message("no v1 memory group of this process: skipped\n");
        skip();
    }
    snprintf(child, sizeof child, "%s/dptrain-test-%d", parent, (int)getpid());
    if (mkdir(child, 0755) != 0) {
        print_message("cannot create a group under %s (%s): skipped\n", parent, strerror(errno));
        skip();
    }
    char *out = NULL;
    if (tu_sh(NULL, "echo 268435456 > '%s/memory.limit_in_bytes'", child) != 0) {
        rmdir(child);
        print_message("cannot set a limit on %s: skipped\n", child);
        skip();
    }
    int rc = tu_sh(&out, "sh -c 'echo $$ > \"%s/cgroup.procs\" && exec \"%s\" train --dataset synthetic --samples 1000000 "
                   "--shape 3x32x32 --epochs 1 --no-progress'", child, getenv("DPTRAIN"));
    rmdir(child);
    if (rc != 1 || !tu_contains(out, "is available (the cgroup limit") || !tu_contains(out, "dptrain-test-") ||
        !tu_contains(out, "memory.limit_in_bytes"))
        fail_msg("rc %d:\n%s", rc, out);
    print_message("%s", out);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v2_nested),
        cmocka_unit_test(test_v1_nested),
        cmocka_unit_test(test_refused_inside_nested_group),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
