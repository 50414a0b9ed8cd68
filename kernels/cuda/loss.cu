// loss.cu: softmax cross-entropy on the GPU, twin of kernels/cpu/loss.c: one thread a sample,
// then the samples' losses added in sample order by one thread (a lane holds a few samples), so
// the loss is the same sum the CPU takes. Writes the loss and the hit count to device memory.
#include <math.h>

#include "kernels/cuda/common.cuh"

extern "C" {
#include "kernels/kcall.h"
}

#define XENT_TILE 256

// One call's loss, by a block of XENT_TILE threads.
__device__ __forceinline__ void xent_block(int batch, int K, const float *z, const int32_t *labels, float scale,
                                           float *dz, float *loss, int32_t *correct) {
    __shared__ double li[XENT_TILE];
    __shared__ int hit[XENT_TILE];
    double total = 0.0;
    int ok = 0;
    for (int t0 = 0; t0 < batch; t0 += XENT_TILE) {
        const int n = t0 + (int)threadIdx.x;
        if (n < batch) {
            const float *zi = z + (size_t)n * K;
            float *g = dz ? dz + (size_t)n * K : nullptr;
            float mx = zi[0];
            int am = 0;
            for (int j = 1; j < K; j++)
                if (zi[j] > mx) mx = zi[j], am = j; // first maximum wins
            float se = 0.0f;
            for (int j = 0; j < K; j++) {
                const float e = expf(zi[j] - mx);
                se = __fadd_rn(se, e);
                if (g) g[j] = e;
            }
            const int32_t lab = labels[n];
            const int valid = lab >= 0 && lab < K;
            li[threadIdx.x] = valid ? (double)mx + log((double)se) - (double)zi[lab] : NAN;
            hit[threadIdx.x] = valid && am == lab;
            if (g) {
                const float inv = __fdiv_rn(scale, se);
                for (int j = 0; j < K; j++) g[j] = __fmul_rn(g[j], inv);
                if (valid) g[lab] = __fadd_rn(g[lab], -scale);
            }
        }
        __syncthreads();
        if (threadIdx.x == 0)
            for (int i = 0; i < XENT_TILE && t0 + i < batch; i++) total += li[i], ok += hit[i];
        __syncthreads();
    }
    if (threadIdx.x == 0) *loss = (float)total, *correct = ok;
}

__global__ void xent_k(int batch, int K, const float *z, const int32_t *labels, float scale, float *dz, float *loss,
                       int32_t *correct) {
    xent_block(batch, K, z, labels, scale, dz, loss, correct);
}

// The lanes of one loss call in one launch (lanes.cu): a block a lane, each its call's block.
struct xent_lanes {
    int batch[DP_CUDA_LANES];
    const float *z[DP_CUDA_LANES];
    const int32_t *labels[DP_CUDA_LANES];
    float *dz[DP_CUDA_LANES], *loss[DP_CUDA_LANES];
    int32_t *correct[DP_CUDA_LANES];
};
__global__ void xent_lanes_k(xent_lanes L, int K, float scale) {
    const int l = blockIdx.x;
    xent_block(L.batch[l], K, L.z[l], L.labels[l], scale, L.dz[l], L.loss[l], L.correct[l]);
}

// The loss over n <= DP_CUDA_LANES lanes in one launch; 0 for another kind.
extern "C" int dp_cuda_lanes_loss(const dp_kctx *c, int n, const dp_kcall *const *calls) {
    if (calls[0]->kind != DP_KC_XENT) return 0;
    for (int l = 1; l < n; l++) // the classes and the gradient's scale: lane 0's for all
        if (calls[l]->i[1] != calls[0]->i[1] || calls[l]->f[0] != calls[0]->f[0]) return 0;
    xent_lanes L = {};
    for (int l = 0; l < n; l++) {
        const dp_kcall *a = calls[l];
        L.batch[l] = a->i[0], L.z[l] = (const float *)a->p[0], L.labels[l] = (const int32_t *)a->p[1];
        L.dz[l] = (float *)a->p[2], L.loss[l] = (float *)a->p[3], L.correct[l] = (int32_t *)a->p[4];
    }
    DP_LAUNCH(xent_lanes_k, (unsigned)n, XENT_TILE, 0, dp_stream(c))(L, calls[0]->i[1], calls[0]->f[0]);
    DP_LAUNCHED("softmax cross-entropy lanes");
    return 1;
}

extern "C" void dp_cuda_softmax_xent(const dp_kctx *c, int batch, int classes, const float *logits,
                                     const int32_t *labels, float grad_scale, float *dlogits, float *loss,
                                     int32_t *correct) {
    DP_LAUNCH(xent_k, 1, XENT_TILE, 0, dp_stream(c))(batch, classes, logits, labels, grad_scale, dlogits, loss, correct);
    DP_LAUNCHED("softmax cross-entropy");
}

// A replica's lanes' losses and hits into its step metrics: a handful of values, one thread, the
// tree of core/treesum.c (float adds rounded as the CPU's).
__global__ void lane_metrics_k(int n, float *loss, const int32_t *correct, float *out) {
    long long hits = 0;
    for (int l = 0; l < n; l++) hits += correct[l];
    for (int m = n; m > 1;) {
        const int h = (m + 1) / 2;
        for (int i = 0; i < m - h; i++) loss[i] = __fadd_rn(loss[i], loss[i + h]);
        m = h;
    }
    out[0] = n > 0 ? loss[0] : 0.0f;
    out[1] = (float)hits;
}

extern "C" void dp_cuda_lane_metrics(const dp_kctx *c, int n, float *loss, const int32_t *correct, float *out) {
    DP_LAUNCH(lane_metrics_k, 1, 1, 0, dp_stream(c))(n, loss, correct, out);
    DP_LAUNCHED("lane metrics");
}
