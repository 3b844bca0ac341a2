// Mamba-3 SISO's tensors (official names and shapes, modules/mamba3.py) and their initialisation.
#include "mamba3.h"

#include "core/errors.h"
#include "core/rng.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace mamba {

int Mamba3Dims::ropeAngles(int d_state, float rope_fraction) {
    int rotated = static_cast<int>(std::floor(d_state * static_cast<double>(rope_fraction)));
    if (rotated % 2 != 0) --rotated;
    return rotated / 2;
}

Mamba3Dims Mamba3Dims::of(const ModelConfig& c) {
    Mamba3Dims d;
    d.d_model = c.d_model;
    d.d_state = c.d_state;
    d.d_inner = c.expand * c.d_model;
    d.headdim = c.headdim;
    d.nheads = d.d_inner / c.headdim;
    d.ngroups = c.ngroups;
    d.nangles = ropeAngles(c.d_state, c.rope_fraction);
    d.proj = 2 * d.d_inner + 2 * d.ngroups * d.d_state + 3 * d.nheads + d.nangles;
    d.n_layers = c.n_layers;
    d.chunk = c.chunk_size;
    d.eps = c.norm_eps;
    d.a_floor = c.a_floor;
    d.outproj_norm = c.is_outproj_norm;
    return d;
}

int64_t Mamba3::layerStateSize() const {
    // S [nh, hd, ds] + k [nh, ds] + v [nh, hd] + θ [nh, na]
    return int64_t(d_.nheads) * (int64_t(d_.headdim) * d_.d_state + d_.d_state + d_.headdim + d_.nangles);
}

void Mamba3::declareLayer(ParamTable& t, int layer) {
    const std::string p = "backbone.layers." + std::to_string(layer) + ".";
    const int64_t D = d_.d_model, E = d_.d_inner, H = d_.nheads, N = d_.d_state;
    Layer l;
    l.norm = t.add(p + "norm.weight", {D}, false, true);
    l.in_proj = t.add(p + "mixer.in_proj.weight", {d_.proj, D}, true, false);
    l.dt_bias = t.add(p + "mixer.dt_bias", {H}, false, true);
    l.b_bias = t.add(p + "mixer.B_bias", {H, 1, N}, false, true);  // official [nheads, mimo_rank = 1, d_state]
    l.c_bias = t.add(p + "mixer.C_bias", {H, 1, N}, false, true);
    l.b_norm = t.add(p + "mixer.B_norm.weight", {N}, false, true);
    l.c_norm = t.add(p + "mixer.C_norm.weight", {N}, false, true);
    l.d = t.add(p + "mixer.D", {H}, false, true);
    l.gate_norm = d_.outproj_norm ? t.add(p + "mixer.norm.weight", {E}, false, true) : -1;
    l.out_proj = t.add(p + "mixer.out_proj.weight", {D, E}, true, false);
    if (static_cast<int>(layers_.size()) != layer) throw std::logic_error("layers must be declared in order");
    layers_.push_back(l);
}

void Mamba3::initLayer(const ParamTable& t, int layer, int64_t seed, float* host) const {
    const Layer& L = layers_.at(layer);
    auto ptr = [&](int index) { return host + t[index].offset; };
    auto size = [&](int index) { return t[index].size; };
    auto fill = [&](int index, float v) { std::fill(ptr(index), ptr(index) + size(index), v); };

    fill(L.norm, 1.f);
    // nn.Linear default U(±1/√fan_in); out_proj then ÷√n_layer (MixerModel's prenorm-residual rescale).
    Rng::stream(seed, L.in_proj + 1).fillUniform(ptr(L.in_proj), size(L.in_proj), 1.0 / std::sqrt(double(d_.d_model)));
    Rng::stream(seed, L.out_proj + 1)
        .fillUniform(ptr(L.out_proj), size(L.out_proj),
                     1.0 / std::sqrt(double(d_.d_inner)) / std::sqrt(double(d_.n_layers)));
    // Δ bias: Δ0 = exp(U[ln dt_min, ln dt_max]) ≥ floor, stored as softplus⁻¹(Δ0).
    Rng r_db = Rng::stream(seed, L.dt_bias + 1);
    float* db = ptr(L.dt_bias);
    for (int64_t i = 0; i < size(L.dt_bias); ++i) {
        double dt = std::exp(r_db.uniform(std::log(double(config_.dt_min)), std::log(double(config_.dt_max))));
        dt = std::max(dt, double(config_.dt_init_floor));
        db[i] = static_cast<float>(dt + std::log(-std::expm1(-dt)));
    }
    fill(L.b_bias, 1.f);
    fill(L.c_bias, 1.f);
    fill(L.b_norm, 1.f);
    fill(L.c_norm, 1.f);
    fill(L.d, 1.f);
    if (L.gate_norm >= 0) fill(L.gate_norm, 1.f);
}

}  // namespace mamba
