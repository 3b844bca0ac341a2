// Mamba-3 SISO (Lahoti et al. 2026), as in state-spaces/mamba modules/mamba3.py (the math and the names:
// /work/shared/reference/mamba3-siso.md):
//
//   [z | x | B | C | dd_dt | dd_A | trap | θ̇] = in_proj(RMSNorm(h))      no conv, no x_proj, no dt_proj
//   B̂, Ĉ = RMSNorm(B), RMSNorm(C) per group;  Δ = softplus(dd_dt + dt_bias);  A = min(−ht(dd_A), −A_floor)
//   θ += π·tanh(θ̇)·Δ;  k = rot_θ(B̂ + B_bias),  q = rot_θ(Ĉ + C_bias)          data-dependent RoPE
//   S_t = e^{AΔ}·S_{t−1} + e^{AΔ}·Δ(1−σ)·v_{t−1} ⊗ k_{t−1} + σΔ·x_t ⊗ k_t      trapezoidal rule, σ = σ(trap)
//   y = S_t·q + D·x;   h += out_proj(y ⊙ SiLU(z))     (or RMSNormGated per head when is_outproj_norm)
//
// Everything between the two products is one op (Ops::mamba3Scan); state per layer and sequence: S, the last
// key, the last input and the rotation angles (Mamba3ScanArgs).
#pragma once

#include "arch/arch.h"

#include <vector>

namespace mamba {

struct Mamba3Dims {
    int d_model, d_state, d_inner, headdim, nheads, ngroups, nangles;
    int proj;             // in_proj output width: 2·d_inner + 2·ngroups·d_state + 3·nheads + nangles
    int n_layers, chunk;
    float eps, a_floor;
    bool outproj_norm;

    static Mamba3Dims of(const ModelConfig& config);
    /** The official num_rope_angles: ⌊d_state·rope_fraction⌋ rounded down to even, halved. */
    static int ropeAngles(int d_state, float rope_fraction);
};

class Mamba3 final : public Architecture {
public:
    explicit Mamba3(const ModelConfig& config) : config_(config), d_(Mamba3Dims::of(config)) {}

    int code() const override { return ARCH_MAMBA3_SISO; }
    const char* name() const override { return "mamba3"; }
    void declareLayer(ParamTable& table, int layer) override;
    void initLayer(const ParamTable& table, int layer, int64_t seed, float* host) const override;
    int64_t layerStateSize() const override;
    int64_t derivedSize() const override { return 0; }
    void derive(Ops&, const WeightView&, float*) const override {}
    std::unique_ptr<LayerBuffers> newBuffers() const override;
    bool reserve(Ops& ops, LayerBuffers& buffers, int B, int T, BufferUse use) const override;
    void forwardLayer(Ops& ops, const WeightView& w, const LayerCall& call, LayerBuffers& buffers,
                      bool tape) const override;
    void backwardLayer(Ops& ops, const WeightView& w, const WeightView& master, const LayerCall& call,
                       LayerBuffers& tape, LayerBuffers& scratch, float* dresid, float* grads) const override;

private:
    /** Indices of one layer's tensors in the ParamTable (gate_norm = -1 without is_outproj_norm). */
    struct Layer {
        int norm, in_proj, dt_bias, b_bias, c_bias, b_norm, c_norm, d, gate_norm, out_proj;
    };
    /** The scan's arguments for one layer call (pointers into the weights; proj, state and out set by the caller). */
    Mamba3ScanArgs scanArgs(const WeightView& w, const Layer& L, int B, int T) const;

    ModelConfig config_;
    Mamba3Dims d_;
    std::vector<Layer> layers_;
};

}  // namespace mamba
