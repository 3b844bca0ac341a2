// The public C++ API (mamba.h): argument checks at the boundary, then the model code.
#include "errors.h"
#include "init.h"
#include "model_impl.h"
#include "devices.h"

#include <vector>

namespace mamba {

namespace {
Backend& backendFor(int device) {
    if (device == DEVICE_CPU) return cpuBackend();
    return cudaBackend(device);
}
}  // namespace

ModelImpl::ModelImpl(const ModelConfig& c, int device, int dtype, int64_t seed)
    : config(c), dims(Dims::of(c)), table(dims), be(backendFor(device)), device(device), dtype(dtype),
      mamba1(dims, table) {
    require(dtype >= DTYPE_F32 && dtype <= DTYPE_F16, "dtype code " + std::to_string(dtype) + " is unknown");
    require(device != DEVICE_CPU || dtype == DTYPE_F32,
            "the CPU backend stores weights as F32 only; BF16/F16/TF32 need a CUDA device");
    params = Buffer(be, table.totalSize());
    std::vector<float> host(static_cast<size_t>(table.totalSize()), 0.f);
    initMamba1(config, dims, table, seed, host.data());
    be.upload(params.data(), host.data(), table.totalSize());
    neg_a = Buffer(be, dims.ssm_state * dims.n_layers);
    if (dtype == DTYPE_BF16 || dtype == DTYPE_F16) lowp = Buffer(be, (table.totalSize() + 1) / 2);
}

ModelImpl::~ModelImpl() { dropGraphs(); }

Weights ModelImpl::weights() {
    if (weights_changed) {
        for (int i = 0; i < dims.n_layers; ++i)
            be.negExp(params.data() + table.params()[table.layers[i].a_log].offset, neg_a.data() + i * dims.ssm_state,
                      dims.ssm_state);
        if (lowp.data()) be.toLowPrecision(params.data(), lowp.data(), table.totalSize(), dtype);
        weights_changed = false;
    }
    return Weights{params.data(), reinterpret_cast<const uint16_t*>(lowp.data()), dtype, neg_a.data()};
}

void ModelImpl::setGraphs(bool on) {
    if (!on) dropGraphs();
    graphs = on && be.supportsGraphs();
}

void ModelImpl::dropGraphs() noexcept {
    for (auto& g : step_graphs_) be.destroyGraph(g.second);
    step_graphs_.clear();
}

void ModelImpl::launch(float* st, Input staged, int B, int T, float* out, bool allPositions, const Weights& w) {
    if (staged.ids)
        mamba1.runTokens(be, w, st, staged.ids, B, T, out, allPositions);
    else
        mamba1.run(be, w, st, staged.x, B, T, out, allPositions);
}

// A decode step replayed from a captured graph: staging and workspace pointers are fixed at capture,
// so anything that moves them drops the graphs first. Host copies stay outside the graph.
void ModelImpl::runGraphStep(StateImpl& s, Input in, float* out) {
    const int B = s.batch;
    const int64_t inN = in.ids ? B : static_cast<int64_t>(B) * dims.in_width;
    const int64_t outN = static_cast<int64_t>(B) * (in.ids ? dims.vocab : dims.d_model);
    bool moved = mamba1.reserve(be, B);
    moved |= x_stage.ensure(be, inN);
    moved |= y_stage.ensure(be, outN);
    if (moved) dropGraphs();
    const Weights w = weights();
    be.upload(x_stage.data(), in.ids ? reinterpret_cast<const float*>(in.ids) : in.x, inN);
    const Input staged = in.ids ? Input{nullptr, reinterpret_cast<const int32_t*>(x_stage.data())}
                                : Input{x_stage.data(), nullptr};
    // Tokens and features capture different launches: the key tells them apart by the batch's sign.
    const auto key = std::make_pair(static_cast<const float*>(s.data.data()), in.ids ? -B : B);
    auto it = step_graphs_.find(key);
    if (it == step_graphs_.end()) {
        be.beginCapture();
        try {
            launch(s.data.data(), staged, B, 1, y_stage.data(), false, w);
        } catch (...) {
            be.destroyGraph(be.endCapture());
            throw;
        }
        it = step_graphs_.emplace(key, be.endCapture()).first;
    }
    be.replay(it->second);
    be.download(out, y_stage.data(), outN);
}

void ModelImpl::checkState(const StateImpl& s) const {
    require(&s.be == &be, "the state lives on another device than the model");
    require(s.dims.d_inner == dims.d_inner && s.dims.d_state == dims.d_state && s.dims.d_conv == dims.d_conv &&
                s.dims.n_layers == dims.n_layers,
            "the state was made for a model of another shape");
}

void ModelImpl::run(StateImpl* state, Input in, int B, int T, float* out, bool allPositions) {
    float* st;
    if (state) {
        st = state->data.data();
    } else {
        scratch_state.ensure(be, dims.row_state * B);
        be.zero(scratch_state.data(), dims.row_state * B);
        st = scratch_state.data();
    }
    if (in.ids) {  // ids index the embedding: checked here, the kernels trust them
        require(dims.vocab > 0, "this model has no vocabulary: pass float inputs");
        for (int64_t i = 0; i < static_cast<int64_t>(B) * T; ++i)
            if (in.ids[i] < 0 || in.ids[i] >= dims.vocab)
                fail("token id " + std::to_string(in.ids[i]) + " at position " + std::to_string(i) +
                     " is out of range [0, " + std::to_string(dims.vocab) + ")");
    }
    const int64_t inN = static_cast<int64_t>(B) * T * (in.ids ? 1 : dims.in_width);
    const int64_t outN = static_cast<int64_t>(B) * (allPositions ? T : 1) * (in.ids ? dims.vocab : dims.d_model);
    if (be.isHost()) {
        launch(st, in, B, T, out, allPositions, weights());
        return;
    }
    if (graphs && state && T == 1 && !allPositions) {
        runGraphStep(*state, in, out);
        return;
    }
    if (mamba1.reserve(be, static_cast<int64_t>(B) * T) | x_stage.ensure(be, inN) | y_stage.ensure(be, outN)) dropGraphs();
    const Weights w = weights();
    be.upload(x_stage.data(), in.ids ? reinterpret_cast<const float*>(in.ids) : in.x, inN);
    const Input staged = in.ids ? Input{nullptr, reinterpret_cast<const int32_t*>(x_stage.data())}
                                : Input{x_stage.data(), nullptr};
    launch(st, staged, B, T, y_stage.data(), allPositions, w);
    be.download(out, y_stage.data(), outN);
}

// ---- Model ----

Model::Model(const ModelConfig& config, int device, int dtype, int64_t seed)
    : impl_(new ModelImpl(config, device, dtype, seed)) {}
Model::~Model() { delete impl_; }

ModelConfig Model::config() const { return impl_->config; }
int Model::device() const { return impl_->device; }
int Model::dtype() const { return impl_->dtype; }
int Model::inputWidth() const { return impl_->dims.in_width; }
void Model::setCudaGraphs(bool enabled) { impl_->setGraphs(enabled); }
bool Model::cudaGraphs() const { return impl_->graphs; }
int Model::paramCount() const { return static_cast<int>(impl_->table.params().size()); }
int64_t Model::paramTotalSize() const { return impl_->table.totalSize(); }

static const ParamInfo& paramAt(const ModelImpl& m, int index) {
    if (index < 0 || index >= static_cast<int>(m.table.params().size()))
        throw std::out_of_range("parameter index " + std::to_string(index) + " is out of range [0, " +
                                std::to_string(m.table.params().size()) + ")");
    return m.table.params()[index];
}

std::string Model::paramName(int index) const { return paramAt(*impl_, index).name; }
int Model::paramIndex(const std::string& name) const { return impl_->table.indexOf(name); }
int Model::paramRank(int index) const { return static_cast<int>(paramAt(*impl_, index).shape.size()); }
int64_t Model::paramDim(int index, int axis) const {
    const ParamInfo& p = paramAt(*impl_, index);
    if (axis < 0 || axis >= static_cast<int>(p.shape.size())) throw std::out_of_range("axis out of range");
    return p.shape[axis];
}
int64_t Model::paramSize(int index) const { return paramAt(*impl_, index).size; }

void Model::readParam(int index, float* dst, int64_t dstLength) const {
    const ParamInfo& p = paramAt(*impl_, index);
    require(dst != nullptr, "destination is null");
    requireLength(p.name.c_str(), dstLength, p.size);
    impl_->be.download(dst, impl_->params.data() + p.offset, p.size);
}

void Model::writeParam(int index, const float* src, int64_t srcLength) {
    const ParamInfo& p = paramAt(*impl_, index);
    require(src != nullptr, "source is null");
    requireLength(p.name.c_str(), srcLength, p.size);
    impl_->be.upload(impl_->params.data() + p.offset, src, p.size);
    impl_->weights_changed = true;
}


void Model::step(State& state, const float* x, int64_t xLength, float* y, int64_t yLength) {
    prefill(state, x, xLength, 1, y, yLength);
}

void Model::prefill(State& state, const float* x, int64_t xLength, int T, float* y, int64_t yLength) {
    StateImpl& s = *state.impl();
    impl_->checkState(s);
    require(T >= 1, "sequence length T = " + std::to_string(T) + " must be >= 1");
    require(x != nullptr, "input is null");
    requireLength("input", xLength, static_cast<int64_t>(s.batch) * T * impl_->dims.in_width);
    if (y == nullptr) {
        require(yLength == 0, "output is null");
        // The backbone always writes the last position; give it somewhere to go.
        std::vector<float> sink(static_cast<size_t>(s.batch) * impl_->dims.d_model);
        impl_->run(&s, x, s.batch, T, sink.data(), false);
        return;
    }
    requireLength("output", yLength, static_cast<int64_t>(s.batch) * impl_->dims.d_model);
    impl_->run(&s, x, s.batch, T, y, false);
}

void Model::forward(State* state, const float* x, int64_t xLength, int B, int T, float* y, int64_t yLength) {
    require(B >= 1 && T >= 1, "batch and sequence length must be >= 1 (got B = " + std::to_string(B) +
                                  ", T = " + std::to_string(T) + ")");
    if (state) {
        impl_->checkState(*state->impl());
        require(state->impl()->batch == B, "the state holds " + std::to_string(state->impl()->batch) +
                                               " rows but the input has B = " + std::to_string(B));
    }
    require(x != nullptr && y != nullptr, "input or output is null");
    requireLength("input", xLength, static_cast<int64_t>(B) * T * impl_->dims.in_width);
    requireLength("output", yLength, static_cast<int64_t>(B) * T * impl_->dims.d_model);
    impl_->run(state ? state->impl() : nullptr, x, B, T, y, true);
}

int Model::vocabSize() const { return impl_->dims.vocab; }

void Model::stepTokens(State& state, const int32_t* ids, int64_t idsLength, float* logits, int64_t logitsLength) {
    prefillTokens(state, ids, idsLength, 1, logits, logitsLength);
}

void Model::prefillTokens(State& state, const int32_t* ids, int64_t idsLength, int T, float* logits,
                          int64_t logitsLength) {
    StateImpl& s = *state.impl();
    impl_->checkState(s);
    require(impl_->dims.vocab > 0, "this model has no vocabulary (vocab_size = 0)");
    require(T >= 1, "sequence length T = " + std::to_string(T) + " must be >= 1");
    require(ids != nullptr && logits != nullptr, "ids or logits is null");
    requireLength("ids", idsLength, static_cast<int64_t>(s.batch) * T);
    requireLength("logits", logitsLength, static_cast<int64_t>(s.batch) * impl_->dims.vocab);
    impl_->runTokens(&s, ids, s.batch, T, logits, false);
}

void Model::forwardTokens(State* state, const int32_t* ids, int64_t idsLength, int B, int T, float* logits,
                          int64_t logitsLength) {
    require(impl_->dims.vocab > 0, "this model has no vocabulary (vocab_size = 0)");
    require(B >= 1 && T >= 1, "batch and sequence length must be >= 1");
    if (state) {
        impl_->checkState(*state->impl());
        require(state->impl()->batch == B, "the state holds " + std::to_string(state->impl()->batch) +
                                               " rows but B = " + std::to_string(B));
    }
    require(ids != nullptr && logits != nullptr, "ids or logits is null");
    requireLength("ids", idsLength, static_cast<int64_t>(B) * T);
    requireLength("logits", logitsLength, static_cast<int64_t>(B) * T * impl_->dims.vocab);
    impl_->runTokens(state ? state->impl() : nullptr, ids, B, T, logits, true);
}

// ---- State ----

static StateImpl* newStateImpl(const ModelImpl& m, int batch) {
    require(batch >= 1 && batch <= (1 << 20), "batch = " + std::to_string(batch) + " must be in [1, 1048576]");
    return new StateImpl(m.be, m.dims, batch);
}

State::State(const Model& model, int batch) : impl_(newStateImpl(*model.impl(), batch)) {}
State::~State() { delete impl_; }
int State::batch() const { return impl_->batch; }
int64_t State::rowSize() const { return impl_->dims.row_state; }
void State::reset() { impl_->be.zero(impl_->data.data(), impl_->data.size()); }

static void checkRow(const StateImpl& s, int row) {
    if (row < 0 || row >= s.batch)
        throw std::out_of_range("row " + std::to_string(row) + " is out of range [0, " + std::to_string(s.batch) + ")");
}

void State::resetRow(int row) {
    checkRow(*impl_, row);
    impl_->be.zero(impl_->data.data() + row * impl_->dims.row_state, impl_->dims.row_state);
}

void State::readRow(int row, float* dst, int64_t dstLength) const {
    checkRow(*impl_, row);
    require(dst != nullptr, "destination is null");
    requireLength("state row", dstLength, impl_->dims.row_state);
    impl_->be.download(dst, impl_->data.data() + row * impl_->dims.row_state, impl_->dims.row_state);
}

void State::writeRow(int row, const float* src, int64_t srcLength) {
    checkRow(*impl_, row);
    require(src != nullptr, "source is null");
    requireLength("state row", srcLength, impl_->dims.row_state);
    impl_->be.upload(impl_->data.data() + row * impl_->dims.row_state, src, impl_->dims.row_state);
}

void State::copyFrom(const State& other) {
    require(&other.impl_->be == &impl_->be && other.impl_->dims.row_state == impl_->dims.row_state &&
                other.impl_->batch == impl_->batch,
            "copyFrom needs a state of the same model shape, device and batch");
    impl_->be.copy(impl_->data.data(), other.impl_->data.data(), impl_->data.size());
}

// ---- process-wide ----

void noop() {}

}  // namespace mamba

