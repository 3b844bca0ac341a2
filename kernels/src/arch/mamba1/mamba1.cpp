// Mamba-1's layer, forward and backward, written once against the ops layer (see mamba1.h for the math).
// Rows r = b·T + t. Inference, prefill and training run the same forwardLayer; training only asks it to
// keep its activations (the tape) and the SSM state every kScanChunk steps. The conv output and the SSM
// states h_t are NOT kept: backward recomputes them from x (with the starting conv history) and from those
// checkpoints, one chunk at a time, so the tape is O(B·T·d + B·T/16·d_inner·d_state).
#include "mamba1.h"

#include <stdexcept>

namespace mamba {

namespace {
/** One layer's activations: [B·T rows, width] each. */
struct Mamba1Buffers final : LayerBuffers {
    Buffer normed;       // RMSNorm(h)                       [d_model]
    Buffer xz;           // in_proj output [x | z]           [2·d_inner]
    Buffer u;            // SiLU(conv(x))                    [d_inner]
    Buffer xdbl;         // x_proj output [δ | B | C]        [xdbl]
    Buffer dt;           // dt_proj output (pre-softplus)    [d_inner]
    Buffer gated;        // y · SiLU(z)                      [d_inner]
    Buffer checkpoints;  // tape: h before every kScanChunk steps
    // BufferUse::TapeRounded: the products' inputs as they rounded them (2-byte values, dense rows), read by the
    // weight gradients; normed and gated are then not written in f32.
    bool rounded = false;
    Buffer normed16;     // [d_model]
    Buffer u16;          // [d_inner]
    Buffer gated16;      // [d_inner]
};
Mamba1Buffers& cast(LayerBuffers& b) { return static_cast<Mamba1Buffers&>(b); }
}  // namespace

std::unique_ptr<LayerBuffers> Mamba1::newBuffers() const { return std::make_unique<Mamba1Buffers>(); }

bool Mamba1::reserve(Ops& ops, LayerBuffers& buffers, int B, int T, BufferUse use) const {
    Mamba1Buffers& b = cast(buffers);
    const int64_t R = static_cast<int64_t>(B) * T, E = d_.d_inner;
    // Backward scratch reuses the same shapes as gradients: normed → dnormed, xz → dxz, u → du, xdbl → dxdbl,
    // dt → ddt, gated → dgated.
    b.rounded = use == BufferUse::TapeRounded;
    auto halves = [R](int64_t width) { return (R * width + 1) / 2; };  // floats that hold R rows of 2-byte values
    bool moved = false;
    if (b.rounded) {
        moved |= b.normed16.ensure(ops, halves(d_.d_model));
        moved |= b.u16.ensure(ops, halves(E));
        moved |= b.gated16.ensure(ops, halves(E));
    } else {
        moved |= b.normed.ensure(ops, R * d_.d_model);
        moved |= b.gated.ensure(ops, R * E);
    }
    moved |= b.xz.ensure(ops, R * 2 * E);
    moved |= b.u.ensure(ops, R * E);
    moved |= b.xdbl.ensure(ops, R * d_.xdbl);
    moved |= b.dt.ensure(ops, R * E);
    if (isTape(use))
        moved |= b.checkpoints.ensure(ops, static_cast<int64_t>(B) * ((T + kScanChunk - 1) / kScanChunk) * d_.ssm_state);
    return moved;
}

void Mamba1::derive(Ops& ops, const WeightView& w, float* derived) const {
    for (int i = 0; i < d_.n_layers; ++i) ops.negExp(w.vec(layers_[i].a_log), derived + i * d_.ssm_state, d_.ssm_state);
}

void Mamba1::forwardLayer(Ops& ops, const WeightView& w, const LayerCall& c, LayerBuffers& buffers, bool tape) const {
    const Layer& L = layers_[c.layer];
    Mamba1Buffers& b = cast(buffers);
    const int64_t R = static_cast<int64_t>(c.B) * c.T;
    const int D = d_.d_model, E = d_.d_inner;
    float* conv_hist = c.state;              // row b at + b·state_stride
    float* ssm = c.state + d_.conv_state;
    // A rounded tape keeps the products' inputs as they rounded them, written so by their producers: the RMSNorm
    // writes normed only rounded, the conv writes u also rounded and the scan writes the gated output only rounded,
    // and in_proj, x_proj and out_proj take those (no packing pass, no f32 normed or gated).
    const bool rounded = tape && b.rounded;
    RmsNormArgs norm{c.resid, D, w.vec(L.norm), R, D, d_.eps, b.normed.data(), D};
    Gemm inProj = Gemm::forward(c.mode, norm.y, D, R, w.matrix(L.in_proj), nullptr, b.xz.data(), 2 * E, 0.f);
    if (rounded) {
        norm.y = nullptr;
        norm.y16 = Rounded16{b.normed16.data(), D, w.matrix(L.in_proj).dtype};
        inProj = inProj.withRoundedInput(b.normed16.data(), D);
    }

    // [x | z] = in_proj(RMSNorm(h)), then u = SiLU(conv1d(x)) with the history carried: a named fusion, a backend
    // may normalise inside the product and (decode) run the conv step in its epilogue.
    ConvArgs conv{b.xz.data(), 2 * E, w.vec(L.conv_w), w.vec(L.conv_b), conv_hist, c.state_stride, b.u.data(), E,
                  c.B, c.T, E, d_.d_conv};
    if (rounded) conv.u16 = Rounded16{b.u16.data(), E, w.matrix(L.x_proj).dtype};
    ops.normLinearConv(norm, inProj, conv);

    // [δ | B | C] = x_proj(u)
    const Gemm xProj = Gemm::forward(c.mode, b.u.data(), E, R, w.matrix(L.x_proj), nullptr, b.xdbl.data(), d_.xdbl, 0.f);
    ops.gemm(rounded ? xProj.withRoundedInput(b.u16.data(), E) : xProj);

    // dt = dt_proj's product (fused into the scan where a backend can), then the scan: Δ = softplus(dt + dt_proj's
    // bias), D skip and the SiLU(z) gate. The bias is the scan's (no pass over dt to add it); the tape's dt is without.
    const Gemm dtProj = Gemm::forward(c.mode, b.xdbl.data(), d_.xdbl, R, w.matrix(L.dt_w), nullptr, b.dt.data(), E, 0.f);
    ScanArgs scan{b.dt.data(), negA(w, c.layer), b.xdbl.data() + d_.dt_rank, d_.xdbl, b.u.data(), b.xz.data() + E,
                  2 * E, w.vec(L.d), ssm, c.state_stride, rounded ? nullptr : b.gated.data(), c.B, c.T, E, d_.d_state};
    if (rounded) scan.out16 = Rounded16{b.gated16.data(), E, w.matrix(L.out_proj).dtype};
    scan.shape_independent = c.mode == GemmMode::Deterministic;
    scan.dt_bias = w.vec(L.dt_b);
    const ScanCheckpoints ckpt{b.checkpoints.data(), kScanChunk};
    ops.selectiveScan(scan, &dtProj, tape ? &ckpt : nullptr);

    // h += out_proj(gated)
    const Gemm outProj = Gemm::forward(c.mode, b.gated.data(), E, R, w.matrix(L.out_proj), nullptr, c.resid, D, 1.f);
    ops.gemm(rounded ? outProj.withRoundedInput(b.gated16.data(), E) : outProj);
}

void Mamba1::backwardLayer(Ops& ops, const WeightView& w, const WeightView& master, const LayerCall& c,
                           LayerBuffers& tapeBuffers, LayerBuffers& scratch, float* dresid, float* grads) const {
    const Layer& L = layers_[c.layer];
    Mamba1Buffers& tp = cast(tapeBuffers);
    Mamba1Buffers& g = cast(scratch);  // the same shapes, holding gradients
    const int64_t R = static_cast<int64_t>(c.B) * c.T;
    const int D = d_.d_model, E = d_.d_inner;
    auto grad = [&](int index) { return grads + (*w.table)[index].offset; };
    // A weight gradient's x: the f32 activation, or the rounded copy its forward product kept (TapeRounded)
    auto withX = [&](const Gemm& g, const Buffer& x16, int width) { return tp.rounded ? g.withRoundedX(x16.data(), width) : g; };

    // out_proj (the residual passes dresid through unchanged).
    ops.linearBackward(Gemm::backwardData(c.mode, dresid, D, R, trainingMatrix(w, master, L.out_proj), g.gated.data(), E, 0.f),
                       withX(Gemm::weightGrad(c.mode, w.matrix(L.out_proj).dtype, dresid, D, tp.gated.data(), E, R, D, E, grad(L.out_proj), nullptr), tp.gated16, E));

    // gate + D skip + scan + softplus: ddt, dB/dC (into dxdbl), du, dz (into dxz), dA_log, dD.
    // With a state carry, the h part of the state gradient (the conv history comes first in a layer's state).
    ScanBackwardArgs scan{
        tp.dt.data(), negA(w, c.layer), tp.xdbl.data() + d_.dt_rank, d_.xdbl, tp.u.data(), tp.xz.data() + E, 2 * E,
        w.vec(L.d), tp.checkpoints.data(), kScanChunk, g.gated.data(), g.dt.data(), g.xdbl.data() + d_.dt_rank, d_.xdbl,
        g.u.data(), g.xz.data() + E, 2 * E, grad(L.a_log), grad(L.d), c.B, c.T, E, d_.d_state, nullptr, nullptr, 0};
    scan.dh_end = c.dend ? c.dend + d_.conv_state : nullptr;
    scan.dh_start = c.dstart ? c.dstart + d_.conv_state : nullptr;
    scan.dh_stride = c.state_stride;
    scan.dt_bias = w.vec(L.dt_b);
    scan.ddt_bias = grad(L.dt_b);  // db_dt = Σ ddt
    // Where the products round their dy anyway, ddt and dz are written rounded, as dt_proj and in_proj read them
    // (dense 2-byte rows over their f32 buffers' first halves): no packing pass reads them again in f32.
    const bool dt16 = roundsOperandsOf(ops, w.matrix(L.dt_w).dtype), xz16 = roundsOperandsOf(ops, w.matrix(L.in_proj).dtype);
    const Rounded16 ddt16{g.dt.data(), E, w.matrix(L.dt_w).dtype};
    const Rounded16 dxz16{g.xz.data(), 2 * E, w.matrix(L.in_proj).dtype};  // [dx | dz], 2-byte
    if (dt16) {
        scan.ddt = nullptr;
        scan.ddt16 = ddt16;
    }
    if (xz16) {
        scan.dz = nullptr;
        scan.dz16 = Rounded16{static_cast<uint16_t*>(dxz16.data) + E, dxz16.ld, dxz16.dtype};
    }
    ops.selectiveScanBackward(scan);

    // dt_proj: dW_dt += ddtᵀ·δ, dδ = ddt·W_dt.
    const Gemm dtData = Gemm::backwardData(c.mode, g.dt.data(), E, R, trainingMatrix(w, master, L.dt_w), g.xdbl.data(), d_.xdbl, 0.f);
    const Gemm dtWeight = Gemm::weightGrad(c.mode, w.matrix(L.dt_w).dtype, g.dt.data(), E, tp.xdbl.data(), d_.xdbl, R, E, d_.dt_rank, grad(L.dt_w), nullptr);
    if (dt16) ops.linearBackward(dtData.withRoundedDy(ddt16.data, E), dtWeight.withRoundedDy(ddt16.data, E));
    else ops.linearBackward(dtData, dtWeight);

    // x_proj: dW_x += dxdblᵀ·u, du += dxdbl·W_x.
    ops.linearBackward(Gemm::backwardData(c.mode, g.xdbl.data(), d_.xdbl, R, trainingMatrix(w, master, L.x_proj), g.u.data(), E, 1.f),
                       withX(Gemm::weightGrad(c.mode, w.matrix(L.x_proj).dtype, g.xdbl.data(), d_.xdbl, tp.u.data(), E, R, d_.xdbl, E, grad(L.x_proj), nullptr), tp.u16, E));

    // conv + SiLU: dx (into dxz's first half), dconv_w, dconv_b.
    ConvBackwardArgs conv{tp.xz.data(), 2 * E, c.start, c.state_stride, w.vec(L.conv_w), w.vec(L.conv_b), g.u.data(), E,
                          g.xz.data(), 2 * E, grad(L.conv_w), grad(L.conv_b), c.B, c.T, E, d_.d_conv, c.dend, c.dstart,
                          c.state_stride};
    if (xz16) {
        conv.dx = nullptr;
        conv.dx16 = dxz16;
    }
    ops.convSiluBackward(conv);

    // in_proj: dW_in += dxzᵀ·normed, dnormed = dxz·W_in.
    const Gemm inData = Gemm::backwardData(c.mode, g.xz.data(), 2 * E, R, trainingMatrix(w, master, L.in_proj), g.normed.data(), D, 0.f);
    const Gemm inWeight = withX(Gemm::weightGrad(c.mode, w.matrix(L.in_proj).dtype, g.xz.data(), 2 * E, tp.normed.data(), D, R, 2 * E, D, grad(L.in_proj), nullptr), tp.normed16, D);
    if (xz16) ops.linearBackward(inData.withRoundedDy(dxz16.data, 2 * E), inWeight.withRoundedDy(dxz16.data, 2 * E));
    else ops.linearBackward(inData, inWeight);

    // The block norm, added to the residual gradient.
    ops.rmsnormBackward(RmsNormBackwardArgs{c.input, D, w.vec(L.norm), g.normed.data(), D, R, D, d_.eps, dresid, D,
                                            1.f, grad(L.norm)});
}

}  // namespace mamba
