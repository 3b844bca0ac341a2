// RMSNorm backward. Per row: ρ = 1/sqrt(mean(x²) + eps), g = w ⊙ dy,
//   dx = beta·dx + ρ·(g − x·c) with c = Σ(g ⊙ x)·ρ²/d   (= ρ·(g − x̂·mean(g ⊙ x̂)), x̂ = ρ·x),
// and the weight gradient dw[j] += Σ_r dy[r, j]·(x[r, j]·ρ_r).
//
// One warp per row, up to 8 warps per block, kNormRows rows per block (warp w of W takes rows w, w + W, …):
// lane l owns the columns l, l + 32, … (aligned rows: 4l … 4l+3, 4l+128 …), so a row's sums are a lane's terms in
// column order, then a fixed xor tree;
// its dx elements are its own, and so are its shares of dw, accumulated over the warp's rows in shared memory. After
// the rows, the block adds its warps' shares in warp order into one partial per block, and a second kernel adds the
// blocks' partials in block order (a warp per column: lane j takes blocks j, j + 32, … in order, then a fixed xor tree).
// dw never needs a second pass over dy and x.
#include "train_kernels.h"

#include <algorithm>

namespace mamba::cuda::train {
namespace {

constexpr int kNormMaxWarps = 8;
constexpr int kNormRows = 32;

/** Σ over the warp (a fixed xor tree: every lane gets the same bits). */
__device__ __forceinline__ float warpSum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// dx may alias neither x nor dy (the model passes separate buffers). Shared memory: [warps][d] dw shares.
// VEC: every row and w 16-byte aligned with d % 4 == 0, so a lane's columns go four at a time (float4 loads: a
// quarter of the load instructions and four times the bytes in flight per load; the scalar form was latency-bound
// at ≈ half the HBM rate).
template <bool VEC>
__global__ void __launch_bounds__(kNormMaxWarps * 32) rmsnormBackwardKernel(RmsNormBackwardArgs a, float* part) {
    extern __shared__ float share[];
    pdlWait();
    pdlLaunchDependents();
    constexpr int kPer = VEC ? 4 : 1;  // consecutive columns a lane takes at a time
    const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32, d = a.d;
    float* mine = share + static_cast<int64_t>(warp) * d;
    for (int j = lane; j < d; j += 32) mine[j] = 0.f;
    __syncwarp();  // (the zeroing's columns are not the VEC loop's columns of the same lane)
    // A lane's group of kPer columns starting at j: x, dy and w as arrays (one float4 load each where VEC).
    auto group = [&](const float* p, int j, float (&v)[kPer]) {
        if constexpr (VEC) {
            const float4 q = *reinterpret_cast<const float4*>(p + j);
            v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
        } else {
            v[0] = p[j];
        }
    };
    auto put = [&](float* p, int j, const float (&v)[kPer]) {
        if constexpr (VEC) *reinterpret_cast<float4*>(p + j) = make_float4(v[0], v[1], v[2], v[3]);
        else p[j] = v[0];
    };
    const int64_t r_end = min(a.rows, (static_cast<int64_t>(blockIdx.x) + 1) * kNormRows);
    for (int64_t r = static_cast<int64_t>(blockIdx.x) * kNormRows + warp; r < r_end; r += warps) {
        const float* xr = a.x + r * a.ldx;
        const float* gr = a.dy + r * a.lddy;
        float* out = a.dx + r * a.lddx;
        float ss = 0.f, dot = 0.f;
#pragma unroll 2
        for (int j = lane * kPer; j < d; j += 32 * kPer) {
            float xv[kPer], gv[kPer], wv[kPer];
            group(xr, j, xv), group(gr, j, gv), group(a.w, j, wv);
#pragma unroll
            for (int e = 0; e < kPer; ++e) {
                ss += xv[e] * xv[e];
                dot += wv[e] * gv[e] * xv[e];
            }
        }
        ss = warpSum(ss);
        dot = warpSum(dot);
        const float rho = 1.f / sqrtf(ss / static_cast<float>(d) + a.eps);
        const float c = dot * rho * rho / static_cast<float>(d);
#pragma unroll 2
        for (int j = lane * kPer; j < d; j += 32 * kPer) {
            float xv[kPer], gv[kPer], wv[kPer], ov[kPer], mv[kPer];
            group(xr, j, xv), group(gr, j, gv), group(a.w, j, wv), group(mine, j, mv);
            if (a.beta != 0.f) group(out, j, ov);
#pragma unroll
            for (int e = 0; e < kPer; ++e) {
                const float v = rho * (wv[e] * gv[e] - c * xv[e]);
                ov[e] = a.beta == 0.f ? v : a.beta * ov[e] + v;
                mv[e] += gv[e] * (xv[e] * rho);
            }
            put(out, j, ov), put(mine, j, mv);
        }
    }
    __syncthreads();
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float v = share[j];
        for (int w = 1; w < warps; ++w) v += share[static_cast<int64_t>(w) * d + j];
        part[static_cast<int64_t>(blockIdx.x) * d + j] = v;
    }
}

// dw[j] += Σ_b part[b, j], blocks in order: one warp per column.
__global__ void rmsnormWeightFinishKernel(const float* part, int64_t blocks, int d, float* dw) {
    pdlWait();
    pdlLaunchDependents();
    const int64_t j = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (j >= d) return;  // whole warps: j is the same for all 32 lanes
    float v = 0.f;
    for (int64_t b = lane; b < blocks; b += 32) v += part[b * d + j];
    v = warpSum(v);
    if (lane == 0) dw[j] += v;
}

}  // namespace

