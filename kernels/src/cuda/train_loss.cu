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
// The row is read three times (max, sum, gradient). Where it fits in a block's shared memory (vocabularies up to
// ≈ 56k on Hopper) it is first copied there by cp.async — the whole row in flight at once — so HBM sees one read
// and one write per logit; a 50,280-logit row (200 KB) re-read from global memory mostly missed L2 at 1,334 rows
// per block. Both ways run the same arithmetic in the same order: the same bits.
#include "cp_async.cuh"
#include "lowp.cuh"
#include "train_kernels.h"

#include <algorithm>
#include <type_traits>

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

/**
 * Copies a row of `vocab` logits into shared memory (16-byte copies when VEC: vocab % 4 == 0 and the logits 16-byte
 * aligned) and waits for it.
 */
template <bool VEC>
__device__ __forceinline__ void stageRow(const float* l, int vocab, float* row) {
    if constexpr (VEC) {
        for (int k = threadIdx.x; k < vocab / 4; k += kCeThreads) cpAsync16(smemAddr(row + 4 * k), l + 4 * k, 16);
    } else {
        for (int k = threadIdx.x; k < vocab; k += kCeThreads) cpAsync4(row + k, l + k);
    }
    cpAsyncCommit();
    cpAsyncWaitAll();
    __syncthreads();
}

/** A gradient value as the loss hands it on: f32, or rounded to the 2-byte type of the head's backward products. */
template <typename OutT>
__device__ __forceinline__ OutT gradOut(float v) {
    if constexpr (std::is_same_v<OutT, float>) return v;
    else return toStorage<OutT>(v);
}

// STAGE: 0 reads the row from global memory; 1 / 2 stage it in shared memory first (2: 16-byte copies).
// OutT: the gradient's type (float, or __nv_bfloat16 / __half rounded from the same f32 value), rows ldd apart.
template <int STAGE, typename OutT>
__global__ void __launch_bounds__(kCeThreads) crossEntropyKernel(const float* logits, int vocab, const int32_t* targets,
                                                                 int ignore_index, float scale, float* loss,
                                                                 float* correct, OutT* dlogits, int64_t ldd) {
    __shared__ float smax[kCeThreads], ssum[kCeThreads];
    __shared__ int sidx[kCeThreads];
    extern __shared__ float4 staged[];
    pdlWait();
    pdlLaunchDependents();
    const int64_t r = blockIdx.x;
    const int tid = threadIdx.x;
    const float* l = logits + r * vocab;
    OutT* dl = dlogits ? dlogits + r * ldd : nullptr;
    const int target = targets[r];
    if (target == ignore_index) {
        if (tid == 0) {
            loss[r] = 0.f;
            correct[r] = 0.f;
        }
        if (dl)
            for (int k = tid; k < vocab; k += kCeThreads) dl[k] = gradOut<OutT>(0.f);
        return;
    }
    const float lt = l[target];
    if constexpr (STAGE > 0) {
        float* row = reinterpret_cast<float*>(staged);
        stageRow<STAGE == 2>(l, vocab, row);
        l = row;
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
    __syncthreads();  // every read of the row is done: dl may overwrite it
    if (tid == 0) {
        loss[r] = logf(total) + m - lt;
        correct[r] = arg == target ? 1.f : 0.f;
    }
    if (!dl) return;
    const float inv = scale / total;
    // (the product is never fused with the target's subtraction: its own rounding)
    if constexpr (STAGE == 0 && !std::is_same_v<OutT, float>) {
        // 2-byte values written over their own f32 row (ld16 = 2·vocab) land on logits k/2: a whole block's stride
        // is read before any of it is written, so a write only ever covers logits this block has already read.
        for (int base = 0; base < vocab; base += kCeThreads) {
            const int k = base + tid;
            float v = 0.f;
            if (k < vocab) {
                v = __fmul_rn(expf(l[k] - m), inv);
                if (k == target) v -= scale;
            }
            __syncthreads();
            if (k < vocab) dl[k] = gradOut<OutT>(v);
        }
    } else {
        for (int k = tid; k < vocab; k += kCeThreads) {
            float v = __fmul_rn(expf(l[k] - m), inv);
            if (k == target) v -= scale;
            dl[k] = gradOut<OutT>(v);
        }
    }
}

/** Launches the kernel for one gradient type: the row staged in shared memory where it fits. */
template <typename OutT>
void launchCrossEntropy(const Exec& ex, const CrossEntropyArgs& a, OutT* dl, int64_t ldd) {
    const dim3 grid(static_cast<unsigned>(a.rows)), block(kCeThreads);
    const size_t row_bytes = static_cast<size_t>(a.vocab) * sizeof(float);
    const size_t static_bytes = kCeThreads * (2 * sizeof(float) + sizeof(int));
    if (ex.cc < 80 || row_bytes + static_bytes > static_cast<size_t>(ex.smem_optin)) {
        launch("cross-entropy", ex, crossEntropyKernel<0, OutT>, grid, block, 0, a.logits, a.vocab, a.targets,
               a.ignore_index, a.scale, a.loss, a.correct, dl, ldd);
        return;
    }
    const bool vec = a.vocab % 4 == 0 && reinterpret_cast<uintptr_t>(a.logits) % 16 == 0;
    auto kernel = vec ? crossEntropyKernel<2, OutT> : crossEntropyKernel<1, OutT>;
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(row_bytes)),
          "cross-entropy (shared memory)");
    launch("cross-entropy", ex, kernel, grid, block, row_bytes, a.logits, a.vocab, a.targets, a.ignore_index, a.scale,
           a.loss, a.correct, dl, ldd);
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
    if (!a.dlogits16) launchCrossEntropy(ex, a, a.dlogits, static_cast<int64_t>(a.vocab));
    else if (a.dtype16 == DTYPE_BF16) launchCrossEntropy(ex, a, static_cast<__nv_bfloat16*>(a.dlogits16), a.ld16);
    else launchCrossEntropy(ex, a, static_cast<__half*>(a.dlogits16), a.ld16);
}

}  // namespace mamba::cuda::train
