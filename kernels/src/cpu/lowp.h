// Exact f32 ↔ bf16/f16 conversions on bit patterns: round to nearest, ties to even; overflow to ±inf;
// NaN stays NaN (quiet, sign and top payload bits kept, as x86's F16C does); f16 subnormals both ways.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace mamba::cpu {

inline uint32_t f32Bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}
inline float f32FromBits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

inline uint16_t f32ToBf16(float f) {
    uint32_t x = f32Bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // NaN → quiet NaN
    x += 0x7fffu + ((x >> 16) & 1u);  // ties to even; a carry into the exponent is the correct rounding
    return static_cast<uint16_t>(x >> 16);
}

inline float bf16ToF32(uint16_t h) { return f32FromBits(static_cast<uint32_t>(h) << 16); }

inline uint16_t f32ToF16(float f) {
    const uint32_t x = f32Bits(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));  // NaN
    if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // ≥ 65520 (incl. inf) → inf
    if (ax >= 0x38800000u) {  // ≥ 2^-14: a normal half; rebias the exponent by 127 − 15, round 13 bits
        uint32_t m = ax - 0x38000000u;
        m += 0xfffu + ((m >> 13) & 1u);
        return static_cast<uint16_t>(sign | (m >> 13));
    }
    if (ax <= 0x33000000u) return static_cast<uint16_t>(sign);  // ≤ 2^-25: 0 (2^-25 itself ties to even 0)
    // A subnormal half h·2^-24: the f32 significand shifted right by 126 − e (14..24 bits), rounded.
    const uint32_t e = ax >> 23;
    const uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u))) ++h;  // may reach 0x400, the smallest normal: still right
    return static_cast<uint16_t>(sign | h);
}

inline float f16ToF32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) return f32FromBits(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));  // inf / quiet NaN
    if (e == 0) {
        const float v = static_cast<float>(m) * 0x1p-24f;  // subnormal (or zero): exact in f32
        return sign ? -v : v;
    }
    return f32FromBits(sign | ((e + 112u) << 23) | (m << 13));
}

/** n f32 values rounded to nearest even to bf16, or to IEEE half when f16 (f32ToBf16 / f32ToF16 each). */
inline void narrowFromF32(const float* src, bool f16, uint16_t* dst, int64_t n) {
    if (f16)
        for (int64_t i = 0; i < n; ++i) dst[i] = f32ToF16(src[i]);
    else
        for (int64_t i = 0; i < n; ++i) dst[i] = f32ToBf16(src[i]);
}

/**
 * n 16-bit values (bf16, or IEEE half when f16) to f32, exactly — bit-equal to bf16ToF32 / f16ToF32, 8 at a
 * time (bf16: a 16-bit shift; f16: F16C).
 */
inline void widenToF32(const uint16_t* src, bool f16, float* dst, int64_t n) {
    int64_t i = 0;
    if (f16) {
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
        for (; i < n; ++i) dst[i] = f16ToF32(src[i]);
    } else {
        for (; i + 8 <= n; i += 8) {
            const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_slli_epi32(h, 16));
        }
        for (; i < n; ++i) dst[i] = bf16ToF32(src[i]);
    }
}

}  // namespace mamba::cpu
