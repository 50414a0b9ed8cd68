/* calibrate.h: `dptrain calibrate`: the all-reduce of the backend at hand over a sweep of message
 * sizes, nccl-tests style (time, algbw = bytes / time, busbw = algbw x 2(N-1)/N), and the alpha
 * and bus bandwidth fitted to them, written as a topology file for the overhead model. */
#ifndef DP_SIM_CALIBRATE_H
#define DP_SIM_CALIBRATE_H

#include <stdio.h>

#include "backends/backend.h"
#include "sim/topology.h"

/* The largest message the fit uses (the sweep goes on to 64 MiB for the table). */
#define DP_CALIBRATE_FIT_BYTES (1024.0 * 1024.0)

/* The work each rank does per training-like step before its collective (sync_steps). */
#define DP_CALIBRATE_STEP_S 500e-6
#define DP_CALIBRATE_STEPS 500

/* Fits time = 2(N-1) alpha + (2(N-1)/N) bytes / bus_bw to n (bytes, seconds) points, weighting
 * each by 1/seconds^2 (relative error), so small and large messages count alike. */
dp_status dp_fit_alpha_beta(const double *bytes, const double *seconds, int n, int world, double *alpha,
                            double *bus_bw);
/* Fits one of DataParallel's collectives (broadcast, reduce: (N-1) alpha + S/B; gather, scatter:
 * (N-1)(alpha + S/B), S one share) to n (bytes, seconds) points, weighted as above. */
dp_status dp_fit_kind(dp_coll_kind kind, const double *bytes, const double *seconds, int n, int world, double *alpha,
                      double *bw);
/* Runs the sweep on b (every rank calls it); rank 0 prints the table on `out` and, if path,
 * writes the topology (named `name`). */
dp_status dp_calibrate(dp_backend_t b, const char *name, const char *path, FILE *out);

#endif
