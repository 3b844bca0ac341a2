// Token embedding gather: out[r, :] = table[ids[r], :] (ids already range-checked by the caller).
// One block per row, 16-byte copies when the row width and pointers allow.
#include "kernels.h"

namespace mamba::cuda {
namespace {

template <bool VEC>
__global__ void embedKernel(const float* __restrict__ table, const int32_t* __restrict__ ids, int d,
                            float* __restrict__ out) {
    pdlWait();
    pdlLaunchDependents();
    const int64_t r = blockIdx.x;
    const float* src = table + static_cast<int64_t>(ids[r]) * d;
    float* dst = out + r * d;
    if (VEC) {
        for (int i = threadIdx.x; i < d / 4; i += blockDim.x)
            reinterpret_cast<float4*>(dst)[i] = reinterpret_cast<const float4*>(src)[i];
    } else {
        for (int i = threadIdx.x; i < d; i += blockDim.x) dst[i] = src[i];
    }
}

}  // namespace

void embed(const Exec& ex, const float* table, const int32_t* ids, int64_t rows, int d, float* out) {
    if (rows <= 0 || d <= 0) return;
    const bool vec = d % 4 == 0 && (reinterpret_cast<uintptr_t>(table) & 15) == 0 &&
                     (reinterpret_cast<uintptr_t>(out) & 15) == 0;
    const int threads = d >= 1024 ? 256 : 128;
    if (vec) launch("embed", ex, embedKernel<true>, dim3(static_cast<unsigned>(rows)), dim3(threads), 0, table, ids, d, out);
    else launch("embed", ex, embedKernel<false>, dim3(static_cast<unsigned>(rows)), dim3(threads), 0, table, ids, d, out);
}

}  // namespace mamba::cuda
