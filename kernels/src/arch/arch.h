// The architecture interface. Every Mamba model is the same residual backbone (backbone.h): an input
// projection or token embedding, N blocks `h += Mixer(RMSNorm(h))`, a final RMSNorm and optionally an
// LM head. An Architecture is the mixer family of those blocks: its tensors, their initialisation, its
// recurrent state, and one forward over [B, T] rows that training also uses (it then records what its
// backward needs) — so inference (step = forward with T = 1), prefill and training share one forward.
#pragma once

#include "core/buffer.h"
#include "mamba/mamba.h"
#include "ops/ops.h"
#include "weights.h"

#include <memory>

namespace mamba {

/** The buffers of one layer's forward (and, when kept for backward, its tape). Owned by the caller. */
class LayerBuffers {
public:
    virtual ~LayerBuffers() = default;
};

/**
 * What the buffers must hold: a forward only; a forward whose activations backward reads (Tape); the same with the
 * products' inputs also kept rounded to the weights' 2-byte type for the weight gradients (TapeRounded: BF16/F16
 * storage on a backend with Capabilities::rounds_backward_operands — an architecture may keep those instead of
 * rounding its f32 activations again in backward, and keep f32 activations that only products read in the forward's
 * scratch, LayerCall::scratch); or backward scratch.
 */
enum class BufferUse { Inference, Tape, TapeRounded, Backward };
inline bool isTape(BufferUse use) { return use == BufferUse::Tape || use == BufferUse::TapeRounded; }

/** One layer's forward or backward over B rows of T steps (rows r = b·T + t, batch-major). */
struct LayerCall {
    int layer;
    int B, T;
    GemmMode mode;         // products: Fast for inference, Reproducible for training
    float* resid;          // forward: [B·T, d_model] residual stream, the layer adds its output in place
    const float* input;    // backward: the residual stream as it entered this layer
    float* state;          // this layer's state of row 0 (forward: read and advanced); row b at + b·state_stride
    const float* start;    // backward: this layer's state of row 0 before the forward
    int64_t state_stride;
    // backward, state carry (optional, null = none), laid out as `state` (row b at + b·state_stride):
    const float* dend;     // ∂L/∂(this layer's state after the forward), e.g. from the next window's backward
    float* dstart;         // out: ∂L/∂(this layer's state before the forward) (overwritten)
    // training forward: the backward's scratch buffers (BufferUse::Backward), free until backward runs
    LayerBuffers* scratch;
};

class Architecture {
public:
    virtual ~Architecture() = default;

    /** The architecture tag (ARCH_MAMBA1, …) and its name in checkpoints ("mamba1"). */
    virtual int code() const = 0;
    virtual const char* name() const = 0;

    /** Adds layer `layer`'s tensors (named backbone.layers.<layer>.…) to the table, block norm first. */
    virtual void declareLayer(ParamTable& table, int layer) = 0;
    /** Writes the seeded initialisation of layer `layer`'s tensors into host (the ParamTable layout). */
    virtual void initLayer(const ParamTable& table, int layer, int64_t seed, float* host) const = 0;

    /** Floats of recurrent state per layer and sequence; a State row is n_layers of these. */
    virtual int64_t layerStateSize() const = 0;
    /** Floats of weights derived from the parameters (e.g. -exp(A_log)), refreshed after every weight change. */
    virtual int64_t derivedSize() const = 0;
    virtual void derive(Ops& ops, const WeightView& w, float* derived) const = 0;

    virtual std::unique_ptr<LayerBuffers> newBuffers() const = 0;
    /** Sizes buffers for B rows of T steps; true if any buffer moved (captured graphs must be dropped). */
    virtual bool reserve(Ops& ops, LayerBuffers& buffers, int B, int T, BufferUse use) const = 0;

    /**
     * resid += Mixer(RMSNorm(resid)) with the state carried. With a tape (buffers reserved with
     * BufferUse::Tape) the activations backward needs stay in `buffers`.
     */
    virtual void forwardLayer(Ops& ops, const WeightView& w, const LayerCall& call, LayerBuffers& buffers,
                              bool tape) const = 0;
    /**
     * Backward of the last taped forward of this layer: dresid holds ∂L/∂(layer output) on entry and
     * ∂L/∂(layer input) on return (the residual path included). Gradients of the layer's tensors are ADDED
     * into grads (ParamTable layout). `w` is what the forward read, `master` the f32 weights for the products.
     * With call.dstart the gradient of the starting state is written there (otherwise dropped: truncated BPTT);
     * with call.dend the end state's gradient flows back too. Every part of the state the forward reads gets one.
     */
    virtual void backwardLayer(Ops& ops, const WeightView& w, const WeightView& master, const LayerCall& call,
                               LayerBuffers& tape, LayerBuffers& scratch, float* dresid, float* grads) const = 0;
};

/** The architecture of a (validated) config. */
std::unique_ptr<Architecture> makeArchitecture(const ModelConfig& config);

}  // namespace mamba
