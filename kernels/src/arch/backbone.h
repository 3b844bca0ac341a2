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

    /**
     * Sizes the buffers for B rows of T steps (Inference; or Tape / TapeRounded: per-layer activations for backward);
     * true if any moved.
     */
    bool reserve(Ops& ops, int B, int T, BufferUse use);
    /** The tape a training forward over weights stored in `dtype` keeps on this backend (Tape or TapeRounded). */
    static BufferUse tapeUse(const Ops& ops, int dtype);

    /** Inference forward: products in `mode`, nothing kept. */
    void forward(Ops& ops, const WeightView& w, const ForwardIO& io, GemmMode mode);

    /**
     * Training forward (features or token ids in, every position out) that keeps the tape; products in `mode`,
     * which must be reproducible (Reproducible, Pedantic or Deterministic). io.out receives RMSNorm_f's output
     * [B, T, d_model] for both kinds of input (a language model's logits come from lmLoss, in blocks).
     * `start` is the state io.state held before the call (read by backward; must stay unchanged until then).
     * io.x or io.ids must also stay unchanged until backward.
     */
    void forwardTape(Ops& ops, const WeightView& w, const ForwardIO& io, const float* start, GemmMode mode);

    /**
     * Backward of the last forwardTape with dy [B, T, d_model]: ADDS every tensor's gradient into grads
     * (ParamTable layout) and writes ∂L/∂x into dx [B, T, in_width] when dx is not null. With token ids in, the
     * embedding's gradient is added too (embedBackward) and dx must be null. State carry (both optional, [B, row_state]
     * like io.state): dEnd is ∂L/∂(the state forwardTape ended in), dStart receives ∂L/∂(its start state).
     */
    void backward(Ops& ops, const WeightView& w, const WeightView& master, const float* dy, float* grads, float* dx,
                  const float* dEnd = nullptr, float* dStart = nullptr);

    /** What lmLoss reads and writes. Pointers are backend memory. */
    struct LmLossArgs {
        const float* y;          // [rows, d_model]: RMSNorm_f's output (forwardTape's io.out)
        int64_t rows;
        const int32_t* targets;  // [rows]: in [0, vocab) or ignore_index (range-checked by the caller)
        int ignore_index;
        float scale;             // dlogits = scale·(softmax − onehot): 1/counted for the mean
        float* row_loss;         // [rows]: each row's loss (0 when ignored)
        float* row_correct;      // [rows]: 1 when the argmax is the target
        float* grads;            // ParamTable layout: lm_head's gradient += (null: loss only)
        float* dy;               // [rows, d_model]: ∂L/∂y, overwritten (with grads)
        GemmMode mode;           // the logits' product (the training forward's mode)
    };
    /**
     * A language model's head and softmax cross-entropy over rows of y, lmBlockRows() rows at a time, so the
     * logits never exist for more than one block: logits = y_blk · W_headᵀ (the model's storage), crossEntropy
     * (dlogits in place), then grads[lm_head] += dlogitsᵀ · y_blk and dy_blk = dlogits · W_head (f32 masters; one Ops::linearBackward).
     * Blocks run in row order, so the head's gradient sums them in a fixed order. With a tied head the
     * embedding's gradient receives this term here and the lookup's in backward.
     */
    void lmLoss(Ops& ops, const WeightView& w, const WeightView& master, const LmLossArgs& a);
    /**
     * Rows per block of lmLoss: a function of the vocabulary and the backend alone (at most the backend's
     * Capabilities::logits_block_floats logits, 64 … 4096 rows).
     */
    int64_t lmBlockRows(const Ops& ops) const;
    /** The logits of rows of y ([rows, d_model], backend memory) into host memory [rows, vocab], block by block. */
    void lmLogits(Ops& ops, const WeightView& w, const float* y, int64_t rows, GemmMode mode, float* hostLogits);
    /**
     * The head's backward for caller-computed dlogits (host [rows, vocab]) times scale, block by block:
     * grads[lm_head] += dlogitsᵀ·y, dy = dlogits·W_head (f32 masters; dy overwritten).
     */
    void lmBackward(Ops& ops, const WeightView& w, const WeightView& master, const float* y, int64_t rows, const float* hostDlogits,
                    float scale, float* grads, float* dy);

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
    Buffer logits_;  // lmLoss: one block of logits
    int tape_B_ = 0, tape_T_ = 0;
    bool have_tape_ = false;
    const float* tape_x_ = nullptr;
    const int32_t* tape_ids_ = nullptr;
    const float* tape_start_ = nullptr;
    GemmMode tape_mode_ = GemmMode::Reproducible;  // the taped forward's mode, also its backward's
};

}  // namespace mamba
