/* profile_run.h: measuring a compute profile on the device at hand: each of `concurrent`
 * workers (one thread, its own replica) runs forward, loss, backward and an SGD step node by
 * node at `batch` samples, all at the same time, timing every node: with the clock on the CPU,
 * with the device's events on a GPU (one worker: a GPU is one device). Concurrent CPU workers
 * are what N processes (or a sim run's threads) sharing the memory bus see; one worker is one
 * device on its own. */
#ifndef DP_PROFILE_RUN_H
#define DP_PROFILE_RUN_H

#include "kernels/device.h"
#include "nn/model.h"
#include "sim/profile.h"

/* Fills the profile's shape: model, node names, kernel launches, parameters, buffers, buckets
 * (bucket_node: node after whose backward bucket k is complete, as the trainer maps them). */
dp_status dp_profile_describe(const dp_model *m, const int *bucket_node, dp_profile *p);
/* Adds (or replaces) the row (batch, concurrent) measured on dev (NULL: the CPU): medians over
 * `steps` steps after 2 warm-up steps, averaged over the workers. A device other than the host
 * takes one worker and needs timing events (kernels/device.h). */
dp_status dp_profile_measure(const dp_model *m, const dp_dev *dev, int batch, int concurrent, int steps,
                             dp_profile *p);

#endif
