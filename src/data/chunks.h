/* chunks.h: the canonical order in which a step's sums are taken, which makes results
 * bitwise the same for any replica count, thread count, bucketing and accumulation split.
 *
 * A step covers E = batch * accumulate positions of the epoch's order. They are cut into C
 * chunks by residue (--chunks C, a power of two): chunk j holds positions j, j+C, j+2C, ...
 * Every per-sample sum (weight gradients, BN sums, the loss) is taken within a chunk in
 * position order, by one single-threaded kernel call, and the C chunk partials are combined
 * by one fixed pairwise tree: chunk j with chunk j + C/2 first, then residues mod C/4, and
 * so on down to residue 0 mod 1.
 *
 * DistributedSampler gives replica r of N the positions congruent to r mod N. When N divides
 * C those are exactly the chunks j = r, r+N, r+2N, ..., and the tree's first log2(C/N) levels
 * combine only chunks of one replica: the replica sums its C/N chunks (its "lanes") locally
 * with the same tree (core/treesum.h), and the all-reduce adds the replicas' partials with the tree's last
 * log2(N) levels (replica r with r + N/2 first: dp_tree_sum over replicas). Threads only
 * decide which lane runs where; buckets only decide when a slice is reduced; accumulation
 * only decides in which micro-step a lane runs. None of them changes an addition.
 *
 * When N does not divide C (N = 3, or more replicas than chunks), a replica's share keeps
 * DistributedSampler's order and is cut into max(1, C/N) contiguous lanes: deterministic for
 * that N, equal to other N only within float rounding.
 *
 * DataParallel (contiguous = 1) scatters a batch as nn.DataParallel does: each replica gets one
 * contiguous block of it (block b of N: positions [ceil(b E / N), ceil((b+1) E / N)), which is
 * torch.chunk's split whenever N divides E). The chunks are then contiguous blocks too: chunk k
 * holds positions [ceil(k E / C), ceil((k+1) E / C)), and it takes the tree's place (its label)
 * bitrev(k) over log2(C) bits. Replica r's lanes are the labels r, r+N, ..., as above, so the
 * same tree and all-reduce apply; their blocks bitrev(r + N i) = bitrev_N(r) (C/N) + bitrev(i)
 * are the C/N consecutive blocks of block bitrev_N(r) of N. So replica r computes on one
 * contiguous block (replica 0 on the first), and the sums are bitwise the same for every N that
 * divides C, though not DistributedSampler's (DDP's) sums: the chunks hold other samples. */
#ifndef DP_DATA_CHUNKS_H
#define DP_DATA_CHUNKS_H

#include <stddef.h>

#define DP_CHUNKS_DEFAULT 8
#define DP_CHUNKS_MAX 256

typedef struct {
    int world;       /* N replicas */
    int chunks;      /* C, a power of two */
    int accumulate;  /* K batches per optimizer step */
    int batch;       /* B samples per batch */
    int canonical;   /* N divides C: the canonical tree holds */
    int lanes;       /* lanes (gradient partials) per replica and step */
    int contiguous;  /* DataParallel's scatter: a replica's share is a contiguous block */
} dp_chunk_plan;

/* contiguous: DataParallel's scatter (above); 0: DistributedSampler's shares (DDP). */
void dp_chunk_plan_init(dp_chunk_plan *p, int world, int chunks, int accumulate, int batch, int contiguous);
/* Samples lane i of replica r holds in a step of E samples. */
int dp_chunk_lane_count(const dp_chunk_plan *p, int E, int r, int i);
/* Position within the step of sample t of lane i of replica r. */
int dp_chunk_lane_pos(const dp_chunk_plan *p, int E, int r, int i, int t);
/* The lanes that run in micro-step mu of a step with n_micro micro-steps: [*first, *first + *count). */
void dp_chunk_micro_lanes(const dp_chunk_plan *p, int mu, int n_micro, int *first, int *count);
/* The most samples one lane holds in any step. */
int dp_chunk_max_lane(const dp_chunk_plan *p);

#endif
