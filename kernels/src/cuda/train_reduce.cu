// Deterministic reductions for training: column sums over rows (bias and norm-weight gradients), the
// double-precision sum of squares (global gradient norm) and its second stage, and scaling.
//
// Column sums: a first kernel gives each thread one column of one slab of kColRows rows, summed in row
// order into partial[slab][col]; a second kernel adds the slabs in slab order and accumulates into the
// destination. Sum of squares: each block sums one chunk of kSumChunk elements (fixed strides per thread,
// then a fixed shared-memory tree, all in double); one block then sums the chunk partials the same way.
#include "train_kernels.h"

#include "ops/optimizer_control.h"

#include <algorithm>

namespace mamba::cuda::train {
namespace {

constexpr int kColRows = 128;   // rows per slab of a column sum
constexpr int kColThreads = 128;
constexpr int kSumThreads = 256;

__global__ void columnPartialKernel(const float* a, int64_t lda, const float* b, int64_t ldb, const float* rs,
                                    int64_t rows, int cols, int col_blocks, float* part) {
    pdlWait();
    pdlLaunchDependents();
    const int64_t slab = blockIdx.x / col_blocks;
    const int j = static_cast<int>(blockIdx.x % col_blocks) * kColThreads + threadIdx.x;
    if (j >= cols) return;
    const int64_t r0 = slab * kColRows, r1 = min(rows, r0 + kColRows);
    float s = 0.f;
    if (b) {
        for (int64_t r = r0; r < r1; ++r) s += a[r * lda + j] * (b[r * ldb + j] * rs[r]);
    } else {
        for (int64_t r = r0; r < r1; ++r) s += a[r * lda + j];
    }
    part[slab * cols + j] = s;
}

__global__ void columnFinishKernel(const float* part, int64_t slabs, int cols, float* acc) {
    pdlWait();
    pdlLaunchDependents();
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) return;
    float s = 0.f;
    for (int64_t c = 0; c < slabs; ++c) s += part[c * cols + j];
    acc[j] += s;
}

/** Tree sum of one double per thread over the block (kSumThreads); the result is valid in thread 0. */
__device__ double blockSumDouble(double v) {
    __shared__ double sh[kSumThreads];
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = kSumThreads / 2; s > 0; s >>= 1) {
        if (static_cast<int>(threadIdx.x) < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    return sh[0];
}

template <bool SQUARES>
__global__ void __launch_bounds__(kSumThreads) sumChunksKernel(const float* x, int64_t n, double* part) {
    pdlWait();
    pdlLaunchDependents();
    const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kSumChunk, i1 = min(n, i0 + kSumChunk);
    double s = 0.0;
    for (int64_t i = i0 + threadIdx.x; i < i1; i += kSumThreads) {
        const double v = x[i];
        s += SQUARES ? v * v : v;
    }
    s = blockSumDouble(s);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

__global__ void __launch_bounds__(kSumThreads) sumPartialsKernel(const double* part, int64_t m, double* out) {
    pdlWait();
    pdlLaunchDependents();
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < m; i += kSumThreads) s += part[i];
    s = blockSumDouble(s);
    if (threadIdx.x == 0) *out = s;
}

__global__ void scaleKernel(float* x, int64_t n, float s) {
    pdlWait();
    pdlLaunchDependents();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        x[i] *= s;
}

}  // namespace

void columnSums(const Exec& ex, const float* a, int64_t lda, const float* b, int64_t ldb, const float* rs, int64_t rows,
                int cols, float* acc, const Scratch& scratch) {
    if (rows <= 0 || cols <= 0) return;
    const int64_t slabs = (rows + kColRows - 1) / kColRows;
    const int col_blocks = (cols + kColThreads - 1) / kColThreads;
    if (slabs * col_blocks > 0x7fffffff) throw std::invalid_argument("columnSums: too many rows");
    float* part = scratch.get(7, slabs * cols);
    launch("column sums", ex, columnPartialKernel, dim3(static_cast<unsigned>(slabs * col_blocks)), dim3(kColThreads),
           0, a, lda, b, ldb, rs, rows, cols, col_blocks, part);
    launch("column sums finish", ex, columnFinishKernel, dim3(blocksFor(cols, 128)), dim3(128), 0,
           static_cast<const float*>(part), slabs, cols, acc);
}

void sumPartials(const Exec& ex, const double* part, int64_t m, double* out) {
    launch("sum partials", ex, sumPartialsKernel, dim3(1), dim3(kSumThreads), 0, part, m, out);
}

void sumInto(const Exec& ex, const float* x, int64_t n, bool squares, double* out, const Scratch& scratch) {
    const int64_t chunks = n > 0 ? (n + kSumChunk - 1) / kSumChunk : 0;
    double* part = chunks > 0 ? reinterpret_cast<double*>(scratch.get(5, 2 * chunks)) : nullptr;
    if (chunks > 0)
        launch(squares ? "sum of squares" : "sum", ex, squares ? sumChunksKernel<true> : sumChunksKernel<false>,
               dim3(static_cast<unsigned>(chunks)), dim3(kSumThreads), 0, x, n, part);
    sumPartials(ex, part, chunks, out);
}

__global__ void optimizerControlKernel(OptimizerControlArgs a) {
    pdlWait();
    pdlLaunchDependents();
    decideOptimizerStep(a);
}

void optimizerControl(const Exec& ex, const OptimizerControlArgs& a) {
    launch("optimizer control", ex, optimizerControlKernel, dim3(1), dim3(1), 0, a);
}

void scale(const Exec& ex, float* x, int64_t n, float s) {
    if (n <= 0) return;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, int64_t{ex.sms} * 8));
    launch("scale", ex, scaleKernel, dim3(blocks), dim3(256), 0, x, n, s);
}

}  // namespace mamba::cuda::train
