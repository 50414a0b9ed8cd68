#include "optim/schedule.h"

float dp_schedule_lr(const dp_schedule *s, int epoch, long step) {
    double lr = s->lr;
    if (s->scale_linear && s->ref_batch > 0) lr *= (double)s->global_batch / s->ref_batch;
    for (int i = 0; i < s->n_milestones; i++)
        if (epoch > s->milestones[i]) lr *= s->gamma;
    if (s->warmup_steps > 0 && step < s->warmup_steps) lr *= (double)(step + 1) / (double)s->warmup_steps;
    return (float)lr;
}
