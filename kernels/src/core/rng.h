// The seeded random numbers of libmamba (weight init, head init): SplitMix64 — tiny, fast and identical
// on every platform, so a seed means the same weights everywhere.
#pragma once

#include <cmath>
#include <cstdint>

namespace mamba {

class Rng {
public:
    explicit Rng(uint64_t seed) : s_(seed) {}
    /** An independent stream per (seed, tensor): adding a tensor never shifts another tensor's values. */
    static Rng stream(int64_t seed, uint64_t salt) {
        return Rng(static_cast<uint64_t>(seed) * 0x2545F4914F6CDD1Dull + 0x1000193ull * salt);
    }
    uint64_t next() {
        uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    /** Uniform in [0, 1) with 53 random bits. */
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
    double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
    void fillUniform(float* p, int64_t n, double bound) {
        for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(uniform(-bound, bound));
    }
    void fillNormal(float* p, int64_t n, double stddev) {
        for (int64_t i = 0; i < n; ++i) {  // Box–Muller, one value per pair of draws
            const double u1 = 1.0 - uniform(), u2 = uniform();
            p[i] = static_cast<float>(stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
        }
    }

private:
    uint64_t s_;
};

}  // namespace mamba
