// Branch-free exp / log / softplus / SiLU for f32 that GCC vectorises inside `omp simd` loops.
// libm's scalar calls cost more than the whole SSM update at decode sizes. Relative error of
// fastExp and fastLog1p is below 2e-7 over their ranges (checked by the Java reference tests).
#pragma once

#include <cstdint>
#include <cstring>

namespace mamba::cpu {

static inline float bitsToFloat(int32_t i) {
    float f;
    std::memcpy(&f, &i, sizeof f);
    return f;
}
static inline int32_t floatToBits(float f) {
    int32_t i;
    std::memcpy(&i, &f, sizeof i);
    return i;
}

/** 2^k as a float for an exponent k in [-126, 127]: shifted unsigned, since shifting a negative int is undefined. */
static inline float powerOfTwo(int32_t k) {
    return bitsToFloat(static_cast<int32_t>(static_cast<uint32_t>(k + 127) << 23));
}

/** e^x: x = n·ln2 + r with |r| ≤ ln2/2 (Cody–Waite split), e^r by a degree-6 polynomial. NaN gives NaN. */
static inline float fastExp(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    // NaN passes the clamp; converting it to int is undefined (UBSan found the shift of the result), so its
    // exponent is taken as 0 — r stays NaN and so does the result. Finite inputs get the same bits as before.
    const float n0 = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
    const float n = n0 == n0 ? n0 : 0.0f;
    const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187045e-06f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    return p * powerOfTwo(static_cast<int32_t>(n));
}

/** ln(1 + x) for x in [0, 1]: ln m + k·ln2 with m = mantissa of 1+x in [√½, √2), atanh series. */
static inline float fastLog1p(float x) {
    const float y = 1.0f + x;
    int32_t bits = floatToBits(y);
    // Normalise the mantissa into [0.7071, 1.4142) so the series converges fast.
    const int32_t k = ((bits - 0x3F3504F3) >> 23);  // negative only for a negative NaN (the result is NaN anyway)
    const float m = bitsToFloat(bits - static_cast<int32_t>(static_cast<uint32_t>(k) << 23));
    // Correct for the rounding of 1 + x (keeps accuracy for tiny x): c = x - (y - 1).
    const float c = x - (y - 1.0f);
    const float s = (m - 1.0f) / (m + 1.0f);
    const float s2 = s * s;
    float p = 1.0f / 11.0f;
    p = p * s2 + 1.0f / 9.0f;
    p = p * s2 + 1.0f / 7.0f;
    p = p * s2 + 1.0f / 5.0f;
    p = p * s2 + 1.0f / 3.0f;
    p = p * s2 + 1.0f;
    return 2.0f * s * p + static_cast<float>(k) * 0.693147180559945309f + c / y;
}

/** softplus with PyTorch's threshold: x for x > 20, else ln(1 + e^x) (stable for negative x). */
static inline float softplus(float x) {
    const float e = fastExp(x > 0.0f ? -x : x);  // e^{-|x|} in (0, 1]
    const float v = (x > 0.0f ? x : 0.0f) + fastLog1p(e);
    return x > 20.0f ? x : v;
}

/** tanh(x) = 1 − 2/(e^{2x} + 1): absolute error below ~2e-7 (relative error grows near 0, where tanh ≈ x is tiny). */
static inline float fastTanh(float x) {
    const float xc = x < -9.0f ? -9.0f : (x > 9.0f ? 9.0f : x);  // tanh(±9) rounds to ±1 in f32
    return 1.0f - 2.0f / (fastExp(2.0f * xc) + 1.0f);
}

/**
 * sin(x) and cos(x) for |x| up to ~1e5 (angles are kept in [0, 2π)): x = j·π/2 + r with |r| ≤ π/4 (three-part
 * Cody–Waite split), odd/even Taylor polynomials in r, the quadrant j mod 4 picks and signs them. Absolute
 * error below ~1.5e-7.
 */
static inline void fastSinCos(float x, float* s, float* c) {
    const float j = __builtin_floorf(x * 0.636619772367581343f + 0.5f);
    const float r = ((x - j * 1.5703125f) - j * 4.837512969970703125e-4f) - j * 7.549789954891886e-8f;
    const float r2 = r * r;
    float ps = -1.0f / 39916800.0f;
    ps = ps * r2 + 1.0f / 362880.0f;
    ps = ps * r2 - 1.0f / 5040.0f;
    ps = ps * r2 + 1.0f / 120.0f;
    ps = ps * r2 - 1.0f / 6.0f;
    const float sr = r + r * r2 * ps;
    float pc = 1.0f / 479001600.0f;
    pc = pc * r2 - 1.0f / 3628800.0f;
    pc = pc * r2 + 1.0f / 40320.0f;
    pc = pc * r2 - 1.0f / 720.0f;
    pc = pc * r2 + 1.0f / 24.0f;
    pc = pc * r2 - 0.5f;
    const float cr = 1.0f + r2 * pc;
    const int32_t q = static_cast<int32_t>(j) & 3;  // two's complement: −1 & 3 = 3, as wanted
    const float sv = (q & 1) ? cr : sr, cv = (q & 1) ? sr : cr;
    *s = (q & 2) ? -sv : sv;
    *c = ((q + 1) & 2) ? -cv : cv;
}

static inline float sigmoid(float x) { return 1.0f / (1.0f + fastExp(-x)); }
static inline float silu(float x) { return x * sigmoid(x); }

}  // namespace mamba::cpu
