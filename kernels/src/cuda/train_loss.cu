// The fused losses of the trainer.
//
// MSE: dy = scale·2·(y − t) element-wise, and Σ (y − t)² in double over fixed chunks of kSumChunk
// elements (tree per chunk, then the chunk partials by one block): deterministic.
//
// Softmax cross-entropy: one block per row. Each thread scans a fixed stride of the vocabulary for its
// (max, first index of the max) and then Σ exp(l − max); fixed shared-memory trees combine them (ties
// go to the smaller index, as the CPU's first-maximum scan). loss = log Σ + max − l[target]; the
// gradient scale·(softmax − onehot) is written only after every thread has read the row, so it may
// overwrite the logits in place.
#include "train_kernels.h"

#include <algorithm>

namespace mamba::cuda::train {
namespace {

constexpr int kSumThreads = 256;
constexpr int kCeThreads = 512;  // a 50,280-logit row is 200 KB: one block per row needs many loads in flight

__global__ void __launch_bounds__(kSumThreads) mseKernel(const float* y, const float* target, int64_t n, float scale,
                                                         float* dy, double* part) {
    __shared__ double sh[kSumThreads];
    pdlWait();
    pdlLaunchDependents();
    const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kSumChunk, i1 = min(n, i0 + kSumChunk);
    double s = 0.0;
    const float two_scale = scale * 2.f;
    for (int64_t i = i0 + threadIdx.x; i < i1; i += kSumThreads) {
        const float e = y[i] - target[i];
        dy[i] = two_scale * e;
        s += static_cast<double>(e) * e;
    }
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int k = kSumThreads / 2; k > 0; k >>= 1) {
        if (static_cast<int>(threadIdx.x) < k) sh[threadIdx.x] += sh[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) part[blockIdx.x] = sh[0];
}

__global__ void __launch_bounds__(kCeThreads) crossEntropyKernel(const float* logits, int vocab, const int32_t* targets,
                                                                 int ignore_index, float scale, float* loss,
                                                                 float* correct, float* dlogits) {
    __shared__ float smax[kCeThreads], ssum[kCeThreads];
    __shared__ int sidx[kCeThreads];
    pdlWait();
    pdlLaunchDependents();
    const int64_t r = blockIdx.x;
    const int tid = threadIdx.x;
    const float* l = logits + r * vocab;
    float* dl = dlogits ? dlogits + r * vocab : nullptr;
    const int target = targets[r];
    if (target == ignore_index) {
        if (tid == 0) {
            loss[r] = 0.f;
            correct[r] = 0.f;
        }
        if (dl)
            for (int k = tid; k < vocab; k += kCeThreads) dl[k] = 0.f;
        return;
    }
    // first maximum of this thread's stride (its indices ascend), then a tree preferring the smaller index on ties
    float mx = -INFINITY;
    int best = -1;
    for (int k = tid; k < vocab; k += kCeThreads) {
        const float v = l[k];
        if (best < 0 || v > mx) {
            mx = v;
            best = k;
        }
    }
    smax[tid] = mx;
    sidx[tid] = best;
    __syncthreads();
    for (int s = kCeThreads / 2; s > 0; s >>= 1) {
        if (tid < s) {
            const float vo = smax[tid + s];
            const int io = sidx[tid + s];
            if (io >= 0 && (sidx[tid] < 0 || vo > smax[tid] || (vo == smax[tid] && io < sidx[tid]))) {
                smax[tid] = vo;
                sidx[tid] = io;
            }
        }
        __syncthreads();
    }
    const float m = smax[0];
    const int arg = sidx[0];
    float sum = 0.f;
    for (int k = tid; k < vocab; k += kCeThreads) sum += expf(l[k] - m);
    ssum[tid] = sum;
    __syncthreads();
    for (int s = kCeThreads / 2; s > 0; s >>= 1) {
        if (tid < s) ssum[tid] += ssum[tid + s];
        __syncthreads();
    }
    const float total = ssum[0];
    const float lt = l[target];
    __syncthreads();  // every read of the row is done: dl may overwrite it
    if (tid == 0) {
        loss[r] = logf(total) + m - lt;
        correct[r] = arg == target ? 1.f : 0.f;
    }
    if (!dl) return;
    const float inv = scale / total;
    for (int k = tid; k < vocab; k += kCeThreads) dl[k] = expf(l[k] - m) * inv;
    __syncthreads();
    if (tid == 0) dl[target] -= scale;
}

}  // namespace

void mse(const Exec& ex, const float* y, const float* target, int64_t n, float scale, float* dy, double* out,
         const Scratch& scratch) {
    const int64_t chunks = n > 0 ? (n + kSumChunk - 1) / kSumChunk : 0;
    double* part = chunks > 0 ? reinterpret_cast<double*>(scratch.get(5, 2 * chunks)) : nullptr;
    if (chunks > 0)
        launch("mse", ex, mseKernel, dim3(static_cast<unsigned>(chunks)), dim3(kSumThreads), 0, y, target, n, scale, dy,
               part);
    sumPartials(ex, part, chunks, out);
}

void crossEntropy(const Exec& ex, const CrossEntropyArgs& a) {
    if (a.rows <= 0) return;
    if (a.rows > 0x7fffffff) throw std::invalid_argument("crossEntropy: too many rows");
    launch("cross-entropy", ex, crossEntropyKernel, dim3(static_cast<unsigned>(a.rows)), dim3(kCeThreads), 0, a.logits,
           a.vocab, a.targets, a.ignore_index, a.scale, a.loss, a.correct, a.dlogits);
}

}  // namespace mamba::cuda::train
