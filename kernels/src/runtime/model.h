// The model runtime behind mamba::Model and mamba::State: a backbone's weights on one backend context,
// host staging, cached derived weights and CUDA graphs of decode steps. Argument checks happen before
// (src/api); everything here trusts its inputs.
#pragma once

#include "arch/backbone.h"
#include "core/buffer.h"
#include "runtime/sampler.h"

#include <map>
#include <memory>
#include <utility>

namespace mamba {

class StateImpl {
public:
    StateImpl(std::shared_ptr<Ops> ops, int device, const BackboneDims& dims, int arch, int batch)
        : ops(std::move(ops)), device(device), arch(arch), n_layers(dims.n_layers), layer_state(dims.layer_state),
          row_state(dims.row_state), batch(batch), data(*this->ops, dims.row_state * batch) {}
    const std::shared_ptr<Ops> ops;  // declared first: outlives data
    const int device, arch, n_layers;
    const int64_t layer_state, row_state;
    const int batch;
    Buffer data;  // [batch, row_state]
};

class ModelImpl {
public:
    ModelImpl(const ModelConfig& config, int device, int dtype, int64_t seed);
    ~ModelImpl();

    /** Input of a run: float features, or token ids (language models). */
    struct Input {
        const float* x;
        const int32_t* ids;
    };

    /** Runs on host input/output, staging through device memory where needed; state null = zeros, kept nowhere. */
    void run(StateImpl* state, Input in, int B, int T, float* out, bool allPositions);
    /**
     * Runs ids [B, T] from the state (carried), then samples each row's next token from the last position's
     * logits with `sampler` on this backend: only the ids come back (next, host). T = 1 replays a CUDA graph
     * of step + sampling when graphs are on.
     */
    void runSample(StateImpl& state, SamplerImpl& sampler, const int32_t* ids, int T, int32_t* next);
    /** Launches on input already in backend memory (no staging, no synchronisation). */
    void launch(float* state, Input staged, int B, int T, float* out, bool allPositions);

    /** The weights as the architecture reads them; refreshes the derived weights after any change. */
    WeightView weights();
    void readParam(int index, float* host);
    void writeParam(int index, const float* host);
    /** Marks derived weights (and graphs' inputs) stale after the storage changed in place. */
    void weightsChanged() { derived_stale_ = true; }

    void checkState(const StateImpl& s) const;
    void setGraphs(bool on);
    bool graphs() const { return graphs_; }
    /** GEMM_DETERMINISTIC / GEMM_CUBLAS_FAST / GEMM_CUBLAS_PEDANTIC; a change drops captured graphs. */
    void setGemmMode(int mode);
    int gemmMode() const { return gemm_mode_; }
    /** The products of inference, and of a trainer's taped forward (always reproducible), in this model's mode. */
    GemmMode inferenceMode() const;
    GemmMode trainingMode() const;
    /** Whether the storage is f32 in the ParamTable layout (so a trainer can update it in place). */
    bool storesF32() const { return !(dtype == DTYPE_BF16 || dtype == DTYPE_F16); }
    float* storageF32() { return storage_.data(); }
    /** Where the storage lives (a captured training step is only valid for the buffers it recorded). */
    const void* storageAddress() const { return storage_.data(); }
    int64_t storageBytes() const { return layout_.bytes; }
    /** Where tensor `index` starts in the storage, in bytes, and whether it is stored in 2 bytes (BF16/F16). */
    int64_t storageByteOffset(int index) const { return layout_.byte_offset[index]; }
    bool storedLowp(int index) const { return layout_.lowp(backbone.table[index]); }

    const Backbone backbone;
    const int device, dtype;
    const std::shared_ptr<Ops> ops;
    /** A trainer's f32 masters while one is attached to a low-precision model (writeParam keeps them in sync). */
    float* masters = nullptr;

private:
    void runGraphStep(StateImpl& state, Input in, float* out);
    bool reserve(int B, int T, int64_t inN, int64_t outN);
    void dropGraphs() noexcept;
    /** A temporary f32 buffer of at least n floats (conversions of one tensor). */
    float* temp(int64_t n);

    StorageLayout layout_;
    Buffer storage_;   // every tensor in its storage type (see StorageLayout)
    Buffer derived_;   // the architecture's derived weights
    bool derived_stale_ = true;
    BackboneRunner runner_;
    Buffer scratch_state_, x_stage_, y_stage_, temp_;
    bool graphs_ = false;
    int gemm_mode_ = GEMM_CUBLAS_FAST;
    std::map<std::pair<const float*, int>, void*> step_graphs_;  // (state memory, ±batch) -> captured step
    struct SampleGraph {
        uint64_t sampler_uid;
        unsigned needs;  // the sampler's stages captured (its rows' settings may change what runs)
        void* graph;
    };
    std::map<std::pair<const float*, int>, SampleGraph> sample_graphs_;  // (state memory, batch) -> step + sampling
};

}  // namespace mamba
