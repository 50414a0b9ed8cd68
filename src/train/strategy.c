/* strategy.c: the strategies --mode names (strategy.h). */
#include "train/strategy.h"

static const dp_strategy *const by_mode[] = {[DP_MODE_DDP] = &dp_strategy_ddp, [DP_MODE_DP] = &dp_strategy_dp};

const dp_strategy *dp_strategy_of(dp_mode m) { return by_mode[m]; }
