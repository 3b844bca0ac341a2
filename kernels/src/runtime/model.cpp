#include "model.h"

#include "core/backends.h"
#include "core/errors.h"

#include <algorithm>
#include <vector>

namespace mamba {

ModelImpl::ModelImpl(const ModelConfig& config, int device, int dtype, int64_t seed)
    : backbone(config), device(device), dtype(dtype), ops(openBackend(device)), runner_(backbone) {
    require(dtype >= DTYPE_F32 && dtype <= DTYPE_F16, "dtype code " + std::to_string(dtype) + " is unknown");
    require(dtype == DTYPE_F32 || ops->capabilities().lowp_storage,
            "this backend stores weights as F32 only (no BF16/F16/TF32 storage)");
    layout_ = StorageLayout::of(backbone.table, dtype);
    storage_ = Buffer(*ops, (layout_.bytes + 3) / 4);
    derived_ = Buffer(*ops, backbone.arch->derivedSize());
    std::vector<float> host(static_cast<size_t>(backbone.table.totalSize()), 0.f);
    backbone.init(seed, host.data());
    if (storesF32()) {
        ops->upload(storage_.data(), host.data(), backbone.table.totalSize());
    } else {
        for (int i = 0; i < backbone.table.count(); ++i) writeParam(i, host.data() + backbone.table[i].offset);
    }
}

ModelImpl::~ModelImpl() { dropGraphs(); }

float* ModelImpl::temp(int64_t n) {
    temp_.ensure(*ops, n);
    return temp_.data();
}

WeightView ModelImpl::weights() {
    WeightView w{&backbone.table, &layout_, reinterpret_cast<const char*>(storage_.data()), derived_.data()};
    if (derived_stale_) {
        backbone.arch->derive(*ops, w, derived_.data());
        derived_stale_ = false;
    }
    return w;
}

void ModelImpl::readParam(int index, float* host) {
    const ParamInfo& p = backbone.table[index];
    char* at = reinterpret_cast<char*>(storage_.data()) + layout_.byte_offset[index];
    if (!layout_.lowp(p)) {
        ops->download(host, reinterpret_cast<float*>(at), p.size);
        return;
    }
    float* t = temp(p.size);
    ops->fromLowPrecision(at, dtype, t, p.size);
    ops->download(host, t, p.size);
    temp_ = Buffer();  // no f32 copy outlives the call: a BF16 model holds ~2 bytes per parameter
}

void ModelImpl::writeParam(int index, const float* host) {
    const ParamInfo& p = backbone.table[index];
    char* at = reinterpret_cast<char*>(storage_.data()) + layout_.byte_offset[index];
    if (layout_.lowp(p)) {
        float* t = temp(p.size);
        ops->upload(t, host, p.size);
        ops->toLowPrecision(t, at, p.size, dtype);
        temp_ = Buffer();
    } else {
        ops->upload(reinterpret_cast<float*>(at), host, p.size);
    }
    if (masters) ops->upload(masters + p.offset, host, p.size);
    derived_stale_ = true;
}

void ModelImpl::setGraphs(bool on) {
    if (!on) dropGraphs();
    graphs_ = on && ops->capabilities().graphs;
}

void ModelImpl::setGemmMode(int mode) {
    require(mode >= GEMM_DETERMINISTIC && mode <= GEMM_CUBLAS_PEDANTIC,
            "GEMM mode code " + std::to_string(mode) + " is unknown");
    if (mode != gemm_mode_) dropGraphs();  // a graph records the kernels of the mode it was captured in
    gemm_mode_ = mode;
}

GemmMode ModelImpl::inferenceMode() const {
    switch (gemm_mode_) {
        case GEMM_DETERMINISTIC: return GemmMode::Deterministic;
        case GEMM_CUBLAS_PEDANTIC: return GemmMode::Pedantic;
        default: return GemmMode::Fast;
    }
}

GemmMode ModelImpl::trainingMode() const {
    const GemmMode m = inferenceMode();
    return m == GemmMode::Fast ? GemmMode::Reproducible : m;
}

void ModelImpl::dropGraphs() noexcept {
    for (auto& g : step_graphs_) ops->destroyGraph(g.second);
    step_graphs_.clear();
    for (auto& g : sample_graphs_) ops->destroyGraph(g.second.graph);
    sample_graphs_.clear();
}

void ModelImpl::checkState(const StateImpl& s) const {
    require(s.device == device, "the state lives on another device than the model");
    require(s.arch == backbone.arch->code() && s.n_layers == backbone.dims.n_layers &&
                s.layer_state == backbone.dims.layer_state,
            "the state was made for a model of another shape");
}

void ModelImpl::launch(float* state, Input staged, int B, int T, float* out, bool allPositions) {
    ForwardIO io;
    io.x = staged.x;
    io.ids = staged.ids;
    io.B = B;
    io.T = T;
    io.out = out;
    io.allPositions = allPositions;
    io.state = state;
    runner_.forward(*ops, weights(), io, inferenceMode());
}

bool ModelImpl::reserve(int B, int T, int64_t inN, int64_t outN) {
    bool moved = runner_.reserve(*ops, B, T, BufferUse::Inference);
    moved |= x_stage_.ensure(*ops, inN);
    moved |= y_stage_.ensure(*ops, outN);
    if (moved) dropGraphs();  // a captured step would read the old buffers
    return moved;
}

// A decode step replayed from a captured graph: staging and workspace pointers are fixed at capture, so
// anything that moves them drops the graphs first. Host copies stay outside the graph, so a replay runs
// exactly the eager kernels (bit-identical results).
void ModelImpl::runGraphStep(StateImpl& s, Input in, float* out) {
    const int B = s.batch;
    const BackboneDims& d = backbone.dims;
    const int64_t inN = in.ids ? B : static_cast<int64_t>(B) * d.in_width;
    const int64_t outN = static_cast<int64_t>(B) * (in.ids ? d.vocab : d.d_model);
    reserve(B, 1, inN, outN);
    weights();  // derived weights are refreshed eagerly, outside the graph
    ops->upload(x_stage_.data(), in.ids ? reinterpret_cast<const float*>(in.ids) : in.x, inN);
    const Input staged = in.ids ? Input{nullptr, reinterpret_cast<const int32_t*>(x_stage_.data())}
                                : Input{x_stage_.data(), nullptr};
    // Tokens and features capture different launches: the key tells them apart by the batch's sign.
    const auto key = std::make_pair(static_cast<const float*>(s.data.data()), in.ids ? -B : B);
    auto it = step_graphs_.find(key);
    if (it == step_graphs_.end()) {
        ops->beginCapture();
        try {
            launch(s.data.data(), staged, B, 1, y_stage_.data(), false);
        } catch (...) {
            ops->destroyGraph(ops->endCapture());
            throw;
        }
        it = step_graphs_.emplace(key, ops->endCapture()).first;
    }
    ops->replay(it->second);
    ops->download(out, y_stage_.data(), outN);
}

void ModelImpl::run(StateImpl* state, Input in, int B, int T, float* out, bool allPositions) {
    const BackboneDims& d = backbone.dims;
    float* st;
    if (state) {
        st = state->data.data();
    } else {
        scratch_state_.ensure(*ops, d.row_state * B);
        ops->zero(scratch_state_.data(), d.row_state * B);
        st = scratch_state_.data();
    }
    if (ops->capabilities().host) {
        launch(st, in, B, T, out, allPositions);
        return;
    }
    if (graphs_ && state && T == 1 && !allPositions) {
        runGraphStep(*state, in, out);
        return;
    }
    const int64_t inN = static_cast<int64_t>(B) * T * (in.ids ? 1 : d.in_width);
    const int64_t outN = static_cast<int64_t>(B) * (allPositions ? T : 1) * (in.ids ? d.vocab : d.d_model);
    reserve(B, T, inN, outN);
    ops->upload(x_stage_.data(), in.ids ? reinterpret_cast<const float*>(in.ids) : in.x, inN);
    const Input staged = in.ids ? Input{nullptr, reinterpret_cast<const int32_t*>(x_stage_.data())}
                                : Input{x_stage_.data(), nullptr};
    launch(st, staged, B, T, y_stage_.data(), allPositions);
    ops->download(out, y_stage_.data(), outN);
}

// Step (or prefill) + sampling: the logits stay in backend memory; the sampler op writes ids there and only those
// are downloaded. With graphs (T = 1), the capture holds the step's kernels and the sampler's, keyed by the state's
// memory and the sampler's uid (a state row count never changes, and a sampler's buffers never move), so each
// replay is one launch; the ids upload and download stay outside, as for plain steps.
void ModelImpl::runSample(StateImpl& s, SamplerImpl& smp, const int32_t* ids, int T, int32_t* next) {
    const BackboneDims& d = backbone.dims;
    const int B = s.batch;
    const int64_t inN = static_cast<int64_t>(B) * T, outN = static_cast<int64_t>(B) * d.vocab;
    if (ops->capabilities().host) {
        y_stage_.ensure(*ops, outN);
        launch(s.data.data(), Input{nullptr, ids}, B, T, y_stage_.data(), false);
        ops->sampleTokens(smp.args(y_stage_.data(), d.vocab));
        smp.collect(next);
        return;
    }
    reserve(B, T, inN, outN);
    weights();  // derived weights are refreshed eagerly, outside any graph
    ops->upload(x_stage_.data(), reinterpret_cast<const float*>(ids), inN);
    const Input staged{nullptr, reinterpret_cast<const int32_t*>(x_stage_.data())};
    if (graphs_ && T == 1) {
        const auto key = std::make_pair(static_cast<const float*>(s.data.data()), B);
        auto it = sample_graphs_.find(key);
        const SampleArgs sa = smp.args(y_stage_.data(), d.vocab);
        if (it != sample_graphs_.end() && (it->second.sampler_uid != smp.uid || it->second.needs != sa.needs)) {
            ops->destroyGraph(it->second.graph);
            sample_graphs_.erase(it);
            it = sample_graphs_.end();
        }
        if (it == sample_graphs_.end()) {
            ops->beginCapture();
            try {
                launch(s.data.data(), staged, B, 1, y_stage_.data(), false);
                ops->sampleTokens(sa);
            } catch (...) {
                ops->destroyGraph(ops->endCapture());
                throw;
            }
            it = sample_graphs_.emplace(key, SampleGraph{smp.uid, sa.needs, ops->endCapture()}).first;
        }
        ops->replay(it->second.graph);
    } else {
        launch(s.data.data(), staged, B, T, y_stage_.data(), false);
        ops->sampleTokens(smp.args(y_stage_.data(), d.vocab));
    }
    smp.collect(next);
}

}  // namespace mamba
