// The public Sampler class and Model's sampling steps (mamba.h): argument checks at the boundary, then the runtime.
#include "core/errors.h"
#include "runtime/model.h"
#include "runtime/sampler.h"

#include <cmath>
#include <vector>

namespace mamba {

static SamplerImpl* newSamplerImpl(const ModelImpl& m, int batch, int vocab) {
    require(m.backbone.dims.vocab > 0, "this model has no vocabulary (vocab_size = 0)");
    require(batch >= 1 && batch <= (1 << 20), "batch = " + std::to_string(batch) + " must be in [1, 1048576]");
    require(vocab >= 1 && vocab <= m.backbone.dims.vocab,
            "vocab = " + std::to_string(vocab) + " must be in [1, " + std::to_string(m.backbone.dims.vocab) + "]");
    return new SamplerImpl(m.ops, m.device, batch, vocab, m.backbone.dims.vocab);
}

Sampler::Sampler(const Model& model, int batch, int vocab) : impl_(newSamplerImpl(*model.impl(), batch, vocab)) {}
Sampler::~Sampler() { delete impl_; }
int Sampler::batch() const { return impl_->batch; }
int Sampler::vocab() const { return impl_->vocab; }

static void requireCount(const char* what, int64_t got, int64_t expected) {
    if (got != expected)
        fail(std::string(what) + " has " + std::to_string(got) + " entries, expected " + std::to_string(expected));
}

static void checkSamplerRow(const SamplerImpl& s, int row) {
    if (row < 0 || row >= s.batch)
        failRange("row " + std::to_string(row) + " is out of range [0, " + std::to_string(s.batch) + ")");
}

void Sampler::setRow(int row, double temperature, int topK, double topP, double minP, double repetitionPenalty,
                     int64_t seed, const int32_t* history, int64_t historyLength) {
    checkSamplerRow(*impl_, row);
    require(temperature >= 0.0 && std::isfinite(temperature),
            "temperature must be finite and >= 0 (0 = greedy), got " + std::to_string(temperature));
    require(topK >= 0, "topK must be >= 0 (0 = off), got " + std::to_string(topK));
    require(topP > 0.0 && topP <= 1.0, "topP must be in (0, 1] (1 = off), got " + std::to_string(topP));
    require(minP >= 0.0 && minP < 1.0, "minP must be in [0, 1) (0 = off), got " + std::to_string(minP));
    require(repetitionPenalty > 0.0 && std::isfinite(repetitionPenalty),
            "repetitionPenalty must be finite and > 0 (1 = off), got " + std::to_string(repetitionPenalty));
    require(historyLength >= 0, "historyLength must be >= 0, got " + std::to_string(historyLength));
    require(history != nullptr || historyLength == 0, "history is null");
    for (int64_t i = 0; i < historyLength; ++i)
        if (history[i] < 0 || history[i] >= impl_->vocab)
            failRange("history[" + std::to_string(i) + "] = " + std::to_string(history[i]) +
                      " is not a token id in [0, " + std::to_string(impl_->vocab) + ")");
    sampling::RowParams p{temperature, topP, minP, static_cast<float>(repetitionPenalty), topK, 0};
    impl_->setRow(row, p, static_cast<uint64_t>(seed), history, historyLength);
}

int64_t Sampler::randomState(int row) const {
    checkSamplerRow(*impl_, row);
    return static_cast<int64_t>(impl_->randomState(row));
}

void Sampler::sample(const float* logits, int64_t logitsLength, int rowWidth, int32_t* next, int64_t nextLength) {
    SamplerImpl& s = *impl_;
    require(logits != nullptr && next != nullptr, "logits or next is null");
    require(rowWidth >= s.vocab, "rowWidth = " + std::to_string(rowWidth) + " must be >= vocab = " + std::to_string(s.vocab));
    requireLength("logits", logitsLength, static_cast<int64_t>(s.batch) * rowWidth);
    requireCount("next", nextLength, s.batch);
    if (s.ops->capabilities().host) {
        s.ops->sampleTokens(s.args(logits, rowWidth));
    } else {
        Buffer staged(*s.ops, logitsLength);
        s.ops->upload(staged.data(), logits, logitsLength);
        s.ops->sampleTokens(s.args(staged.data(), rowWidth));
        s.ops->synchronize();
    }
    s.collect(next);
}

static void checkSampleStep(const ModelImpl& m, StateImpl& st, SamplerImpl& s, const int32_t* ids, int64_t idsLength,
                            int T, const int32_t* next, int64_t nextLength) {
    m.checkState(st);
    const int vocab = m.backbone.dims.vocab;
    require(vocab > 0, "this model has no vocabulary (vocab_size = 0)");
    require(s.device == m.device && s.model_vocab == vocab && s.ops == m.ops,
            "the sampler was made for another model (each sampler runs on its model's device context)");
    require(s.batch == st.batch, "the sampler has " + std::to_string(s.batch) + " rows but the state " +
                                     std::to_string(st.batch));
    require(T >= 1, "sequence length T = " + std::to_string(T) + " must be >= 1");
    require(ids != nullptr && next != nullptr, "ids or next is null");
    requireCount("ids", idsLength, static_cast<int64_t>(st.batch) * T);
    requireCount("next", nextLength, st.batch);
    for (int64_t i = 0; i < idsLength; ++i)
        if (ids[i] < 0 || ids[i] >= vocab)
            fail("token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) + " is out of range [0, " +
                 std::to_string(vocab) + ")");
}

void Model::stepTokensSample(State& state, Sampler& sampler, const int32_t* ids, int64_t idsLength, int32_t* next,
                             int64_t nextLength) {
    prefillTokensSample(state, sampler, ids, idsLength, 1, next, nextLength);
}

void Model::prefillTokensSample(State& state, Sampler& sampler, const int32_t* ids, int64_t idsLength, int T,
                                int32_t* next, int64_t nextLength) {
    checkSampleStep(*impl_, *state.impl(), *sampler.impl(), ids, idsLength, T, next, nextLength);
    impl_->runSample(*state.impl(), *sampler.impl(), ids, T, next);
}

}  // namespace mamba
