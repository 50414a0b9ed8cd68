/* progress.h: the console progress bar: when to show it, the terminal's width, and rendering
 * one line of it into a buffer (a pure function, so tests check the layout at any width). */
#ifndef DP_REPORT_PROGRESS_H
#define DP_REPORT_PROGRESS_H

#include <stddef.h>

typedef struct {
    int epoch, epochs;
    int batch, n_batches;   /* batches done in this epoch, of n_batches */
    double loss;            /* running mean over the epoch */
    double images_per_s;
    double elapsed_s;       /* since the epoch started: gives the ETA */
} dp_progress;

/* Renders the bar into buf as at most width-1 visible characters (the last column is left
 * free, so no terminal wraps the line), parts dropped in order of importance as the width
 * shrinks: "epoch 3/10 [=====>    ] 120/938 loss 0.4321 5234 img/s ETA 0:12". Returns the
 * length written (buf always NUL-terminated when cap > 0). */
int dp_progress_render(char *buf, size_t cap, int width, const dp_progress *p);
/* Columns of the terminal on fd: TIOCGWINSZ, else $COLUMNS, else 80; at least 1. */
int dp_terminal_width(int fd);
/* 1 when started by an MPI launcher (mpirun/srun give rank 0 a pseudo-terminal, so isatty
 * alone would put the bar into redirected output). */
int dp_under_mpi_launcher(void);
/* The auto/forced decision: forced = -1 auto, 0 off, 1 on. */
int dp_progress_wanted(int forced, int fd);

#endif
