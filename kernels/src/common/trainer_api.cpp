// The public mamba::Trainer (mamba.h): argument checks, host staging, the loss heads, gradient clipping
// and AdamW around the Mamba-1 training forward/backward (mamba1_train.cpp).
//
// Buffers: gradients and the two AdamW moments are flat buffers parallel to the model's parameter buffer
// (same offsets, see ParamTable); the optional head has its own four small buffers. The trainer updates
// the model's parameters in place and marks its derived copies (-exp(A_log), low-precision) stale.
#include "errors.h"
#include "devices.h"
#include "mamba1_train.h"
#include "model_impl.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace mamba {

namespace {

Backend& backendOf(int device) { return device == DEVICE_CPU ? cpuBackend() : cudaBackend(device); }

/** Does this backend implement the training stages? (The default implementations throw.) */
bool backendTrains(Backend& be) {
    try {
        be.scale(nullptr, 0, 1.f);
        return true;
    } catch (const std::runtime_error&) {
        return false;
    }
}

int64_t aligned(int64_t n) { return (n + 15) / 16 * 16; }

}  // namespace

bool trainingSupported(int device) {
    try {
        return backendTrains(backendOf(device));
    } catch (const std::exception&) {
        return false;
    }
}

/** One trainable tensor: its values, gradient and moments (all in backend memory). */
struct Slot {
    std::string name;
    float* p;
    float* g;
    float* m;
    float* v;
    int64_t n;
};

class Trainer::Impl {
public:
    Impl(ModelImpl& model, int batch, int seqLen)
        : m(model), be(model.be), B(batch), T(seqLen), R(static_cast<int64_t>(batch) * seqLen), net(m.dims, m.table) {
        require(batch >= 1 && batch <= (1 << 20), "batch = " + std::to_string(batch) + " must be in [1, 1048576]");
        require(seqLen >= 1 && seqLen <= (1 << 24), "seqLen = " + std::to_string(seqLen) + " must be in [1, 16777216]");
        require(R <= (int64_t{1} << 31) - 1, "batch * seqLen = " + std::to_string(R) + " is too large");
        if (!backendTrains(be))
            throw std::runtime_error("training is not supported on this backend yet (device " +
                                     std::to_string(m.device) + "); train on the CPU");
        const int64_t P = m.table.totalSize();
        grads = Buffer(be, P);
        adam_m = Buffer(be, P);
        adam_v = Buffer(be, P);
        for (const ParamInfo& p : m.table.params()) decay.push_back(!p.no_decay);
        start_state = Buffer(be, m.dims.row_state * B);
        tape_start = Buffer(be, m.dims.row_state * B);
        x_stage = Buffer(be, R * m.dims.in_width);
        y_stage = Buffer(be, R * m.dims.d_model);
        dy_stage = Buffer(be, R * m.dims.d_model);
        dx_stage = Buffer(be, R * m.dims.in_width);
        net.reserve(be, B, T);
    }

    ModelImpl& m;
    Backend& be;
    const int B, T;
    const int64_t R;
    Mamba1Train net;
    Buffer grads, adam_m, adam_v;
    std::vector<bool> decay;  // per trainable tensor
    AdamWConfig opt;
    float clip = 0.f;
    int64_t steps = 0;

    // head: W [vocab, d_model] at 0, bias [vocab] at head_bias
    int vocab = 0;
    int64_t head_bias = 0, head_size = 0;
    Buffer head, head_g, head_m, head_v, logits, targets, row_loss, row_correct;

    Buffer start_state, tape_start;
    bool start_pending = false;
    Buffer x_stage, y_stage, dy_stage, dx_stage, target_stage;
    bool have_tape = false, have_dx = false, have_end = false;

    int paramCount() const { return static_cast<int>(m.table.params().size()) + (vocab > 0 ? 2 : 0); }

