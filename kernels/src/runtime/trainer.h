// The trainer runtime behind mamba::Trainer: the training step (taped forward, backward, loss heads),
// gradient accumulation, global-norm clipping and AdamW over a model's weights, updated in place. The C
// API (api/trainer_api.cpp) checks arguments and stages host data; nothing here re-checks them.
#pragma once

#include "linear_head.h"
#include "replica.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace mamba {

/**
 * The step's scalars in backend memory, one buffer read back once per step: the reductions write the sums, the host
 * the AdamW constants (before the step), optimizerControl the decision. Kept on the backend so the whole step can be
 * captured as one CUDA graph.
 */
struct ControlBlock {
    double grad_ss[2];  // Σ g² of the model's gradients, of the head's
    double loss[2];     // the last fused loss: Σ of its terms, Σ of its correct flags (cross-entropy)
    double norm;        // the unscaled gradient norm of the last optimizer step
    AdamWFactors factors;
};
static_assert(sizeof(ControlBlock) % sizeof(float) == 0, "the control block travels as floats");

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

    // ---- the step on the backend (what a captured step holds) and the host's part around it ----
    /** Uploads the AdamW constants of the next step (step count + 1) into the control block. */
    void stageStepFactors();
    /**
     * Enqueues clip + AdamW + storage refresh + clearing the gradients, deciding on the backend (optimizerControl);
     * lossSum/lossCount: a loss in the control block that must be finite (null: the host's noteLoss flag decides).
     */
    void enqueueOptimizerStep(const double* lossSum, double lossCount);
    /** Reads the control block back (synchronises). */
    void readControl();
    /** The host's bookkeeping after a read-back optimizer step: step count, loss scaler, stats. */
    StepStats finishOptimizerStep();
    ControlBlock* control() const { return reinterpret_cast<ControlBlock*>(control_buf.data()); }
    ControlBlock host_control{};

    // ---- whole-step graphs (backends with graphs: CUDA) ----
    /** What a captured step baked in: a step with a different key is captured anew. */
    struct StepGraphKey {
        int kind = -1;  // 0 stepMse, 1 stepTokens
        float seed = 0.f, clip = 0.f, loss_scale = 0.f;
        int mode = 0, ignore_index = 0;
        int64_t counted = 0, decay_version = 0;
        const void* storage = nullptr;
        uint64_t frees = 0;  // the backend's freeCount: workspaces regrown by other calls invalidate a graph
        bool operator==(const StepGraphKey& o) const {
            return kind == o.kind && seed == o.seed && clip == o.clip && loss_scale == o.loss_scale && mode == o.mode &&
                   ignore_index == o.ignore_index && counted == o.counted && decay_version == o.decay_version &&
                   storage == o.storage && frees == o.frees;
        }
    };
    /** Whether an applying step may run as a graph now: graphs on and available, no state carry, no pending bad loss. */
    bool stepGraphEligible() const;
    /** The key of an applying step of this kind (0 stepMse, 1 stepTokens) with the trainer's current settings. */
    StepGraphKey stepGraphKey(int kind, float seed, int ignore_index, int64_t counted) const;
    /**
     * Runs body, the step's backend part (forward to optimizer, nothing read back): replayed from its graph when
     * one with this key exists; else eagerly the first time a key is seen (so every buffer and workspace exists),
     * captured and replayed the second time. A capture that fails turns step graphs off and runs body eagerly.
     */
    void runStep(const StepGraphKey& key, const std::function<void()>& body);
    void dropStepGraph() noexcept;
    bool step_graphs = false;
    std::string step_graphs_off_reason;  // why a failed capture turned them off
    void* step_graph = nullptr;
    StepGraphKey step_graph_key, warm_key;
    int64_t decay_version = 0;  // bumped when a tensor's weight decay is switched (baked into captured steps)
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
    /** mse's backend part: the sum of squared errors into the control block. */
    void enqueueMse(float scale);
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
    /** lmLoss's backend part (sums into the control block) and its host part (from the read-back block). */
    void enqueueLmLoss(int ignoreIndex, float scale, bool grad, int64_t counted);
    StepStats lmLossStats(int64_t counted) const;

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
    Buffer control_buf;            // a ControlBlock
    // adamwGroup's table of the model's tensors (backend memory), rebuilt when a decay flag or the storage changes
    Buffer adamw_table;
    int64_t adamw_table_version = -1;
    const void* adamw_table_storage = nullptr;
    void refreshAdamWTable();
};

}  // namespace mamba
