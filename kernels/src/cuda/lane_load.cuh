// N consecutive floats of a row into registers: 16-byte loads when the caller knows the address is 16-byte aligned and
// all N exist (VEC), else one load per value with the values past `valid` read as 0. Shared by the decode gemv (x rows)
// and the scans (a lane's B_t / C_t values); aligned16 is the launchers' test for it.
#pragma once

#include <cstdint>

namespace mamba::cuda {

/** Whether p allows 16-byte loads and copies (launchers pick their VEC variants by it). */
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <int N, bool VEC>
__device__ __forceinline__ void loadFloats(const float* p, float (&v)[N], int valid) {
    if constexpr (VEC) {
        static_assert(N % 4 == 0, "16-byte loads take 4 floats at a time");
#pragma unroll
        for (int i = 0; i < N; i += 4) {
            const float4 q = *reinterpret_cast<const float4*>(p + i);
            v[i] = q.x;
            v[i + 1] = q.y;
            v[i + 2] = q.z;
            v[i + 3] = q.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i) v[i] = i < valid ? p[i] : 0.f;
    }
}

}  // namespace mamba::cuda
