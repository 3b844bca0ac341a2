#include "trainer.h"

#include "core/errors.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace mamba {

TrainerRuntime::TrainerRuntime(ModelImpl& m, int batch, int seqLen)
    : model(m), ops(*m.ops), B(batch), T(seqLen), R(static_cast<int64_t>(batch) * seqLen),
      replica(m, *m.ops, batch, seqLen), control_buf(*m.ops, sizeof(ControlBlock) / sizeof(float)) {
    for (const ParamInfo& p : m.backbone.table.params()) decay.push_back(!p.no_decay);
    if (!m.storesF32()) m.masters = replica.masters;
}

TrainerRuntime::~TrainerRuntime() {
    dropStepGraph();
    if (model.masters == replica.masters) model.masters = nullptr;
}

bool TrainerRuntime::stepGraphEligible() const {
    return step_graphs && ops.capabilities().graphs && !start_pending && !state_grads && !end_grad_pending &&
           !nonfinite_loss;
}

TrainerRuntime::StepGraphKey TrainerRuntime::stepGraphKey(int kind, float seed, int ignore_index, int64_t counted) const {
    StepGraphKey key;
    key.kind = kind;
    key.seed = seed;
    key.clip = clip;
    key.loss_scale = loss_scale;
    key.mode = static_cast<int>(model.trainingMode());
    key.ignore_index = ignore_index;
    key.counted = counted;
    key.decay_version = decay_version;
    key.storage = model.storageAddress();
    key.frees = ops.freeCount();
    return key;
}

void TrainerRuntime::dropStepGraph() noexcept {
    if (step_graph) ops.destroyGraph(step_graph);
    step_graph = nullptr;
    step_graph_key = StepGraphKey{};
}

void TrainerRuntime::runStep(const StepGraphKey& key, const std::function<void()>& body) {
    if (step_graph && step_graph_key == key) {
        ops.replay(step_graph);
        return;
    }
    dropStepGraph();
    if (!(warm_key == key)) {  // first sight of this key: eagerly, so that everything the step uses is allocated
        body();
        warm_key = key;
        return;
    }
    // The derived weights (e.g. −exp(A_log)) are refreshed by the step's first weights() call when stale, as after
    // every optimizer step: marked stale here so the graph always records that refresh, whatever ran in between.
    model.weightsChanged();
    ops.beginCapture();
    try {
        body();
    } catch (const std::exception& e) {
        try {
            ops.destroyGraph(ops.endCapture());
        } catch (...) {
        }
        step_graphs = false;  // something in the step cannot be captured: run eagerly from now on
        step_graphs_off_reason = e.what();
        body();
        return;
    }
    step_graph = ops.endCapture();
    step_graph_key = key;
    ops.replay(step_graph);
}

Slot TrainerRuntime::slot(int index) const {
    const ParamTable& t = model.backbone.table;
    const int P = t.count();
    if (index < 0 || index >= paramCount())
        failRange("trainable tensor index " + std::to_string(index) + " is out of range [0, " +
                                std::to_string(paramCount()) + ")");
    const TrainerReplica& r = replica;
    if (index < P) {
        const ParamInfo& p = t[index];
        return Slot{p.name, r.masters + p.offset, r.grads.data() + p.offset, r.adam_m.data() + p.offset,
                    r.adam_v.data() + p.offset, p.size};
    }
    const LinearHead& h = *head;
    const int64_t off = index == P ? 0 : h.bias_offset;
    const int64_t n = index == P ? h.weightSize() : h.vocab;
    const char* weight = regression_head ? "regression_head.weight" : "lm_head.weight";
    const char* bias = regression_head ? "regression_head.bias" : "lm_head.bias";
    return Slot{index == P ? weight : bias, h.w.data() + off, h.g.data() + off, h.m.data() + off,
                h.v.data() + off, n};
}

void TrainerRuntime::addHead(int vocab, int64_t seed) {
    head = std::make_unique<LinearHead>(ops, vocab, model.backbone.dims.d_model, R, seed);
    decay.push_back(true);   // lm_head.weight
    decay.push_back(false);  // lm_head.bias
}

void TrainerRuntime::addRegressionHead(int width, int64_t seed) {
    addHead(width, seed);
    regression_head = true;
}

void TrainerRuntime::headForward() {
    if (regression_head) head->forward(ops, replica.y_stage.data(), R, model.trainingMode());
}

void TrainerRuntime::headBackward() {
    if (regression_head) head->backward(ops, replica.y_stage.data(), R, replica.dy_stage.data());
}

