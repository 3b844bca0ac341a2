#include "linear_head.h"

#include "core/rng.h"

#include <cmath>
#include <vector>

namespace mamba {

namespace {
int64_t aligned(int64_t n) { return (n + 15) / 16 * 16; }
}  // namespace

LinearHead::LinearHead(Ops& ops, int vocab, int d_model, int64_t rows, int64_t seed)
    : vocab(vocab), d_model(d_model), bias_offset(aligned(static_cast<int64_t>(vocab) * d_model)) {
    const int64_t size = bias_offset + aligned(vocab);
    w = Buffer(ops, size);
    g = Buffer(ops, size);
    m = Buffer(ops, size);
    v = Buffer(ops, size);
    logits = Buffer(ops, rows * vocab);
    targets = Buffer(ops, rows);
    row_loss = Buffer(ops, rows);
    row_correct = Buffer(ops, rows);
    std::vector<float> host(static_cast<size_t>(size), 0.f);
    Rng(static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ull + 0x6C6D5F68656164ull)
        .fillUniform(host.data(), weightSize(), 1.0 / std::sqrt(static_cast<double>(d_model)));
    ops.upload(w.data(), host.data(), size);
}

void LinearHead::loss(Ops& ops, const float* y, int64_t rows, int ignoreIndex, float scale, bool grad, int64_t counted,
                      StepStats& st, GemmMode mode) {
    ops.gemm(Gemm::forward(mode, y, d_model, rows, matrix(), bias(), logits.data(), vocab, 0.f));
    const float s = counted > 0 ? scale / static_cast<float>(counted) : 0.f;
    ops.crossEntropy(CrossEntropyArgs{logits.data(), rows, vocab, reinterpret_cast<const int32_t*>(targets.data()),
                                      ignoreIndex, s, row_loss.data(), row_correct.data(),
                                      grad ? logits.data() : nullptr});
    std::vector<float> loss(static_cast<size_t>(rows)), correct(static_cast<size_t>(rows));
    ops.download(loss.data(), row_loss.data(), rows);
    ops.download(correct.data(), row_correct.data(), rows);
    double l = 0, c = 0;
    for (int64_t r = 0; r < rows; ++r) {  // in row order: deterministic
        l += loss[r];
        c += correct[r];
    }
    st.has_loss = true;
    st.counted = counted;
    st.loss = counted > 0 ? static_cast<float>(l / counted) : 0.f;
    st.accuracy = counted > 0 ? static_cast<float>(c / counted) : 0.f;
}

void LinearHead::forward(Ops& ops, const float* y, int64_t rows, GemmMode mode) {
    ops.gemm(Gemm::forward(mode, y, d_model, rows, matrix(), bias(), logits.data(), vocab, 0.f));
}

void LinearHead::backward(Ops& ops, const float* y, int64_t rows, float* dy) {
    ops.gemm(Gemm::weightGrad(GemmMode::Reproducible, DTYPE_F32, logits.data(), vocab, y, d_model, rows, vocab, d_model, g.data(), g.data() + bias_offset));
    ops.gemm(Gemm::backwardData(GemmMode::Reproducible, logits.data(), vocab, rows, matrix(), dy, d_model, 0.f));
}

}  // namespace mamba
