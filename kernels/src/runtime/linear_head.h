// The trainer's optional linear head: logits = y · Wᵀ + b over a vocabulary with softmax cross-entropy, or
// (a regression head) outputs of any width for MSE or a caller's loss; and its backward. Logits never leave
// backend memory.
#pragma once

#include "core/buffer.h"
#include "mamba/mamba.h"

namespace mamba {

class LinearHead {
public:
    /** W [vocab, d_model] ~ U(±1/√d_model) (nn.Linear default), bias 0; sized for `rows` positions. */
    LinearHead(Ops& ops, int vocab, int d_model, int64_t rows, int64_t seed);

    Matrix matrix() const { return Matrix::f32Of(w.data(), vocab, d_model); }
    float* bias() const { return w.data() + bias_offset; }
    int64_t weightSize() const { return static_cast<int64_t>(vocab) * d_model; }

    /**
     * logits = y · Wᵀ + b, then per-row loss and correctness against the staged targets; with grad, logits are
     * replaced by dlogits = scale/counted · (softmax − onehot). Fills loss/accuracy/counted of st.
     */
    void loss(Ops& ops, const float* y, int64_t rows, int ignoreIndex, float scale, bool grad, int64_t counted,
              StepStats& st, GemmMode mode);
    /** outputs (in `logits`) = y · Wᵀ + b: a regression head's forward. */
    void forward(Ops& ops, const float* y, int64_t rows, GemmMode mode);
    /** After loss(grad = true), or with ∂L/∂outputs written into `logits`: the head's gradients += , and dy = dlogits · W. */
    void backward(Ops& ops, const float* y, int64_t rows, float* dy);

    const int vocab, d_model;
    const int64_t bias_offset;  // the bias follows W in every buffer, 16-float aligned
    Buffer w, g, m, v;          // values, gradient, AdamW moments: [W | bias]
    Buffer logits, targets, row_loss, row_correct;
};

}  // namespace mamba
