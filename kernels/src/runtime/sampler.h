// The runtime behind mamba::Sampler: per-row sampling settings, SplitMix64 states and seen-token sets in the
// model's backend memory, the op's scratch, and the ids it writes. Argument checks happen before (src/api).
#pragma once

#include "core/buffer.h"
#include "core/sampling.h"

#include <memory>
#include <vector>

namespace mamba {

class SamplerImpl {
public:
    SamplerImpl(std::shared_ptr<Ops> ops, int device, int batch, int vocab, int model_vocab);

    /** Configures a row: settings, the random stream's seed, and the history marked as seen (ids < vocab). */
    void setRow(int row, const sampling::RowParams& p, uint64_t seed, const int32_t* history, int64_t n);
    /** The op's arguments for logits [batch, ld] in backend memory. */
    SampleArgs args(const float* logits, int64_t ld);
    /** Downloads the sampled ids into next [batch] (host); throws for a row the op rejected. */
    void collect(int32_t* next);
    /** sampling::kNeeds* bits of the rows' current settings. */
    unsigned needs() const;
    /** The random state of a row (after its draws so far). */
    uint64_t randomState(int row);

    const std::shared_ptr<Ops> ops;  // declared first: outlives the buffers
    const int device, batch, vocab, model_vocab;
    const int64_t seen_words;
    /** Unique per sampler of the process: keys the CUDA graphs that captured this sampler's buffers. */
    const uint64_t uid;

private:
    Buffer params_, rng_, seen_, out_, scratch_;  // out_: [batch] ids then [batch] error indices
    std::vector<uint32_t> row_bits_;
    std::vector<sampling::RowParams> params_host_;  // what params_ holds
};

}  // namespace mamba
