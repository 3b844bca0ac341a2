// The token sampler's exact arithmetic, shared by the CPU backend (cpu/cpu_sampler.cpp), the CUDA kernels
// (cuda/sample_tokens.cu) and the Java host sampler (org.mamba4j.lm.TokenSampler), which all produce the same
// token for the same logits, settings and random state. Everything below is plain IEEE-754 arithmetic in a
// fixed order: no FMA contraction (the host exp64 carries fp-contract=off; device code uses the _rn
// intrinsics), no library exp, sums in one fixed pairwise tree over token ids (kTile leaves per tile).
//
// The rule, per row (see TokenSampler's Javadoc for the user-facing description):
//  1. a NaN or +Inf logit among the first `vocab` is an error (the lowest such id is reported);
//  2. w = logit, or (seen id and penalty != 1) logit < 0 ? logit·penalty : logit/penalty (float);
//  3. best = argmax w (lowest id on ties); all -Inf is an error; temperature 0 returns best, drawing nothing;
//  4. p = w == -Inf ? 0 : exp64(((double)w − (double)max) / temperature);
//  5. top-k (0 < k < finite count): p = 0 where w < the k-th largest w (ties with it stay);
//  6. top-p (< 1): norm = tree(p); in the order (w descending, id ascending) over p > 0, c += p/norm until
//     c >= topP at token j; tokens after j get p = 0 (none if c never reaches topP);
//  7. min-p (> 0): p = 0 where p < minP (the best token has p = 1);
//  8. total = tree(p); u = nextDouble() · total; descend the tree: at a node with children L, R and the mass
//     acc to its left, go right iff R > 0 and (L == 0 or u >= acc + L), adding L to acc; the leaf is the token.
// nextDouble is java.util.SplittableRandom's: state += GOLDEN_GAMMA, z = mix64(state), (z >>> 11)·2⁻⁵³.
#pragma once

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define MAMBA_SAMPLING_HD __host__ __device__ __forceinline__
#else
#define MAMBA_SAMPLING_HD inline
#endif

