/* chunks.c: the canonical summation plan (chunks.h). */
#include "data/chunks.h"

void dp_chunk_plan_init(dp_chunk_plan *p, int world, int chunks, int accumulate, int batch, int contiguous) {
    p->contiguous = contiguous != 0;
    p->world = world < 1 ? 1 : world;
    p->chunks = chunks < 1 ? 1 : chunks;
    p->accumulate = accumulate < 1 ? 1 : accumulate;
    p->batch = batch < 1 ? 1 : batch;
    p->canonical = p->chunks % p->world == 0;
    p->lanes = p->canonical ? p->chunks / p->world : (p->chunks / p->world > 1 ? p->chunks / p->world : 1);
}

/* Fallback: replica r's share in DistributedSampler order, lane i a contiguous piece of it. */
static int share_count(const dp_chunk_plan *p, int E, int r) { return E > r ? (E - r + p->world - 1) / p->world : 0; }
static int piece_lo(const dp_chunk_plan *p, int n, int i) { return (int)((long long)n * i / p->lanes); }

/* DataParallel: the first position of block k of `blocks` in a batch of E (torch.chunk's split
 * when blocks divides E; the first blocks get the larger shares otherwise). */
static int block_lo(int E, int blocks, int k) { return (int)(((long long)k * E + blocks - 1) / blocks); }

/* k's bits reversed over log2(n) bits (n a power of two). */
static int bitrev(int k, int n) {
    int r = 0;
    for (int bit = 1; bit < n; bit <<= 1) r = (r << 1) | ((k & bit) != 0);
    return r;
}

/* DataParallel, N dividing C: the block (chunk) lane i of replica r holds. */
static int dp_block(const dp_chunk_plan *p, int r, int i) { return bitrev(r + p->world * i, p->chunks); }

/* DataParallel, N not dividing C: replica r's block of N, lane i a contiguous piece of it. */
static int dp_share_lo(const dp_chunk_plan *p, int E, int r) { return block_lo(E, p->world, r); }
static int dp_share_n(const dp_chunk_plan *p, int E, int r) { return block_lo(E, p->world, r + 1) - block_lo(E, p->world, r); }

int dp_chunk_lane_count(const dp_chunk_plan *p, int E, int r, int i) {
    if (i < 0 || i >= p->lanes) return 0;
    if (p->contiguous && p->canonical) {
        const int k = dp_block(p, r, i);
        return block_lo(E, p->chunks, k + 1) - block_lo(E, p->chunks, k);
    }
    if (p->contiguous) {
        const int n = dp_share_n(p, E, r);
        return piece_lo(p, n, i + 1) - piece_lo(p, n, i);
    }
    if (p->canonical) {
        const int j = r + p->world * i;
        return E > j ? (E - j + p->chunks - 1) / p->chunks : 0;
    }
    const int n = share_count(p, E, r);
    return piece_lo(p, n, i + 1) - piece_lo(p, n, i);
}

int dp_chunk_lane_pos(const dp_chunk_plan *p, int E, int r, int i, int t) {
    if (p->contiguous && p->canonical) return block_lo(E, p->chunks, dp_block(p, r, i)) + t;
    if (p->contiguous) return dp_share_lo(p, E, r) + piece_lo(p, dp_share_n(p, E, r), i) + t;
    if (p->canonical) return r + p->world * i + p->chunks * t;
    return r + p->world * (piece_lo(p, share_count(p, E, r), i) + t);
}

void dp_chunk_micro_lanes(const dp_chunk_plan *p, int mu, int n_micro, int *first, int *count) {
    if (n_micro < 1) n_micro = 1;
    const int lo = (int)((long long)p->lanes * mu / n_micro), hi = (int)((long long)p->lanes * (mu + 1) / n_micro);
    *first = lo;
    *count = hi - lo;
}

int dp_chunk_max_lane(const dp_chunk_plan *p) {
    const long long E = (long long)p->batch * p->accumulate;
    if (p->canonical) return (int)((E + p->chunks - 1) / p->chunks);
    const long long share = (E + p->world - 1) / p->world;
    return (int)((share + p->lanes - 1) / p->lanes);
}
