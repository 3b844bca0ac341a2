// What sits behind the public Model and State classes.
#pragma once

#include "buffer.h"
#include "mamba1_model.h"

namespace mamba {

class StateImpl {
public:
    StateImpl(Backend& be, const Dims& dims, int batch)
        : be(be), dims(dims), batch(batch), data(be, dims.row_state * batch) {}
    Backend& be;
    Dims dims;
    int batch;
    Buffer data;  // [batch, row_state]
};

class ModelImpl {
public:
    ModelImpl(const ModelConfig& config, int device, int dtype, int64_t seed);

    /** -exp(A_log) for every layer, recomputed after the weights change. */
    const float* negA();
    /** Runs the backbone on host input/output, staging through device memory when needed. */
    void run(StateImpl* state, const float* x, int B, int T, float* y, bool allPositions);
    void checkState(const StateImpl& s) const;

    ModelConfig config;
    Dims dims;
    ParamTable table;
    Backend& be;
    int device, dtype;
    Buffer params;
    Buffer neg_a;
    bool weights_changed = true;
    Mamba1Model mamba1;
    Buffer scratch_state, x_stage, y_stage;
};

}  // namespace mamba
