/* paths_check.h: no output of a run may replace another output or anything the run reads. The
 * inputs are one list: the files given to --load, --init-from, --resume, --compute and --framework,
 * each file of the --predict / --topology list, and the data set's files under --data; the
 * checkpoint directory's own names (its checkpoints, temporaries and lock) count as outputs. */
#ifndef DP_PATHS_CHECK_H
#define DP_PATHS_CHECK_H

#include "core/status.h"
#include "train/config.h"

/* Checked after parsing, before anything is read or created: a refused run leaves nothing behind. */
dp_status dp_check_output_paths(const dp_config *c);

#endif
