/* test_fakegpu_counts.c: what a LeNet training step costs a GPU, counted on the fake GPU
 * (tests/fakegpu/): the kernels and copies the host launches, the nodes the replayed graphs run,
 * and the host waits, per optimizer step, for DDP at --chunks 1 and 8, --replicas 1, 4 and 8, DP
 * at --replicas 4, and the NCCL backend through its test double at world 2 (two fake GPUs in this
 * process, as test_nccl_fakegpu.c runs them), and LeNet-BN at --chunks 8; and DDP with several
 * steps a launch (--steps-per-graph). Each case prints one
 * line and is held to the bounds in `cases` below: a change that makes a step launch more, or wait
 * more, fails here and must say why in the bound it raises. Nothing is timed.
 *
 * A step's cost is taken from a run of 12 steps less one of 4, over 8 steps, so that set-up, the
 * first step's recording, the evaluation and the teardown cancel out (K steps a launch: 10K less
 * 2K, over 8K). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_config.h"
#include "fakegpu_util.h"
#include "trainrun.h"

typedef struct {
    const char *what, *model;
    dp_mode mode;
    int replicas, chunks, nccl_gpus; /* nccl_gpus: --backend nccl --gpus 0..n-1 (replicas 1) */
    /* the bounds, per optimizer step: kernels + copies the GPU runs (launched or as graph nodes),
       host launches (eager kernels and copies, and graph launches), host waits */
    double max_work, max_launches, max_waits;
    int k; /* --steps-per-graph (0: the default, 1) */
} count_case;

static const count_case cases[] = {
    /* Each layer's call over all lanes of a device is one launch (kernels/kcall.h, passes.c), so the
       step's kernels do not grow with the lanes: --chunks 8 ran 202 kernels a step on lane streams,
       --replicas 4 and 8 209, DP at 4 220, the NCCL double at world 2 212. What still grows with the
       replicas is each replica's own work outside the passes (its uploads, tree sums, optimizer). */
    /* Fused layer sequences (src/nn/fuse.h: conv+relu+maxpool and bn+relu forward, maxpool+relu
       backward) took a LeNet step from 34 operations to 28 (35 to 29 at --chunks 8, 73 and 113 to 67
       and 107 at --replicas 4 and 8, DP 123 to 117) and a LeNet-BN step from 75 to 69. */
    {"ddp --chunks 1", "lenet", DP_MODE_DDP, 1, 1, 0, 28, 7, 1, 1},
    {"ddp --chunks 8", "lenet", DP_MODE_DDP, 1, 8, 0, 29, 7, 1, 1},
    {"ddp --replicas 4", "lenet", DP_MODE_DDP, 4, 8, 0, 67, 26, 1, 1},
    {"ddp --replicas 8", "lenet", DP_MODE_DDP, 8, 8, 0, 107, 50, 1, 1},
    /* the device part (replication, scatter, passes, gather, the master's loss and its step sums,
       the gradients' reduce) and the optimizer step recorded as graphs: before, every one of its 116
       operations was a launch and the step waited 4 times (the records, the lanes' losses and hits
       came down to the host); the master's sums on its device add 7 graph nodes */
    {"dp --replicas 4", "lenet", DP_MODE_DP, 4, 8, 0, 117, 19, 1, 1},
    /* 76 before the fusion: each of the two GPUs runs six fewer calls a step */
    {"nccl double, world 2", "lenet", DP_MODE_DDP, 1, 8, 2, 64, 64, 1, 1},
    /* batch norm: the lanes' sums are added between the stretches, and handed back to the lanes
       in one call (458 kernels a step on lane streams, 115 with the sums handed back one by one) */
    {"lenet-bn, ddp --chunks 8", "lenet-bn", DP_MODE_DDP, 1, 8, 0, 69, 7, 1, 1},
    /* --steps-per-graph K (exec/launch.h): K steps a graph launch, each step's indices and the
       host's part of its metrics uploaded inside it, the metrics read with one wait after it:
       launches and host waits a step are 1/K (one step a launch: 7 launches and 1 wait above). The
       work stays a step's: the uploads move into the launch, which adds the state's copy aside
       (3 copies a replica) and a download per launch. */
    {"ddp --chunks 1, K 4", "lenet", DP_MODE_DDP, 1, 1, 0, 28, 0.25, 0.25, 4},
    {"ddp --chunks 8, K 8", "lenet", DP_MODE_DDP, 1, 8, 0, 29, 0.125, 0.125, 8},
    {"ddp --replicas 4, K 8", "lenet", DP_MODE_DDP, 4, 8, 0, 67, 0.125, 0.125, 8},
    {"lenet-bn, ddp --chunks 8, K 8", "lenet-bn", DP_MODE_DDP, 1, 8, 0, 69, 0.125, 0.125, 8},
};

