/* bench_cpu_spec: the device specification of one core of THIS machine, measured, for the roofline
 * transfer of examples/reports/derive_profiles.py (its `checks` writes build/cpu-here.spec with it
 * on first use, and again when /proc/cpuinfo names another CPU).
 *
 * A CPU profile's worker is one single-threaded lane, so both figures are of one thread:
 *   fp32_tflops         OpenBLAS sgemm 1024^3 (the library dptrain's layers call) on 1 thread:
 *                       the median over windows of --window seconds for --seconds in all
 *   mem_bandwidth_GBps  the STREAM triad a[i] = b[i] + s c[i] over three arrays of --mib MiB each
 *                       (12 bytes moved a float, as STREAM counts it) on 1 thread: the median pass
 * The median, not the best: the machine may be shared, and the spec should say what a layer
 * usually gets. The range (min-max) is in the comment beside each figure.
 *
 *   build/bench_cpu_spec [--out FILE] [--seconds S] [--window W] [--mib M]
 *
 * Writes the spec (`key value  # how`; the keys load_spec reads) on FILE, or stdout. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_dbl(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorted in place; the median of n > 0 values. */
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_dbl);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static float *fbuf(size_t n) {
    float *p = malloc(sizeof(float) * n);
    if (!p) {
        fprintf(stderr, "bench_cpu_spec: out of memory (%zu floats); give a smaller --mib\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    return p;
}

#define MAX_SAMPLES 4096

typedef struct {
    double med, lo, hi;
    int n;
} figure;

static figure summarise(double *v, int n) {
    figure f = {median(v, n), v[0], v[n - 1], n};
    return f;
}

/* GFLOP/s of sgemm 1024^3 on one thread, per window. */
static figure sgemm_rate(double seconds, double window) {
    const int n = 1024;
    float *A = fbuf((size_t)n * n), *B = fbuf((size_t)n * n), *C = fbuf((size_t)n * n);
    const double flop = 2.0 * n * n * n;
    int calls = 0;
    const double t0 = now();
    do {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
        calls++;
    } while (now() - t0 < 0.1);
    int per = (int)(calls * window / (now() - t0));
    if (per < 1) per = 1;
    static double r[MAX_SAMPLES];
    int w = 0;
    const double end = now() + seconds;
    while (w < MAX_SAMPLES && (w < 5 || now() < end)) {
        const double a = now();
        for (int i = 0; i < per; i++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
        r[w++] = flop * per / (now() - a) / 1e9;
    }
    free(A), free(B), free(C);
    return summarise(r, w);
}

/* GB/s of the triad over three arrays of `mib` MiB, per pass. */
static figure triad_rate(double seconds, size_t mib) {
    const size_t n = mib * 1024 * 1024 / sizeof(float);
    float *a = fbuf(n), *b = fbuf(n), *c = fbuf(n);
    const float s = 0.5f;
    static double r[MAX_SAMPLES];
    int w = 0;
    float sink = 0.0f;
    const double end = now() + seconds;
    for (int pass = 0; w < MAX_SAMPLES && (w < 5 || now() < end); pass++) {
        const double t = now();
        for (size_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
        const double dt = now() - t;
        sink += a[(size_t)pass % n];
        if (pass > 0) r[w++] = 12.0 * (double)n / dt / 1e9; /* the first pass faults the pages in */
    }
    free(a), free(b), free(c);
    if (sink == 12345.0f) fputs("", stderr); /* keeps the loop's stores */
    return summarise(r, w);
}

/* /proc/cpuinfo's first processor: "vendor_id", "cpu family", "model", "model name"; a
 * hypervisor flag. */
typedef struct {
    char vendor[64], family[16], model[16], name[128];
    int guest;
} cpu_id;

static void copy_value(char *dst, size_t cap, const char *line) {
    const char *v = strchr(line, ':');
    v = v ? v + 1 : line;
    while (*v == ' ' || *v == '\t') v++;
    snprintf(dst, cap, "%s", v);
    dst[strcspn(dst, "\n")] = 0;
}

static cpu_id read_cpu(void) {
    cpu_id id = {"unknown", "?", "?", "unknown", 0};
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return id;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '\n') break; /* the first processor only */
        if (!strncmp(line, "vendor_id", 9)) copy_value(id.vendor, sizeof id.vendor, line);
        else if (!strncmp(line, "cpu family", 10)) copy_value(id.family, sizeof id.family, line);
        else if (!strncmp(line, "model name", 10)) copy_value(id.name, sizeof id.name, line);
        else if (!strncmp(line, "model", 5) && (line[5] == ' ' || line[5] == '\t'))
            copy_value(id.model, sizeof id.model, line);
        else if (!strncmp(line, "flags", 5)) id.guest = strstr(line, " hypervisor") != NULL;
    }
    fclose(f);
    return id;
}

/* One word (load_spec splits on blanks): blanks and '#' become '-'. */
static void one_word(char *s) {
    for (; *s; s++)
        if (*s == ' ' || *s == '\t' || *s == '#') *s = '-';
}

static void usage(FILE *f) {
    fprintf(f, "usage: bench_cpu_spec [--out FILE] [--seconds S] [--window W] [--mib M]\n"
               "  defaults: --seconds 2 (per figure) --window 0.1 --mib 64 (per triad array); spec on stdout\n");
}

int main(int argc, char **argv) {
    const char *out = NULL;
    double seconds = 2.0, window = 0.1;
    long mib = 64;
    for (int i = 1; i < argc; i++) {
        const int more = i + 1 < argc;
        char *end = NULL;
        if (!strcmp(argv[i], "--out") && more) out = argv[++i];
        else if (!strcmp(argv[i], "--seconds") && more) seconds = strtod(argv[++i], &end);
        else if (!strcmp(argv[i], "--window") && more) window = strtod(argv[++i], &end);
        else if (!strcmp(argv[i], "--mib") && more) mib = strtol(argv[++i], &end, 10);
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "bench_cpu_spec: %s: unknown or missing its value\n", argv[i]);
            usage(stderr);
            return 2;
        }
        if (end && *end) {
            fprintf(stderr, "bench_cpu_spec: %s: '%s' is not a number\n", argv[i - 1], argv[i]);
            return 2;
        }
    }
    if (!(seconds > 0 && seconds <= 600) || !(window > 0 && window <= seconds) || mib < 1 || mib > 4096) {
        fprintf(stderr, "bench_cpu_spec: --seconds 0..600, --window 0..seconds, --mib 1..4096\n");
        return 2;
    }
    FILE *f = out ? fopen(out, "w") : stdout; /* before the 4 s of measuring */
    if (!f) {
        fprintf(stderr, "bench_cpu_spec: --out %s: cannot write it; give a writable path\n", out);
        return 2;
    }
    openblas_set_num_threads(1);
    const cpu_id id = read_cpu();
    const figure g = sgemm_rate(seconds, window);
    const figure m = triad_rate(seconds, (size_t)mib);
    char device[128], when[64];
    snprintf(device, sizeof device, "%s", id.name);
    one_word(device);
    const time_t t = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&t));
    fprintf(f,
            "# One core of this machine, MEASURED by build/bench_cpu_spec on %s: %s (%s, family %s, model %s)%s.\n"
            "# The source of derive_profiles.py's transfer checks on a CPU (docs/overhead-model.md).\n"
            "device %s\nkind cpu\n"
            "cpu %s/%s/%s/%s    # /proc/cpuinfo: vendor/family/model/name; derive_profiles.py re-measures when it changes\n"
            "fp32_tflops %.4f    # OpenBLAS sgemm 1024^3, 1 thread: median of %d windows of %g s (%.1f-%.1f GFLOP/s)\n"
            "mem_bandwidth_GBps %.2f    # triad over 3 x %ld MiB, 1 thread, 12 bytes a float: median of %d passes (%.2f-%.2f GB/s)\n"
            "launch_us 0    # a CPU node is a function call\n",
            when, id.name, id.vendor, id.family, id.model, id.guest ? ", a virtual machine" : "", device, id.vendor,
            id.family, id.model, device, g.med / 1e3, g.n, window, g.lo, g.hi, m.med, mib, m.n, m.lo, m.hi);
    if (out && fclose(f) != 0) {
        fprintf(stderr, "bench_cpu_spec: --out %s: write failed; check the disk\n", out);
        return 2;
    }
    if (out) printf("wrote %s: fp32 %.1f GFLOP/s, %.2f GB/s (%s)\n", out, g.med, m.med, id.name);
    return 0;
}
