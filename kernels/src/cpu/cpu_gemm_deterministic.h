// The CPU's fixed-order product kernel (see cpu_gemm_deterministic.cpp for the order): GEMM_DETERMINISTIC for
// every storage type, and the decode product of 16-bit weights in every mode.
#pragma once

#include <cstdint>

namespace mamba::cpu {

/** y[r, o] += dot(x[r, :in], W[o, :in]) for r < rows, o < out, each dot in the fixed 8-lane FMA order. */
void gemmDeterministicAccumulate(const float* x, int64_t ldx, int64_t rows, const float* W, int out, int in, float* y,
                                 int64_t ldy);

/**
 * The same with 16-bit weights: bf16 (f16 = false) or IEEE half (f16 = true), widened exactly to f32 as they are
 * read, so each element equals dotReference(x[r], the widened W[o]) bit for bit.
 */
void gemmDeterministicAccumulate16(const float* x, int64_t ldx, int64_t rows, const uint16_t* W, bool f16, int out,
                                   int in, float* y, int64_t ldy);

/** The fixed order in plain scalar code: what every element of the kernels above equals, bit for bit. */
float dotReference(const float* x, const float* w, int K);

}  // namespace mamba::cpu
