// RMSNorm: one block per row. Pass 1 sums squares (16-byte loads when the row allows), a warp-shuffle +
// shared-memory reduction gives the scale (rmsnorm_row.cuh), pass 2 re-reads the row (now in L1/L2) and writes
// w ⊙ x · scale.
#include "kernels.h"
#include "lowp.cuh"
#include "rmsnorm_row.cuh"

#include <stdexcept>
#include <string>

namespace mamba::cuda {
namespace {

// x and y are not __restrict__: an in-place call (x == y) is correct, each element being read and
// written by the same thread. The scale and the elements come from rmsnorm_row.cuh, which the deterministic tier's
// fused decode product uses too (the same bits in a decode step as in a prefill).
// y16 (y null): the rows written rounded, as the next product's x (RmsNormArgs::y16).
template <bool VEC>
__global__ void rmsnormKernel(const float* x, int64_t ldx, const float* __restrict__ w, int d, float eps, float* y,
                              int64_t ldy, Rounded16 y16) {
    __shared__ float part[kRmsnormMaxWarps + 1];
    pdlWait();
    pdlLaunchDependents();
    const int64_t r = blockIdx.x;
    const float* xr = x + r * ldx;
    float* yr = y ? y + r * ldy : nullptr;
    const float scale = rmsnormScale(xr, d, eps, VEC, static_cast<int>(blockDim.x), part);
    if (VEC) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        const float4* w4 = reinterpret_cast<const float4*>(w);
        for (int i = threadIdx.x; i < d / 4; i += blockDim.x) {
            const float4 v = x4[i], g = w4[i];
            const float4 o = make_float4(rmsnormValue(v.x, g.x, scale), rmsnormValue(v.y, g.y, scale),
                                         rmsnormValue(v.z, g.z, scale), rmsnormValue(v.w, g.w, scale));
            if (yr) {
                reinterpret_cast<float4*>(yr)[i] = o;
            } else {
                storeRounded(y16, r, 4 * i, o.x);
                storeRounded(y16, r, 4 * i + 1, o.y);
                storeRounded(y16, r, 4 * i + 2, o.z);
                storeRounded(y16, r, 4 * i + 3, o.w);
            }
        }
    } else {
        for (int i = threadIdx.x; i < d; i += blockDim.x) {
            const float o = rmsnormValue(xr[i], w[i], scale);
            if (yr) yr[i] = o;
            else storeRounded(y16, r, i, o);
        }
    }
}

}  // namespace

void rmsnorm(const Exec& ex, const RmsNormArgs& a) {
    if (a.rows <= 0 || a.d <= 0) return;
    if (a.rows > 0x7fffffff)
        throw std::invalid_argument("rmsnorm: " + std::to_string(a.rows) + " rows exceed 2^31 - 1");
    const int d = a.d;
    const int threads = rmsnormThreads(d);
    // (rounded rows: 4 values a thread need only the f32 side aligned; the 2-byte stores go one by one)
    const bool vec = a.y ? rmsnormVectorised(d, a.ldx, a.ldy, a.x, a.y, a.w) : rmsnormVectorised(d, a.ldx, 0, a.x, a.x, a.w);
    if (vec)
        launch("rmsnorm", ex, rmsnormKernel<true>, dim3(static_cast<unsigned>(a.rows)), dim3(threads), 0, a.x, a.ldx,
               a.w, d, a.eps, a.y, a.ldy, a.y16);
    else
        launch("rmsnorm", ex, rmsnormKernel<false>, dim3(static_cast<unsigned>(a.rows)), dim3(threads), 0, a.x, a.ldx,
               a.w, d, a.eps, a.y, a.ldy, a.y16);
}

}  // namespace mamba::cuda
