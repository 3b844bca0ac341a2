// The GEMM contract: every matrix product of every architecture (inference projections, the LM head,
// every backward product) is one Gemm value handed to Ops::gemm. The backend picks the kernel from the
// product's kind, its shape, the weight's storage type and the mode — in one place per backend
// (cpu/cpu_gemm.cpp, cuda/gemm/gemm.cu), which is where GEMM tiers live.
#pragma once

#include "mamba/mamba.h"

#include <cstdint>

namespace mamba {

/** A linear weight [out, in] (PyTorch layout), used as y = x · Wᵀ, stored in `dtype`. */
struct Matrix {
    const float* f32;   // the f32 values (F32/TF32 storage), or null when only the 2-byte copy exists
    const void* lowp;   // the bf16/f16 values (BF16/F16 storage), or null
    int dtype;          // DTYPE_F32, DTYPE_TF32 (f32 values, tensor-core products allowed), DTYPE_BF16, DTYPE_F16
    int out, in;

    static Matrix f32Of(const float* w, int out, int in) { return Matrix{w, nullptr, DTYPE_F32, out, in}; }
};

/**
 * How a product may be computed — the GemmMode tiers.
 * - Fast: the backend's fastest kernel for the shape (GEMM_CUBLAS_FAST inference).
 * - Pedantic: the vendor GEMM without reduced-precision shortcuts (cuBLAS pedantic math; on the CPU, as
 *   Reproducible).
 * - Reproducible: results depend only on the operands — never on thread counts or a heuristic's split — but may
 *   depend on how many rows share the product (training products in the cuBLAS modes).
 * - Deterministic: Reproducible AND batch-invariant: row r's result depends only on row r and W, for every
 *   number of rows and whatever the other rows hold (GEMM_DETERMINISTIC).
 */
enum class GemmMode { Fast, Pedantic, Reproducible, Deterministic };

enum class GemmKind {
    Forward,       // c[r, 0:out] = beta·c[r] + a[r, 0:in]·Wᵀ (+ bias)            a = x,  c = y
    BackwardData,  // c[r, 0:in]  = beta·c[r] + a[r, 0:out]·W                      a = dy, c = dx
    WeightGrad,    // dw[out, in] += Σ_r a[r]ᵀ·b[r]; dbias[out] += Σ_r a[r]        a = dy, b = x
};
// The backward products of a weight run in its storage type, like its forward: BF16/F16 round dy (and x for
// WeightGrad) to that type and use tensor cores with f32 accumulation into f32 gradients (on CUDA; the CPU
// backend keeps f32 operands); F32 is true f32, TF32 allows TF32 tensor-op math. BackwardData reads W's 2-byte
// values for BF16/F16 and its f32 values otherwise, so a training Matrix carries both (trainingMatrix, weights.h).
// A backward product's mode is Pedantic or Reproducible: batch invariance is a promise about forward rows.

struct Gemm {
    GemmKind kind;
    GemmMode mode;
    int64_t rows;           // the B·T rows
    Matrix w;               // Forward/BackwardData: the weight; WeightGrad: only its out/in shape is used
    const float* a;         // see GemmKind
    int64_t lda;
    const float* b;         // WeightGrad: x [rows, ldb]; otherwise null
    int64_t ldb;
    float* c;               // Forward: y [rows, ldc]; BackwardData: dx [rows, ldc]; WeightGrad: dw [out, in] (dense)
    int64_t ldc;
    float beta;             // Forward/BackwardData only
    const float* bias;      // Forward: [out] or null
    float* dbias;           // WeightGrad: [out] or null
    // BackwardData/WeightGrad through linearBackward: dy already rounded to the weight's 2-byte type (BF16/F16
    // storage), [rows, lda16]. The backend reads it instead of rounding `a` itself — a producer that rounds as it
    // writes (the LM loss's cross-entropy) saves the packing pass; `a` may then be null (no dbias).
    // Forward (BF16/F16 weights): x given rounded the same way, [rows, lda16], `a` null; the product multiplies the
    // rounded values (on every path: one that would not round x itself works on them widened to f32).
    const void* a16 = nullptr;
    int64_t lda16 = 0;
    // WeightGrad through linearBackward only: x already rounded to the weight's 2-byte type, [rows, ldb16] — e.g. the
    // copy its forward product left in keep16; `b` may then be null.
    const void* b16 = nullptr;
    int64_t ldb16 = 0;
    // Forward, BF16/F16 weights, backends with Capabilities::rounds_backward_operands only: also leave x rounded to
    // the weight's type here, [rows, in] dense, overlapping no other operand (the training tape keeps it for the
    // weight gradient, which then need not round x again).
    void* keep16 = nullptr;

    /** y = beta·y + x·Wᵀ (+ bias). */
    static Gemm forward(GemmMode mode, const float* x, int64_t ldx, int64_t rows, const Matrix& w, const float* bias,
                        float* y, int64_t ldy, float beta) {
        return Gemm{GemmKind::Forward, mode, rows, w, x, ldx, nullptr, 0, y, ldy, beta, bias, nullptr};
    }
    /** dx = beta·dx + dy·W, in W's storage type (see above). */
    static Gemm backwardData(GemmMode mode, const float* dy, int64_t lddy, int64_t rows, const Matrix& w, float* dx,
                             int64_t lddx, float beta) {
        return Gemm{GemmKind::BackwardData, backwardMode(mode), rows, w, dy, lddy, nullptr, 0, dx, lddx, beta,
                    nullptr, nullptr};
    }
    /** dw[out, in] += Σ_r dy[r]ᵀ·x[r]; dbias += Σ_r dy[r] when not null; operands in `dtype` (see above). */
    static Gemm weightGrad(GemmMode mode, int dtype, const float* dy, int64_t lddy, const float* x, int64_t ldx,
                           int64_t rows, int out, int in, float* dw, float* dbias) {
        return Gemm{GemmKind::WeightGrad, backwardMode(mode), rows, Matrix{nullptr, nullptr, dtype, out, in}, dy, lddy,
                    x, ldx, dw, in, 1.f, nullptr, dbias};
    }
    /** The same product with dy given rounded to the weight's 2-byte type (see a16) instead of in f32. */
    Gemm withRoundedDy(const void* dy16, int64_t lddy16) const {
        Gemm g = *this;
        g.a = nullptr;
        g.lda = 0;
        g.a16 = dy16;
        g.lda16 = lddy16;
        return g;
    }
    /** The same forward product with x given rounded to the weight's 2-byte type (see a16) instead of in f32. */
    Gemm withRoundedInput(const void* x16, int64_t ldx16) const { return withRoundedDy(x16, ldx16); }
    /** The same weight gradient with x given rounded to the weight's 2-byte type (see b16) instead of in f32. */
    Gemm withRoundedX(const void* x16, int64_t ldx16) const {
        Gemm g = *this;
        g.b = nullptr;
        g.ldb = 0;
        g.b16 = x16;
        g.ldb16 = ldx16;
        return g;
    }
    /** The same forward product, also leaving its x rounded in `x16` (see keep16). */
    Gemm keepingRoundedX(void* x16) const {
        Gemm g = *this;
        g.keep16 = x16;
        return g;
    }
    static GemmMode backwardMode(GemmMode m) { return m == GemmMode::Pedantic ? m : GemmMode::Reproducible; }
};

}  // namespace mamba