void TrainerRuntime::writeParam(int index, const float* host) {
    const int P = model.backbone.table.count();
    if (index < P) {
        model.writeParam(index, host);  // also writes the attached masters (or the f32 storage they are)
        return;
    }
    const Slot s = slot(index);
    ops.upload(s.p, host, s.n);
}

ForwardIO TrainerRuntime::stagedIO(int steps) {
    ForwardIO io;
    if (languageModel())
        io.ids = reinterpret_cast<const int32_t*>(replica.ids_stage.data());
    else
        io.x = replica.x_stage.data();
    io.B = B;
    io.T = steps;
    io.out = replica.y_stage.data();
    io.allPositions = true;
    io.state = replica.work_state.data();
    return io;
}

void TrainerRuntime::forward() {
    TrainerReplica& r = replica;
    const int64_t n = model.backbone.dims.row_state * B;
    if (start_pending)
        ops.copy(r.tape_start.data(), r.start_state.data(), n);
    else
        ops.zero(r.tape_start.data(), n);
    start_pending = false;
    have_tape = false;
    ops.copy(r.work_state.data(), r.tape_start.data(), n);
    r.runner.forwardTape(ops, model.weights(), stagedIO(T), r.tape_start.data(), model.trainingMode());
    have_tape = true;
    have_end = true;
}

void TrainerRuntime::backward() {
    if (!have_tape) failState("backward needs a forward first (each forward allows one backward)");
    have_tape = false;
    TrainerReplica& r = replica;
    const WeightView w = model.weights();
    const int64_t n = model.backbone.dims.row_state * B;
    if (end_grad_pending && loss_scale != 1.f) ops.scale(r.end_grad.data(), n, loss_scale);  // the seed's scale
    const float* dEnd = end_grad_pending ? r.end_grad.data() : nullptr;
    float* dStart = state_grads ? r.start_grad.data() : nullptr;
    end_grad_pending = false;
    r.runner.backward(ops, w, r.masterView(w.derived), r.dy_stage.data(), r.grads.data(), r.dx_stage.data(), dEnd,
                      dStart);
    have_dx = true;
    have_start_grad = dStart != nullptr;
    start_grad_scale = loss_scale;
}

void TrainerRuntime::zeroGrad() {
    ops.zero(replica.grads.data(), replica.grads.size());
    if (head) ops.zero(head->g.data(), head->g.size());
    nonfinite_loss = false;
}

void TrainerRuntime::noteLoss(double loss) {
    // The float the caller sees: a loss that overflows float is as useless as a NaN, even if its gradient is finite.
    if (!std::isfinite(static_cast<float>(loss))) nonfinite_loss = true;
}

StepStats TrainerRuntime::pending() const {
    StepStats st;
    st.step = steps;
    st.learning_rate = opt.lr;
    st.loss_scale = loss_scale;
    return st;
}

StepStats TrainerRuntime::optimizerStep() {
    stageStepFactors();
    enqueueOptimizerStep(nullptr, 0);
    readControl();
    return finishOptimizerStep();
}

void TrainerRuntime::stageStepFactors() {
    // The constants of step `steps + 1` (used only if the step applies; a skipped step leaves `steps` as it is).
    const double t = static_cast<double>(steps + 1);
    AdamWArgs a{};
    a.lr = opt.lr;
    a.beta1 = opt.beta1;
    a.beta2 = opt.beta2;
    a.eps = opt.eps;
    a.weight_decay = opt.weight_decay;
    a.bias_correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(opt.beta1), t));
    a.bias_correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(opt.beta2), t));
    a.grad_scale = 1.f;  // written by optimizerControl
    const AdamWFactors f = adamwFactors(a);
    static_assert(offsetof(ControlBlock, factors) % sizeof(float) == 0, "the factors start at a float boundary");
    ops.upload(control_buf.data() + offsetof(ControlBlock, factors) / sizeof(float), reinterpret_cast<const float*>(&f),
               sizeof f / sizeof(float));
}