namespace mamba {

// ---- ParamLayout ----

namespace {
struct LayoutImpl {
    explicit LayoutImpl(const ModelConfig& c) : dims(Dims::of(c)), table(dims) {}
    Dims dims;
    ParamTable table;
    const ParamInfo& at(int index) const {
        if (index < 0 || index >= static_cast<int>(table.params().size()))
            throw std::out_of_range("parameter index " + std::to_string(index) + " is out of range [0, " +
                                    std::to_string(table.params().size()) + ")");
        return table.params()[index];
    }
};
const LayoutImpl& layout(void* p) { return *static_cast<const LayoutImpl*>(p); }
}  // namespace

ParamLayout::ParamLayout(const ModelConfig& config) : impl_(new LayoutImpl(config)) {}
ParamLayout::~ParamLayout() { delete static_cast<LayoutImpl*>(impl_); }
int ParamLayout::count() const { return static_cast<int>(layout(impl_).table.params().size()); }
std::string ParamLayout::name(int index) const { return layout(impl_).at(index).name; }
int ParamLayout::indexOf(const std::string& name) const { return layout(impl_).table.indexOf(name); }
int ParamLayout::rank(int index) const { return static_cast<int>(layout(impl_).at(index).shape.size()); }
int64_t ParamLayout::dim(int index, int axis) const {
    const ParamInfo& p = layout(impl_).at(index);
    if (axis < 0 || axis >= static_cast<int>(p.shape.size()))
        throw std::out_of_range("axis " + std::to_string(axis) + " is out of range");
    return p.shape[axis];
}
int64_t ParamLayout::size(int index) const { return layout(impl_).at(index).size; }
bool ParamLayout::noDecay(int index) const { return layout(impl_).at(index).no_decay; }

}  // namespace mamba
