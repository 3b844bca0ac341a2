// Token embedding gather: out[r, :] = table[ids[r], :] as f32 (ids already range-checked by the caller).
// The table is stored as f32, bf16 or f16 (a BF16 language model keeps its embedding only in bf16).
// One block per row; 16-byte loads when the row width and pointers allow (4 floats or 8 two-byte values,
// unpacked by lowp.cuh and stored as two float4s), element by element otherwise.
#include "kernels.h"
#include "lane_load.cuh"
#include "lowp.cuh"

#include <stdexcept>
#include <string>

namespace mamba::cuda {
namespace {

template <typename W, bool VEC>
__global__ void embedKernel(const W* __restrict__ table, const int32_t* __restrict__ ids, int d,
                            float* __restrict__ out) {
    pdlWait();
    pdlLaunchDependents();
    const int64_t r = blockIdx.x;
    const W* src = table + static_cast<int64_t>(ids[r]) * d;
    float* dst = out + r * d;
    if constexpr (VEC) {
        constexpr int V = kChunkElems<W>;
        for (int i = threadIdx.x; i < d / V; i += blockDim.x) {
            float f[V];
            unpack16<W>(reinterpret_cast<const int4*>(src)[i], f);
#pragma unroll
            for (int v = 0; v < V; v += 4)
                reinterpret_cast<float4*>(dst + i * V)[v / 4] = make_float4(f[v], f[v + 1], f[v + 2], f[v + 3]);
        }
    } else {
        for (int i = threadIdx.x; i < d; i += blockDim.x) dst[i] = toFloat(src[i]);
    }
}

template <typename W>
void launchEmbed(const Exec& ex, const W* table, const int32_t* ids, int64_t rows, int d, float* out) {
    // Every row start must be 16-byte aligned too: d a multiple of the chunk for the table, of 4 for out.
    const bool vec = d % kChunkElems<W> == 0 && aligned16(table) && aligned16(out);
    const int threads = d >= 1024 ? 256 : 128;
    const dim3 grid(static_cast<unsigned>(rows));
    if (vec) launch("embed", ex, embedKernel<W, true>, grid, dim3(threads), 0, table, ids, d, out);
    else launch("embed", ex, embedKernel<W, false>, grid, dim3(threads), 0, table, ids, d, out);
}

}  // namespace

void embed(const Exec& ex, const void* table, int dtype, const int32_t* ids, int64_t rows, int d, float* out) {
    if (rows <= 0 || d <= 0) return;
    if (rows > 0x7fffffff) throw std::invalid_argument("embed: " + std::to_string(rows) + " rows exceed 2^31 - 1");
    switch (dtype) {
        case DTYPE_F32:
        case DTYPE_TF32: launchEmbed(ex, static_cast<const float*>(table), ids, rows, d, out); break;
        case DTYPE_BF16: launchEmbed(ex, static_cast<const __nv_bfloat16*>(table), ids, rows, d, out); break;
        case DTYPE_F16: launchEmbed(ex, static_cast<const __half*>(table), ids, rows, d, out); break;
        default: throw std::invalid_argument("embed: unknown storage dtype code " + std::to_string(dtype));
    }
}

}  // namespace mamba::cuda
