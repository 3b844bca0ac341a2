// Mamba-1 forward, written once against the Backend interface. The same code runs a decode step
// (T = 1), a prefill and a full-sequence forward; only the row count of each stage changes.
#pragma once

#include "buffer.h"
#include "params.h"

namespace mamba {

/** Where a model's weights live: the f32 master buffer, an optional 2-byte copy, and cached -exp(A_log). */
struct Weights {
    const float* f32;
    const uint16_t* lowp;  // same element offsets as f32; null when matrices are read as f32
    int dtype;             // DTYPE_F32, DTYPE_TF32, DTYPE_BF16 or DTYPE_F16
    const float* neg_a;    // [n_layers, d_inner, d_state]
};

class Mamba1Model {
public:
    Mamba1Model(const Dims& dims, const ParamTable& table) : dims_(dims), table_(table) {}

    /**
     * Runs x [B, T, in_width] through the backbone, carrying `state` ([B, row_state], in and out).
     * Writes y: every position [B, T, d_model] when allPositions, else the last one [B, d_model].
     */
    void run(Backend& be, const Weights& w, float* state, const float* x, int B, int T, float* y, bool allPositions);

    /** Language-model form: token ids [B, T] (device ints) in, logits [B, T or 1, vocab] out. */
    void runTokens(Backend& be, const Weights& w, float* state, const int32_t* ids, int B, int T, float* logits,
                   bool allPositions);

    /** Sizes the workspace for `rows` = B*T rows; returns true if any buffer moved (graphs must be re-captured). */
    bool reserve(Backend& be, int64_t rows);

private:
    Matrix matrix(const Weights& w, int index) const;
    /** The residual blocks over resid_ (already holding h0), then the final norm of the wanted rows into y. */
    void blocksAndNorm(Backend& be, const Weights& w, float* state, int B, int T, float* y, bool allPositions);
    const float* at(const Weights& w, int index) const { return w.f32 + table_.params()[index].offset; }

    const Dims& dims_;
    const ParamTable& table_;
    // Workspace, grown to the largest B*T seen.
    Buffer resid_, normed_, xz_, u_, xdbl_, dt_, gated_;
};

}  // namespace mamba
