#include "mamba1_model.h"

namespace mamba {

Matrix Mamba1Model::matrix(const Weights& w, int index) const {
    const ParamInfo& p = table_.params()[index];
    return Matrix{w.f32 + p.offset, w.lowp ? w.lowp + p.offset : nullptr, w.dtype, static_cast<int>(p.shape[0]),
                  static_cast<int>(p.shape[1])};
}

bool Mamba1Model::reserve(Backend& be, int64_t R) {
    const int E = dims_.d_inner;
    bool moved = resid_.ensure(be, R * dims_.d_model);
    moved |= normed_.ensure(be, R * dims_.d_model);
    moved |= xz_.ensure(be, R * 2 * E);
    moved |= u_.ensure(be, R * E);
    moved |= xdbl_.ensure(be, R * dims_.xdbl);
    moved |= dt_.ensure(be, R * E);
    moved |= gated_.ensure(be, R * E);
    return moved;
}

void Mamba1Model::run(Backend& be, const Weights& w, float* state, const float* x, int B, int T, float* y,
                      bool allPositions) {
    const int64_t R = static_cast<int64_t>(B) * T;  // rows of every stage, batch-major: r = b*T + t
    reserve(be, R);
    // Residual stream h0: the input projection, or the input itself.
    if (table_.input_w >= 0)
        be.linear(x, dims_.input_dim, R, matrix(w, table_.input_w), at(w, table_.input_b), resid_.data(), dims_.d_model, 0.f);
    else
        be.copy(resid_.data(), x, R * dims_.d_model);
    blocksAndNorm(be, w, state, B, T, y, allPositions);
}

void Mamba1Model::runTokens(Backend& be, const Weights& w, float* state, const int32_t* ids, int B, int T,
                            float* logits, bool allPositions) {
    const int64_t R = static_cast<int64_t>(B) * T;
    reserve(be, R);
    be.embed(at(w, table_.embedding), ids, R, dims_.d_model, resid_.data());
    blocksAndNorm(be, w, state, B, T, normed_.data(), allPositions);
    const int64_t rows = allPositions ? R : B;
    be.linear(normed_.data(), dims_.d_model, rows, matrix(w, table_.lm_head), nullptr, logits, dims_.vocab, 0.f);
}

void Mamba1Model::blocksAndNorm(Backend& be, const Weights& w, float* state, int B, int T, float* y, bool allPositions) {
    const Dims& d = dims_;
    const int64_t R = static_cast<int64_t>(B) * T;
    const int E = d.d_inner;
    float* resid = resid_.data();
    const float* a = w.neg_a;

    for (int i = 0; i < d.n_layers; ++i) {
        const LayerParams& L = table_.layers[i];
        float* conv_hist = state + i * d.layer_state;  // row b adds b * row_state
        float* ssm = conv_hist + d.conv_state;

        be.rmsnorm(resid, d.d_model, at(w, L.norm), R, d.d_model, d.eps, normed_.data(), d.d_model);
        be.linear(normed_.data(), d.d_model, R, matrix(w, L.in_proj), nullptr, xz_.data(), 2 * E, 0.f);

        ConvArgs c{xz_.data(), 2 * E, at(w, L.conv_w), at(w, L.conv_b), conv_hist, d.row_state,
                   u_.data(), E, B, T, E, d.d_conv};
        be.convSilu(c);

        be.linear(u_.data(), E, R, matrix(w, L.x_proj), nullptr, xdbl_.data(), d.xdbl, 0.f);
        be.linear(xdbl_.data(), d.xdbl, R, matrix(w, L.dt_w), at(w, L.dt_b), dt_.data(), E, 0.f);

        ScanArgs s{dt_.data(), a + static_cast<int64_t>(i) * d.ssm_state, xdbl_.data() + d.dt_rank, d.xdbl, u_.data(),
                   xz_.data() + E, 2 * E, at(w, L.d), ssm, d.row_state, gated_.data(), B, T, E, d.d_state};
        be.selectiveScan(s);

        be.linear(gated_.data(), E, R, matrix(w, L.out_proj), nullptr, resid, d.d_model, 1.f);
    }

    const float* norm_f = at(w, table_.norm_f);
    if (allPositions)
        be.rmsnorm(resid, d.d_model, norm_f, R, d.d_model, d.eps, y, d.d_model);
    else  // only the last position of each row
        be.rmsnorm(resid + static_cast<int64_t>(T - 1) * d.d_model, static_cast<int64_t>(T) * d.d_model, norm_f, B,
                   d.d_model, d.eps, y, d.d_model);
}

}  // namespace mamba
