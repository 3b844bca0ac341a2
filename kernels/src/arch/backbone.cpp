#include "backbone.h"

#include "core/errors.h"
#include "core/rng.h"

#include <algorithm>
#include <cmath>

namespace mamba {

namespace {
const ModelConfig& validated(const ModelConfig& c) {
    validateConfig(c);
    return c;
}
}  // namespace

Backbone::Backbone(const ModelConfig& c) : config(validated(c)), arch(makeArchitecture(c)) {
    dims.d_model = c.d_model;
    dims.n_layers = c.n_layers;
    dims.input_dim = c.input_dim;
    dims.in_width = c.input_dim > 0 ? c.input_dim : c.d_model;
    dims.vocab = c.vocab_size;
    dims.tie_embeddings = c.tie_embeddings;
    dims.eps = c.norm_eps;
    dims.layer_state = arch->layerStateSize();
    dims.row_state = dims.layer_state * c.n_layers;

    const int64_t D = c.d_model;
    // No weight decay on the token embedding by default (as nn.Embedding in the official training recipes); a tied
    // LM head is that same tensor, an untied one is a Linear and decays.
    if (dims.vocab > 0) embedding = table.add("backbone.embeddings.weight", {dims.vocab, D}, true, true);
    if (dims.input_dim > 0) {
        input_w = table.add("input_proj.weight", {D, dims.input_dim}, true, false);
        input_b = table.add("input_proj.bias", {D}, false, true);
    }
    for (int i = 0; i < dims.n_layers; ++i) arch->declareLayer(table, i);
    norm_f = table.add("backbone.norm_f.weight", {D}, false, true);
    if (dims.vocab > 0)
        lm_head = dims.tie_embeddings ? embedding : table.add("lm_head.weight", {dims.vocab, D}, true, false);
}

void Backbone::init(int64_t seed, float* host) const {
    auto ptr = [&](int index) { return host + table[index].offset; };
    auto size = [&](int index) { return table[index].size; };
    if (input_w >= 0) {  // nn.Linear default (kaiming_uniform a=√5 ⇒ U(±1/√fan_in)), bias zeroed
        Rng::stream(seed, input_w + 1).fillUniform(ptr(input_w), size(input_w), 1.0 / std::sqrt(double(dims.input_dim)));
        std::fill(ptr(input_b), ptr(input_b) + size(input_b), 0.f);
    }
    for (int i = 0; i < dims.n_layers; ++i) arch->initLayer(table, i, seed, host);
    std::fill(ptr(norm_f), ptr(norm_f) + size(norm_f), 1.f);
    if (embedding >= 0)  // mixer_seq_simple._init_weights: N(0, 0.02)
        Rng::stream(seed, embedding + 1).fillNormal(ptr(embedding), size(embedding), 0.02);
    if (lm_head >= 0 && lm_head != embedding)
        Rng::stream(seed, lm_head + 1).fillUniform(ptr(lm_head), size(lm_head), 1.0 / std::sqrt(double(dims.d_model)));
}

// ---- BackboneRunner ----

LayerCall BackboneRunner::call(int layer, int B, int T, GemmMode mode, float* state) const {
    LayerCall c{};
    c.layer = layer;
    c.B = B;
    c.T = T;
    c.mode = mode;
    c.state = state ? state + layer * bb_.dims.layer_state : nullptr;
    c.state_stride = bb_.dims.row_state;
    return c;
}

bool BackboneRunner::reserve(Ops& ops, int B, int T, BufferUse use) {
    const Architecture& arch = *bb_.arch;
    const int64_t R = static_cast<int64_t>(B) * T, D = bb_.dims.d_model;
    if (!isTape(use)) {
        if (!layer_) layer_ = arch.newBuffers();
        bool moved = resid_.ensure(ops, R * D);
        moved |= normed_.ensure(ops, R * D);
        moved |= arch.reserve(ops, *layer_, B, T, BufferUse::Inference);
        return moved;
    }
    const int L = bb_.dims.n_layers;
    bool moved = false;
    if (static_cast<int>(entering_.size()) != L + 1) {
        entering_.resize(L + 1);
        tape_.clear();
        for (int i = 0; i < L; ++i) tape_.push_back(arch.newBuffers());
        scratch_ = arch.newBuffers();
    }
    for (Buffer& b : entering_) moved |= b.ensure(ops, R * D);
    for (auto& t : tape_) moved |= arch.reserve(ops, *t, B, T, use);
    moved |= arch.reserve(ops, *scratch_, B, T, BufferUse::Backward);
    moved |= dresid_.ensure(ops, R * D);
    return moved;
}

BufferUse BackboneRunner::tapeUse(const Ops& ops, int dtype) {
    // Where the backend rounds 2-byte products' operands, the tape keeps them rounded for the weight gradients.
    return roundsOperandsOf(ops, dtype) ? BufferUse::TapeRounded : BufferUse::Tape;
}

void BackboneRunner::stem(Ops& ops, const WeightView& w, const ForwardIO& io, GemmMode mode, float* h0) {
    const int64_t R = static_cast<int64_t>(io.B) * io.T;
    const int D = bb_.dims.d_model;
    if (io.ids)
        ops.embed(w.matrix(bb_.embedding), io.ids, R, h0);
    else if (bb_.input_w >= 0)
        ops.gemm(Gemm::forward(mode, io.x, bb_.dims.input_dim, R, w.matrix(bb_.input_w), w.vec(bb_.input_b), h0, D, 0.f));
    else
        ops.copy(h0, io.x, R * D);
}

void BackboneRunner::forward(Ops& ops, const WeightView& w, const ForwardIO& io, GemmMode mode) {
    const BackboneDims& d = bb_.dims;
    const int B = io.B, T = io.T;
    const int64_t R = static_cast<int64_t>(B) * T;
    reserve(ops, B, T, BufferUse::Inference);
    float* h = resid_.data();
    stem(ops, w, io, mode, h);
    for (int i = 0; i < d.n_layers; ++i) {
        LayerCall c = call(i, B, T, mode, io.state);
        c.resid = h;
        bb_.arch->forwardLayer(ops, w, c, *layer_, false);
    }
    // The final norm of every position, or of the last position of each row.
    const int64_t rows = io.allPositions ? R : B;
    const float* last = io.allPositions ? h : h + static_cast<int64_t>(T - 1) * d.d_model;
    const int64_t ld = io.allPositions ? d.d_model : static_cast<int64_t>(T) * d.d_model;
    const RmsNormArgs norm{last, ld, w.vec(bb_.norm_f), rows, d.d_model, d.eps, io.ids ? normed_.data() : io.out,
                           d.d_model};
    if (io.ids)  // logits = lm_head(RMSNorm_f(h)): the named fusion, as in every block
        ops.normLinear(norm, Gemm::forward(mode, norm.y, d.d_model, rows, w.matrix(bb_.lm_head), nullptr, io.out,
                                           d.vocab, 0.f));
    else
        ops.rmsnorm(norm);
}

void BackboneRunner::forwardTape(Ops& ops, const WeightView& w, const ForwardIO& io, const float* start,
                                 GemmMode mode) {
    const BackboneDims& d = bb_.dims;
    require((io.x != nullptr) != (io.ids != nullptr), "the training forward takes features or token ids");
    require(io.ids == nullptr || bb_.embedding >= 0, "token ids need a language model");
    const int B = io.B, T = io.T;
    const int64_t R = static_cast<int64_t>(B) * T;
    reserve(ops, B, T, tapeUse(ops, w.layout->dtype));
    have_tape_ = false;
    if (mode == GemmMode::Fast) throw std::logic_error("the training forward needs reproducible products");
    stem(ops, w, io, mode, entering_[0].data());
    for (int i = 0; i < d.n_layers; ++i) {
        ops.copy(entering_[i + 1].data(), entering_[i].data(), R * d.d_model);
        LayerCall c = call(i, B, T, mode, io.state);
        c.resid = entering_[i + 1].data();
        c.scratch = scratch_.get();
        bb_.arch->forwardLayer(ops, w, c, *tape_[i], true);
    }
    ops.rmsnorm(RmsNormArgs{entering_[d.n_layers].data(), d.d_model, w.vec(bb_.norm_f), R, d.d_model, d.eps, io.out,
                            d.d_model});
    tape_B_ = B;
    tape_T_ = T;
    tape_x_ = io.x;
    tape_ids_ = io.ids;
    tape_start_ = start;
    tape_mode_ = mode;
    have_tape_ = true;
}

void BackboneRunner::backward(Ops& ops, const WeightView& w, const WeightView& master, const float* dy, float* grads,
                              float* dx, const float* dEnd, float* dStart) {
    const BackboneDims& d = bb_.dims;
    if (!have_tape_) throw std::logic_error("backward without a taped forward");
    if (tape_ids_ && dx) throw std::logic_error("token ids have no input gradient");
    const int B = tape_B_, T = tape_T_;
    const int64_t R = static_cast<int64_t>(B) * T;
    const ParamTable& tb = bb_.table;
    auto grad = [&](int index) { return grads + tb[index].offset; };
    float* dresid = dresid_.data();

    // Final norm: dresid = ∂L/∂(stream after the last layer).
    ops.rmsnormBackward(RmsNormBackwardArgs{entering_[d.n_layers].data(), d.d_model, w.vec(bb_.norm_f), dy, d.d_model,
                                            R, d.d_model, d.eps, dresid, d.d_model, 0.f, grad(bb_.norm_f)});
    for (int i = d.n_layers - 1; i >= 0; --i) {
        LayerCall c = call(i, B, T, tape_mode_, nullptr);
        c.input = entering_[i].data();
        c.start = tape_start_ + i * d.layer_state;
        c.dend = dEnd ? dEnd + i * d.layer_state : nullptr;
        c.dstart = dStart ? dStart + i * d.layer_state : nullptr;
        bb_.arch->backwardLayer(ops, w, master, c, *tape_[i], *scratch_, dresid, grads);
    }
    // The token embedding, the input projection, or the input itself.
    if (tape_ids_) {
        ops.embedBackward(EmbedBackwardArgs{dresid, d.d_model, tape_ids_, R, d.vocab, d.d_model, grad(bb_.embedding)});
    } else if (bb_.input_w >= 0) {
        ops.gemm(Gemm::weightGrad(tape_mode_, w.matrix(bb_.input_w).dtype, dresid, d.d_model, tape_x_, d.input_dim, R, d.d_model, d.input_dim, grad(bb_.input_w),
                                  grad(bb_.input_b)));
        if (dx) ops.gemm(Gemm::backwardData(tape_mode_, dresid, d.d_model, R, trainingMatrix(w, master, bb_.input_w), dx, d.input_dim, 0.f));
    } else if (dx) {
        ops.copy(dx, dresid, R * d.d_model);
    }
}

int64_t BackboneRunner::lmBlockRows(const Ops& ops) const {
    const int64_t V = std::max(1, bb_.dims.vocab);
    return std::clamp<int64_t>(ops.capabilities().logits_block_floats / V, 64, 4096);
}

void BackboneRunner::lmLoss(Ops& ops, const WeightView& w, const WeightView& master, const LmLossArgs& a) {
    const BackboneDims& d = bb_.dims;
    if (bb_.lm_head < 0) throw std::logic_error("lmLoss needs a language model");
    const int D = d.d_model, V = d.vocab;
    const int64_t block = std::min(lmBlockRows(ops), std::max<int64_t>(a.rows, 1));
    logits_.ensure(ops, block * V);
    float* logits = logits_.data();
    float* dhead = a.grads ? a.grads + bb_.table[bb_.lm_head].offset : nullptr;
    const Matrix head = trainingMatrix(w, master, bb_.lm_head);
    // Where the head's backward products round dlogits to its 2-byte type anyway, the loss writes them rounded: the
    // same bits, without writing them in f32 and packing them again (≈ 1 GB of traffic a step at 130m, B 8 × T 2,048).
    const bool rounded = roundsOperandsOf(ops, head.dtype);
    for (int64_t r0 = 0; r0 < a.rows; r0 += block) {
        const int64_t n = std::min(block, a.rows - r0);
        const float* y = a.y + r0 * D;
        ops.gemm(Gemm::forward(a.mode, y, D, n, w.matrix(bb_.lm_head), nullptr, logits, V, 0.f));
        CrossEntropyArgs ce{logits, n, V, a.targets + r0, a.ignore_index, a.scale, a.row_loss + r0,
                            a.row_correct + r0, dhead ? logits : nullptr};
        if (dhead && rounded) {  // dlogits in the head's 2-byte type, each row in the first half of its own f32 row
            ce.dlogits = nullptr;
            ce.dlogits16 = logits;
            ce.ld16 = 2 * static_cast<int64_t>(V);
            ce.dtype16 = head.dtype;
        }
        ops.crossEntropy(ce);
        if (!dhead) continue;
        const Gemm data = Gemm::backwardData(a.mode, logits, V, n, head, a.dy + r0 * D, D, 0.f);
        const Gemm weight = Gemm::weightGrad(a.mode, head.dtype, logits, V, y, D, n, V, D, dhead, nullptr);
        if (rounded) ops.linearBackward(data.withRoundedDy(logits, ce.ld16), weight.withRoundedDy(logits, ce.ld16));
        else ops.linearBackward(data, weight);
    }
}

void BackboneRunner::lmLogits(Ops& ops, const WeightView& w, const float* y, int64_t rows, GemmMode mode,
                              float* hostLogits) {
    if (bb_.lm_head < 0) throw std::logic_error("lmLogits needs a language model");
    const int D = bb_.dims.d_model, V = bb_.dims.vocab;
    const int64_t block = std::min(lmBlockRows(ops), std::max<int64_t>(rows, 1));
    logits_.ensure(ops, block * V);
    for (int64_t r0 = 0; r0 < rows; r0 += block) {
        const int64_t n = std::min(block, rows - r0);
        ops.gemm(Gemm::forward(mode, y + r0 * D, D, n, w.matrix(bb_.lm_head), nullptr, logits_.data(), V, 0.f));
        ops.download(hostLogits + r0 * V, logits_.data(), n * V);
    }
}

void BackboneRunner::lmBackward(Ops& ops, const WeightView& w, const WeightView& master, const float* y, int64_t rows,
                                const float* hostDlogits, float scale, float* grads, float* dy) {
    if (bb_.lm_head < 0) throw std::logic_error("lmBackward needs a language model");
    const int D = bb_.dims.d_model, V = bb_.dims.vocab;
    const int64_t block = std::min(lmBlockRows(ops), std::max<int64_t>(rows, 1));
    logits_.ensure(ops, block * V);
    float* dhead = grads + bb_.table[bb_.lm_head].offset;
    const Matrix head = trainingMatrix(w, master, bb_.lm_head);
    for (int64_t r0 = 0; r0 < rows; r0 += block) {
        const int64_t n = std::min(block, rows - r0);
        ops.upload(logits_.data(), hostDlogits + r0 * V, n * V);
        if (scale != 1.f) ops.scale(logits_.data(), n * V, scale);
        ops.linearBackward(Gemm::backwardData(tape_mode_, logits_.data(), V, n, head, dy + r0 * D, D, 0.f),
                           Gemm::weightGrad(tape_mode_, head.dtype, logits_.data(), V, y + r0 * D, D, n, V, D, dhead,
                                            nullptr));
    }
}

}  // namespace mamba
