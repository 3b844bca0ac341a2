// RMSNorm: one block per row. Pass 1 sums squares (16-byte loads when the row allows), a warp-shuffle +
// shared-memory reduction gives the scale, pass 2 re-reads the row (now in L1/L2) and writes w ⊙ x · scale.
#include "kernels.h"

#include <stdexcept>
#include <string>

namespace mamba::cuda {
namespace {

__device__ float blockSum(float v) {
    __shared__ float part[32];
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < static_cast<int>(blockDim.x >> 5) ? part[lane] : 0.f;
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
        if (lane == 0) part[0] = v;
    }
    __syncthreads();
    return part[0];
}

// x and y are not __restrict__: an in-place call (x == y) is correct, each element being read and
// written by the same thread.
template <bool VEC>
__global__ void rmsnormKernel(const float* x, int64_t ldx, const float* __restrict__ w, int d, float eps, float* y,
                              int64_t ldy) {
    pdlWait();
    pdlLaunchDependents();
    const int64_t r = blockIdx.x;
    const float* xr = x + r * ldx;
    float* yr = y + r * ldy;
    float ss = 0.f;
    if (VEC) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        for (int i = threadIdx.x; i < d / 4; i += blockDim.x) {
            const float4 v = x4[i];
            ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
    } else {
        for (int i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
    }
    const float scale = 1.0f / sqrtf(blockSum(ss) / static_cast<float>(d) + eps);
    if (VEC) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        const float4* w4 = reinterpret_cast<const float4*>(w);
        float4* y4 = reinterpret_cast<float4*>(yr);
        for (int i = threadIdx.x; i < d / 4; i += blockDim.x) {
            const float4 v = x4[i], g = w4[i];
            y4[i] = make_float4(g.x * (v.x * scale), g.y * (v.y * scale), g.z * (v.z * scale), g.w * (v.w * scale));
        }
    } else {
        for (int i = threadIdx.x; i < d; i += blockDim.x) yr[i] = w[i] * (xr[i] * scale);
    }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

void rmsnorm(const Exec& ex, const RmsNormArgs& a) {
    if (a.rows <= 0 || a.d <= 0) return;
    if (a.rows > 0x7fffffff)
        throw std::invalid_argument("rmsnorm: " + std::to_string(a.rows) + " rows exceed 2^31 - 1");
    const int d = a.d;
    const int threads = d <= 1024 ? 128 : d <= 4096 ? 256 : 512;
    const bool vec =
        d % 4 == 0 && a.ldx % 4 == 0 && a.ldy % 4 == 0 && aligned16(a.x) && aligned16(a.y) && aligned16(a.w);
    if (vec)
        launch("rmsnorm", ex, rmsnormKernel<true>, dim3(static_cast<unsigned>(a.rows)), dim3(threads), 0, a.x, a.ldx,
               a.w, d, a.eps, a.y, a.ldy);
    else
        launch("rmsnorm", ex, rmsnormKernel<false>, dim3(static_cast<unsigned>(a.rows)), dim3(threads), 0, a.x, a.ldx,
               a.w, d, a.eps, a.y, a.ldy);
}

}  // namespace mamba::cuda
