/* --help against the parser: every flag --help lists with a numeric range is parsed at both
 * ends of that range (accepted) and just outside them (refused, exit code 2), so the stated
 * ranges cannot drift from the accepted ones; value flags state their default. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/options.h"

/* Parses "dptrain --dataset synthetic <flag> <value>"; returns the exit code main would use. */
static int parse_code(const char *flag, const char *value) {
    char *argv[] = {"dptrain", "--dataset", "synthetic", (char *)flag, (char *)value, NULL};
    dp_config c;
    dp_config_defaults(&c);
    dp_action a;
    dp_status s = dp_parse_args(5, argv, &c, &a);
    if (s != DP_OK && !tu_contains(dp_last_error(), flag))
        fail_msg("%s %s: the message does not name the flag: %s", flag, value, dp_last_error());
    return dp_exit_code(s);
}

static void expect_code(const char *flag, const char *value, int code) {
    int got = parse_code(flag, value);
    if (got != code) fail_msg("%s %s: exit %d, expected %d (%s)", flag, value, got, code, dp_last_error());
}

static void check_integer_range(const char *flag, const char *lo, const char *hi) {
    expect_code(flag, lo, 0);
    expect_code(flag, hi, 0);
    char below[40], above[40];
    snprintf(below, sizeof below, "%lld", strtoll(lo, NULL, 10) - 1);
    /* hi + 1 as text: hi may be 2^63-1 */
    unsigned long long h = strtoull(hi, NULL, 10);
    snprintf(above, sizeof above, "%llu", h + 1);
    expect_code(flag, below, 2);
    expect_code(flag, above, 2);
}

/* "(0, 100]": an open end is refused and a value just inside accepted; a closed end accepted
 * and a value just outside refused. */
static void check_real_range(const char *flag, char open_c, double lo, double hi, char close_c) {
    char v[64];
    double eps_lo = 1e-6 * (fabs(lo) > 1 ? fabs(lo) : 1), eps_hi = 1e-6 * (fabs(hi) > 1 ? fabs(hi) : 1);
    snprintf(v, sizeof v, "%.17g", lo);
    expect_code(flag, v, open_c == '(' ? 2 : 0);
    snprintf(v, sizeof v, "%.17g", open_c == '(' ? lo + eps_lo : lo - eps_lo);
    expect_code(flag, v, open_c == '(' ? 0 : 2);
    snprintf(v, sizeof v, "%.17g", hi);
    expect_code(flag, v, close_c == ')' ? 2 : 0);
    snprintf(v, sizeof v, "%.17g", close_c == ')' ? hi - eps_hi : hi + eps_hi);
    expect_code(flag, v, close_c == ')' ? 0 : 2);
}

static void test_help_ranges_match_parser(void **state) {
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    dp_print_usage(f);
    fclose(f);
    int checked = 0, lines = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "  --", 4) != 0) continue;
        lines++;
        char flag[64], meta[64] = "";
        if (sscanf(line + 2, "%63s %63s", flag, meta) < 1) fail_msg("cannot read '%s'", line);
        const char *r = strstr(line, "range ");
        if (strcmp(flag, "--lr-steps") == 0 || strcmp(flag, "--shape") == 0) continue; /* lists, checked below */
        if (!r) continue;
        r += 6;
        long long ilo;
        unsigned long long ihi;
        double lo, hi;
        char oc, cc;
        char los[40], his[40];
        if (r[0] == '(' || r[0] == '[') {
            if (sscanf(r, "%c%lf, %lf%c", &oc, &lo, &hi, &cc) != 4) fail_msg("cannot read the range in '%s'", line);
            check_real_range(flag, oc, lo, hi, cc);
        } else {
            if (sscanf(r, "%lld..%llu", &ilo, &ihi) != 2) fail_msg("cannot read the range in '%s'", line);
            snprintf(los, sizeof los, "%lld", ilo), snprintf(his, sizeof his, "%llu", ihi);
            check_integer_range(flag, los, his);
        }
        /* a numeric flag states its default */
        if (!strstr(line, "(default ")) fail_msg("no default in '%s'", line);
        checked++;
    }
    free(text);
    assert_true(lines >= 40);
    assert_true(checked >= 18);
    /* the two list-valued flags, at their stated limits */
    expect_code("--shape", "3x1024x1024", 0);
    expect_code("--shape", "1x1x1", 0);
    expect_code("--shape", "4x8x8", 2);
    expect_code("--shape", "3x1025x8", 2);
    expect_code("--shape", "3x0x8", 2);
    expect_code("--chunks", "3", 2); /* inside 1..256 but not a power of two, as --help says */
    expect_code("--chunks", "64", 0);
    expect_code("--lr-steps", "1,1000000", 0);
    expect_code("--lr-steps", "0", 2);
    expect_code("--lr-steps", "1000001", 2);
    expect_code("--lr-steps", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", 0);
    expect_code("--lr-steps", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", 2);
}

/* Through the binary once: a value just past a stated end exits 2 naming the flag and range. */
static void test_cli_exit_code(void **state) {
    (void)state;
    char *out;
    int rc = tu_run_dptrain(&out, "--epochs 100001");
    if (rc != 2 || !tu_contains(out, "--epochs: expected an integer in 1..100000")) fail_msg("exit %d:\n%s", rc, out);
    free(out);
    rc = tu_run_dptrain(&out, "--help");
    assert_int_equal(rc, 0);
    assert_true(tu_contains(out, "--epochs E           epochs to train, range 1..100000 (default 10)"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_ranges_match_parser),
        cmocka_unit_test(test_cli_exit_code),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
