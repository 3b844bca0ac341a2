// The residual backbone every architecture shares (mixer_seq_simple.MixerModel + MambaLMHeadModel):
//
//   h0 = input_proj(x) | x | embedding[ids]
//   h_{i+1} = h_i + Mixer_i(RMSNorm_i(h_i))          (the Architecture's layers)
//   y = RMSNorm_f(h_L);  logits = y · Wᵀ_lm_head     (language models)
//
// Backbone is the immutable description (config, tensors, architecture); BackboneRunner runs it with its
// own buffers — a model has one for inference, a trainer replica one for its taped forward and backward.
#pragma once

#include "arch.h"

#include <vector>

namespace mamba {

/** Sizes shared by every architecture. */
struct BackboneDims {
    int d_model, n_layers;
    int input_dim;        // > 0: a Linear(input_dim → d_model) with bias runs first
    int in_width;         // floats per input position: input_dim, or d_model
    int vocab;            // > 0: a language model (token ids in, logits out)
    bool tie_embeddings;  // the LM head reuses the embedding
    float eps;            // block and final norms
    int64_t layer_state;  // floats of state per layer and row
    int64_t row_state;    // one row of a State
};

class Backbone {
public:
    /** Validates the config (std::invalid_argument naming the field) and lays out every tensor. */
    explicit Backbone(const ModelConfig& config);

    /** The seeded initialisation of every tensor into host (ParamTable layout, totalSize floats). */
    void init(int64_t seed, float* host) const;

    const ModelConfig config;
    const std::unique_ptr<Architecture> arch;
    BackboneDims dims;
    ParamTable table;
    int input_w = -1, input_b = -1;     // the input projection
    int embedding = -1, lm_head = -1;   // language models; lm_head == embedding when tied
    int norm_f = -1;
};

/** What one forward reads and writes. Pointers are backend memory. */
struct ForwardIO {
    const float* x = nullptr;      // [B, T, in_width] features …
    const int32_t* ids = nullptr;  // … or [B, T] token ids (language models; range-checked by the caller)
    int B = 0, T = 0;
    float* out = nullptr;          // features in: RMSNorm_f output; ids in: logits. [B, T or 1, width]
    bool allPositions = false;     // every position, or the last one of each row
    float* state = nullptr;        // [B, row_state]: carried in and out
};

class BackboneRunner {
public:
    explicit BackboneRunner(const Backbone& backbone) : bb_(backbone) {}

    /** Sizes the buffers for B rows of T steps (tape: per-layer activations for backward); true if any moved. */
    bool reserve(Ops& ops, int B, int T, bool tape);

    /** Inference forward: products in `mode`, nothing kept. */
    void forward(Ops& ops, const WeightView& w, const ForwardIO& io, GemmMode mode);

    /**
     * Training forward (features in, every position out) that keeps the tape; products in `mode`, which must be
     * reproducible (Reproducible, Pedantic or Deterministic).
     * `start` is the state io.state held before the call (read by backward; must stay unchanged until then).
     * io.x must also stay unchanged until backward.
     */
    void forwardTape(Ops& ops, const WeightView& w, const ForwardIO& io, const float* start, GemmMode mode);

    /**
     * Backward of the last forwardTape with dy [B, T, d_model]: ADDS every tensor's gradient into grads
     * (ParamTable layout) and writes ∂L/∂x into dx [B, T, in_width] when dx is not null.
     */
    void backward(Ops& ops, const WeightView& w, const WeightView& master, const float* dy, float* grads, float* dx);

private:
    LayerCall call(int layer, int B, int T, GemmMode mode, float* state) const;
    void stem(Ops& ops, const WeightView& w, const ForwardIO& io, GemmMode mode, float* h0);

    const Backbone& bb_;
    // inference
    Buffer resid_, normed_;
    std::unique_ptr<LayerBuffers> layer_;
    // tape
    std::vector<Buffer> entering_;  // n_layers + 1: entering_[i] is the stream entering layer i, [L] norm_f's input
    std::vector<std::unique_ptr<LayerBuffers>> tape_;
    std::unique_ptr<LayerBuffers> scratch_;
    Buffer dresid_;
    int tape_B_ = 0, tape_T_ = 0;
    const float* tape_x_ = nullptr;
    const float* tape_start_ = nullptr;
};

}  // namespace mamba
