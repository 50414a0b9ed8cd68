/* fuzz_cgroup.c: any bytes as the text of a cgroup limit file (memory.max, memory.current,
 * memory.stat, cpu.max, cpu.cfs_quota_us / cpu.cfs_period_us), through the parsers that
 * dp_cgroup_headroom and dp_cgroup_cpu_limit use. Must never crash or hit undefined behaviour (an
 * overflow, a read past the text); "no limit" (0) is fine. An accepted quota pair is two numbers in
 * 1..2^50 that cpu_level's rounding up cannot overflow, and the text is them again. Seeds: what
 * v1 and v2 write, and the forms each parser refuses. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cgroup.h"
#include "fuzz.h"

static void check_pair(const char *text, const long long *a, const long long *b) {
    const long long top = 1ll << 50;
    if (*a < 1 || *a > top || (b && (*b < 1 || *b > top))) abort();
    /* the accepted text is the numbers again, as strtoll reads them (leading blanks and a '+' allowed) */
    char again[64];
    if (b) snprintf(again, sizeof again, "%lld %lld", *a, *b);
    else snprintf(again, sizeof again, "%lld", *a);
    long long x = 0, y = 0;
    if (!dp_cgroup_parse_pair(again, &x, b ? &y : NULL) || x != *a || (b && y != *b)) abort();
    if (b && (*a + *b - 1) / *b < 1) abort(); /* cpu_level's cores, rounded up */
    (void)text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1); /* exactly the size: ASan sees a read past the NUL */
    if (!text) abort();
    memcpy(text, data, size);
    text[size] = '\0';
    volatile unsigned long long sink = dp_cgroup_parse_number(text);
    sink += dp_cgroup_parse_stat(text, "inactive_file");
    sink += dp_cgroup_parse_stat(text, "total_inactive_file");
    (void)sink;
    long long a = 0, b = 0;
    if (dp_cgroup_parse_pair(text, &a, &b)) check_pair(text, &a, &b);
    if (dp_cgroup_parse_pair(text, &a, NULL)) check_pair(text, &a, NULL);
    free(text);
    return 0;
}

void dp_fuzz_seeds(void (*add)(const uint8_t *data, size_t size)) {
    static const char *const seeds[] = {
        "150000 100000\n", "max 100000\n", "100000\n", "-1\n", "max\n", "536870912\n",
        "9223372036854775807\n", "18446744073709551616\n", "1125899906842624 1\n", "1 1125899906842625\n",
        "anon 1048576\nfile 4194304\nactive_file 1048576\ninactive_file 3145728\nshmem 0\n",
        "cache 4194304\nrss 1048576\ntotal_inactive_file 3145728\ntotal_active_file 1048576\n",
        "inactive_file", "inactive_file \ninactive_file 12",
    };
    for (size_t i = 0; i < sizeof seeds / sizeof *seeds; i++) add((const uint8_t *)seeds[i], strlen(seeds[i]));
}
