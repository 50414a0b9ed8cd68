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

/* root/<rel> with the text; parent directories made. */
static void put(const char *root, const char *rel, const char *text) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
    tu_write_file(path, text, strlen(text));
}

static const char *fresh_root(const char *name) {
    const char *r = tu_path(name);
    tu_sh(NULL, "rm -rf '%s'", r);
    assert_int_equal(mkdir(r, 0755), 0);
    return r;
}

static const char *v2_root(void) {
    const char *r = fresh_root("cpu2");
    put(r, "proc/self/mountinfo", "25 1 0:22 / / rw - ext4 /dev/sda1 rw\n"
                                  "41 31 0:38 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n");
    put(r, "proc/self/cgroup", "0::/job/step\n");
    return r;
}

static void test_v2_quota(void **state) {
    (void)state;
    const char *r = v2_root();
    dp_cpu_count c;
    /* no cpu.max anywhere: the mask */
    dp_cpu_count_find(r, 16, &c);
    assert_int_equal(c.cores, 16);
    assert_int_equal(c.quota, 0);
    assert_string_equal(c.source, "affinity mask");
    put(r, "sys/fs/cgroup/job/step/cpu.max", "max 100000\n");
    dp_cpu_count_find(r, 16, &c);
    assert_int_equal(c.cores, 16);
    /* 1.5 cores' time: 2 threads (rounded up) */
    put(r, "sys/fs/cgroup/job/cpu.max", "150000 100000\n");
    dp_cpu_count_find(r, 16, &c);
    assert_int_equal(c.cores, 2);
    assert_int_equal(c.quota, 2);
    assert_string_equal(c.source, "cgroup quota /sys/fs/cgroup/job/cpu.max (150000 / 100000 us)");
    /* the tighter level wins, wherever it is */
    put(r, "sys/fs/cgroup/job/step/cpu.max", "50000 100000\n");
    dp_cpu_count_find(r, 16, &c);
    assert_int_equal(c.cores, 1);
    assert_string_equal(c.source, "cgroup quota /sys/fs/cgroup/job/step/cpu.max (50000 / 100000 us)");
    /* a quota above the mask: the mask */
    put(r, "sys/fs/cgroup/job/step/cpu.max", "max 100000\n");
    put(r, "sys/fs/cgroup/job/cpu.max", "3200000 100000\n");
    dp_cpu_count_find(r, 16, &c);
    assert_int_equal(c.cores, 16);
    assert_int_equal(c.quota, 32);
    assert_string_equal(c.source, "affinity mask");
    /* exactly 4 cores' time: 4 */
    put(r, "sys/fs/cgroup/job/cpu.max", "400000 100000\n");
    dp_cpu_count_find(r, 16, &c);
    assert_int_equal(c.cores, 4);
}

/* garbage is no quota, never 0 cores or a wrapped number */
static void test_v2_garbage(void **state) {
    (void)state;
    const char *r = v2_root();
    const char *bad[] = {"", "\n", "abc 100000\n", "150000\n", "150000 0\n", "-5 100000\n", "150000 100000x\n",
                         "0 100000\n", "99999999999999999999 100000\n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        put(r, "sys/fs/cgroup/job/cpu.max", bad[i]);
        dp_cpu_count c;
        dp_cpu_count_find(r, 8, &c);
        assert_int_equal(c.cores, 8);
        assert_int_equal(c.quota, 0);
    }
}

/* v1: the cpu controller's mount (cpu,cpuacct), the parent's quota; -1 is none */
static void test_v1_quota(void **state) {
    (void)state;
    const char *r = fresh_root("cpu1");
    put(r, "proc/self/mountinfo", "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
                                  "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n");
    put(r, "proc/self/cgroup", "5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/\n");
    put(r, "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n");
    put(r, "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
    dp_cpu_count c;
    dp_cpu_count_find(r, 64, &c);
    assert_int_equal(c.cores, 64);
    put(r, "sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_quota_us", "250000\n");
    put(r, "sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_period_us", "100000\n");
    dp_cpu_count_find(r, 64, &c);
    assert_int_equal(c.cores, 3);
    assert_string_equal(c.source, "cgroup quota /sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_quota_us (250000 / 100000 us)");
    /* a quota without its period is no quota */
    put(r, "sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_period_us", "none\n");
    dp_cpu_count_find(r, 64, &c);
    assert_int_equal(c.cores, 64);
}

/* no cgroup files at all, and the real system: at least one core */
static void test_missing_and_real(void **state) {
    (void)state;
    const char *r = fresh_root("cpu0");
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
