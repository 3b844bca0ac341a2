// AdamW (PyTorch's torch.optim.AdamW, non-amsgrad), element-wise, with the same formula and operation
// order as the CPU backend (cpu_train.cpp):
//   g ← g·grad_scale;  m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²;
//   p ← p·(1 − lr·wd) − (lr/bc1)·m / (sqrt(v)/sqrt(bc2) + eps).
// The constants (decay, step, 1/sqrt(bc2): adamwFactors in ops.h) are computed on the host exactly as the CPU does
// and read from device memory with this step's grad_scale and skip flag (optimizerControl), so a captured step
// replays with each step's values.
#include "train_kernels.h"

#include "lowp.cuh"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace mamba::cuda::train {
namespace {

/** One element's update: the formula above, in that order (every AdamW kernel here runs this). */
__device__ __forceinline__ float adamwElement(const AdamWFactors& a, float decay, float g, float& m, float& v, float p) {
    const float gi = g * a.grad_scale;
    const float mi = a.beta1 * m + a.c1 * gi;
    const float vi = a.beta2 * v + a.c2 * gi * gi;
    m = mi;
    v = vi;
    const float denom = sqrtf(vi) * a.inv_sqrt_bc2 + a.eps;
    return p * decay - a.step * mi / denom;
}

__global__ void adamwKernel(float* p, const float* g, float* m, float* v, int64_t n, const AdamWFactors* f,
                            int decay_index) {
    pdlWait();
    pdlLaunchDependents();
    const AdamWFactors a = *f;
    if (a.skip != 0.f) return;
    const float decay = a.decay[decay_index];
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        float mi = m[i], vi = v[i];
        p[i] = adamwElement(a, decay, g[i], mi, vi, p[i]);
        m[i] = mi;
        v[i] = vi;
    }
}

constexpr int kGroupThreads = 256;
constexpr int64_t kGroupChunk = 4 * kGroupThreads * 8;  // floats per block: 8 groups of 4 per thread

/** A parameter's copy in the model's storage. */
__device__ __forceinline__ void storeCopy(char* at, int dtype, float x) {
    if (dtype == DTYPE_BF16) *reinterpret_cast<__nv_bfloat16*>(at) = toStorage<__nv_bfloat16>(x);
    else if (dtype == DTYPE_F16) *reinterpret_cast<__half*>(at) = toStorage<__half>(x);
    else *reinterpret_cast<float*>(at) = x;
}

/**
 * adamwGroup: block b takes floats [begin + b·kGroupChunk, +kGroupChunk) of the flat buffers, 4 consecutive floats per
 * thread at a time; a thread follows the tensor table forward from the block's first tensor (the gaps between
 * tensors — alignment padding — are left alone). Offsets are multiples of 4, so a group of 4 never spans two tensors.
 */
__global__ void __launch_bounds__(kGroupThreads) adamwGroupKernel(float* p, const float* g, float* m, float* v,
                                                                  const AdamWTensor* table, int count, char* store,
                                                                  const AdamWFactors* f, int64_t begin, int64_t end) {
    pdlWait();
    pdlLaunchDependents();
    const AdamWFactors a = *f;
    const bool update = a.skip == 0.f;
    const int64_t chunk0 = begin + blockIdx.x * kGroupChunk;
    const int64_t chunk1 = chunk0 + kGroupChunk < end ? chunk0 + kGroupChunk : end;
    __shared__ int first;
    if (threadIdx.x == 0) {  // the last tensor starting at or before chunk0
        int lo = 0, hi = count - 1;
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (table[mid].offset <= chunk0) lo = mid;
            else hi = mid - 1;
        }
        first = lo;
    }
    __syncthreads();
    int k = first;
    for (int64_t i = chunk0 + 4 * threadIdx.x; i < chunk1; i += 4 * kGroupThreads) {
        while (k + 1 < count && table[k + 1].offset <= i) ++k;
        const AdamWTensor t = table[k];
        if (i < t.offset || i >= t.offset + t.n) continue;  // padding between tensors
        const float decay = a.decay[t.decayed ? 0 : 1];
        const int64_t left = t.offset + t.n - i;
        const int lanes = left < 4 ? static_cast<int>(left) : 4;
        float pv[4], gv[4], mv[4], vv[4];
        if (lanes == 4) {
            *reinterpret_cast<float4*>(pv) = *reinterpret_cast<const float4*>(p + i);
            if (update) {
                *reinterpret_cast<float4*>(gv) = *reinterpret_cast<const float4*>(g + i);
                *reinterpret_cast<float4*>(mv) = *reinterpret_cast<const float4*>(m + i);
                *reinterpret_cast<float4*>(vv) = *reinterpret_cast<const float4*>(v + i);
            }
        } else {
            for (int j = 0; j < lanes; ++j) {
                pv[j] = p[i + j];
                if (update) {
                    gv[j] = g[i + j];
                    mv[j] = m[i + j];
                    vv[j] = v[i + j];
                }
            }
        }
        if (update) {
#pragma unroll
            for (int j = 0; j < 4; ++j)
                if (j < lanes) pv[j] = adamwElement(a, decay, gv[j], mv[j], vv[j], pv[j]);
            if (lanes == 4) {
                *reinterpret_cast<float4*>(p + i) = *reinterpret_cast<const float4*>(pv);
                *reinterpret_cast<float4*>(m + i) = *reinterpret_cast<const float4*>(mv);
                *reinterpret_cast<float4*>(v + i) = *reinterpret_cast<const float4*>(vv);
            } else {
                for (int j = 0; j < lanes; ++j) {
                    p[i + j] = pv[j];
                    m[i + j] = mv[j];
                    v[i + j] = vv[j];
                }
            }
        }
        if (t.store_byte >= 0) {
            const int bytes = t.store_dtype == DTYPE_F32 ? 4 : 2;
            char* at = store + t.store_byte + (i - t.offset) * bytes;
            for (int j = 0; j < lanes; ++j) storeCopy(at + j * bytes, t.store_dtype, pv[j]);
        }
    }
}

}  // namespace

void adamwGroup(const Exec& ex, const AdamWGroupArgs& a, int64_t begin, int64_t end) {
    if (a.count <= 0 || end <= begin) return;
    const int64_t blocks = (end - begin + kGroupChunk - 1) / kGroupChunk;
    if (blocks > 0x7fffffff) throw std::invalid_argument("adamwGroup: too many parameters");
    launch("adamwGroup", ex, adamwGroupKernel, dim3(static_cast<unsigned>(blocks)), dim3(kGroupThreads), 0, a.p, a.g,
           a.m, a.v, a.tensors, a.count, static_cast<char*>(a.store), a.f, begin, end);
}

void adamw(const Exec& ex, float* p, const float* g, float* m, float* v, int64_t n, const AdamWFactors* f, bool decayed) {
    if (n <= 0) return;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, int64_t{ex.sms} * 8));
    launch("adamw", ex, adamwKernel, dim3(blocks), dim3(256), 0, p, g, m, v, n, f, decayed ? 0 : 1);
}

}  // namespace mamba::cuda::train
