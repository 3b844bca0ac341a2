// What sits behind the public Model and State classes.
#pragma once

#include "buffer.h"
#include "mamba1_model.h"

#include <map>
#include <utility>

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

    ~ModelImpl();

    /** The weights as the kernels read them; refreshes derived copies (-exp(A_log), BF16/F16) after writes. */
    Weights weights();
    /** Runs the backbone on host input/output, staging through device memory when needed. */
    void run(StateImpl* state, const float* x, int B, int T, float* y, bool allPositions) {
        run(state, Input{x, nullptr}, B, T, y, allPositions);
    }
    /** Language-model form: token ids in, logits out. */
    void runTokens(StateImpl* state, const int32_t* ids, int B, int T, float* logits, bool allPositions) {
        run(state, Input{nullptr, ids}, B, T, logits, allPositions);
    }
    void checkState(const StateImpl& s) const;
    void setGraphs(bool on);

    ModelConfig config;
    Dims dims;
    ParamTable table;
    Backend& be;
    int device, dtype;
    Buffer params;
    Buffer lowp;   // 2-byte copy of params for BF16/F16 storage (same element offsets)
    Buffer neg_a;
    bool weights_changed = true;
    Mamba1Model mamba1;
    Buffer scratch_state, x_stage, y_stage;
    bool graphs = false;

    /** Input: float features, or token ids (4 bytes each, staged through the same buffer). */
    struct Input {
        const float* x;
        const int32_t* ids;
    };
    /** Launches the model on input already in the backend's memory (no staging, no synchronisation). */
    void launch(float* state, Input staged, int B, int T, float* out, bool allPositions, const Weights& w);

private:
    void run(StateImpl* state, Input in, int B, int T, float* out, bool allPositions);
    void runGraphStep(StateImpl& state, Input in, float* out);
    void dropGraphs() noexcept;
    std::map<std::pair<const float*, int>, void*> step_graphs_;  // (state memory, batch) -> captured step
};

}  // namespace mamba