void TrainerRuntime::enqueueOptimizerStep(const double* lossSum, double lossCount) {
    ControlBlock* c = control();
    // The global norm over every trainable tensor (the flat buffers' alignment padding stays zero).
    ops.sumInto(replica.grads.data(), replica.grads.size(), true, &c->grad_ss[0]);
    if (head) ops.sumInto(head->g.data(), head->g.size(), true, &c->grad_ss[1]);
    OptimizerControlArgs oc{};
    oc.sums = c->grad_ss;
    oc.nsums = head ? 2 : 1;
    oc.loss_sum = lossSum;
    oc.loss_count = lossCount;
    oc.loss_bad = nonfinite_loss;
    oc.clip = clip;
    oc.loss_scale = loss_scale;
    oc.factors = &c->factors;
    oc.norm = &c->norm;
    ops.optimizerControl(oc);
    // A skipped step (non-finite norm or loss) leaves parameters and moments as they are: the kernels see the flag.
    // The model's tensors in one call, which also writes low-precision storage from the masters (f32 storage is them);
    // then the head's.
    refreshAdamWTable();
    const int P = model.backbone.table.count();
    ops.adamwGroup(AdamWGroupArgs{replica.masters, replica.grads.data(), replica.adam_m.data(), replica.adam_v.data(),
                                  replica.grads.size(), reinterpret_cast<const AdamWTensor*>(adamw_table.data()), P,
                                  model.storesF32() ? nullptr : const_cast<void*>(model.storageAddress()),
                                  &c->factors});
    model.weightsChanged();
    for (int i = P; i < paramCount(); ++i) {
        const Slot s = slot(i);
        ops.adamw(s.p, s.g, s.m, s.v, s.n, &c->factors, decay[i]);
    }
    ops.zero(replica.grads.data(), replica.grads.size());
    if (head) ops.zero(head->g.data(), head->g.size());
}

void TrainerRuntime::refreshAdamWTable() {
    // Host checks only: a captured step (whose key holds decay_version and the storage address) never uploads here.
    if (adamw_table_version == decay_version && adamw_table_storage == model.storageAddress()) return;
    const ParamTable& t = model.backbone.table;
    std::vector<AdamWTensor> table;
    for (int i = 0; i < t.count(); ++i) {
        AdamWTensor e{};
        e.offset = t[i].offset;
        e.n = t[i].size;
        e.decayed = decay[i] ? 1 : 0;
        e.store_byte = model.storesF32() ? -1 : model.storageByteOffset(i);
        e.store_dtype = model.storedLowp(i) ? model.dtype : DTYPE_F32;
        table.push_back(e);
    }
    const int64_t floats = static_cast<int64_t>(table.size() * sizeof(AdamWTensor) / sizeof(float));
    if (adamw_table.size() != floats) adamw_table = Buffer(ops, floats);
    ops.upload(adamw_table.data(), reinterpret_cast<const float*>(table.data()), floats);
    adamw_table_version = decay_version;
    adamw_table_storage = model.storageAddress();
}

void TrainerRuntime::readControl() {
    ops.download(reinterpret_cast<float*>(&host_control), control_buf.data(), sizeof(ControlBlock) / sizeof(float));
}

StepStats TrainerRuntime::finishOptimizerStep() {
    StepStats st = pending();
    st.grad_norm = static_cast<float>(host_control.norm);
    nonfinite_loss = false;  // the gradients it marked are gone
    if (host_control.factors.skip != 0.f) {  // a diverged step: skipped rather than poison the weights
        if (scaler.enabled) {  // overflow under the scale (or a diverged loss): back off
            loss_scale *= scaler.backoff_factor;
            clean_steps = 0;
        }
        return st;
    }
    ++steps;
    st.step = steps;
    st.applied = true;
    if (scaler.enabled && ++clean_steps >= scaler.growth_interval) {
        const float grown = loss_scale * scaler.growth_factor;
        if (std::isfinite(grown)) loss_scale = grown;  // as GradScaler: never grow into infinity
        clean_steps = 0;
    }
    return st;
}

void TrainerRuntime::setLossScaler(const LossScalerConfig& c) {
    scaler = c;
    loss_scale = c.enabled ? c.init_scale : 1.f;
    clean_steps = 0;
}

void TrainerRuntime::burnIn(const float* x, int nSteps) {
    // The taped forward in chunks of at most seqLen steps (the tape's size), carrying the state; it keeps the
    // reproducible products, and the tape it leaves is discarded.
    TrainerReplica& r = replica;
    const BackboneDims& d = model.backbone.dims;
    const int w = d.in_width;
    have_tape = false;
    ops.zero(r.start_state.data(), d.row_state * B);
    std::vector<float> chunk;
    for (int s0 = 0; s0 < nSteps; s0 += T) {
        const int n = std::min(T, nSteps - s0);
        chunk.resize(static_cast<size_t>(B) * n * w);
        for (int b = 0; b < B; ++b)
            std::copy(x + (static_cast<int64_t>(b) * nSteps + s0) * w, x + (static_cast<int64_t>(b) * nSteps + s0 + n) * w,
                      chunk.begin() + static_cast<int64_t>(b) * n * w);
        ops.upload(r.x_stage.data(), chunk.data(), static_cast<int64_t>(chunk.size()));
        ops.copy(r.work_state.data(), r.start_state.data(), d.row_state * B);
        r.runner.forwardTape(ops, model.weights(), stagedIO(n), r.start_state.data(), model.trainingMode());
        ops.copy(r.start_state.data(), r.work_state.data(), d.row_state * B);
    }
    have_end = false;
    start_pending = true;
}

