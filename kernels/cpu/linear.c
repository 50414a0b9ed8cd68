/* linear.c: fully connected layer on single-threaded OpenBLAS GEMMs. Threads split the batch
 * for y and dx, and the output features for dw and db, so no partial sums are needed and every
 * gradient element is summed over the batch in the same order whatever the thread count. */
#include "kernels/cpu/variant.h" /* first: renames this variant's functions */
#include "kernels/cpu/linear.h"

#include <cblas.h>

#include "kernels/cpu/cpu_common.h"

/* Below this many multiply-adds a thread fork costs more than it saves. */
#define LINEAR_MIN_MACS_PER_THREAD 65536

static int linear_threads(int batch, int in_f, int out_f, int nthreads) {
    const double macs = (double)batch * in_f * out_f;
    int nt = nthreads;
    if (macs / LINEAR_MIN_MACS_PER_THREAD < nt) nt = (int)(macs / LINEAR_MIN_MACS_PER_THREAD);
    if (nt > batch) nt = batch;
    return nt < 1 ? 1 : nt;
}

static void fwd_rows(int lo, int hi, int in_f, int out_f, const float *x, const float *w, const float *b, float *y) {
    if (hi <= lo) return;
    float *yr = y + (size_t)lo * out_f; /* (hi - lo, out_f) */
    if (b)
        for (int n = 0; n < hi - lo; n++)
            for (int o = 0; o < out_f; o++) yr[(size_t)n * out_f + o] = b[o];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, hi - lo, out_f, in_f, 1.0f, x + (size_t)lo * in_f, in_f, w,
                in_f, b ? 1.0f : 0.0f, yr, out_f);
}

void linear_forward_cpu(int batch, int in_f, int out_f, const float *x, const float *w, const float *b, float *y,
                        int nthreads) {
    if (batch <= 0 || out_f <= 0) return;
    const int nt = linear_threads(batch, in_f, out_f, nthreads);
    if (nt == 1) {
        fwd_rows(0, batch, in_f, out_f, x, w, b, y);
        return;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int c = 0; c < nt; c++) {
        int lo, hi;
        dp_chunk(batch, nt, c, &lo, &hi);
        fwd_rows(lo, hi, in_f, out_f, x, w, b, y);
    }
}

/* Chunk c of nt: dx rows of its batch chunk, dw / db rows of its output-feature chunk. */
static void bwd_chunk(int batch, int in_f, int out_f, int nt, int c, const float *x, const float *w, const float *dy,
                      float *dx, float *dw, float *db) {
    int lo, hi;
    dp_chunk(batch, nt, c, &lo, &hi);
    if (dx && hi > lo)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, hi - lo, in_f, out_f, 1.0f, dy + (size_t)lo * out_f,
                    out_f, w, in_f, 0.0f, dx + (size_t)lo * in_f, in_f);
    int o0, o1;
    dp_chunk(out_f, nt, c, &o0, &o1);
    if (o1 <= o0) return;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, o1 - o0, in_f, batch, 1.0f, dy + o0, out_f, x, in_f, 1.0f,
                dw + (size_t)o0 * in_f, in_f);
    if (db)
        for (int n = 0; n < batch; n++) /* over the batch in order, vectorised over features */
            for (int o = o0; o < o1; o++) db[o] += dy[(size_t)n * out_f + o];
}

void linear_backward_cpu(int batch, int in_f, int out_f, const float *x, const float *w, const float *dy, float *dx,
                         float *dw, float *db, int nthreads) {
    if (batch <= 0 || out_f <= 0 || in_f <= 0) return;
    int nt = linear_threads(batch, in_f, out_f, nthreads);
    if (nt > out_f) nt = out_f;
    if (nt == 1) {
        bwd_chunk(batch, in_f, out_f, 1, 0, x, w, dy, dx, dw, db);
        return;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int c = 0; c < nt; c++) bwd_chunk(batch, in_f, out_f, nt, c, x, w, dy, dx, dw, db);
}
