/* signals.h: SIGINT / SIGTERM as a request to stop at the next step boundary. The handler only
 * records the signal (async-signal-safe); SA_RESETHAND puts the default action back, so a second
 * Ctrl-C ends the process at once. */
#ifndef DP_SIGNALS_H
#define DP_SIGNALS_H

void dp_signals_install(void);
/* The first stop signal received (SIGINT or SIGTERM), 0 if none. */
int dp_signals_pending(void);
/* Back to the default actions (after training: nothing left to finish cleanly). */
void dp_signals_restore(void);
const char *dp_signal_name(int sig);

#endif
