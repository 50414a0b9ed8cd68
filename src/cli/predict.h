/* predict.h: the overhead model run from the command line after a training run (--predict,
 * --save-profile) or instead of one (dptrain predict): it times the model here (or reads
 * --compute), predicts DP and DDP on the topologies asked for, and reports (cli/predict.c). */
#ifndef DP_CLI_PREDICT_H
#define DP_CLI_PREDICT_H

#include "train/trainer.h"

/* --save-profile can be written, --predict's topologies and --compute's profile read and fit
 * this run's model. */
dp_status dp_predict_precheck(const dp_config *c);
/* After t's run (rank 0's process): nothing unless --predict or --save-profile was given. */
dp_status dp_trainer_predict(dp_trainer *t);
/* `dptrain predict --compute P`: the prediction from the profile and the model's description
 * (shapes, parameters, buckets) alone: no trainer, no replicas, activations or batches, so its
 * memory is the model's description, whatever the batch (ResNet-18 at 256: megabytes, not 18 GB). */
dp_status dp_predict_from_profile(const dp_config *c);

#endif