    Slot slot(int index) const {
        const int P = static_cast<int>(m.table.params().size());
        if (index < 0 || index >= paramCount())
            throw std::out_of_range("trainable tensor index " + std::to_string(index) + " is out of range [0, " +
                                    std::to_string(paramCount()) + ")");
        if (index < P) {
            const ParamInfo& p = m.table.params()[index];
            return Slot{p.name, m.params.data() + p.offset, grads.data() + p.offset, adam_m.data() + p.offset,
                        adam_v.data() + p.offset, p.size};
        }
        const int64_t off = index == P ? 0 : head_bias;
        const int64_t n = index == P ? static_cast<int64_t>(vocab) * m.dims.d_model : vocab;
        return Slot{index == P ? "lm_head.weight" : "lm_head.bias", head.data() + off, head_g.data() + off,
                    head_m.data() + off, head_v.data() + off, n};
    }

    Weights weights() { return m.weights(); }

    void stageX(const float* x, int64_t xLength) {
        require(x != nullptr, "input is null");
        requireLength("input", xLength, R * m.dims.in_width);
        be.upload(x_stage.data(), x, R * m.dims.in_width);
    }

    /** The training forward on the staged input into y_stage. */
    void forward() {
        const int64_t n = m.dims.row_state * B;
        if (start_pending)
            be.copy(tape_start.data(), start_state.data(), n);
        else
            be.zero(tape_start.data(), n);
        start_pending = false;
        have_tape = false;
        net.forward(be, weights(), tape_start.data(), x_stage.data(), B, T, y_stage.data());
        have_tape = true;
        have_end = true;
    }

    /** Backward of the tape with dy_stage as the output gradient (already scaled). */
    void backward() {
        require(have_tape, "backward needs a forward first (each forward allows one backward)");
        have_tape = false;
        net.backward(be, weights(), dy_stage.data(), grads.data(), dx_stage.data());
        have_dx = true;
    }

    void zeroGrad() {
        be.zero(grads.data(), grads.size());
        if (vocab > 0) be.zero(head_g.data(), head_g.size());
    }

