/* signals.c: the stop request of a user's Ctrl-C or a scheduler's SIGTERM. */
#include "train/signals.h"

#include <signal.h>
#include <string.h>

static volatile sig_atomic_t pending;

static void on_signal(int sig) {
    if (!pending) pending = sig;
}

void dp_signals_install(void) {
    pending = 0; /* a run starts with no request (an earlier run in this process may have had one) */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND | SA_RESTART; /* the second one kills; reads and waits carry on */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int dp_signals_pending(void) { return pending; }

void dp_signals_restore(void) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
}

const char *dp_signal_name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal"; }