void rmsnormBackward(const Exec& ex, const RmsNormBackwardArgs& a, const Scratch& scratch) {
    if (a.rows <= 0 || a.d <= 0) return;
    const int64_t blocks = (a.rows + kNormRows - 1) / kNormRows;
    if (blocks > 0x7fffffff) throw std::invalid_argument("rmsnormBackward: too many rows");
    // as many warps (≤ 8) as the rows' dw shares fit in a block's shared memory
    const int64_t row_bytes = static_cast<int64_t>(a.d) * sizeof(float);
    const int warps = static_cast<int>(std::min<int64_t>(kNormMaxWarps, ex.smem_optin / row_bytes));
    if (warps < 1)
        throw std::invalid_argument("rmsnormBackward: d = " + std::to_string(a.d) + " needs " + std::to_string(row_bytes) +
                                    " bytes of shared memory per block; the device has " + std::to_string(ex.smem_optin));
    const size_t smem = static_cast<size_t>(warps * row_bytes);
    auto aligned = [](const void* p, int64_t ld) { return reinterpret_cast<uintptr_t>(p) % 16 == 0 && ld % 4 == 0; };
    const bool vec = a.d % 4 == 0 && aligned(a.x, a.ldx) && aligned(a.dy, a.lddy) && aligned(a.dx, a.lddx) &&
                     aligned(a.w, 0);
    const auto kernel = vec ? rmsnormBackwardKernel<true> : rmsnormBackwardKernel<false>;
    // The opt-in is the device's maximum, always (see selectiveScanBackward): a concurrent setter never lowers it.
    if (smem > 48 * 1024)
        check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, ex.smem_optin),
              "cudaFuncSetAttribute (rmsnorm backward)");
    float* part = scratch.get(3, blocks * a.d);
    launch("rmsnorm backward", ex, kernel, dim3(static_cast<unsigned>(blocks)), dim3(warps * 32), smem, a, part);
    launch("rmsnorm backward dw", ex, rmsnormWeightFinishKernel, dim3(blocksFor(static_cast<int64_t>(a.d) * 32, 128)),
           dim3(128), 0, static_cast<const float*>(part), blocks, a.d, a.dw);
}

}  // namespace mamba::cuda::train