void TrainerRuntime::setStartState(const StateImpl& s) {
    ops.copy(replica.start_state.data(), s.data.data(), model.backbone.dims.row_state * B);
    start_pending = true;
}

void TrainerRuntime::readEndState(StateImpl& s) const {
    if (!have_end) failState("no forward has run yet");
    ops.copy(s.data.data(), replica.work_state.data(), model.backbone.dims.row_state * B);
}

void TrainerRuntime::setEndStateGradient(const StateImpl& g) {
    ops.copy(replica.end_grad.data(), g.data.data(), model.backbone.dims.row_state * B);
    end_grad_pending = true;
}

void TrainerRuntime::readStartStateGradient(StateImpl& into) const {
    if (!state_grads) failState("state gradients are off: turn them on (setStateGradients) before the backward");
    if (!have_start_grad) failState("no backward has run since state gradients were turned on");
    const int64_t n = model.backbone.dims.row_state * B;
    ops.copy(into.data.data(), replica.start_grad.data(), n);
    if (start_grad_scale != 1.f) ops.scale(into.data.data(), n, 1.f / start_grad_scale);  // in the loss's own units
}

void TrainerRuntime::enqueueMse(float scale) {
    const int64_t n = R * outWidth();
    // L = mean((y − target)²) over every element; dy = scale · 2(y − target) / n (in place for a head: elementwise).
    ops.mse(outStage(), replica.target_stage.data(), n, scale / static_cast<float>(n), doutStage(), &control()->loss[0]);
}

double TrainerRuntime::mse(float scale) {
    enqueueMse(scale);
    readControl();
    return host_control.loss[0] / static_cast<double>(R * outWidth());
}

int64_t TrainerRuntime::stageTargets(const int32_t* t, int ignoreIndex) const {
    int64_t counted = 0;
    for (int64_t r = 0; r < R; ++r)
        if (t[r] != ignoreIndex) ++counted;
    static_assert(sizeof(int32_t) == sizeof(float), "targets travel through a float buffer");
    ops.upload(head->targets.data(), reinterpret_cast<const float*>(t), R);  // a 4-byte copy, read back as int32
    return counted;
}

int64_t TrainerRuntime::stageTokens(const int32_t* ids, const int32_t* targets, int ignoreIndex) {
    int64_t counted = 0;
    for (int64_t r = 0; r < R; ++r)
        if (targets[r] != ignoreIndex) ++counted;
    static_assert(sizeof(int32_t) == sizeof(float), "ids travel through a float buffer");
    ops.upload(replica.ids_stage.data(), reinterpret_cast<const float*>(ids), R);  // 4-byte copies, read as int32
    ops.upload(replica.lm_targets.data(), reinterpret_cast<const float*>(targets), R);
    return counted;
}

void TrainerRuntime::enqueueLmLoss(int ignoreIndex, float scale, bool grad, int64_t counted) {
    TrainerReplica& r = replica;
    const WeightView w = model.weights();
    BackboneRunner::LmLossArgs a{};
    a.y = r.y_stage.data();
    a.rows = R;
    a.targets = reinterpret_cast<const int32_t*>(r.lm_targets.data());
    a.ignore_index = ignoreIndex;
    a.scale = counted > 0 ? scale / static_cast<float>(counted) : 0.f;  // the mean over counted targets
    a.row_loss = r.row_loss.data();
    a.row_correct = r.row_correct.data();
    a.grads = grad ? r.grads.data() : nullptr;
    a.dy = r.dy_stage.data();
    a.mode = model.trainingMode();
    r.runner.lmLoss(ops, w, r.masterView(w.derived), a);
    // the per-row losses and correct flags summed on the backend (fixed chunks, fixed order)
    ops.sumInto(r.row_loss.data(), R, false, &control()->loss[0]);
    ops.sumInto(r.row_correct.data(), R, false, &control()->loss[1]);
}

StepStats TrainerRuntime::lmLossStats(int64_t counted) const {
    const double l = host_control.loss[0], c = host_control.loss[1];
    StepStats st = pending();
    st.has_loss = true;
    st.counted = counted;
    st.loss = counted > 0 ? static_cast<float>(l / counted) : 0.f;
    st.accuracy = counted > 0 ? static_cast<float>(c / counted) : 0.f;
    return st;
}

StepStats TrainerRuntime::lmLoss(int ignoreIndex, float scale, bool grad, int64_t counted) {
    enqueueLmLoss(ignoreIndex, scale, grad, counted);
    readControl();
    return lmLossStats(counted);
}

}  // namespace mamba
