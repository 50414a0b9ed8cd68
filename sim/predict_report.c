/* predict_report.c: the overhead model's console table, log lines and plot. */
#include "sim/predict_report.h"
#include "sim/predict.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "io/atomic.h"
#include "report/svg_png.h"

static const char *const mode_names[2] = {"ddp", "dp"};

dp_status dp_report_predictions(dp_reporter *r, const char *what, const dp_predict_series *s) {
    const dp_topology *t = s->topo;
    if (r->console) {
        printf("predicted on %s (%s, up to %d devices): %s\n", t->name, t->device, t->devices, what);
        printf("  mode devices  step ms  epoch s  speedup  effic.  compute ms  exposed comm ms  DP serial ms  host ms\n");
    }
    for (int m = 0; m < 2; m++)
        for (int i = 0; i < s->n; i++) {
            const dp_prediction *p = &s->pred[m][i];
            if (r->console)
                printf("  %-4s %7d %8.3f %8.2f %8.2f %7.2f %11.3f %16.3f %13.3f %8.3f%s\n", mode_names[m], s->devices[i],
                       1e3 * p->step_s, p->epoch_s, p->speedup, p->efficiency, 1e3 * p->compute_s,
                       1e3 * p->exposed_comm_s, 1e3 * p->serial_s, 1e3 * p->host_s,
                       s->devices[i] > t->devices ? "  (more devices than the topology has)" : "");
            if (dp_report_logging(r)) {
                dp_json j = dp_json_begin("predict");
                dp_json_str(&j, "topology", t->name);
                dp_json_str(&j, "mode", mode_names[m]);
                dp_json_int(&j, "devices", s->devices[i]);
                dp_json_real(&j, "step_s", "%.9g", p->step_s);
                dp_json_real(&j, "epoch_s", "%.9g", p->epoch_s);
                dp_json_real(&j, "speedup", "%.6g", p->speedup);
                dp_json_real(&j, "efficiency", "%.6g", p->efficiency);
                dp_json_real(&j, "compute_s", "%.9g", p->compute_s);
                dp_json_real(&j, "exposed_comm_s", "%.9g", p->exposed_comm_s);
                dp_json_real(&j, "serial_s", "%.9g", p->serial_s);
                dp_json_real(&j, "host_s", "%.9g", p->host_s);
                dp_json_real(&j, "comm_s", "%.9g", p->comm_s);
                dp_json_int(&j, "collectives", p->collectives);
                DP_TRY(dp_report_json(r, &j, 0));
            }
        }
    if (r->console) fflush(stdout);
    return DP_OK;
}

static void xml_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
    }
}

/* The plot as an SVG document into f. */
static void plot_svg(FILE *f, const char *title, const dp_predict_series *s, int n_series) {
    static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
                                         "#e377c2", "#17becf"};
    const double W = 760, H = 480, L = 70, R = 230, T = 50, B = 60; /* plot box margins */
    int nmax = 1;
    double ymax = 1;
    for (int k = 0; k < n_series; k++)
        for (int i = 0; i < s[k].n; i++) {
            if (s[k].devices[i] > nmax) nmax = s[k].devices[i];
            for (int m = 0; m < 2; m++)
                if (s[k].pred[m][i].speedup > ymax) ymax = s[k].pred[m][i].speedup;
        }
    if (nmax > ymax) ymax = nmax; /* room for the ideal line */
    ymax = ceil(ymax);
    const double lx = log2((double)nmax) > 0 ? log2((double)nmax) : 1;
