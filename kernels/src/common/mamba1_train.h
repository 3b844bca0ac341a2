// Mamba-1 training: a forward over [B, T] that records what backward needs (the activation tape), and
// backpropagation through time into every weight and into the input. Written once against the Backend
// interface, stage by stage in the same order as Mamba1Model::run (its products go through
// linearDeterministic, so outputs equal an inference forward's to f32 rounding, and are bit-identical
// for any thread count).
//
// Tape per layer (rows r = b·T + t): the residual stream entering the layer, its RMSNorm output, the
// in_proj output [x | z], u = SiLU(conv(x)), x_proj output [δ | B | C], dt_proj output (pre-softplus)
// the gated scan output, and the SSM state every kScanChunk steps. The conv output and the SSM states
// h_t are NOT kept: backward recomputes them from x (with the starting conv history) and from those
// checkpoints, one chunk at a time (the official checkpoint_lvl idea), so the tape is
// O(B·T·d + B·T/64·d_inner·d_state), never O(B·T·d_inner·d_state).
#pragma once

#include "buffer.h"
#include "mamba1_model.h"

#include <vector>

namespace mamba {

class Mamba1Train {
public:
    Mamba1Train(const Dims& dims, const ParamTable& table) : dims_(dims), table_(table) {}

    /** Sizes the tape and the backward workspace for B rows of T steps. */
    void reserve(Backend& be, int B, int T);

    /**
     * Training forward of x [B, T, in_width] from `start` ([B, row_state]; read, not modified) into
     * y [B, T, d_model] (the final-norm output of every position). Keeps x's address: x must stay
     * unchanged until backward. The state after the last step is left in endState().
     */
    void forward(Backend& be, const Weights& w, const float* start, const float* x, int B, int T, float* y);

    /**
     * Backward of the last forward: dy [B, T, d_model] is the gradient of the outputs. Adds every
     * weight's gradient into `grads` (laid out like the parameter buffer) and writes the input's gradient
     * into dx [B, T, in_width] when dx is not null. The gradients of the starting state are dropped
     * (truncated BPTT). `w` must be the weights the forward ran with.
     */
    void backward(Backend& be, const Weights& w, const float* dy, float* grads, float* dx);

    /** The recurrent state after the last forward, [B, row_state]. */
    const float* endState() const { return work_state_.data(); }

private:
    // Steps between SSM-state checkpoints: bounds backward's per-task buffers (2·64·d_state·64 floats).
    static constexpr int kScanChunk = 64;
    struct LayerTape {
        Buffer normed, xz, u, xdbl, dt, gated, checkpoints;
    };
    Matrix matrix(const Weights& w, int index) const;
    Matrix master(const Weights& w, int index) const;  // the f32 weights, for backward products
    const float* at(const Weights& w, int index) const { return w.f32 + table_.params()[index].offset; }
    float* grad(float* grads, int index) const { return grads + table_.params()[index].offset; }

    const Dims& dims_;
    const ParamTable& table_;
    int B_ = 0, T_ = 0;
    int64_t rows_ = 0;             // capacity in rows
    int64_t ckpt_ = 0;             // capacity of each layer's checkpoints
    const float* x_ = nullptr;      // the last forward's input
    const float* start_ = nullptr;  // the last forward's starting state
    std::vector<Buffer> resid_;     // n_layers + 1: resid_[i] enters layer i; resid_[L] enters norm_f
    std::vector<LayerTape> tape_;
    Buffer work_state_;
    // backward workspace
    Buffer dresid_, dnormed_, dxz_, du_, ddt_, dxdbl_, dgated_;
};

}  // namespace mamba
