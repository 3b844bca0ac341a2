// Mamba-1 forward, written once against the Backend interface. The same code runs a decode step
// (T = 1), a prefill and a full-sequence forward; only the row count of each stage changes.
#pragma once

#include "buffer.h"
#include "params.h"

namespace mamba {

class Mamba1Model {
public:
    Mamba1Model(const Dims& dims, const ParamTable& table) : dims_(dims), table_(table) {}

    /**
     * Runs x [B, T, in_width] through the backbone, carrying `state` ([B, row_state], in and out).
     * Writes y: every position [B, T, d_model] when allPositions, else the last one [B, d_model].
     * `params` is the flat weight buffer, `a` the cached -exp(A_log) for all layers.
     */
    void run(Backend& be, const float* params, const float* a, float* state, const float* x, int B, int T,
             float* y, bool allPositions);

private:
    Matrix matrix(const float* params, int index) const;
    const float* at(const float* params, int index) const { return params + table_.params()[index].offset; }

    const Dims& dims_;
    const ParamTable& table_;
    // Workspace, grown to the largest B*T seen.
    Buffer resid_, normed_, xz_, u_, xdbl_, dt_, gated_;
};

}  // namespace mamba
