// The public mamba::Trainer (mamba.h): argument checks and host staging; the training itself is the
// trainer runtime (runtime/trainer.h).
#include "core/errors.h"
#include "runtime/collective.h"
#include "runtime/trainer.h"

#include <cmath>

namespace mamba {

namespace {
void checkTrainable(const ModelImpl& m, int batch, int seqLen) {
    require(batch >= 1 && batch <= (1 << 20), "batch = " + std::to_string(batch) + " must be in [1, 1048576]");
    require(seqLen >= 1 && seqLen <= (1 << 24), "seqLen = " + std::to_string(seqLen) + " must be in [1, 16777216]");
    require(static_cast<int64_t>(batch) * seqLen <= (int64_t{1} << 31) - 1,
            "batch * seqLen = " + std::to_string(static_cast<int64_t>(batch) * seqLen) + " is too large");
    if (!m.ops->capabilities().training)
        throw std::runtime_error("training is not supported on this backend (device " + std::to_string(m.device) + ")");
}

void checkScale(float scale) { require(std::isfinite(scale), "gradient scale = " + std::to_string(scale) + " must be finite"); }

void checkStateRows(const TrainerRuntime& t, const StateImpl& s) {
    t.model.checkState(s);
    require(s.batch == t.B, "the state holds " + std::to_string(s.batch) + " rows but the trainer's batch is " +
                                std::to_string(t.B));
}

float* moment(const Slot& s, int which) {
    require(which == 0 || which == 1, "moment " + std::to_string(which) + " must be 0 (m) or 1 (v)");
    return which == 0 ? s.m : s.v;
}
}  // namespace

class Trainer::Impl : public TrainerRuntime {
public:
    using TrainerRuntime::TrainerRuntime;