#define X(n) (L + (W - L - R) * log2((double)(n)) / lx)
#define Y(v) (H - B - (H - T - B) * (v) / ymax)
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
               "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<text x=\"%.0f\" y=\"24\" font-size=\"15\" text-anchor=\"middle\">", (W - R + L) / 2);
    xml_text(f, title);
    fprintf(f, "</text>\n");
    /* axes, grid, ticks */
    for (double v = 0; v <= ymax + 1e-9; v += ymax > 10 ? 2 : (ymax > 4 ? 1 : 0.5)) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, Y(v), W - R, Y(v));
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", L - 6, Y(v) + 4, v);
    }
    for (int n = 1; n <= nmax; n *= 2) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", X(n), (double)T, X(n),
                H - B);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%d</text>\n", X(n), H - B + 18, n);
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"black\"/>\n", L,
            (double)T, W - L - R, H - T - B);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">devices</text>\n", (W - R + L) / 2, H - 18);
    fprintf(f, "<text x=\"18\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 18 %.1f)\">predicted speedup "
               "(epoch time of 1 device / N devices)</text>\n", (H - B + T) / 2, (H - B + T) / 2);
    /* ideal, and 1x */
    fprintf(f, "<polyline fill=\"none\" stroke=\"#888\" stroke-dasharray=\"2,3\" points=\"");
    for (int n = 1; n <= nmax; n *= 2) fprintf(f, "%.1f,%.1f ", X(n), Y(n));
    fprintf(f, "\"/>\n");
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n", L, Y(1), W - R, Y(1));
    double ly = T + 10;
    for (int k = 0; k < n_series; k++) {
        const char *c = colors[k % 8];
        for (int m = 0; m < 2; m++) {
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", c,
                    m ? " stroke-dasharray=\"7,4\"" : "");
            /* a topology is drawn up to the devices it has (the table flags the rows beyond) */
            for (int i = 0; i < s[k].n && s[k].devices[i] <= s[k].topo->devices; i++)
                fprintf(f, "%.1f,%.1f ", X(s[k].devices[i]), Y(s[k].pred[m][i].speedup));
            fprintf(f, "\"/>\n");
            for (int i = 0; i < s[k].n && s[k].devices[i] <= s[k].topo->devices; i++)
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", X(s[k].devices[i]),
                        Y(s[k].pred[m][i].speedup), c);
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>\n",
                    W - R + 15, ly, W - R + 45, ly, c, m ? " stroke-dasharray=\"7,4\"" : "");
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">", W - R + 52, ly + 4);
            xml_text(f, s[k].topo->name);
            fprintf(f, " %s</text>\n", m ? "DP" : "DDP");
            ly += 18;
        }
    }
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\" stroke-dasharray=\"2,3\"/>\n"
               "<text x=\"%.1f\" y=\"%.1f\">ideal (N x)</text>\n", W - R + 15, ly, W - R + 45, ly, W - R + 52, ly + 4);
    fprintf(f, "</svg>\n");
#undef X
#undef Y
}

dp_status dp_plot_kind(const char *path) {
    const char *dot = strrchr(path, '.');
    if (dot && strcasecmp(dot, ".svg") == 0) return DP_OK;
    if (dot && strcasecmp(dot, ".png") == 0)
        return dp_png_supported() ? DP_OK
                                  : dp_fail(DP_ERR_USAGE, "--plot %s: this build writes SVG only (install librsvg2-dev "
                                                          "and rebuild for PNG, or name the file .svg)", path);
    return dp_fail(DP_ERR_USAGE, "--plot %s: name an .svg or a .png file", path);
}

/* What dp_atomic_write puts in the plot's file: the drawing, or its rendering. */
typedef struct {
    const char *svg, *path;
    size_t len;
    int png;
} plot_file;

static dp_status write_plot(FILE *f, void *ctx) {
    const plot_file *o = ctx;
    if (o->png) return dp_svg_to_png(o->svg, o->len, 2.0, f, o->path); /* twice the size: sharp on a high-DPI screen */
    if (fwrite(o->svg, 1, o->len, f) != o->len)
        return dp_fail(DP_ERR_IO, "--plot %s: writing failed: %s", o->path, strerror(errno));
    return DP_OK;
}

dp_status dp_plot_speedup(const char *path, const char *title, const dp_predict_series *s, int n_series) {
    DP_TRY(dp_plot_kind(path));
    plot_file o = {.path = path, .png = strcasecmp(strrchr(path, '.'), ".png") == 0};
    char *svg = NULL;
    FILE *m = open_memstream(&svg, &o.len);
    if (!m) return dp_fail(DP_ERR_NOMEM, "--plot %s: out of memory for the drawing", path);
    plot_svg(m, title, s, n_series);
    if (fclose(m) != 0 || !svg) return free(svg), dp_fail(DP_ERR_NOMEM, "--plot %s: out of memory for the drawing", path);
    o.svg = svg;
    dp_status st = dp_atomic_write("--plot", path, write_plot, &o); /* the old plot or the whole new one */
    free(svg);
    return st;
}
