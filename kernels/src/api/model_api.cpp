// The public Model and State classes (mamba.h): argument checks at the boundary, then the model runtime.
#include "core/errors.h"
#include "runtime/model.h"

#include <vector>

namespace mamba {

// ---- Model ----

Model::Model(const ModelConfig& config, int device, int dtype, int64_t seed)
    : impl_(new ModelImpl(config, device, dtype, seed)) {}
Model::~Model() { delete impl_; }

ModelConfig Model::config() const { return impl_->backbone.config; }
int Model::device() const { return impl_->device; }
int Model::dtype() const { return impl_->dtype; }
int Model::inputWidth() const { return impl_->backbone.dims.in_width; }
void Model::setCudaGraphs(bool enabled) { impl_->setGraphs(enabled); }
bool Model::cudaGraphs() const { return impl_->graphs(); }
void Model::setGemmMode(int mode) { impl_->setGemmMode(mode); }
int Model::gemmMode() const { return impl_->gemmMode(); }
void* Model::cudaStream() const { return impl_->ops->nativeStream(); }
int Model::paramCount() const { return impl_->backbone.table.count(); }
int64_t Model::paramTotalSize() const { return impl_->backbone.table.totalSize(); }
std::string Model::paramName(int index) const { return impl_->backbone.table.at(index).name; }
int Model::paramIndex(const std::string& name) const { return impl_->backbone.table.indexOf(name); }
int Model::paramRank(int index) const { return static_cast<int>(impl_->backbone.table.at(index).shape.size()); }
int64_t Model::paramDim(int index, int axis) const {
    const ParamInfo& p = impl_->backbone.table.at(index);
    if (axis < 0 || axis >= static_cast<int>(p.shape.size())) failRange("axis " + std::to_string(axis) + " is out of range [0, " + std::to_string(p.shape.size()) + ")");
    return p.shape[axis];
}
int64_t Model::paramSize(int index) const { return impl_->backbone.table.at(index).size; }

void Model::readParam(int index, float* dst, int64_t dstLength) const {
    const ParamInfo& p = impl_->backbone.table.at(index);
    require(dst != nullptr, "destination is null");
    requireLength(p.name.c_str(), dstLength, p.size);
    impl_->readParam(index, dst);
}

void Model::writeParam(int index, const float* src, int64_t srcLength) {
    const ParamInfo& p = impl_->backbone.table.at(index);
    require(src != nullptr, "source is null");
    requireLength(p.name.c_str(), srcLength, p.size);
    impl_->writeParam(index, src);
}

void Model::step(State& state, const float* x, int64_t xLength, float* y, int64_t yLength) {
    prefill(state, x, xLength, 1, y, yLength);
}

void Model::prefill(State& state, const float* x, int64_t xLength, int T, float* y, int64_t yLength) {
    StateImpl& s = *state.impl();
    const BackboneDims& d = impl_->backbone.dims;
    impl_->checkState(s);
    require(T >= 1, "sequence length T = " + std::to_string(T) + " must be >= 1");
    require(x != nullptr, "input is null");
    requireLength("input", xLength, static_cast<int64_t>(s.batch) * T * d.in_width);
    if (y == nullptr) {
        require(yLength == 0, "output is null");
        // The backbone always writes the last position; give it somewhere to go.
        std::vector<float> sink(static_cast<size_t>(s.batch) * d.d_model);
        impl_->run(&s, ModelImpl::Input{x, nullptr}, s.batch, T, sink.data(), false);
        return;
    }
    requireLength("output", yLength, static_cast<int64_t>(s.batch) * d.d_model);
    impl_->run(&s, ModelImpl::Input{x, nullptr}, s.batch, T, y, false);
}

static void checkBatch(const ModelImpl& m, State* state, int B, int T) {
    require(B >= 1 && T >= 1, "batch and sequence length must be >= 1 (got B = " + std::to_string(B) +
                                  ", T = " + std::to_string(T) + ")");
    if (!state) return;
    m.checkState(*state->impl());
    require(state->impl()->batch == B, "the state holds " + std::to_string(state->impl()->batch) +
                                           " rows but the input has B = " + std::to_string(B));
}

void Model::forward(State* state, const float* x, int64_t xLength, int B, int T, float* y, int64_t yLength) {
    const BackboneDims& d = impl_->backbone.dims;
    checkBatch(*impl_, state, B, T);
    require(x != nullptr && y != nullptr, "input or output is null");
    requireLength("input", xLength, static_cast<int64_t>(B) * T * d.in_width);
    requireLength("output", yLength, static_cast<int64_t>(B) * T * d.d_model);
    impl_->run(state ? state->impl() : nullptr, ModelImpl::Input{x, nullptr}, B, T, y, true);
}

int Model::vocabSize() const { return impl_->backbone.dims.vocab; }

/** Token ids index the embedding: checked here, the kernels trust them. */
static void checkIds(const ModelImpl& m, const int32_t* ids, int64_t n) {
    const int vocab = m.backbone.dims.vocab;
    require(vocab > 0, "this model has no vocabulary (vocab_size = 0)");
    require(ids != nullptr, "ids are null");
    for (int64_t i = 0; i < n; ++i)
        if (ids[i] < 0 || ids[i] >= vocab)
            fail("token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) + " is out of range [0, " +
                 std::to_string(vocab) + ")");
}

void Model::stepTokens(State& state, const int32_t* ids, int64_t idsLength, float* logits, int64_t logitsLength) {
    prefillTokens(state, ids, idsLength, 1, logits, logitsLength);
}

void Model::prefillTokens(State& state, const int32_t* ids, int64_t idsLength, int T, float* logits,
                          int64_t logitsLength) {
    StateImpl& s = *state.impl();
    impl_->checkState(s);
    require(impl_->backbone.dims.vocab > 0, "this model has no vocabulary (vocab_size = 0)");
    require(T >= 1, "sequence length T = " + std::to_string(T) + " must be >= 1");
    require(ids != nullptr && logits != nullptr, "ids or logits is null");
    requireLength("ids", idsLength, static_cast<int64_t>(s.batch) * T);
    requireLength("logits", logitsLength, static_cast<int64_t>(s.batch) * impl_->backbone.dims.vocab);
    checkIds(*impl_, ids, idsLength);
    impl_->run(&s, ModelImpl::Input{nullptr, ids}, s.batch, T, logits, false);
}

void Model::forwardTokens(State* state, const int32_t* ids, int64_t idsLength, int B, int T, float* logits,
                          int64_t logitsLength) {
    require(impl_->backbone.dims.vocab > 0, "this model has no vocabulary (vocab_size = 0)");
    checkBatch(*impl_, state, B, T);
    require(ids != nullptr && logits != nullptr, "ids or logits is null");
    requireLength("ids", idsLength, static_cast<int64_t>(B) * T);
    requireLength("logits", logitsLength, static_cast<int64_t>(B) * T * impl_->backbone.dims.vocab);
    checkIds(*impl_, ids, idsLength);
    impl_->run(state ? state->impl() : nullptr, ModelImpl::Input{nullptr, ids}, B, T, logits, true);
}

// ---- State ----

static StateImpl* newStateImpl(const ModelImpl& m, int batch) {
    require(batch >= 1 && batch <= (1 << 20), "batch = " + std::to_string(batch) + " must be in [1, 1048576]");
    return new StateImpl(m.ops, m.device, m.backbone.dims, m.backbone.arch->code(), batch);
}

// A state may be used by any model of its shape on its device, and models run on their own contexts (streams):
// every state operation completes before it returns, so no other context can see it half done.
State::State(const Model& model, int batch) : impl_(newStateImpl(*model.impl(), batch)) { impl_->ops->synchronize(); }
State::~State() { delete impl_; }
int State::batch() const { return impl_->batch; }
int64_t State::rowSize() const { return impl_->row_state; }
void State::reset() {
    impl_->ops->zero(impl_->data.data(), impl_->data.size());
    impl_->ops->synchronize();
}

static void checkRow(const StateImpl& s, int row) {
    if (row < 0 || row >= s.batch)
        failRange("row " + std::to_string(row) + " is out of range [0, " + std::to_string(s.batch) + ")");
}

void State::resetRow(int row) {
    checkRow(*impl_, row);
    impl_->ops->zero(impl_->data.data() + row * impl_->row_state, impl_->row_state);
    impl_->ops->synchronize();
}

void State::readRow(int row, float* dst, int64_t dstLength) const {
    checkRow(*impl_, row);
    require(dst != nullptr, "destination is null");
    requireLength("state row", dstLength, impl_->row_state);
    impl_->ops->download(dst, impl_->data.data() + row * impl_->row_state, impl_->row_state);
}

void State::writeRow(int row, const float* src, int64_t srcLength) {
    checkRow(*impl_, row);
    require(src != nullptr, "source is null");
    requireLength("state row", srcLength, impl_->row_state);
    impl_->ops->upload(impl_->data.data() + row * impl_->row_state, src, impl_->row_state);
    impl_->ops->synchronize();
}

void State::copyFrom(const State& other) {
    const StateImpl& o = *other.impl_;
    require(o.device == impl_->device && o.arch == impl_->arch && o.row_state == impl_->row_state &&
                o.layer_state == impl_->layer_state && o.batch == impl_->batch,
            "copyFrom needs a state of the same model shape, device and batch");
    // Another context may still be writing the source: finish its work before this context reads it.
    o.ops->synchronize();
    impl_->ops->copy(impl_->data.data(), o.data.data(), impl_->data.size());
    impl_->ops->synchronize();
}

void State::copyRowFrom(int row, const State& other, int otherRow) {
    const StateImpl& o = *other.impl_;
    checkRow(*impl_, row);
    checkRow(o, otherRow);
    require(o.device == impl_->device && o.arch == impl_->arch && o.row_state == impl_->row_state &&
                o.layer_state == impl_->layer_state,
            "copyRowFrom needs a state of the same model shape and device");
    if (&o == impl_ && row == otherRow) return;
    o.ops->synchronize();  // as in copyFrom: the source's context may still be writing it
    impl_->ops->copy(impl_->data.data() + row * impl_->row_state, o.data.data() + otherRow * o.row_state,
                     impl_->row_state);
    impl_->ops->synchronize();
}

}  // namespace mamba