    /** Float inputs (forward, step, stepMse, stepCrossEntropy, burnIn) need a backbone with float inputs. */
    void requireFeatures(const char* call) const {
        if (languageModel())
            failState(std::string(call) + " takes float inputs, but this model is a language model (vocabSize = " +
                      std::to_string(model.backbone.dims.vocab) + "): train it with stepTokens");
    }
    void stageX(const float* x, int64_t xLength) {
        requireFeatures("this call");
        require(x != nullptr, "input is null");
        requireLength("input", xLength, R * model.backbone.dims.in_width);
        ops.upload(replica.x_stage.data(), x, R * model.backbone.dims.in_width);
    }
    void checkDy(const float* dy, int64_t dyLength, float scale) const {
        require(dy != nullptr, "output gradient is null");
        requireLength("output gradient", dyLength, R * outWidth());
        checkScale(scale);
    }
    /** Uploads a checked output gradient [B, T, outWidth] times the seed scale (after headForward: it may share its buffer). */
    void stageDy(const float* dy, float scale) {
        const int64_t n = R * outWidth();
        ops.upload(doutStage(), dy, n);
        const float seed = seedScale(scale);
        if (seed != 1.f) ops.scale(doutStage(), n, seed);
    }
    int64_t checkTargets(const int* t, int64_t length, int ignoreIndex) {
        requireFeatures("stepCrossEntropy/evalCrossEntropy");
        if (!head || regression_head) failState("cross-entropy needs a head: call addHead(vocab, seed) first");
        require(t != nullptr, "targets are null");
        requireLength("targets", length, R);
        for (int64_t r = 0; r < R; ++r)
            if (t[r] != ignoreIndex && (t[r] < 0 || t[r] >= head->vocab))
                failRange("targets[" + std::to_string(r) + "] = " + std::to_string(t[r]) +
                                        " is outside [0, " + std::to_string(head->vocab) +
                                        ") and is not the ignore index " + std::to_string(ignoreIndex));
        return stageTargets(reinterpret_cast<const int32_t*>(t), ignoreIndex);
    }
    /** Checks and stages token ids [B, T] (language models). */
    void checkIds(const int32_t* ids, int64_t idsLength, const char* call) {
        if (!languageModel())
            failState(std::string(call) + " needs a language model (vocabSize > 0); this model takes float inputs");
        const int V = model.backbone.dims.vocab;
        require(ids != nullptr, "ids are null");
        require(idsLength == R, "ids has " + std::to_string(idsLength) + " values, expected batch * seqLen = " +
                                    std::to_string(R));
        for (int64_t r = 0; r < R; ++r)
            if (ids[r] < 0 || ids[r] >= V)
                failRange("token id " + std::to_string(ids[r]) + " at position " + std::to_string(r) +
                          " is out of range [0, " + std::to_string(V) + ")");
    }
    /** Checks and stages token ids and next-token targets [B, T]; returns how many targets count. */
    int64_t checkTokens(const int32_t* ids, int64_t idsLength, const int32_t* t, int64_t length, int ignoreIndex) {
        if (!languageModel())
            failState("stepTokens needs a language model (vocabSize > 0); this model takes float inputs");
        const int V = model.backbone.dims.vocab;
        require(ids != nullptr, "ids are null");
        require(t != nullptr, "targets are null");
        require(idsLength == R, "ids has " + std::to_string(idsLength) + " values, expected batch * seqLen = " +
                                    std::to_string(R));
        require(length == R, "targets has " + std::to_string(length) + " values, expected batch * seqLen = " +
                                 std::to_string(R));
        for (int64_t r = 0; r < R; ++r)
            if (ids[r] < 0 || ids[r] >= V)
                failRange("token id " + std::to_string(ids[r]) + " at position " + std::to_string(r) +
                          " is out of range [0, " + std::to_string(V) + ")");
        for (int64_t r = 0; r < R; ++r)
            if (t[r] != ignoreIndex && (t[r] < 0 || t[r] >= V))
                failRange("targets[" + std::to_string(r) + "] = " + std::to_string(t[r]) + " is outside [0, " +
                          std::to_string(V) + ") and is not the ignore index " + std::to_string(ignoreIndex));
        return stageTokens(ids, t, ignoreIndex);
    }
};

Trainer::Trainer(Model& model, int batch, int seqLen)
    : impl_((checkTrainable(*model.impl(), batch, seqLen), new Impl(*model.impl(), batch, seqLen))) {}
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

void Trainer::setLossScaler(const LossScalerConfig& c) {
    if (c.enabled) {
        require(std::isfinite(c.init_scale) && c.init_scale > 0.f,
                "loss scaler init_scale = " + std::to_string(c.init_scale) + " must be finite and > 0");
        require(std::isfinite(c.growth_factor) && c.growth_factor > 1.f,
                "loss scaler growth_factor = " + std::to_string(c.growth_factor) + " must be finite and > 1");
        require(c.backoff_factor > 0.f && c.backoff_factor < 1.f,
                "loss scaler backoff_factor = " + std::to_string(c.backoff_factor) + " must be in (0, 1)");
        require(c.growth_interval >= 1,
                "loss scaler growth_interval = " + std::to_string(c.growth_interval) + " must be >= 1");
    }
    impl_->setLossScaler(c);
}
LossScalerConfig Trainer::lossScaler() const { return impl_->scaler; }
float Trainer::lossScale() const { return impl_->loss_scale; }
int64_t Trainer::lossScalerCleanSteps() const { return impl_->clean_steps; }
void Trainer::setLossScalerState(float scale, int64_t cleanSteps) {
    if (!impl_->scaler.enabled) failState("no loss scaler is set");
    require(std::isfinite(scale) && scale > 0.f, "loss scale = " + std::to_string(scale) + " must be finite and > 0");
    require(cleanSteps >= 0, "clean steps = " + std::to_string(cleanSteps) + " must be >= 0");
    impl_->loss_scale = scale;
    impl_->clean_steps = cleanSteps;
}

void Trainer::addHead(int vocab, int64_t seed) {
    if (impl_->head) failState("the trainer already has a head");
    if (impl_->languageModel())
        failState("a language model trains its own lm_head with stepTokens; a separate head cannot be added");
    require(vocab >= 1 && vocab <= (1 << 20), "vocab = " + std::to_string(vocab) + " must be in [1, 1048576]");
    impl_->addHead(vocab, seed);
}
int Trainer::headVocab() const { return impl_->head && !impl_->regression_head ? impl_->head->vocab : 0; }

void Trainer::addRegressionHead(int width, int64_t seed) {
    if (impl_->head) failState("the trainer already has a head");
    if (impl_->languageModel()) failState("a language model trains its own lm_head with stepTokens; it takes no output head");
    require(width >= 1 && width <= (1 << 20), "output head width = " + std::to_string(width) + " must be in [1, 1048576]");
    impl_->addRegressionHead(width, seed);
}
int Trainer::outputWidth() const { return impl_->outWidth(); }

int Trainer::paramCount() const { return impl_->paramCount(); }
std::string Trainer::paramName(int index) const { return impl_->slot(index).name; }
int64_t Trainer::paramSize(int index) const { return impl_->slot(index).n; }

void Trainer::setWeightDecay(int index, bool decay) {
    impl_->slot(index);
    if (impl_->decay[index] != decay) ++impl_->decay_version;
    impl_->decay[index] = decay;
}

void Trainer::setStepGraphs(bool on) {
    impl_->step_graphs = on;
    impl_->step_graphs_off_reason.clear();
    if (!on) impl_->dropStepGraph();
}
bool Trainer::stepGraphs() const { return impl_->step_graphs; }
std::string Trainer::stepGraphsOffReason() const { return impl_->step_graphs_off_reason; }
bool Trainer::weightDecay(int index) const {
    impl_->slot(index);
    return impl_->decay[index];
}

void Trainer::readParam(int index, float* dst, int64_t dstLength) const {
    const Slot s = impl_->slot(index);
    require(dst != nullptr, "destination is null");
    requireLength(s.name.c_str(), dstLength, s.n);
    impl_->ops.download(dst, s.p, s.n);
}

void Trainer::writeParam(int index, const float* src, int64_t srcLength) {
    const Slot s = impl_->slot(index);
    require(src != nullptr, "source is null");
    requireLength(s.name.c_str(), srcLength, s.n);
    impl_->writeParam(index, src);
}

void Trainer::readGrad(int index, float* dst, int64_t dstLength) const {
    const Slot s = impl_->slot(index);
    require(dst != nullptr, "destination is null");
    requireLength(s.name.c_str(), dstLength, s.n);
    impl_->ops.download(dst, s.g, s.n);
}

void Trainer::readMoment(int which, int index, float* dst, int64_t dstLength) const {
    const Slot s = impl_->slot(index);
    float* p = moment(s, which);
    require(dst != nullptr, "destination is null");
    requireLength(s.name.c_str(), dstLength, s.n);
    impl_->ops.download(dst, p, s.n);
}

void Trainer::writeMoment(int which, int index, const float* src, int64_t srcLength) {
    const Slot s = impl_->slot(index);
    float* p = moment(s, which);
    require(src != nullptr, "source is null");
    requireLength(s.name.c_str(), srcLength, s.n);
    impl_->ops.upload(p, src, s.n);
}

int64_t Trainer::stepCount() const { return impl_->steps; }
void Trainer::setStepCount(int64_t steps) {
    require(steps >= 0, "step count = " + std::to_string(steps) + " must be >= 0");
    impl_->steps = steps;
}
void Trainer::zeroGrad() { impl_->zeroGrad(); }

int64_t Trainer::gradientLength() const {
    int64_t n = 0;
    for (int i = 0; i < impl_->paramCount(); ++i) n += impl_->slot(i).n;
    return n;
}

void Trainer::readGradients(float* dst, int64_t dstLength) const {
    require(dst != nullptr, "destination is null");
    requireLength("gradients", dstLength, gradientLength());
    int64_t off = 0;
    for (int i = 0; i < impl_->paramCount(); ++i) {
        const Slot s = impl_->slot(i);
        impl_->ops.download(dst + off, s.g, s.n);
        off += s.n;
    }
}

void Trainer::writeGradients(const float* src, int64_t srcLength) {
    require(src != nullptr, "source is null");
    requireLength("gradients", srcLength, gradientLength());
    int64_t off = 0;
    for (int i = 0; i < impl_->paramCount(); ++i) {
        const Slot s = impl_->slot(i);
        impl_->ops.upload(s.g, src + off, s.n);
        off += s.n;
    }
}

void Trainer::burnIn(const float* x, int64_t xLength, int steps) {
    impl_->requireFeatures("burnIn");
    require(steps >= 1, "burn-in steps = " + std::to_string(steps) + " must be >= 1");
    require(x != nullptr, "burn-in input is null");
    requireLength("burn-in input", xLength, static_cast<int64_t>(impl_->B) * steps * impl_->model.backbone.dims.in_width);
    impl_->burnIn(x, steps);
}

void Trainer::setStartState(const State& state) {
    checkStateRows(*impl_, *state.impl());
    impl_->setStartState(*state.impl());
}

void Trainer::readEndState(State& state) const {
    checkStateRows(*impl_, *state.impl());
    impl_->readEndState(*state.impl());
}

void Trainer::setStateGradients(bool on) { impl_->setStateGradients(on); }
bool Trainer::stateGradients() const { return impl_->state_grads; }

void Trainer::setEndStateGradient(const State& gradient) {
    checkStateRows(*impl_, *gradient.impl());
    impl_->setEndStateGradient(*gradient.impl());
}

void Trainer::readStartStateGradient(State& into) const {
    checkStateRows(*impl_, *into.impl());
    impl_->readStartStateGradient(*into.impl());
}

void Trainer::forward(const float* x, int64_t xLength, float* y, int64_t yLength) {
    Impl& t = *impl_;
    const int64_t n = t.R * t.outWidth();
    require(y != nullptr, "output is null");
    requireLength("output", yLength, n);
    t.stageX(x, xLength);
    t.forward();
    t.headForward();
    t.ops.download(y, t.outStage(), n);
}

StepStats Trainer::backward(const float* dy, int64_t dyLength, float scale, bool apply) {
    Impl& t = *impl_;
    t.requireFeatures("backward");
    t.checkDy(dy, dyLength, scale);
    if (!t.have_tape) failState("backward needs a forward first (each forward allows one backward)");
    t.stageDy(dy, scale);
    t.headBackward();
    t.backward();
    return t.finish(apply);
}

StepStats Trainer::optimizerStep() { return impl_->optimizerStep(); }

StepStats Trainer::step(const float* x, int64_t xLength, const float* dy, int64_t dyLength, float scale, bool apply) {
    Impl& t = *impl_;
    t.requireFeatures("step");
    t.checkDy(dy, dyLength, scale);
    t.stageX(x, xLength);
    t.forward();
    t.headForward();
    t.stageDy(dy, scale);
    t.headBackward();
    t.backward();
    return t.finish(apply);
}

StepStats Trainer::stepMse(const float* x, int64_t xLength, const float* target, int64_t targetLength, float scale,
                           bool apply) {
    Impl& t = *impl_;
    const int64_t n = t.R * t.outWidth();
    require(target != nullptr, "target is null");
    requireLength("target", targetLength, n);
    checkScale(scale);
    t.stageX(x, xLength);
    t.replica.target_stage.ensure(t.ops, n);
    t.ops.upload(t.replica.target_stage.data(), target, n);
    if (apply && t.stepGraphEligible()) {  // the whole step on the backend, read back once
        const float seed = t.seedScale(scale);
        const TrainerRuntime::StepGraphKey key = t.stepGraphKey(0, seed, 0, n);
        t.stageStepFactors();
        t.runStep(key, [&t, seed, n] {
            t.forward();
            t.headForward();
            t.enqueueMse(seed);
            t.headBackward();
            t.backward();
            t.enqueueOptimizerStep(&t.control()->loss[0], static_cast<double>(n));
        });
        t.readControl();
        StepStats st = t.finishOptimizerStep();
        st.has_loss = true;
        st.loss = static_cast<float>(t.host_control.loss[0] / static_cast<double>(n));
        st.counted = n;
        return st;
    }
    t.forward();
    t.headForward();
    const double loss = t.mse(t.seedScale(scale));
    t.noteLoss(loss);
    t.headBackward();
    t.backward();
    StepStats st = t.finish(apply);
    st.has_loss = true;
    st.loss = static_cast<float>(loss);
    st.counted = n;
    return st;
}

StepStats Trainer::stepCrossEntropy(const float* x, int64_t xLength, const int* targets, int64_t targetLength,
                                    int ignoreIndex, float scale, bool apply) {
    Impl& t = *impl_;
    checkScale(scale);
    const int64_t counted = t.checkTargets(targets, targetLength, ignoreIndex);
    t.stageX(x, xLength);
    t.forward();
    StepStats loss;
    t.head->loss(t.ops, t.replica.y_stage.data(), t.R, ignoreIndex, t.seedScale(scale), true, counted, loss,
                 t.model.trainingMode());
    t.head->backward(t.ops, t.replica.y_stage.data(), t.R, t.replica.dy_stage.data());
    t.noteLoss(loss.loss);
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
    const int64_t counted = t.checkTargets(targets, targetLength, ignoreIndex);
    t.stageX(x, xLength);
    t.forward();
    t.have_tape = false;
    StepStats st = t.pending();
    t.head->loss(t.ops, t.replica.y_stage.data(), t.R, ignoreIndex, 1.f, false, counted, st, t.model.trainingMode());
    return st;
}

void Trainer::readInputGradient(float* dst, int64_t dstLength) const {
    Impl& t = *impl_;
    if (t.languageModel()) failState("a language model has no input gradient (its inputs are token ids)");
    if (!t.have_dx) failState("no backward has run yet");
    require(dst != nullptr, "destination is null");
    requireLength("input gradient", dstLength, t.R * t.model.backbone.dims.in_width);
    t.ops.download(dst, t.replica.dx_stage.data(), t.R * t.model.backbone.dims.in_width);
}

StepStats Trainer::stepTokens(const int32_t* ids, int64_t idsLength, const int32_t* targets, int64_t targetsLength,
                              int ignoreIndex, float scale, bool apply) {
    Impl& t = *impl_;
    checkScale(scale);
    const int64_t counted = t.checkTokens(ids, idsLength, targets, targetsLength, ignoreIndex);
    if (apply && t.stepGraphEligible()) {  // the whole step on the backend, read back once
        const float seed = t.seedScale(scale);
        const TrainerRuntime::StepGraphKey key = t.stepGraphKey(1, seed, ignoreIndex, counted);
        t.stageStepFactors();
        t.runStep(key, [&t, seed, ignoreIndex, counted] {
            t.forward();
            t.enqueueLmLoss(ignoreIndex, seed, true, counted);
            t.backward();
            // the mean loss must be a finite float: the sum over `counted` targets is checked on the backend
            t.enqueueOptimizerStep(&t.control()->loss[0], static_cast<double>(counted));
        });
        t.have_dx = false;
        t.readControl();
        const StepStats loss = t.lmLossStats(counted);
        StepStats st = t.finishOptimizerStep();
        st.has_loss = true;
        st.loss = loss.loss;
        st.accuracy = loss.accuracy;
        st.counted = loss.counted;
        return st;
    }
    t.forward();
    const StepStats loss = t.lmLoss(ignoreIndex, t.seedScale(scale), true, counted);
    t.noteLoss(loss.loss);
    t.backward();
    t.have_dx = false;
    StepStats st = t.finish(apply);
    st.has_loss = true;
    st.loss = loss.loss;
    st.accuracy = loss.accuracy;
    st.counted = loss.counted;
    return st;
}

StepStats Trainer::evalTokens(const int32_t* ids, int64_t idsLength, const int32_t* targets, int64_t targetsLength,
                              int ignoreIndex) {
    Impl& t = *impl_;
    const int64_t counted = t.checkTokens(ids, idsLength, targets, targetsLength, ignoreIndex);
    t.forward();
    t.have_tape = false;
    return t.lmLoss(ignoreIndex, 1.f, false, counted);
}

void Trainer::forwardTokens(const int32_t* ids, int64_t idsLength, float* logits, int64_t logitsLength) {
    Impl& t = *impl_;
    t.checkIds(ids, idsLength, "forwardTokens");
    require(logits != nullptr, "logits are null");
    requireLength("logits", logitsLength, t.R * t.model.backbone.dims.vocab);
    static_assert(sizeof(int32_t) == sizeof(float), "ids travel through a float buffer");
    t.ops.upload(t.replica.ids_stage.data(), reinterpret_cast<const float*>(ids), t.R);
    t.forward();
    t.replica.runner.lmLogits(t.ops, t.model.weights(), t.replica.y_stage.data(), t.R, t.model.trainingMode(), logits);
}

StepStats Trainer::backwardLogits(const float* dlogits, int64_t dlogitsLength, float scale, bool apply) {
    Impl& t = *impl_;
    if (!t.languageModel()) failState("backwardLogits needs a language model (vocabSize > 0)");
    require(dlogits != nullptr, "logits gradient is null");
    requireLength("logits gradient", dlogitsLength, t.R * t.model.backbone.dims.vocab);
    checkScale(scale);
    if (!t.have_tape) failState("backwardLogits needs a forwardTokens first (each forward allows one backward)");
    const WeightView w = t.model.weights();
    t.replica.runner.lmBackward(t.ops, w, t.replica.masterView(w.derived), t.replica.y_stage.data(), t.R, dlogits, t.seedScale(scale),
                                t.replica.grads.data(), t.replica.dy_stage.data());
    t.backward();
    t.have_dx = false;
    return t.finish(apply);
}

void NcclComm::sumGradients(Trainer& trainer, bool rankOrder) {
    TrainerRuntime& t = *trainer.impl_;
    require(t.model.device == impl_->device, "the trainer is on device " + std::to_string(t.model.device) +
                                                 ", this NCCL rank on cuda:" + std::to_string(impl_->device));
    // The flat buffers whole: their alignment padding is zero on every rank, so it sums to zero.
    std::vector<DeviceSpan> spans{{t.replica.grads.data(), t.replica.grads.size()}};
    if (t.head) spans.push_back({t.head->g.data(), t.head->g.size()});
    impl_->collective->sumGradients(t.ops, spans, rankOrder);
}

}  // namespace mamba
