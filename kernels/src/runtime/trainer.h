// The trainer runtime behind mamba::Trainer: the training step (taped forward, backward, loss heads),
// gradient accumulation, global-norm clipping and AdamW over a model's weights, updated in place. The C
// API (api/trainer_api.cpp) checks arguments and stages host data; nothing here re-checks them.
#pragma once

#include "linear_head.h"
#include "replica.h"

#include <memory>
#include <string>
#include <vector>

namespace mamba {

/** One trainable tensor in one replica: values, gradient and moments (backend memory). */
struct Slot {
    std::string name;
    float* p;
    float* g;
    float* m;
    float* v;
    int64_t n;
};

class TrainerRuntime {
public:
    TrainerRuntime(ModelImpl& model, int batch, int seqLen);
    ~TrainerRuntime();

    int paramCount() const { return model.backbone.table.count() + (head ? 2 : 0); }
    /** Tensor `index` (the model's, then lm_head.weight and lm_head.bias); std::out_of_range otherwise. */
    Slot slot(int index) const;
    void addHead(int vocab, int64_t seed);
    /** A linear head [width, d_model] + bias whose outputs are the trainer's outputs (MSE, caller losses). */
    void addRegressionHead(int width, int64_t seed);
    /** Floats per output position: the regression head's width, or d_model. */
    int outWidth() const { return regression_head ? head->vocab : model.backbone.dims.d_model; }
    /** Where the outputs and their gradient live: the regression head's buffer, or y_stage / dy_stage. */
    float* outStage() const { return regression_head ? head->logits.data() : replica.y_stage.data(); }
    float* doutStage() const { return regression_head ? head->logits.data() : replica.dy_stage.data(); }
    /** After forward(): the regression head's outputs (nothing without one). */
    void headForward();
    /** Before backward(): the regression head's backward of doutStage() into dy_stage (nothing without one). */
    void headBackward();

    /** The taped forward of the staged input into y_stage. */
    void forward();
    /** Backward of the tape with dy_stage (already scaled) as the output gradient. */
    void backward();
    void zeroGrad();
    /**
     * Clip + AdamW with the accumulated gradients, then clears them. Skipped (gradients discarded, weights and
     * step count unchanged) when the gradient norm is non-finite or a fused loss since the last step was.
     */
    StepStats optimizerStep();
    StepStats finish(bool apply) { return apply ? optimizerStep() : pending(); }
    /** Stats of a call that did not step. */
    StepStats pending() const;
    /** Writes tensor `index` (host f32): masters and the model's storage. */
    void writeParam(int index, const float* host);

    /** Runs x [B, steps, in_width] (host) from zeros with no tape; the next forward starts from the result. */
    void burnIn(const float* x, int steps);
    void setStartState(const StateImpl& s);
    void readEndState(StateImpl& s) const;

    // ---- state carry with gradients (truncated BPTT over windows of a long stream) ----
    /** Whether each backward writes ∂L/∂(its forward's start state) (off: dropped, the fastest backward). */
    void setStateGradients(bool on) {
        state_grads = on;
        have_start_grad = have_start_grad && on;
    }
    /** The next backward adds ∂L/∂(end state) = g (the same scale as its dy) to the backward through time. Once. */
    void setEndStateGradient(const StateImpl& g);
    /** ∂L/∂(start state) of the last backward (times its scale). */
    void readStartStateGradient(StateImpl& into) const;

    /** Installs a loss scaler (or none: config.enabled false); the scale restarts at init_scale. */
    void setLossScaler(const LossScalerConfig& config);
    /** The factor of a backward's output gradient: the caller's scale times the loss scale. */
    float seedScale(float scale) const { return scale * loss_scale; }

    /** Records a fused loss as reported (float): a NaN or infinite one marks the accumulated gradient as unusable. */
    void noteLoss(double loss);

    /** Mean squared error of the outputs against the staged target: dout = scale·2(y − t)/n; returns the mean loss. */
    double mse(float scale);
    /** Stages targets [B, T] (already checked) and returns how many are not ignored. */
    int64_t stageTargets(const int32_t* targets, int ignoreIndex) const;

    // ---- language models ----
    bool languageModel() const { return model.backbone.dims.vocab > 0; }
    /** Stages token ids and next-token targets [B, T] (already checked); returns how many targets count. */
    int64_t stageTokens(const int32_t* ids, const int32_t* targets, int ignoreIndex);
    /**
     * After forward(): the LM head + cross-entropy over every position (lmLoss, in blocks), mean over the `counted`
     * targets times `scale`. With grad, the head's gradient is added and dy_stage holds ∂L/∂y for backward().
     * Fills loss/accuracy/counted of the returned stats (pending() otherwise).
     */
    StepStats lmLoss(int ignoreIndex, float scale, bool grad, int64_t counted);

    /** The taped forward of `steps` steps: staged input in, y_stage out, work_state advanced. */
    ForwardIO stagedIO(int steps);

    ModelImpl& model;
    Ops& ops;
    const int B, T;
    const int64_t R;
    TrainerReplica replica;
    std::unique_ptr<LinearHead> head;
    bool regression_head = false;  // head is an output head for MSE / caller losses, not cross-entropy
    std::vector<bool> decay;  // per trainable tensor
    AdamWConfig opt;
    float clip = 0.f;
    int64_t steps = 0;
    bool nonfinite_loss = false;  // set by noteLoss, cleared with the gradients
    bool start_pending = false, have_tape = false, have_dx = false, have_end = false;
    bool state_grads = false, end_grad_pending = false, have_start_grad = false;
    float start_grad_scale = 1.f;  // the loss scale of the backward that wrote start_grad
    LossScalerConfig scaler;
    float loss_scale = 1.f;        // 1 while the scaler is off
    int64_t clean_steps = 0;       // applied optimizer steps since the scale last changed
};

}  // namespace mamba
