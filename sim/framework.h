/* framework.h: predicting DP and DDP from a measured single-device time of another framework
 * (PyTorch): the per-step costs that framework's DataParallel and DistributedDataParallel add
 * (a .framework file, measured by examples/bench/framework_costs.py), and the arithmetic that
 * puts the measured time, the overhead model's communication and those costs together
 * (docs/overhead-model.md, "Predicting from a measured single-device time"). Pure: no clocks. */
#ifndef DP_SIM_FRAMEWORK_H
#define DP_SIM_FRAMEWORK_H

#include "core/status.h"
#include "sim/model.h"

typedef struct {
    char name[64];
    char path[4096]; /* the file it was read from; PATH_MAX: any path a file opens by */
    /* seconds per step, each only on more than one device */
    double ddp_step_s;    /* DDP: the reducer's per-step work (prepare, finalize, hooks) */
    double ddp_bucket_s;  /* DDP: per gradient bucket (copy in, launch, wait, copy out), wire time apart */
    double dp_step_s;     /* DataParallel: forward's fixed Python (scatter, gather, parallel_apply set-up) */
    double dp_device_s;   /* DataParallel: per device (its thread, its scatter and gather share) */
    double dp_tensor_s;   /* DataParallel: per parameter or buffer tensor per device (replicate) */
} dp_framework;

/* A .framework file (or NAME: NAME.framework next to the presets). Every key is required. */
dp_status dp_framework_load(const char *path_or_name, dp_framework *f);
dp_status dp_framework_parse(const char *text, const char *origin, dp_framework *f);

/* What the model needs of the run besides the profile: its tensors and buckets. */
typedef struct {
    int tensors;          /* parameter and buffer tensors (what replicate copies) */
    int buckets;          /* DDP's gradient buckets */
} dp_framework_shape;

/* The framework's step on N devices from its measured step on one.
 * measured_step_s: the framework's single-device step at the measured batch b1; one: the overhead
 * model's prediction for one device at b1; model: its prediction for the query (mode, N devices,
 * global batch B); share: a device's part of the measured run's samples per step, (B / N) / b1.
 * The measured step less the model's own non-compute part on one device is the framework's
 * compute, split in proportion to the samples a device takes:
 *   step = (measured - (one.step - one.compute)) * share + (model.step - model.compute) + added(mode, N)
 * added = 0 on one device; DDP: ddp_step + buckets * ddp_bucket; DP: dp_step + N * (dp_device +
 * tensors * dp_tensor). out: model's fields with compute, host (+ added) and step replaced;
 * epoch_s = step * steps_per_epoch. DP_ERR_USAGE when the measured step is shorter than the model's
 * own per-step time on one device besides forward and backward: its host time (one.host_s: launches,
 * calls, the CPU trainer's overhead; at least one.step - one.compute) plus its loss and optimizer
 * (one.loss_opt_s), or not above one.step - one.compute. */
dp_status dp_framework_step(const dp_framework *f, const dp_framework_shape *sh, dp_predict_mode mode, int devices,
                            double share, double measured_step_s, const dp_prediction *one,
                            const dp_prediction *model, long steps_per_epoch, dp_prediction *out);

#endif
