// Our matrix-vector kernel (gemv.cu): the Forward product for decode-sized row counts, with an optional
// rmsnorm prologue (the fused half of Ops::normLinear). gemm.cu is the only caller besides the tests.
#pragma once

#include "mamba/mamba.h"

#include "../cuda_check.h"

#include <cstdint>

namespace mamba::cuda {

/** The most rows one gemv call takes (the F32 scalar tier runs longer products 8 rows at a time). */
constexpr int kGemvMaxRows = 8;

/**
 * Rows up to which the fast modes send a Forward product to the gemv rather than cuBLAS: 8 for f32 weights, 4 for
 * 16-bit ones, whose gemv time grows with the rows while cuBLAS's tensor cores stay flat (H200, 2026-12-02: the 2.8b
 * decode step at 8 rows took 7.5 ms on the gemv against 3.9 ms for 16 rows on cuBLAS; at 4 rows 3.7 ms).
 */
constexpr int fastGemvMaxRows(int wdtype) { return wdtype == DTYPE_BF16 || wdtype == DTYPE_F16 ? 4 : kGemvMaxRows; }

/** An rmsnorm fused in front of a gemv: the gemv's input is y = w ⊙ x / rms(x), which it also writes out. */
struct NormPrologue {
    const float* x;
    int64_t ldx;
    const float* w;
    float eps;
    float* y;
    int64_t ldy;
};

/**
 * A causal depthwise conv + SiLU fused behind a one-row gemv (decode's in_proj at B = 1, Ops::normLinearConv): for every
 * output o < channels, u[o] = SiLU(bias[o] + Σ_k w[o, k]·(history[o, :] ++ y[o])[k]) and the history moves on by one —
 * convSilu's arithmetic (conv_step.cuh), bit for bit. Its own kernel (gemvConvKernel): the inputs are copied into
 * shared memory when the output's product starts, so the epilogue waits on no load, and the other gemv kernels stay
 * as they were (docs/cuda-backend.md, "Conv epilogue").
 */
struct ConvEpilogue {
    // width ≤ kConvEpilogueMaxWidth (every Mamba checkpoint's d_conv is 4): 4 taps + 3 history + bias = one 8-float slot
    const float* w;     // [channels, width]
    const float* bias;  // [channels]
    float* history;     // [channels, width − 1], oldest first; read and rewritten
    float* u;           // out: [channels]
    int channels, width;
};

constexpr int kConvEpilogueMaxWidth = 4;

/** Widest row a fused rmsnorm + gemv takes (8 normalised rows live in shared memory). */
constexpr int kNormFuseMaxWidth = 6144;

/**
 * y[r, 0:out] = beta·y[r] + x[r]·Wᵀ (+ bias) for r < rows ≤ kGemvMaxRows, W [out, in] row-major stored as
 * f32 (wdtype DTYPE_F32/TF32), bf16 or f16; f32 accumulation. Rows are computed independently with the
 * same arithmetic whatever `rows` is, so a batch row equals the same row run alone, bit for bit.
 * With `norm`, x is first computed as rmsnorm(norm->x) inside the kernel (see gemvNormFusable); with `conv` (one row,
 * `norm` given), the outputs below conv->channels are also run through the conv step (ConvEpilogue).
 */
void gemv(const Exec& ex, const float* x, int64_t ldx, int rows, const void* w, int wdtype, int out, int in,
          const float* bias, float* y, int64_t ldy, float beta, const NormPrologue* norm = nullptr,
          const ConvEpilogue* conv = nullptr);

/**
 * Whether gemv can take the rmsnorm prologue for `rows` rows of this weight: 1 … kGemvMaxRows rows, whole
 * 16-byte weight rows, width ≤ kNormFuseMaxWidth, and rows·in floats of shared memory on this device.
 */
bool gemvNormFusable(const Exec& ex, int rows, const void* w, int wdtype, int in);

/** Threads that cooperate on one output of a gemv of this shape (ex.gemv_group forces it; for tests/notes). */
int gemvGroupSize(const Exec& ex, int wdtype, int out, int in, bool vectorised);
/** The group size of the same product with the rmsnorm prologue (capped so that each block has enough outputs). */
int normGroupSize(const Exec& ex, int wdtype, int out, int in);

/**
 * Whether fusing the rmsnorm into this product is faster than running the two apart (a measured rule, see gemv.cu).
 * The two paths agree to f32 rounding, not bit for bit (another group size): the fast modes' contract, where a row's
 * last bits may change with the batch; DETERMINISTIC never fuses.
 */
bool gemvNormFusionPays(const Exec& ex, int rows, int wdtype, int out, int in);

}  // namespace mamba::cuda