    StepStats optimizerStep() {
        StepStats st;
        // Global norm over every trainable tensor (the flat buffers' alignment padding stays zero).
        double ss = be.sumOfSquares(grads.data(), grads.size());
        if (vocab > 0) ss += be.sumOfSquares(head_g.data(), head_g.size());
        const double norm = std::sqrt(ss);
        st.grad_norm = static_cast<float>(norm);
        st.learning_rate = opt.lr;
        if (!std::isfinite(norm)) {  // a diverged step: skip it rather than poison the weights
            zeroGrad();
            st.step = steps;
            st.applied = false;
            return st;
        }
        ++steps;
        float gscale = 1.f;
        if (clip > 0.f && norm > clip) gscale = static_cast<float>(clip / (norm + 1e-6));
        AdamWArgs a{};
        a.lr = opt.lr;
        a.beta1 = opt.beta1;
        a.beta2 = opt.beta2;
        a.eps = opt.eps;
        a.bias_correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(opt.beta1), static_cast<double>(steps)));
        a.bias_correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(opt.beta2), static_cast<double>(steps)));
        a.grad_scale = gscale;
        for (int i = 0; i < paramCount(); ++i) {
            const Slot s = slot(i);
            a.weight_decay = decay[i] ? opt.weight_decay : 0.f;
            be.adamw(s.p, s.g, s.m, s.v, s.n, a);
        }
        m.weights_changed = true;
        zeroGrad();
        st.step = steps;
        st.applied = true;
        return st;
    }

    StepStats finish(bool apply) {
        if (apply) return optimizerStep();
        StepStats st;
        st.step = steps;
        st.learning_rate = opt.lr;
        return st;
    }

    void requireHead() const { require(vocab > 0, "cross-entropy needs a head: call addHead(vocab, seed) first"); }

    /** Checks and stages targets [B, T]; returns how many are not ignored. */
    int64_t stageTargets(const int* t, int64_t length, int ignoreIndex) {
        require(t != nullptr, "targets are null");
        requireLength("targets", length, R);
        int64_t counted = 0;
        for (int64_t r = 0; r < R; ++r) {
            if (t[r] == ignoreIndex) continue;
            if (t[r] < 0 || t[r] >= vocab)
                throw std::out_of_range("targets[" + std::to_string(r) + "] = " + std::to_string(t[r]) +
                                        " is outside [0, " + std::to_string(vocab) + ") and is not the ignore index " +
                                        std::to_string(ignoreIndex));
            ++counted;
        }
        static_assert(sizeof(int) == sizeof(float), "targets travel through a float buffer");
        be.upload(targets.data(), reinterpret_cast<const float*>(t), R);  // 4-byte copy, read back as int32
        return counted;
    }

    Matrix headMatrix() const {
        return Matrix{head.data(), nullptr, DTYPE_F32, vocab, m.dims.d_model};
    }

    /** logits = y_stage · Wᵀ + b, then per-row loss/correct (and dlogits in place when grad). */
    void headLoss(int ignoreIndex, float scale, bool grad, int64_t counted, StepStats& st) {
        be.linearDeterministic(y_stage.data(), m.dims.d_model, R, headMatrix(), head.data() + head_bias, logits.data(),
                               vocab, 0.f);
        const float s = counted > 0 ? scale / static_cast<float>(counted) : 0.f;
        be.crossEntropy(logits.data(), R, vocab, reinterpret_cast<const int32_t*>(targets.data()), ignoreIndex, s,
                        row_loss.data(), row_correct.data(), grad ? logits.data() : nullptr);
        std::vector<float> loss(static_cast<size_t>(R)), correct(static_cast<size_t>(R));
        be.download(loss.data(), row_loss.data(), R);
        be.download(correct.data(), row_correct.data(), R);
        double l = 0, c = 0;
        for (int64_t r = 0; r < R; ++r) {
            l += loss[r];
            c += correct[r];
        }
        st.has_loss = true;
        st.counted = counted;
        st.loss = counted > 0 ? static_cast<float>(l / counted) : 0.f;
        st.accuracy = counted > 0 ? static_cast<float>(c / counted) : 0.f;
    }
};

// ---- Trainer ----

Trainer::Trainer(Model& model, int batch, int seqLen) : impl_(new Impl(*model.impl(), batch, seqLen)) {}
Trainer::~Trainer() { delete impl_; }

int Trainer::batch() const { return impl_->B; }
int Trainer::seqLen() const { return impl_->T; }

void Trainer::setAdamW(const AdamWConfig& c) {
    require(std::isfinite(c.lr) && c.lr >= 0.f, "AdamW lr = " + std::to_string(c.lr) + " must be finite and >= 0");
    require(c.beta1 >= 0.f && c.beta1 < 1.f, "AdamW beta1 = " + std::to_string(c.beta1) + " must be in [0, 1)");
    require(c.beta2 >= 0.f && c.beta2 < 1.f, "AdamW beta2 = " + std::to_string(c.beta2) + " must be in [0, 1)");
    require(std::isfinite(c.eps) && c.eps > 0.f, "AdamW eps = " + std::to_string(c.eps) + " must be > 0");
    require(std::isfinite(c.weight_decay) && c.weight_decay >= 0.f,
            "AdamW weight_decay = " + std::to_string(c.weight_decay) + " must be >= 0");
    impl_->opt = c;
}
AdamWConfig Trainer::adamW() const { return impl_->opt; }

void Trainer::setLearningRate(float lr) {
    require(std::isfinite(lr) && lr >= 0.f, "learning rate = " + std::to_string(lr) + " must be finite and >= 0");
    impl_->opt.lr = lr;
}
float Trainer::learningRate() const { return impl_->opt.lr; }

void Trainer::setClipGradNorm(float maxNorm) {
    require(!std::isnan(maxNorm), "clip norm is NaN");
    impl_->clip = maxNorm > 0.f ? maxNorm : 0.f;
}
float Trainer::clipGradNorm() const { return impl_->clip; }

