// One replica of a trainer: everything a training step mutates on one backend — f32 master weights,
// gradients, AdamW moments, the taped forward's activations and the staging buffers. A trainer owns one
// replica today; data-parallel training owns one per device, each with its own context.
#pragma once

#include "model.h"

namespace mamba {

struct TrainerReplica {
    TrainerReplica(ModelImpl& model, Ops& ops, int B, int T);

    /** The f32 masters as the architecture reads them (derived weights: the model's). */
    WeightView masterView(const float* derived) const {
        return WeightView{&table, &master_layout, reinterpret_cast<const char*>(masters), derived};
    }

    Ops& ops;
    const ParamTable& table;
    StorageLayout master_layout;  // the ParamTable layout in f32
    Buffer own_masters;           // only for BF16/F16 models: F32/TF32 models train their storage in place
    float* masters;
    Buffer grads, adam_m, adam_v;  // the ParamTable layout
    BackboneRunner runner;
    Buffer start_state;  // where the next forward starts (burn-in, setStartState)
    Buffer tape_start;   // the state the taped forward started from (backward reads it)
    Buffer work_state;   // the state the taped forward advances
    Buffer end_grad;     // state carry: ∂L/∂(end state) for the next backward (setEndStateGradient)
    Buffer start_grad;   // state carry: ∂L/∂(tape_start) from the last backward (state gradients on)
    Buffer x_stage, y_stage, dy_stage, dx_stage, target_stage;  // x_stage, dx_stage: feature inputs only
    // Language models: token ids and next-token targets [B, T] (int32 in float buffers), per-row loss/correctness.
    Buffer ids_stage, lm_targets, row_loss, row_correct;
};

}  // namespace mamba
