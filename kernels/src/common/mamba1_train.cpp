#include "mamba1_train.h"

#include <stdexcept>

namespace mamba {

Matrix Mamba1Train::matrix(const Weights& w, int index) const {
    const ParamInfo& p = table_.params()[index];
    return Matrix{w.f32 + p.offset, w.lowp ? w.lowp + p.offset : nullptr, w.dtype, static_cast<int>(p.shape[0]),
                  static_cast<int>(p.shape[1])};
}

Matrix Mamba1Train::master(const Weights& w, int index) const {
    const ParamInfo& p = table_.params()[index];
    return Matrix{w.f32 + p.offset, nullptr, DTYPE_F32, static_cast<int>(p.shape[0]), static_cast<int>(p.shape[1])};
}

void Mamba1Train::reserve(Backend& be, int B, int T) {
    const Dims& d = dims_;
    const int64_t R = static_cast<int64_t>(B) * T;
    const int E = d.d_inner;
    const int64_t ckpt = static_cast<int64_t>(B) * ((T + kScanChunk - 1) / kScanChunk) * d.ssm_state;
    if (R > rows_ || ckpt > ckpt_ || static_cast<int64_t>(resid_.size()) != d.n_layers + 1) {
        resid_.clear();
        tape_.clear();
        for (int i = 0; i <= d.n_layers; ++i) resid_.emplace_back(be, R * d.d_model);
        for (int i = 0; i < d.n_layers; ++i) {
            LayerTape t;
            t.normed = Buffer(be, R * d.d_model);
            t.xz = Buffer(be, R * 2 * E);
            t.u = Buffer(be, R * E);
            t.xdbl = Buffer(be, R * d.xdbl);
            t.dt = Buffer(be, R * E);
            t.gated = Buffer(be, R * E);
            t.checkpoints = Buffer(be, ckpt);
            tape_.push_back(std::move(t));
        }
        dresid_ = Buffer(be, R * d.d_model);
        dnormed_ = Buffer(be, R * d.d_model);
        dxz_ = Buffer(be, R * 2 * E);
        du_ = Buffer(be, R * E);
        ddt_ = Buffer(be, R * E);
        dxdbl_ = Buffer(be, R * d.xdbl);
        dgated_ = Buffer(be, R * E);
        rows_ = R;
        ckpt_ = ckpt;
    }
    work_state_.ensure(be, d.row_state * B);
}

void Mamba1Train::forward(Backend& be, const Weights& w, const float* start, const float* x, int B, int T, float* y) {
    const Dims& d = dims_;
    reserve(be, B, T);
    B_ = B;
    T_ = T;
    x_ = x;
    start_ = start;
    const int64_t R = static_cast<int64_t>(B) * T;  // rows, batch-major: r = b·T + t
    const int E = d.d_inner;
    float* state = work_state_.data();
    be.copy(state, start, d.row_state * B);

    // The residual stream entering layer 0: the input projection, or the input itself.
    if (table_.input_w >= 0)
        be.linearDeterministic(x, d.input_dim, R, matrix(w, table_.input_w), at(w, table_.input_b), resid_[0].data(),
                               d.d_model, 0.f);
    else
        be.copy(resid_[0].data(), x, R * d.d_model);

    for (int i = 0; i < d.n_layers; ++i) {
        const LayerParams& L = table_.layers[i];
        LayerTape& tp = tape_[i];
        float* conv_hist = state + i * d.layer_state;  // row b adds b · row_state
        float* ssm = conv_hist + d.conv_state;

        be.rmsnorm(resid_[i].data(), d.d_model, at(w, L.norm), R, d.d_model, d.eps, tp.normed.data(), d.d_model);
        be.linearDeterministic(tp.normed.data(), d.d_model, R, matrix(w, L.in_proj), nullptr, tp.xz.data(), 2 * E, 0.f);

        ConvArgs c{tp.xz.data(), 2 * E, at(w, L.conv_w), at(w, L.conv_b), conv_hist, d.row_state,
                   tp.u.data(), E, B, T, E, d.d_conv};
        be.convSilu(c);

        be.linearDeterministic(tp.u.data(), E, R, matrix(w, L.x_proj), nullptr, tp.xdbl.data(), d.xdbl, 0.f);
        be.linearDeterministic(tp.xdbl.data(), d.xdbl, R, matrix(w, L.dt_w), at(w, L.dt_b), tp.dt.data(), E, 0.f);

        ScanArgs s{tp.dt.data(), w.neg_a + static_cast<int64_t>(i) * d.ssm_state, tp.xdbl.data() + d.dt_rank, d.xdbl,
                   tp.u.data(), tp.xz.data() + E, 2 * E, at(w, L.d), ssm, d.row_state, tp.gated.data(), B, T, E,
                   d.d_state};
        be.selectiveScanTrain(s, tp.checkpoints.data(), kScanChunk);

        // resid_[i+1] = resid_[i] + out_proj(gated)
        be.copy(resid_[i + 1].data(), resid_[i].data(), R * d.d_model);
        be.linearDeterministic(tp.gated.data(), E, R, matrix(w, L.out_proj), nullptr, resid_[i + 1].data(), d.d_model,
                               1.f);
    }
    be.rmsnorm(resid_[d.n_layers].data(), d.d_model, at(w, table_.norm_f), R, d.d_model, d.eps, y, d.d_model);
}

void Mamba1Train::backward(Backend& be, const Weights& w, const float* dy, float* grads, float* dx) {
    const Dims& d = dims_;
    if (!x_) throw std::logic_error("backward without a forward");
    const int B = B_, T = T_;
    const int64_t R = static_cast<int64_t>(B) * T;
    const int E = d.d_inner;
    float* dresid = dresid_.data();

    // Final norm: dresid = ∂L/∂(residual stream after the last layer).
    be.rmsnormBackward(resid_[d.n_layers].data(), d.d_model, at(w, table_.norm_f), dy, d.d_model, R, d.d_model, d.eps,
                       dresid, d.d_model, 0.f, grad(grads, table_.norm_f));

    for (int i = d.n_layers - 1; i >= 0; --i) {
        const LayerParams& L = table_.layers[i];
        LayerTape& tp = tape_[i];
        const float* start_conv = start_ + i * d.layer_state;

        // out_proj (the residual passes dresid through unchanged).
        be.linearBackward(dresid, d.d_model, R, master(w, L.out_proj), dgated_.data(), E, 0.f);
        be.linearWeightGrad(dresid, d.d_model, tp.gated.data(), E, R, d.d_model, E, grad(grads, L.out_proj), nullptr);

        // gate + D skip + scan + softplus: ddt, dB/dC (into dxdbl), du, dz (into dxz), dA_log, dD.
        ScanBackwardArgs sb{tp.dt.data(), w.neg_a + static_cast<int64_t>(i) * d.ssm_state, tp.xdbl.data() + d.dt_rank,
                            d.xdbl, tp.u.data(), tp.xz.data() + E, 2 * E, at(w, L.d), tp.checkpoints.data(), kScanChunk,
                            dgated_.data(), ddt_.data(), dxdbl_.data() + d.dt_rank, d.xdbl, du_.data(),
                            dxz_.data() + E, 2 * E, grad(grads, L.a_log), grad(grads, L.d), B, T, E, d.d_state};
        be.selectiveScanBackward(sb);

        // dt_proj: dW_dt += ddtᵀ·δ, db_dt += Σ ddt, dδ = ddt·W_dt.
        be.linearWeightGrad(ddt_.data(), E, tp.xdbl.data(), d.xdbl, R, E, d.dt_rank, grad(grads, L.dt_w),
                            grad(grads, L.dt_b));
        be.linearBackward(ddt_.data(), E, R, master(w, L.dt_w), dxdbl_.data(), d.xdbl, 0.f);

        // x_proj: dW_x += dxdblᵀ·u, du += dxdbl·W_x.
        be.linearWeightGrad(dxdbl_.data(), d.xdbl, tp.u.data(), E, R, d.xdbl, E, grad(grads, L.x_proj), nullptr);
        be.linearBackward(dxdbl_.data(), d.xdbl, R, master(w, L.x_proj), du_.data(), E, 1.f);

        // conv + SiLU: dx (into dxz's first half), dconv_w, dconv_b.
        ConvBackwardArgs cb{tp.xz.data(), 2 * E, start_conv, d.row_state, at(w, L.conv_w), at(w, L.conv_b), du_.data(),
                            E, dxz_.data(), 2 * E, grad(grads, L.conv_w), grad(grads, L.conv_b), B, T, E, d.d_conv};
        be.convSiluBackward(cb);

        // in_proj: dW_in += dxzᵀ·normed, dnormed = dxz·W_in.
        be.linearWeightGrad(dxz_.data(), 2 * E, tp.normed.data(), d.d_model, R, 2 * E, d.d_model, grad(grads, L.in_proj),
                            nullptr);
        be.linearBackward(dxz_.data(), 2 * E, R, master(w, L.in_proj), dnormed_.data(), d.d_model, 0.f);

        // Layer norm, added to the residual gradient.
        be.rmsnormBackward(resid_[i].data(), d.d_model, at(w, L.norm), dnormed_.data(), d.d_model, R, d.d_model, d.eps,
                           dresid, d.d_model, 1.f, grad(grads, L.norm));
    }

    // Input projection, then the input itself.
    if (table_.input_w >= 0) {
        be.linearWeightGrad(dresid, d.d_model, x_, d.input_dim, R, d.d_model, d.input_dim, grad(grads, table_.input_w),
                            grad(grads, table_.input_b));
        if (dx) be.linearBackward(dresid, d.d_model, R, master(w, table_.input_w), dx, d.input_dim, 0.f);
    } else if (dx) {
        be.copy(dx, dresid, R * d.d_model);
    }
}

}  // namespace mamba