void Trainer::addHead(int vocab, int64_t seed) {
    Impl& t = *impl_;
    require(t.vocab == 0, "the trainer already has a head");
    require(vocab >= 1 && vocab <= (1 << 20), "vocab = " + std::to_string(vocab) + " must be in [1, 1048576]");
    const int dm = t.m.dims.d_model;
    t.head_bias = aligned(static_cast<int64_t>(vocab) * dm);
    t.head_size = t.head_bias + aligned(vocab);
    t.head = Buffer(t.be, t.head_size);
    t.head_g = Buffer(t.be, t.head_size);
    t.head_m = Buffer(t.be, t.head_size);
    t.head_v = Buffer(t.be, t.head_size);
    t.logits = Buffer(t.be, t.R * vocab);
    t.targets = Buffer(t.be, t.R);
    t.row_loss = Buffer(t.be, t.R);
    t.row_correct = Buffer(t.be, t.R);
    // nn.Linear default: U(±1/√fan_in) for the weight; the bias starts at zero. SplitMix64 stream.
    std::vector<float> host(static_cast<size_t>(t.head_size), 0.f);
    uint64_t s = static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ull + 0x6C6D5F68656164ull;
    const double bound = 1.0 / std::sqrt(static_cast<double>(dm));
    for (int64_t i = 0; i < static_cast<int64_t>(vocab) * dm; ++i) {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        host[i] = static_cast<float>((static_cast<double>(z >> 11) * 0x1.0p-53 * 2 - 1) * bound);
    }
    t.be.upload(t.head.data(), host.data(), t.head_size);
    t.vocab = vocab;
    t.decay.push_back(true);   // lm_head.weight
    t.decay.push_back(false);  // lm_head.bias
}
int Trainer::headVocab() const { return impl_->vocab; }

int Trainer::paramCount() const { return impl_->paramCount(); }
std::string Trainer::paramName(int index) const { return impl_->slot(index).name; }
int64_t Trainer::paramSize(int index) const { return impl_->slot(index).n; }

void Trainer::setWeightDecay(int index, bool decay) {
    impl_->slot(index);
    impl_->decay[index] = decay;
}
bool Trainer::weightDecay(int index) const {
    impl_->slot(index);
    return impl_->decay[index];
}

void Trainer::readParam(int index, float* dst, int64_t dstLength) const {
    const Slot s = impl_->slot(index);
    require(dst != nullptr, "destination is null");
    requireLength(s.name.c_str(), dstLength, s.n);
    impl_->be.download(dst, s.p, s.n);
}

void Trainer::writeParam(int index, const float* src, int64_t srcLength) {
    const Slot s = impl_->slot(index);
    require(src != nullptr, "source is null");
    requireLength(s.name.c_str(), srcLength, s.n);
    impl_->be.upload(s.p, src, s.n);
    impl_->m.weights_changed = true;
}

void Trainer::readGrad(int index, float* dst, int64_t dstLength) const {
    const Slot s = impl_->slot(index);
    require(dst != nullptr, "destination is null");
    requireLength(s.name.c_str(), dstLength, s.n);
    impl_->be.download(dst, s.g, s.n);
}

static float* moment(const Slot& s, int which) {
    require(which == 0 || which == 1, "moment " + std::to_string(which) + " must be 0 (m) or 1 (v)");
    return which == 0 ? s.m : s.v;
}

void Trainer::readMoment(int which, int index, float* dst, int64_t dstLength) const {
    const Slot s = impl_->slot(index);
    float* p = moment(s, which);
    require(dst != nullptr, "destination is null");
    requireLength(s.name.c_str(), dstLength, s.n);
    impl_->be.download(dst, p, s.n);
}

void Trainer::writeMoment(int which, int index, const float* src, int64_t srcLength) {
    const Slot s = impl_->slot(index);
    float* p = moment(s, which);
    require(src != nullptr, "source is null");
    requireLength(s.name.c_str(), srcLength, s.n);
    impl_->be.upload(p, src, s.n);
}

