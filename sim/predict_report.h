/* predict_report.h: how the overhead model's predictions are shown: a table per topology on the
 * console, one `predict` object per (topology, mode, devices) in --log, and a plot of predicted
 * speedup against devices: drawn as SVG (by hand: no Python needed), rasterized for a PNG
 * (report/svg_png.h). */
#ifndef DP_PREDICT_REPORT_H
#define DP_PREDICT_REPORT_H

#include "report/report.h"
#include "sim/model.h"

typedef struct {
    const dp_topology *topo;
    int n;                       /* device counts */
    const int *devices;
    const dp_prediction *pred[2]; /* [DP_PREDICT_DDP], [DP_PREDICT_DP]: n each */
} dp_predict_series;

/* The table on the console (if r->console) and the log lines (if r->log). `what` describes the
 * workload ("lenet, batch 64, 938 steps/epoch, compute: cpu profile"). */
dp_status dp_report_predictions(dp_reporter *r, const char *what, const dp_predict_series *s);
/* Speedup against devices for every series, DDP solid and DP dashed, and the ideal line. (Whether
 * a path names a plot this build can write: dp_plot_kind, sim/predict.h.) */
dp_status dp_plot_speedup(const char *path, const char *title, const dp_predict_series *s, int n_series);

#endif
