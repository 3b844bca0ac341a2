#include "sampler.h"

#include "core/errors.h"

#include <atomic>
#include <string>

namespace mamba {

namespace {
std::atomic<uint64_t> next_uid{1};
constexpr int64_t kParamFloats = sizeof(sampling::RowParams) / 4;
}  // namespace

SamplerImpl::SamplerImpl(std::shared_ptr<Ops> o, int device, int batch, int vocab, int model_vocab)
    : ops(std::move(o)), device(device), batch(batch), vocab(vocab), model_vocab(model_vocab),
      seen_words((vocab + 31) / 32), uid(next_uid++) {
    params_ = Buffer(*ops, kParamFloats * batch);
    rng_ = Buffer(*ops, 2 * static_cast<int64_t>(batch));
    seen_ = Buffer(*ops, seen_words * batch);
    out_ = Buffer(*ops, 2 * static_cast<int64_t>(batch));
    // The CPU backend keeps its per-row work in thread-local vectors; device backends need the scratch.
    if (!ops->capabilities().host) scratch_ = Buffer(*ops, (sampling::ScratchLayout(vocab).bytes * batch + 3) / 4);
    params_host_.assign(static_cast<size_t>(batch), sampling::RowParams{0.0, 1.0, 0.0, 1.0f, 0, 0});
    ops->upload(params_.data(), reinterpret_cast<const float*>(params_host_.data()), kParamFloats * batch);
    ops->synchronize();
}

void SamplerImpl::setRow(int row, const sampling::RowParams& p, uint64_t seed, const int32_t* history, int64_t n) {
    row_bits_.assign(static_cast<size_t>(seen_words), 0u);
    for (int64_t i = 0; i < n; ++i) row_bits_[history[i] >> 5] |= 1u << (history[i] & 31);
    ops->upload(seen_.data() + seen_words * row, reinterpret_cast<const float*>(row_bits_.data()), seen_words);
    ops->upload(params_.data() + kParamFloats * row, reinterpret_cast<const float*>(&p), kParamFloats);
    params_host_[row] = p;
    ops->upload(rng_.data() + 2 * static_cast<int64_t>(row), reinterpret_cast<const float*>(&seed), 2);
    ops->synchronize();
}

unsigned SamplerImpl::needs() const {
    unsigned n = 0;
    for (const sampling::RowParams& p : params_host_) {
        if (p.temperature == 0.0) continue;
        n |= sampling::kNeedsSampling;
        if (p.top_k > 0) n |= sampling::kNeedsTopK;
        if (p.top_p < 1.0) n |= sampling::kNeedsTopP;
    }
    return n;
}

uint64_t SamplerImpl::randomState(int row) {
    uint64_t s = 0;
    ops->download(reinterpret_cast<float*>(&s), rng_.data() + 2 * static_cast<int64_t>(row), 2);
    return s;
}

SampleArgs SamplerImpl::args(const float* logits, int64_t ld) {
    SampleArgs a;
    a.logits = logits;
    a.ld = ld;
    a.batch = batch;
    a.vocab = vocab;
    a.params = params_.data();
    a.rng = reinterpret_cast<uint64_t*>(rng_.data());
    a.seen = reinterpret_cast<uint32_t*>(seen_.data());
    a.seen_words = seen_words;
    a.out = reinterpret_cast<int32_t*>(out_.data());
    a.err_index = reinterpret_cast<int32_t*>(out_.data()) + batch;
    a.scratch = scratch_.data();
    a.needs = needs();
    return a;
}

void SamplerImpl::collect(int32_t* next) {
    std::vector<int32_t> host(static_cast<size_t>(2 * batch));
    ops->download(reinterpret_cast<float*>(host.data()), out_.data(), 2 * static_cast<int64_t>(batch));
    for (int b = 0; b < batch; ++b) {
        const int32_t id = host[b], at = host[batch + b];
        const std::string where = "row " + std::to_string(b) + ": ";
        if (id == sampling::kErrNaN)
            throw std::runtime_error(where + "logit of token " + std::to_string(at) +
                                     " is NaN: the model produced non-finite activations");
        if (id == sampling::kErrPosInf)
            throw std::runtime_error(where + "logit of token " + std::to_string(at) + " is +Infinity: the model overflowed");
        if (id == sampling::kErrAllNegInf)
            throw std::runtime_error(where + "every one of the " + std::to_string(vocab) +
                                     " logits is -Infinity: no token can be chosen");
        if (id < 0 || id >= vocab) throw std::runtime_error(where + "the sampler returned token " + std::to_string(id));
        next[b] = id;
    }
}

}  // namespace mamba
