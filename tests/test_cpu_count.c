/* test_cpu_count.c: the usable cores are the smaller of the affinity mask and the cgroup CPU
 * quota (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us) at the tightest level of a nested
 * group, rounded up; missing files, "max", -1 and garbage mean no quota (fake trees). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/cgroup.h"
#include "core/cpu_count.h"
#include "testutil.h"


/* v2: each row writes one level's cpu.max, then the cores, the quota (-1: not checked) and the source
 * (NULL: not checked) the levels written so far give, with a mask of 16 cores. */
static void test_v2_quota(void **state) {
    (void)state;
    static const struct {
        const char *level, *cpu_max;
        int cores, quota;
        const char *source;
    } rows[] = {
        {NULL, NULL, 16, 0, "affinity mask"}, /* no cpu.max anywhere: the mask */
        {"job/step", "max 100000\n", 16, -1, NULL},
        /* 1.5 cores' time: 2 threads (rounded up) */
        {"job", "150000 100000\n", 2, 2, "cgroup quota /sys/fs/cgroup/job/cpu.max (150000 / 100000 us)"},
        /* the tighter level wins, wherever it is */
        {"job/step", "50000 100000\n", 1, -1, "cgroup quota /sys/fs/cgroup/job/step/cpu.max (50000 / 100000 us)"},
        /* a quota above the mask: the mask */
        {"job/step", "max 100000\n", 2, -1, NULL},
        {"job", "3200000 100000\n", 16, 32, "affinity mask"},
        /* exactly 4 cores' time: 4 */
        {"job", "400000 100000\n", 4, -1, NULL},
    };
    const char *r = tu_fake_cgroup_v2("cpu2");
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        if (rows[i].level) {
            char rel[128];
            snprintf(rel, sizeof rel, "sys/fs/cgroup/%s/cpu.max", rows[i].level);
            tu_put(r, rel, rows[i].cpu_max);
        }
        dp_cpu_count c;
        dp_cpu_count_find(r, 16, &c);
        if (c.cores != rows[i].cores || (rows[i].quota >= 0 && c.quota != rows[i].quota) ||
            (rows[i].source && strcmp(c.source, rows[i].source) != 0))
            fail_msg("row %zu (%s/cpu.max = %s): %d cores, quota %d, \"%s\"; expected %d, %d, \"%s\"", i,
                     rows[i].level ? rows[i].level : "-", rows[i].cpu_max ? rows[i].cpu_max : "-", c.cores, c.quota,
                     c.source, rows[i].cores, rows[i].quota, rows[i].source ? rows[i].source : "");
    }
}

/* garbage is no quota, never 0 cores or a wrapped number */
static void test_v2_garbage(void **state) {
    (void)state;
    const char *r = tu_fake_cgroup_v2("cpu2");
    const char *bad[] = {"", "\n", "abc 100000\n", "150000\n", "150000 0\n", "-5 100000\n", "150000 100000x\n",
                         "0 100000\n", "99999999999999999999 100000\n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tu_put(r, "sys/fs/cgroup/job/cpu.max", bad[i]);
        dp_cpu_count c;
        dp_cpu_count_find(r, 8, &c);
        assert_int_equal(c.cores, 8);
        assert_int_equal(c.quota, 0);
    }
}

/* v1: the cpu controller's mount (cpu,cpuacct), the parent's quota; -1 is none */
static void test_v1_quota(void **state) {
    (void)state;
    const char *r = tu_fresh_dir("cpu1");
    tu_put(r, "proc/self/mountinfo", "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
                                  "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n");
    tu_put(r, "proc/self/cgroup", "5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/\n");
    tu_put(r, "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n");
    tu_put(r, "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
    dp_cpu_count c;
    dp_cpu_count_find(r, 64, &c);
    assert_int_equal(c.cores, 64);
    tu_put(r, "sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_quota_us", "250000\n");
    tu_put(r, "sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_period_us", "100000\n");
    dp_cpu_count_find(r, 64, &c);
    assert_int_equal(c.cores, 3);
    assert_string_equal(c.source, "cgroup quota /sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_quota_us (250000 / 100000 us)");
    /* a quota without its period is no quota */
    tu_put(r, "sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_period_us", "none\n");
    dp_cpu_count_find(r, 64, &c);
    assert_int_equal(c.cores, 64);
}

/* no cgroup files at all, and the real system: at least one core */
static void test_missing_and_real(void **state) {
    (void)state;
    const char *r = tu_fresh_dir("cpu0");
    dp_cpu_count c;
    dp_cpu_count_find(r, 6, &c);
    assert_int_equal(c.cores, 6);
    assert_int_equal(dp_cgroup_cpu_limit(r, NULL, 0), 0);
    dp_cpu_count_find("", 0, &c);
    assert_true(c.cores >= 1 && c.affinity >= c.cores);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v2_quota),
        cmocka_unit_test(test_v2_garbage),
        cmocka_unit_test(test_v1_quota),
        cmocka_unit_test(test_missing_and_real),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
