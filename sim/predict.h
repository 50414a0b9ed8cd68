/* predict.h: the predictor's one entry point, for the command line (src/cli/): the overhead model
 * run after a training run (--predict, --save-profile) or instead of one (dptrain predict): it
 * times the model here (or reads --compute), predicts DP and DDP on the topologies asked for, and
 * reports (sim/predict.c); and `dptrain calibrate`, which measures a topology. Nothing below sim/
 * includes a sim/ header: the sim backend is reached through the backend table
 * (backends/backend_kind.h). */
#ifndef DP_SIM_PREDICT_H
#define DP_SIM_PREDICT_H

#include "train/trainer.h"

/* --save-profile can be written, --predict's topologies and --compute's profile read and fit
 * this run's model. */
dp_status dp_predict_precheck(const dp_config *c);
/* After t's run (rank 0's process): nothing unless --predict or --save-profile was given. */
dp_status dp_predict_run(dp_trainer *t);
/* `dptrain predict --compute P`: the prediction from the profile and the model's description
 * (shapes, parameters, buckets) alone: no trainer, no replicas, activations or batches, so its
 * memory is the model's description, whatever the batch (ResNet-18 at 256: megabytes, not 18 GB). */
dp_status dp_predict_from_profile(const dp_config *c);
/* `dptrain calibrate`: the backend's all-reduce sweep on every rank; rank 0 prints the table and
 * writes the topology file (--out). Reports its own failure on stderr; returns the status. */
dp_status dp_predict_calibrate(const dp_config *c);
/* DP_OK if path names a plot this build can write (.svg, or .png with librsvg); a usage error
 * otherwise, checked before a run so that a bad name does not cost the run. */
dp_status dp_plot_kind(const char *path);

#endif
