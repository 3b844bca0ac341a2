// Our matrix-vector kernel (gemv.cu): the Forward product for decode-sized row counts, with an optional
// rmsnorm prologue (the fused half of Ops::normLinear). gemm.cu is the only caller besides the tests.
#pragma once

#include "../cuda_check.h"

#include <cstdint>

namespace mamba::cuda {

/** Rows up to which a Forward product uses our matrix-vector kernel rather than cuBLAS. */
constexpr int kGemvMaxRows = 8;

/** An rmsnorm fused in front of a gemv: the gemv's input is y = w ⊙ x / rms(x), which it also writes out. */
struct NormPrologue {
    const float* x;
    int64_t ldx;
    const float* w;
    float eps;
    float* y;
    int64_t ldy;
};

/** Widest row a fused rmsnorm + gemv takes (8 normalised rows live in shared memory). */
constexpr int kNormFuseMaxWidth = 6144;

/**
 * y[r, 0:out] = beta·y[r] + x[r]·Wᵀ (+ bias) for r < rows ≤ kGemvMaxRows, W [out, in] row-major stored as
 * f32 (wdtype DTYPE_F32/TF32), bf16 or f16; f32 accumulation. Rows are computed independently with the
 * same arithmetic whatever `rows` is, so a batch row equals the same row run alone, bit for bit.
 * With `norm`, x is first computed as rmsnorm(norm->x) inside the kernel (see gemvNormFusable).
 */
void gemv(const Exec& ex, const float* x, int64_t ldx, int rows, const void* w, int wdtype, int out, int in,
          const float* bias, float* y, int64_t ldy, float beta, const NormPrologue* norm = nullptr);

/**
 * Whether gemv can take the rmsnorm prologue for `rows` rows of this weight: 1 … kGemvMaxRows rows, whole
 * 16-byte weight rows, width ≤ kNormFuseMaxWidth, and rows·in floats of shared memory on this device.
 */
bool gemvNormFusable(const Exec& ex, int rows, const void* w, int wdtype, int in);

/** Threads that cooperate on one output of a gemv of this shape (ex.gemv_group forces it; for tests/notes). */
int gemvGroupSize(const Exec& ex, int wdtype, int out, int in, bool vectorised);

}  // namespace mamba::cuda
