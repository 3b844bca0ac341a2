// bf16 / f16 storage on the device, both directions, in one place: the gemv, the scan's fused Δ
// projection, the embedding gather and fromLowPrecision read 2-byte values through these helpers, and
// toLowPrecision / the activation packing of a low-precision GEMM write them through toStorage().
//
// Reading is exact (every bf16 and f16 value is an f32 value): a bf16 is the top half of an f32, an
// f16 goes through the hardware conversion. Writing rounds to nearest even.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "ops/ops.h"

namespace mamba::cuda {

/** Elements of storage type W in one 16-byte chunk (4 for f32, 8 for bf16/f16). */
template <typename W>
constexpr int kChunkElems = static_cast<int>(16 / sizeof(W));

/** One stored element as f32 (exact). */
__device__ __forceinline__ float toFloat(float v) { return v; }
__device__ __forceinline__ float toFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float toFloat(__half v) { return __half2float(v); }

/** A 16-byte chunk of W values (loaded as an int4) as kChunkElems<W> floats, in memory order. */
template <typename W>
__device__ __forceinline__ void unpack16(const int4& raw, float (&f)[kChunkElems<W>]);

template <>
__device__ __forceinline__ void unpack16<float>(const int4& raw, float (&f)[4]) {
    f[0] = __int_as_float(raw.x);
    f[1] = __int_as_float(raw.y);
    f[2] = __int_as_float(raw.z);
    f[3] = __int_as_float(raw.w);
}

template <>
__device__ __forceinline__ void unpack16<__nv_bfloat16>(const int4& raw, float (&f)[8]) {
    const unsigned u[4] = {static_cast<unsigned>(raw.x), static_cast<unsigned>(raw.y), static_cast<unsigned>(raw.z),
                           static_cast<unsigned>(raw.w)};
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // little-endian: the lower address is the low half of the word
        f[2 * i] = __uint_as_float(u[i] << 16);
        f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
}

template <>
__device__ __forceinline__ void unpack16<__half>(const int4& raw, float (&f)[8]) {
    const int u[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // a pair of halves converts in one instruction
        __half2 h;
        memcpy(&h, &u[i], sizeof h);
        const float2 v = __half22float2(h);
        f[2 * i] = v.x;
        f[2 * i + 1] = v.y;
    }
}

/** f32 to storage type T, round to nearest even. */
template <typename T>
__device__ __forceinline__ T toStorage(float v);
template <>
__device__ __forceinline__ __nv_bfloat16 toStorage<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half toStorage<__half>(float v) { return __float2half_rn(v); }

/** Two f32 → one word of two T (round to nearest even), the first value at the lower address. */
template <typename T>
__device__ __forceinline__ uint32_t packPair(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t packPair<__nv_bfloat16>(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t packPair<__half>(float lo, float hi) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}

/** v rounded into element (r, c) of a Rounded16 output (ops/ops.h), in its 2-byte type. */
__device__ __forceinline__ void storeRounded(const Rounded16& out, int64_t r, int64_t c, float v) {
    if (out.dtype == DTYPE_BF16) static_cast<__nv_bfloat16*>(out.data)[r * out.ld + c] = toStorage<__nv_bfloat16>(v);
    else static_cast<__half*>(out.data)[r * out.ld + c] = toStorage<__half>(v);
}

}  // namespace mamba::cuda
