/* ranks.h: the multi-rank launch harness the NCCL suites share: several dptrain processes started the
 * way torchrun starts them (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR/PORT), each
 * under `timeout -s KILL` (a hang fails the test, never the CI job), and their checkpoint compared with
 * the sim's. */
#ifndef DP_TEST_RANKS_H
#define DP_TEST_RANKS_H

typedef struct {
    const char *dir;         /* the processes run in DIR; process p's output in DIR/<log><p>.log */
    int n;                   /* processes */
    const char *log;         /* "rank" or "proc" */
    const char *env;         /* variables set for every process (NULL: none) */
    const char *fault;       /* DP_NCCL_DOUBLE_FAULT for every process (NULL: none) */
    int timeout_s;
    const char *const *each; /* more arguments for process p (NULL: none) */
} rk_launch;

/* $DP_NCCL_DOUBLE, the test double's library (fails the test without it). */
const char *rk_double(void);
/* Runs l->n processes of `$DPTRAIN <args>` with the double preloaded; codes[p] is process p's exit
 * status (-1 if unknown). Returns the seconds the slowest took. */
double rk_run(const rk_launch *l, int codes[], const char *args_fmt, ...) __attribute__((format(printf, 3, 4)));
/* DIR/<log><p>.log (malloc'd, caller frees). */
char *rk_log(const char *dir, const char *log, int p);
/* Fails the test, printing every log, unless every process exited 0. */
void rk_expect_all_ok(const rk_launch *l, const int codes[]);
/* DIR/nccl.ckpt, written by the ranks, against `$DPTRAIN train --backend sim <sim args> --save
 * DIR/sim.ckpt`: the tensors bitwise equal, else the test fails naming `what` and the first difference. */
void rk_expect_equal_to_sim(const char *dir, const char *what, const char *sim_args_fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
