// One row's rmsnorm scale, shared by the rmsnorm kernel (rmsnorm.cu) and the deterministic tier's fused decode product
// (gemm/gemm_tc.cu), so that a DETERMINISTIC decode step, which normalises inside the product, gives the bits of a
// prefill, which runs the rmsnorm kernel first. The sum order is that of `vt` threads (rmsnormThreads of the width),
// whatever block runs it, and every operation is written out (no contraction left to the compiler).
#pragma once

#include "cuda_check.h"

#include <cstdint>

namespace mamba::cuda {

/** Threads of the rmsnorm kernel's block for rows of width d — and so the sum order of a row's squares. */
constexpr int rmsnormThreads(int d) { return d <= 1024 ? 128 : d <= 4096 ? 256 : 512; }
constexpr int kRmsnormMaxWarps = 512 / 32;

/** Whether a row is summed in 16-byte chunks (the rule both callers use: width, strides and bases all allow it). */
inline bool rmsnormVectorised(int d, int64_t ldx, int64_t ldy, const void* x, const void* y, const void* w) {
    auto a16 = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
    return d % 4 == 0 && ldx % 4 == 0 && ldy % 4 == 0 && a16(x) && a16(y) && a16(w);
}

/**
 * 1 / sqrt(mean(x²) + eps) of x[0, d), as `vt` threads sum it: thread v adds elements v, v + vt, … (16-byte chunks of
 * four squares when vec), each warp of 32 such threads folds by an xor tree, and a last xor tree over the warp sums
 * (in warp order, zeros past them) gives the total. Any block of whole warps may run it: its warps take the virtual
 * warps in turn. `part` is shared memory of kRmsnormMaxWarps + 1 floats; every thread of the block must call this,
 * and every thread gets the scale.
 */
__device__ __forceinline__ float rmsnormScale(const float* x, int d, float eps, bool vec, int vt, float* part) {
    const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
    const int warps = static_cast<int>(blockDim.x >> 5), vwarps = vt >> 5;
    for (int vw = warp; vw < vwarps; vw += warps) {
        const int v = vw * 32 + lane;
        float ss = 0.f;
        if (vec) {
            const float4* x4 = reinterpret_cast<const float4*>(x);
            for (int i = v; i < d / 4; i += vt) {
                const float4 q = x4[i];
                ss = __fadd_rn(ss, __fmaf_rn(q.w, q.w, __fmaf_rn(q.z, q.z, __fmaf_rn(q.y, q.y, __fmul_rn(q.x, q.x)))));
            }
        } else {
            for (int i = v; i < d; i += vt) ss = __fmaf_rn(x[i], x[i], ss);
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) ss = __fadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, off));
        if (lane == 0) part[vw] = ss;
    }
    __syncthreads();
    if (warp == 0) {
        float s = lane < vwarps ? part[lane] : 0.f;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, off));
        if (lane == 0) part[kRmsnormMaxWarps] = s;
    }
    __syncthreads();
    const float total = part[kRmsnormMaxWarps];
    return __frcp_rn(__fsqrt_rn(__fadd_rn(__fdiv_rn(total, static_cast<float>(d)), eps)));
}

/** One normalised element: w·(x·scale), the rmsnorm's output. */
__device__ __forceinline__ float rmsnormValue(float x, float w, float scale) { return __fmul_rn(w, __fmul_rn(x, scale)); }

}  // namespace mamba::cuda
