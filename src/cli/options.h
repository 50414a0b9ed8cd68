/* options.h: the command line -> dp_config, with every value checked against its range. */
#ifndef DP_OPTIONS_H
#define DP_OPTIONS_H

#include "train/config.h"

typedef enum { DP_ACTION_RUN = 0, DP_ACTION_HELP, DP_ACTION_VERSION } dp_action;

/* Fills c (after dp_config_defaults) from argv. A bad flag or value returns DP_ERR_USAGE with
 * a message naming the flag, what was given and what is allowed. */
dp_status dp_parse_args(int argc, char **argv, dp_config *c, dp_action *action);
void dp_print_usage(FILE *f);
void dp_print_version(FILE *f);

#endif
