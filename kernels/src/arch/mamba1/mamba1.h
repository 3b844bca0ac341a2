// Mamba-1 (Gu & Dao 2023): the selective-SSM mixer, as in state-spaces/mamba mamba_simple.py.
//
//   [x | z] = in_proj(RMSNorm(h))            x, z: [d_inner]
//   u = SiLU(conv1d(x))                      causal depthwise conv, width d_conv, history carried
//   [δ | B | C] = x_proj(u)                  δ: [dt_rank], B, C: [d_state]
//   Δ = softplus(dt_proj(δ))                 [d_inner]   (dt_proj's bias added by the scan)
//   h_t = exp(Δ·A)·h_{t-1} + Δ·u·B,  y = h_t·C + D·u,   A = -exp(A_log)
//   h += out_proj(y · SiLU(z))
//
// State per layer and sequence: the conv history [d_inner, d_conv−1] (oldest first) then h [d_inner, d_state].
#pragma once

#include "arch/arch.h"

#include <vector>

namespace mamba {

struct Mamba1Dims {
    int d_model, d_state, d_conv, d_inner, dt_rank;
    int xdbl;             // x_proj output: dt_rank + 2·d_state
    int n_layers;
    float eps;
    int64_t conv_state;   // d_inner · (d_conv − 1)
    int64_t ssm_state;    // d_inner · d_state

    static Mamba1Dims of(const ModelConfig& config);
};

class Mamba1 final : public Architecture {
public:
    explicit Mamba1(const ModelConfig& config) : config_(config), d_(Mamba1Dims::of(config)) {}

    int code() const override { return ARCH_MAMBA1; }
    const char* name() const override { return "mamba1"; }
    void declareLayer(ParamTable& table, int layer) override;
    void initLayer(const ParamTable& table, int layer, int64_t seed, float* host) const override;
    int64_t layerStateSize() const override { return d_.conv_state + d_.ssm_state; }
    int64_t derivedSize() const override { return d_.ssm_state * d_.n_layers; }
    void derive(Ops& ops, const WeightView& w, float* derived) const override;
    std::unique_ptr<LayerBuffers> newBuffers() const override;
    bool reserve(Ops& ops, LayerBuffers& buffers, int B, int T, BufferUse use) const override;
    void forwardLayer(Ops& ops, const WeightView& w, const LayerCall& call, LayerBuffers& buffers,
                      bool tape) const override;
    void backwardLayer(Ops& ops, const WeightView& w, const WeightView& master, const LayerCall& call,
                       LayerBuffers& tape, LayerBuffers& scratch, float* dresid, float* grads) const override;

private:
    /** Indices of one layer's tensors in the ParamTable. */
    struct Layer {
        int norm, in_proj, conv_w, conv_b, x_proj, dt_w, dt_b, a_log, d, out_proj;
    };
    /**
     * Steps between SSM-state checkpoints of the training scan (backward recomputes the states between). 16 = the CUDA
     * backward's piece (train_scan.cu): every state is then recomputed once, not twice, for a tape 4× that of 64 steps.
     */
    static constexpr int kScanChunk = 16;

    const float* negA(const WeightView& w, int layer) const { return w.derived + layer * d_.ssm_state; }

    ModelConfig config_;
    Mamba1Dims d_;
    std::vector<Layer> layers_;
};

}  // namespace mamba