namespace mamba::sampling {

/** Leaves per tile of the pairwise tree (a power of two): tiles are summed alone, then a tree over tiles. */
constexpr int kTile = 1024;
/** Candidate cuts (weight relative to the best token's 1) tried in turn (tiers 0, 1) before sorting everything (2). */
MAMBA_SAMPLING_HD double tierCut(int tier) { return tier == 0 ? 1e-4 : 1e-12; }

/** What the rows of a batch use, so a backend can skip whole stages (SampleArgs::needs). */
constexpr unsigned kNeedsSampling = 1;  // some row has temperature > 0
constexpr unsigned kNeedsTopK = 2;      // some sampling row has top-k > 0
constexpr unsigned kNeedsTopP = 4;      // some sampling row has top-p < 1

/** Error codes written instead of a token id. */
constexpr int32_t kErrNaN = -1;
constexpr int32_t kErrPosInf = -2;
constexpr int32_t kErrAllNegInf = -3;

/** One row's settings, in backend memory (40 bytes, 8-aligned). */
struct RowParams {
    double temperature;  // 0 = greedy
    double top_p;        // 1 = off
    double min_p;        // 0 = off
    float penalty;       // 1 = off
    int32_t top_k;       // 0 = off
    int64_t reserved;
};
static_assert(sizeof(RowParams) == 40, "RowParams layout is shared with device code");

constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;

MAMBA_SAMPLING_HD uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/** SplittableRandom(seed).nextDouble() with the stream's state advanced in place. */
MAMBA_SAMPLING_HD double nextDouble(uint64_t& state) {
    state += kGoldenGamma;
    return static_cast<double>(mix64(state) >> 11) * 0x1.0p-53;
}

/** A key whose ascending signed order is w descending, then id ascending (-0 and +0 tie); low 32 bits: id. */
MAMBA_SAMPLING_HD int64_t packDescending(float w, int32_t id) {
    const float v = w == 0.0f ? 0.0f : w;
    int32_t bits;
#ifdef __CUDA_ARCH__
    bits = __float_as_int(v);
#else
    std::memcpy(&bits, &v, 4);
#endif
    const int32_t ascending = bits ^ ((bits >> 31) & 0x7fffffff);
    return static_cast<int64_t>(static_cast<uint64_t>(static_cast<uint32_t>(~ascending)) << 32 |
                                static_cast<uint32_t>(id));
}

/** The logit a key was packed from (+0 for either zero). */
MAMBA_SAMPLING_HD float keyValue(int64_t key) {
    const int32_t ascending = ~static_cast<int32_t>(static_cast<uint64_t>(key) >> 32);
    const int32_t bits = ascending ^ ((ascending >> 31) & 0x7fffffff);
#ifdef __CUDA_ARCH__
    return __int_as_float(bits);
#else
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
#endif
}

MAMBA_SAMPLING_HD int32_t keyId(int64_t key) { return static_cast<int32_t>(static_cast<uint64_t>(key) & 0xffffffffu); }

// exp64: e^d for d <= 0 from + − × only: k = floor(d/ln2 + 1/2), r = d − k·ln2 (Cody–Waite, fdlibm's split),
// Taylor to degree 13 in Horner form (|r| <= 0.35: relative error < 2e-16), times 2^k built from bits. d below
// −708 gives 0 (e^−708 ≈ 3e−308 is the smallest normal result it makes). Same constants on every side.
constexpr double kInvLn2 = 0x1.71547652b82fep+0;
constexpr double kLn2Hi = 0x1.62e42fee00000p-1;
constexpr double kLn2Lo = 0x1.a39ef35793c76p-33;
constexpr double kExpMin = -708.0;
// 1/n! for n = 0 … 13, each rounded to the nearest double (a macro so that CUDA's __constant__ copy is the same list).
#define MAMBA_SAMPLING_EXP_COEFFS                                                                \
    0x1.0000000000000p+0, 0x1.0000000000000p+0, 0x1.0000000000000p-1, 0x1.5555555555555p-3,      \
        0x1.5555555555555p-5, 0x1.1111111111111p-7, 0x1.6c16c16c16c17p-10, 0x1.a01a01a01a01ap-13, \
        0x1.a01a01a01a01ap-16, 0x1.71de3a556c734p-19, 0x1.27e4fb7789f5cp-22, 0x1.ae64567f544e4p-26, \
        0x1.1eed8eff8d898p-29, 0x1.6124613a86d09p-33
constexpr double kExpCoeff[14] = {MAMBA_SAMPLING_EXP_COEFFS};

MAMBA_SAMPLING_HD double powerOfTwo(int k) {  // 2^k for k in [-1022, 1023]
    const uint64_t bits = static_cast<uint64_t>(k + 1023) << 52;
#ifdef __CUDA_ARCH__
    return __longlong_as_double(static_cast<long long>(bits));
#else
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
#endif
}

#ifndef __CUDACC__
/** The host exp64 (no FMA contraction, whatever the file's flags). */
__attribute__((optimize("fp-contract=off"), noinline)) inline double exp64(double d) {
    if (!(d >= kExpMin)) return 0.0;
    const double kd = __builtin_floor(d * kInvLn2 + 0.5);
    const double r = (d - kd * kLn2Hi) - kd * kLn2Lo;
    double s = kExpCoeff[13];
    for (int n = 12; n >= 0; --n) s = s * r + kExpCoeff[n];
    return s * powerOfTwo(static_cast<int>(kd));
}

/**
 * v[i] = exp64(v[i]) for i < n, the same operations in the same order, written so that the compiler vectorises it
 * (2^k from the bits of k + 1023 + 2^52, which the addition holds exactly; selects instead of branches).
 */
__attribute__((optimize("fp-contract=off"))) inline void exp64Array(double* v, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const double d = v[i];
        const double dd = d >= kExpMin ? d : 0.0;
        const double kd = __builtin_floor(dd * kInvLn2 + 0.5);
        const double r = (dd - kd * kLn2Hi) - kd * kLn2Lo;
        double s = kExpCoeff[13];
        for (int k = 12; k >= 0; --k) s = s * r + kExpCoeff[k];
        const double m = kd + (1023.0 + 0x1.0p52);
        uint64_t bits;
        std::memcpy(&bits, &m, 8);
        bits <<= 52;
        double scale;
        std::memcpy(&scale, &bits, 8);
        v[i] = d >= kExpMin ? s * scale : 0.0;
    }
}
#endif

/** Per-row scratch of the sampler (backend memory): weights p, sort keys, the tree over tile sums, row facts. */
struct ScratchLayout {
    int64_t tiles, tiles_pow2, keys_pow2;
    int64_t p_offset, keys_offset, tree_offset, partials_offset, stats_offset, bytes;  // per row, in bytes
    explicit ScratchLayout(int vocab) {
        tiles = (vocab + kTile - 1) / kTile;
        tiles_pow2 = 1;
        while (tiles_pow2 < tiles) tiles_pow2 <<= 1;
        keys_pow2 = 1;
        while (keys_pow2 < vocab) keys_pow2 <<= 1;
        p_offset = 0;
        keys_offset = tiles * kTile * 8;
        tree_offset = keys_offset + keys_pow2 * 8;
        partials_offset = tree_offset + 2 * tiles_pow2 * 8;  // 16 bytes per tile (CUDA's per-tile argmax)
        stats_offset = partials_offset + tiles * 16;
        bytes = stats_offset + 64;
    }
};

}  // namespace mamba::sampling
