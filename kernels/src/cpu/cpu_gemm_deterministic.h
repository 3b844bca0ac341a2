// GEMM_DETERMINISTIC's kernel on the CPU (see cpu_gemm_deterministic.cpp for the fixed order).
#pragma once

#include <cstdint>

namespace mamba::cpu {

/** y[r, o] += dot(x[r, :in], W[o, :in]) for r < rows, o < out, each dot in the fixed 8-lane FMA order. */
void gemmDeterministicAccumulate(const float* x, int64_t ldx, int64_t rows, const float* W, int out, int in, float* y,
                                 int64_t ldy);

/** The fixed order in plain scalar code: what every element of gemmDeterministicAccumulate equals, bit for bit. */
float dotReference(const float* x, const float* w, int K);

}  // namespace mamba::cpu