int64_t Trainer::stepCount() const { return impl_->steps; }
void Trainer::setStepCount(int64_t steps) {
    require(steps >= 0, "step count = " + std::to_string(steps) + " must be >= 0");
    impl_->steps = steps;
}
void Trainer::zeroGrad() { impl_->zeroGrad(); }

void Trainer::burnIn(const float* x, int64_t xLength, int steps) {
    Impl& t = *impl_;
    require(steps >= 1, "burn-in steps = " + std::to_string(steps) + " must be >= 1");
    require(x != nullptr, "burn-in input is null");
    const int w = t.m.dims.in_width;
    requireLength("burn-in input", xLength, static_cast<int64_t>(t.B) * steps * w);
    // The training forward in chunks of at most seqLen steps (the tape's size), carrying the state; it keeps
    // the reproducible products, and the tape it leaves is discarded.
    t.have_tape = false;
    const Weights wt = t.weights();
    t.be.zero(t.start_state.data(), t.m.dims.row_state * t.B);
    std::vector<float> chunk;
    for (int s0 = 0; s0 < steps; s0 += t.T) {
        const int n = std::min(t.T, steps - s0);
        chunk.resize(static_cast<size_t>(t.B) * n * w);
        for (int b = 0; b < t.B; ++b)
            std::copy(x + (static_cast<int64_t>(b) * steps + s0) * w, x + (static_cast<int64_t>(b) * steps + s0 + n) * w,
                      chunk.begin() + static_cast<int64_t>(b) * n * w);
        t.be.upload(t.x_stage.data(), chunk.data(), static_cast<int64_t>(chunk.size()));
        t.net.forward(t.be, wt, t.start_state.data(), t.x_stage.data(), t.B, n, t.y_stage.data());
        t.be.copy(t.start_state.data(), t.net.endState(), t.m.dims.row_state * t.B);
    }
    t.have_end = false;
    t.start_pending = true;
}

void Trainer::setStartState(const State& state) {
    Impl& t = *impl_;
    t.m.checkState(*state.impl());
    require(state.impl()->batch == t.B, "the state holds " + std::to_string(state.impl()->batch) +
                                            " rows but the trainer's batch is " + std::to_string(t.B));
    t.be.copy(t.start_state.data(), state.impl()->data.data(), t.m.dims.row_state * t.B);
    t.start_pending = true;
}

void Trainer::readEndState(State& state) const {
    Impl& t = *impl_;
    t.m.checkState(*state.impl());
    require(state.impl()->batch == t.B, "the state holds " + std::to_string(state.impl()->batch) +
                                            " rows but the trainer's batch is " + std::to_string(t.B));
    require(t.have_end, "no forward has run yet");
    t.be.copy(state.impl()->data.data(), t.net.endState(), t.m.dims.row_state * t.B);
}

void Trainer::forward(const float* x, int64_t xLength, float* y, int64_t yLength) {
    Impl& t = *impl_;
    require(y != nullptr, "output is null");
    requireLength("output", yLength, t.R * t.m.dims.d_model);
    t.stageX(x, xLength);
    t.forward();
    t.be.download(y, t.y_stage.data(), t.R * t.m.dims.d_model);
}

static void checkScale(float scale) {
    require(std::isfinite(scale), "gradient scale = " + std::to_string(scale) + " must be finite");
}

StepStats Trainer::backward(const float* dy, int64_t dyLength, float scale, bool apply) {
    Impl& t = *impl_;
    require(dy != nullptr, "output gradient is null");
    requireLength("output gradient", dyLength, t.R * t.m.dims.d_model);
    checkScale(scale);
    require(t.have_tape, "backward needs a forward first (each forward allows one backward)");
    t.be.upload(t.dy_stage.data(), dy, t.R * t.m.dims.d_model);
    if (scale != 1.f) t.be.scale(t.dy_stage.data(), t.R * t.m.dims.d_model, scale);
    t.backward();
    return t.finish(apply);
}

