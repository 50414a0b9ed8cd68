/* nccl_watchdog.h: a thread beside each NCCL communicator that ends the process when a call into
 * NCCL outlives its deadline by a grace period, as PyTorch's ProcessGroupNCCL watchdog does.
 * The main thread's own polling (backends/nccl.c: settle) ends a collective that makes no
 * progress for --timeout seconds by aborting the communicator, but nothing on that thread can end
 * a call that never returns: ncclCommAbort itself can block when a peer was killed (NCCL issues
 * 863, 992, 1013), and so can finalize and destroy. The watchdog prints which rank and which call
 * hung, and _exit()s with status 1, so that a launcher sees a failed rank instead of a hung one. */
#ifndef DP_NCCL_WATCHDOG_H
#define DP_NCCL_WATCHDOG_H

#include "core/status.h"

typedef struct dp_nccl_watchdog dp_nccl_watchdog;

/* Starts the thread. `who` names the rank in its message ("rank 1 (GPU 1)"); a call that runs
 * longer than deadline_s + grace_s ends the process. */
dp_status dp_nccl_watchdog_start(const char *who, double deadline_s, double grace_s, dp_nccl_watchdog **out);
/* Brackets a call that may block: `what` ("all-reduce", "aborting the communicator") must stay
 * valid until the matching leave. Calls do not nest. NULL w: nothing. */
void dp_nccl_watchdog_enter(dp_nccl_watchdog *w, const char *what);
/* The same for a call that should return at once (an abort): it gets the grace period only. */
void dp_nccl_watchdog_enter_brief(dp_nccl_watchdog *w, const char *what);
void dp_nccl_watchdog_leave(dp_nccl_watchdog *w);
/* Stops and joins the thread (NULL: nothing). */
void dp_nccl_watchdog_stop(dp_nccl_watchdog *w);

#endif
