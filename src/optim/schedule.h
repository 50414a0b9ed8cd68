/* schedule.h: the learning rate at each optimizer step.
 *   base = lr * (lr_scale_linear ? global_batch / ref_batch : 1)
 *   step decay: times gamma for every milestone epoch already reached (torch MultiStepLR)
 *   warm-up: linear from base/warmup_steps to base over the first warmup_steps steps */
#ifndef DP_SCHEDULE_H
#define DP_SCHEDULE_H

#define DP_MAX_LR_STEPS 16

typedef struct {
    float lr;
    int scale_linear;     /* --lr-scale linear */
    int ref_batch;        /* --lr-ref-batch */
    int global_batch;
    int milestones[DP_MAX_LR_STEPS]; /* epochs (1-based: "10" = from the start of epoch 11) */
    int n_milestones;
    float gamma;
    long warmup_steps;    /* 0: none */
} dp_schedule;

/* epoch counts from 1, step (optimizer steps so far, before this one) from 0. */
float dp_schedule_lr(const dp_schedule *s, int epoch, long step);

#endif