typedef struct {
    dp_fakegpu_launch_counts l;
    unsigned long replays, waits;
} counts;

static counts now(void) { return (counts){dp_fakegpu_launches(), dp_fakegpu_replays(), dp_fakegpu_host_waits()}; }

/* The NCCL double's hooks into the fake GPUs; 0 where it is not preloaded (a run outside ctest). */
static int nccl_double(void) {
#if DP_HAVE_NCCL
    void (*set)(void *(*)(const void *), void (*)(const void *), void (*)(const void *, void *, const void *, size_t)) =
        NULL;
    *(void **)&set = dlsym(RTLD_DEFAULT, "dp_nccl_double_set_hooks");
    if (!set) return 0;
    set(dp_fakegpu_host_address, dp_fakegpu_stream_sync, dp_fakegpu_stream_write);
    return 1;
#else
    return 0;
#endif
}

/* What a run of `steps` steps of case k cost the fake GPUs. */
static counts run_case(const count_case *k, int steps) {
    dp_config c;
    tr_base_config(&c, k->model);
    c.device = "fakegpu", c.mode = k->mode, c.replicas = k->replicas, c.chunks = k->chunks, c.max_steps = steps;
    if (k->k) c.steps_per_graph = k->k, c.data.samples = 64 * 96; /* one epoch holds the longer run */
    if (k->nccl_gpus) {
        c.backend = "nccl", c.n_gpus = k->nccl_gpus;
        for (int i = 0; i < k->nccl_gpus; i++) c.gpus[i] = i;
    }
    const counts a = now();
    tr_result r = tr_run(&c);
    tr_free(&r);
    const counts b = now();
    return (counts){.l = {.kernels = b.l.kernels - a.l.kernels,
                          .copies = b.l.copies - a.l.copies,
                          .graph_kernels = b.l.graph_kernels - a.l.graph_kernels,
                          .graph_copies = b.l.graph_copies - a.l.graph_copies},
                    .replays = b.replays - a.replays,
                    .waits = b.waits - a.waits};
}

#define PER_STEP(field) (((double)more.field - (double)few.field) / (8.0 * K))

static void test_counts_per_step(void **state) {
    (void)state;
    FGT_OK(dp_fakegpu_register());
    const int have_nccl = nccl_double();
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const count_case *k = &cases[i];
        if (k->nccl_gpus && !have_nccl) {
            print_message("%-26s skipped: the NCCL test double is not preloaded\n", k->what);
            continue;
        }
        /* K steps a launch: from the third launch on (the first runs eagerly, the second records) */
        const int K = k->k > 1 ? k->k : 1, n_few = K > 1 ? 2 * K : 4;
        const counts few = run_case(k, n_few), more = run_case(k, n_few + 8 * K);
        const double kernels = PER_STEP(l.kernels), copies = PER_STEP(l.copies);
        const double g_kernels = PER_STEP(l.graph_kernels), g_copies = PER_STEP(l.graph_copies);
        const double replays = PER_STEP(replays), waits = PER_STEP(waits);
        const double work = kernels + copies + g_kernels + g_copies, launches = kernels + copies + replays;
        print_message("%-26s per step: %7.2f kernels + %6.2f copies launched, %6.2f graph launches of %7.2f kernel "
                      "+ %6.2f copy nodes; %7.2f launches, %7.2f operations in all; %5.2f host waits\n",
                      k->what, kernels, copies, replays, g_kernels, g_copies, launches, work, waits);
        if (work > k->max_work || launches > k->max_launches || waits > k->max_waits) {
            print_error("%s: %.2f operations (bound %.2f), %.2f launches (bound %.2f), %.2f host waits (bound %.2f) a "
                        "step\n", k->what, work, k->max_work, launches, k->max_launches, waits, k->max_waits);
            failed = 1;
        }
    }
    if (failed) fail_msg("a case went over its bounds (above)");
}

int main(void) {
    setenv("DP_FAKEGPU_DELAY_US", "0", 0); /* counts do not depend on the delays: no need to wait them */
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_counts_per_step)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
