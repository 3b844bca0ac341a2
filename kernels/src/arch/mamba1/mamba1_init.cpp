// Mamba-1's tensors and their initialisation (mamba_simple.Mamba.__init__ and _init_weights).
#include "mamba1.h"

#include "core/rng.h"

#include <stdexcept>

#include <algorithm>
#include <cmath>

namespace mamba {

Mamba1Dims Mamba1Dims::of(const ModelConfig& c) {
    Mamba1Dims d;
    d.d_model = c.d_model;
    d.d_state = c.d_state;
    d.d_conv = c.d_conv;
    d.d_inner = c.expand * c.d_model;
    d.dt_rank = c.dt_rank > 0 ? c.dt_rank : (c.d_model + 15) / 16;
    d.xdbl = d.dt_rank + 2 * c.d_state;
    d.n_layers = c.n_layers;
    d.eps = c.norm_eps;
    d.conv_state = static_cast<int64_t>(d.d_inner) * (d.d_conv - 1);
    d.ssm_state = static_cast<int64_t>(d.d_inner) * d.d_state;
    return d;
}

void Mamba1::declareLayer(ParamTable& t, int layer) {
    const std::string p = "backbone.layers." + std::to_string(layer) + ".";
    const int64_t D = d_.d_model, E = d_.d_inner;
    Layer l;
    l.norm = t.add(p + "norm.weight", {D}, false, true);
    l.in_proj = t.add(p + "mixer.in_proj.weight", {2 * E, D}, true, false);
    l.conv_w = t.add(p + "mixer.conv1d.weight", {E, 1, d_.d_conv}, false, false);
    l.conv_b = t.add(p + "mixer.conv1d.bias", {E}, false, true);
    l.x_proj = t.add(p + "mixer.x_proj.weight", {d_.xdbl, E}, true, false);
    l.dt_w = t.add(p + "mixer.dt_proj.weight", {E, d_.dt_rank}, true, false);
    l.dt_b = t.add(p + "mixer.dt_proj.bias", {E}, false, true);
    l.a_log = t.add(p + "mixer.A_log", {E, d_.d_state}, false, true);
    l.d = t.add(p + "mixer.D", {E}, false, true);
    l.out_proj = t.add(p + "mixer.out_proj.weight", {D, E}, true, false);
    if (static_cast<int>(layers_.size()) != layer) throw std::logic_error("layers must be declared in order");
    layers_.push_back(l);
}

void Mamba1::initLayer(const ParamTable& t, int layer, int64_t seed, float* host) const {
    const Layer& L = layers_.at(layer);
    auto ptr = [&](int index) { return host + t[index].offset; };
    auto size = [&](int index) { return t[index].size; };
    auto fill = [&](int index, float v) { std::fill(ptr(index), ptr(index) + size(index), v); };
    // nn.Linear / Conv1d default: U(±1/√fan_in). Each tensor draws from its own stream.
    auto uniform = [&](int index, double fan_in) {
        Rng::stream(seed, index + 1).fillUniform(ptr(index), size(index), 1.0 / std::sqrt(fan_in));
    };

    fill(L.norm, 1.f);
    uniform(L.in_proj, d_.d_model);
    uniform(L.conv_w, d_.d_conv);  // depthwise: fan_in = d_conv for weight and bias
    uniform(L.conv_b, d_.d_conv);
    uniform(L.x_proj, d_.d_inner);
    uniform(L.dt_w, d_.dt_rank);
    // Δ bias: Δ0 = exp(U[ln dt_min, ln dt_max]) ≥ floor, stored as softplus⁻¹(Δ0) = Δ0 + ln(1 − e^{−Δ0}).
    Rng r_db = Rng::stream(seed, L.dt_b + 1);
    float* db = ptr(L.dt_b);
    for (int64_t i = 0; i < size(L.dt_b); ++i) {
        double dt = std::exp(r_db.uniform(std::log(double(config_.dt_min)), std::log(double(config_.dt_max))));
        dt = std::max(dt, double(config_.dt_init_floor));
        db[i] = static_cast<float>(dt + std::log(-std::expm1(-dt)));
    }
    float* a_log = ptr(L.a_log);  // S4D-real: A[d, n] = -(n + 1)
    for (int e = 0; e < d_.d_inner; ++e)
        for (int n = 0; n < d_.d_state; ++n) a_log[int64_t(e) * d_.d_state + n] = static_cast<float>(std::log(n + 1.0));
    fill(L.d, 1.f);
    // out_proj: nn.Linear default, then ÷√n_layer (GPT-2 style prenorm-residual rescale).
    Rng::stream(seed, L.out_proj + 1)
        .fillUniform(ptr(L.out_proj), size(L.out_proj),
                     1.0 / std::sqrt(double(d_.d_inner)) / std::sqrt(double(d_.n_layers)));
}

}  // namespace mamba
