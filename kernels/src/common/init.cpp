#include "init.h"

#include <algorithm>
#include <cmath>

namespace mamba {
namespace {

/** SplitMix64: tiny, fast, and the same on every platform — so a seed means the same weights everywhere. */
class Rng {
public:
    explicit Rng(uint64_t seed) : s_(seed) {}
    uint64_t next() {
        uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    /** Uniform in [0, 1) with 53 random bits. */
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
    double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

private:
    uint64_t s_;
};

void fillUniform(Rng& rng, float* p, int64_t n, double bound) {
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(rng.uniform(-bound, bound));
}

void fillNormal(Rng& rng, float* p, int64_t n, double stddev) {  // Box–Muller
    for (int64_t i = 0; i < n; ++i) {
        const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
        p[i] = static_cast<float>(stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
    }
}

}  // namespace

void initMamba1(const ModelConfig& cfg, const Dims& d, const ParamTable& table, int64_t seed, float* host) {
    const auto& ps = table.params();
    // Each tensor draws from its own stream, so adding a tensor never shifts the others' values.
    auto stream = [&](int index) { return Rng(static_cast<uint64_t>(seed) * 0x2545F4914F6CDD1Dull + 0x1000193ull * (index + 1)); };
    auto ptr = [&](int index) { return host + ps[index].offset; };
    auto size = [&](int index) { return ps[index].size; };
    auto fill = [&](int index, float v) { std::fill(ptr(index), ptr(index) + size(index), v); };

    if (table.input_w >= 0) {  // nn.Linear default (kaiming_uniform a=√5 ⇒ U(±1/√fan_in)), bias zeroed
        Rng r = stream(table.input_w);
        fillUniform(r, ptr(table.input_w), size(table.input_w), 1.0 / std::sqrt(static_cast<double>(d.input_dim)));
        fill(table.input_b, 0.f);
    }
    for (const LayerParams& L : table.layers) {
        fill(L.norm, 1.f);
        Rng r_in = stream(L.in_proj);
        fillUniform(r_in, ptr(L.in_proj), size(L.in_proj), 1.0 / std::sqrt(static_cast<double>(d.d_model)));
        // Depthwise Conv1d default: fan_in = d_conv for both weight and bias.
        Rng r_cw = stream(L.conv_w), r_cb = stream(L.conv_b);
        fillUniform(r_cw, ptr(L.conv_w), size(L.conv_w), 1.0 / std::sqrt(static_cast<double>(d.d_conv)));
        fillUniform(r_cb, ptr(L.conv_b), size(L.conv_b), 1.0 / std::sqrt(static_cast<double>(d.d_conv)));
        Rng r_x = stream(L.x_proj);
        fillUniform(r_x, ptr(L.x_proj), size(L.x_proj), 1.0 / std::sqrt(static_cast<double>(d.d_inner)));
        Rng r_dw = stream(L.dt_w);
        fillUniform(r_dw, ptr(L.dt_w), size(L.dt_w), 1.0 / std::sqrt(static_cast<double>(d.dt_rank)));
        // Δ bias: Δ0 = exp(U[ln dt_min, ln dt_max]) ≥ floor, stored as softplus⁻¹(Δ0) = Δ0 + ln(1 − e^{−Δ0}).
        Rng r_db = stream(L.dt_b);
        float* db = ptr(L.dt_b);
        for (int64_t i = 0; i < size(L.dt_b); ++i) {
            double dt = std::exp(r_db.uniform(std::log(static_cast<double>(cfg.dt_min)), std::log(static_cast<double>(cfg.dt_max))));
            dt = std::max(dt, static_cast<double>(cfg.dt_init_floor));
            db[i] = static_cast<float>(dt + std::log(-std::expm1(-dt)));
        }
        float* a_log = ptr(L.a_log);  // S4D-real: A[d, n] = -(n + 1)
        for (int e = 0; e < d.d_inner; ++e)
            for (int n = 0; n < d.d_state; ++n) a_log[static_cast<int64_t>(e) * d.d_state + n] = static_cast<float>(std::log(n + 1.0));
        fill(L.d, 1.f);
        // out_proj: nn.Linear default, then ÷√n_layer (GPT-2 style prenorm-residual rescale).
        Rng r_out = stream(L.out_proj);
        fillUniform(r_out, ptr(L.out_proj), size(L.out_proj),
                    1.0 / std::sqrt(static_cast<double>(d.d_inner)) / std::sqrt(static_cast<double>(d.n_layers)));
    }
    fill(table.norm_f, 1.f);
    if (table.embedding >= 0) {  // mixer_seq_simple._init_weights: N(0, 0.02)
        Rng r = stream(table.embedding);
        fillNormal(r, ptr(table.embedding), size(table.embedding), 0.02);
    }
    if (table.lm_head >= 0 && table.lm_head != table.embedding) {
        Rng r = stream(table.lm_head);
        fillUniform(r, ptr(table.lm_head), size(table.lm_head), 1.0 / std::sqrt(static_cast<double>(d.d_model)));
    }
}

}  // namespace mamba
