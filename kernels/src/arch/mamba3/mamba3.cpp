// Mamba-3 SISO's layer, forward and backward, written once against the ops layer (the math: mamba3.h).
// Rows r = b·T + t. Inference, prefill and training run the same forwardLayer; training keeps the in_proj
// output, the products' inputs (RMSNorm(h) and the gated output, in f32 or as the products rounded them) and the
// whole state every `chunk` steps (the tape), and backward recomputes the states in between inside
// mamba3ScanBackward.
#include "mamba3.h"

namespace mamba {

namespace {
/** One layer's activations: [B·T rows, width] each. Backward scratch reuses the shapes for gradients. */
struct Mamba3Buffers final : LayerBuffers {
    Buffer normed;       // RMSNorm(h)                                    [d_model]
    Buffer proj;         // in_proj output [z | x | B | C | dd_dt | dd_A | trap | θ̇]   [proj]
    Buffer gated;        // the scan's gated output                       [d_inner]
    Buffer checkpoints;  // tape: the layer state before every chunk of steps
    // BufferUse::TapeRounded: the products' inputs as they rounded them (2-byte values, dense rows), read by the
    // weight gradients. normed and gated are then only the forward's (in the backward scratch), not the tape's.
    bool rounded = false;
    Buffer normed16;     // [d_model]
    Buffer gated16;      // [d_inner]
};
Mamba3Buffers& cast(LayerBuffers& b) { return static_cast<Mamba3Buffers&>(b); }
}  // namespace

std::unique_ptr<LayerBuffers> Mamba3::newBuffers() const { return std::make_unique<Mamba3Buffers>(); }

bool Mamba3::reserve(Ops& ops, LayerBuffers& buffers, int B, int T, BufferUse use) const {
    Mamba3Buffers& b = cast(buffers);
    const int64_t R = static_cast<int64_t>(B) * T;
    b.rounded = use == BufferUse::TapeRounded;
    bool moved = false;
    if (b.rounded) {  // (floats that hold R rows of 2-byte values)
        moved |= b.normed16.ensure(ops, (R * d_.d_model + 1) / 2);
        moved |= b.gated16.ensure(ops, (R * d_.d_inner + 1) / 2);
    } else {
        moved |= b.normed.ensure(ops, R * d_.d_model);
        moved |= b.gated.ensure(ops, R * d_.d_inner);
    }
    moved |= b.proj.ensure(ops, R * d_.proj);
    if (isTape(use))
        moved |= b.checkpoints.ensure(ops, static_cast<int64_t>(B) * ((T + d_.chunk - 1) / d_.chunk) * layerStateSize());
    return moved;
}

Mamba3ScanArgs Mamba3::scanArgs(const WeightView& w, const Layer& L, int B, int T) const {
    Mamba3ScanArgs s{};
    s.ldproj = d_.proj;
    s.dt_bias = w.vec(L.dt_bias);
    s.b_bias = w.vec(L.b_bias);
    s.c_bias = w.vec(L.c_bias);
    s.b_norm = w.vec(L.b_norm);
    s.c_norm = w.vec(L.c_norm);
    s.d_skip = w.vec(L.d);
    s.gate_norm = L.gate_norm >= 0 ? w.vec(L.gate_norm) : nullptr;
    s.a_floor = d_.a_floor;
    s.ldout = d_.d_inner;
    s.batch = B;
    s.steps = T;
    s.nheads = d_.nheads;
    s.headdim = d_.headdim;
    s.d_state = d_.d_state;
    s.ngroups = d_.ngroups;
    s.nangles = d_.nangles;
    return s;
}

void Mamba3::forwardLayer(Ops& ops, const WeightView& w, const LayerCall& c, LayerBuffers& buffers, bool tape) const {
    const Layer& L = layers_[c.layer];
    Mamba3Buffers& b = cast(buffers);
    const int64_t R = static_cast<int64_t>(c.B) * c.T;
    const int D = d_.d_model;
    // A rounded tape keeps the products' inputs as they rounded them; normed and gated then live in the scratch.
    const bool rounded = tape && b.rounded;
    float* normed = rounded ? cast(*c.scratch).normed.data() : b.normed.data();
    float* gated = rounded ? cast(*c.scratch).gated.data() : b.gated.data();
    auto product = [&](const Gemm& g, Buffer& keep) { return rounded ? g.keepingRoundedX(keep.data()) : g; };

    // [z | x | B | C | dd_dt | dd_A | trap | θ̇] = in_proj(RMSNorm(h))
    ops.normLinear(RmsNormArgs{c.resid, D, w.vec(L.norm), R, D, d_.eps, normed, D},
                   product(Gemm::forward(c.mode, normed, D, R, w.matrix(L.in_proj), nullptr, b.proj.data(), d_.proj, 0.f),
                           b.normed16));

    // BCNorm, Δ/A/trapezoid, RoPE, the recurrence, D skip and the gate.
    Mamba3ScanArgs s = scanArgs(w, L, c.B, c.T);
    s.proj = b.proj.data();
    s.state = c.state;
    s.state_stride = c.state_stride;
    s.out = gated;
    const ScanCheckpoints ckpt{b.checkpoints.data(), d_.chunk};
    ops.mamba3Scan(s, tape ? &ckpt : nullptr);

    // h += out_proj(gated)
    ops.gemm(product(Gemm::forward(c.mode, gated, d_.d_inner, R, w.matrix(L.out_proj), nullptr, c.resid, D, 1.f),
                     b.gated16));
}

void Mamba3::backwardLayer(Ops& ops, const WeightView& w, const WeightView& master, const LayerCall& c,
                           LayerBuffers& tapeBuffers, LayerBuffers& scratch, float* dresid, float* grads) const {
    const Layer& L = layers_[c.layer];
    Mamba3Buffers& tp = cast(tapeBuffers);
    Mamba3Buffers& g = cast(scratch);  // the same shapes, holding gradients
    const int64_t R = static_cast<int64_t>(c.B) * c.T;
    const int D = d_.d_model, E = d_.d_inner;
    auto grad = [&](int index) { return index >= 0 ? grads + (*w.table)[index].offset : nullptr; };
    // A weight gradient's x: the f32 activation, or the rounded copy its forward product kept (TapeRounded)
    auto withX = [&](const Gemm& g, const Buffer& x16, int width) { return tp.rounded ? g.withRoundedX(x16.data(), width) : g; };

    // out_proj (the residual passes dresid through unchanged).
    ops.linearBackward(Gemm::backwardData(c.mode, dresid, D, R, trainingMatrix(w, master, L.out_proj), g.gated.data(), E, 0.f),
                       withX(Gemm::weightGrad(c.mode, w.matrix(L.out_proj).dtype, dresid, D, tp.gated.data(), E, R, D, E, grad(L.out_proj), nullptr), tp.gated16, E));

    // The scan: every in_proj field's gradient, and the gradients of the per-head vectors and norms.
    Mamba3ScanBackwardArgs a{};
    a.fwd = scanArgs(w, L, c.B, c.T);
    a.fwd.proj = tp.proj.data();
    a.checkpoints = tp.checkpoints.data();
    a.chunk = d_.chunk;
    a.dout = g.gated.data();
    a.lddout = E;
    a.dproj = g.proj.data();
    a.lddproj = d_.proj;
    a.d_dt_bias = grad(L.dt_bias);
    a.d_b_bias = grad(L.b_bias);
    a.d_c_bias = grad(L.c_bias);
    a.d_b_norm = grad(L.b_norm);
    a.d_c_norm = grad(L.c_norm);
    a.d_d_skip = grad(L.d);
    a.d_gate_norm = grad(L.gate_norm);
    a.dstate_end = c.dend;  // the layer's state is the scan's state, whole
    a.dstate = c.dstart;
    a.dstate_stride = c.state_stride;
    ops.mamba3ScanBackward(a);

    // in_proj: dW_in += dprojᵀ·normed, dnormed = dproj·W_in.
    ops.linearBackward(Gemm::backwardData(c.mode, g.proj.data(), d_.proj, R, trainingMatrix(w, master, L.in_proj), g.normed.data(), D, 0.f),
                       withX(Gemm::weightGrad(c.mode, w.matrix(L.in_proj).dtype, g.proj.data(), d_.proj, tp.normed.data(), D, R, d_.proj, D, grad(L.in_proj), nullptr), tp.normed16, D));

    // The block norm, added to the residual gradient.
    ops.rmsnormBackward(RmsNormBackwardArgs{c.input, D, w.vec(L.norm), g.normed.data(), D, R, D, d_.eps, dresid, D,
                                            1.f, grad(L.norm)});
}

}  // namespace mamba