StepStats Trainer::optimizerStep() { return impl_->optimizerStep(); }

StepStats Trainer::step(const float* x, int64_t xLength, const float* dy, int64_t dyLength, float scale, bool apply) {
    Impl& t = *impl_;
    require(dy != nullptr, "output gradient is null");
    requireLength("output gradient", dyLength, t.R * t.m.dims.d_model);
    checkScale(scale);
    t.stageX(x, xLength);
    t.forward();
    t.be.upload(t.dy_stage.data(), dy, t.R * t.m.dims.d_model);
    if (scale != 1.f) t.be.scale(t.dy_stage.data(), t.R * t.m.dims.d_model, scale);
    t.backward();
    return t.finish(apply);
}

StepStats Trainer::stepMse(const float* x, int64_t xLength, const float* target, int64_t targetLength, float scale,
                           bool apply) {
    Impl& t = *impl_;
    const int64_t n = t.R * t.m.dims.d_model;
    require(target != nullptr, "target is null");
    requireLength("target", targetLength, n);
    checkScale(scale);
    t.stageX(x, xLength);
    t.target_stage.ensure(t.be, n);
    t.be.upload(t.target_stage.data(), target, n);
    t.forward();
    // L = mean((y − target)²) over every element; dy = scale · 2(y − target) / n.
    const double sse = t.be.mse(t.y_stage.data(), t.target_stage.data(), n, scale / static_cast<float>(n),
                                t.dy_stage.data());
    t.backward();
    StepStats st = t.finish(apply);
    st.has_loss = true;
    st.loss = static_cast<float>(sse / static_cast<double>(n));
    st.counted = n;
    return st;
}

StepStats Trainer::stepCrossEntropy(const float* x, int64_t xLength, const int* targets, int64_t targetLength,
                                    int ignoreIndex, float scale, bool apply) {
    Impl& t = *impl_;
    t.requireHead();
    checkScale(scale);
    t.stageX(x, xLength);
    const int64_t counted = t.stageTargets(targets, targetLength, ignoreIndex);
    t.forward();
    StepStats loss;
    t.headLoss(ignoreIndex, scale, true, counted, loss);
    const int dm = t.m.dims.d_model;
    // logits now hold dlogits: head gradients, then dy = dlogits · W.
    t.be.linearWeightGrad(t.logits.data(), t.vocab, t.y_stage.data(), dm, t.R, t.vocab, dm, t.head_g.data(),
                          t.head_g.data() + t.head_bias);
    t.be.linearBackward(t.logits.data(), t.vocab, t.R, t.headMatrix(), t.dy_stage.data(), dm, 0.f);
    t.backward();
    StepStats st = t.finish(apply);
    st.has_loss = true;
    st.loss = loss.loss;
    st.accuracy = loss.accuracy;
    st.counted = loss.counted;
    return st;
}

StepStats Trainer::evalCrossEntropy(const float* x, int64_t xLength, const int* targets, int64_t targetLength,
                                    int ignoreIndex) {
    Impl& t = *impl_;
    t.requireHead();
    t.stageX(x, xLength);
    const int64_t counted = t.stageTargets(targets, targetLength, ignoreIndex);
    t.forward();
    t.have_tape = false;
    StepStats st;
    t.headLoss(ignoreIndex, 1.f, false, counted, st);
    st.step = t.steps;
    st.learning_rate = t.opt.lr;
    return st;
}

void Trainer::readInputGradient(float* dst, int64_t dstLength) const {
    Impl& t = *impl_;
    require(t.have_dx, "no backward has run yet");
    require(dst != nullptr, "destination is null");
    requireLength("input gradient", dstLength, t.R * t.m.dims.in_width);
    t.be.download(dst, t.dx_stage.data(), t.R * t.m.dims.in_width);
}

}  // namespace mamba
