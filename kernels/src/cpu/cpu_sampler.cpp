// The CPU backend's token sampler: the plain twin of cuda/sample_tokens.cu and of the Java TokenSampler,
// following core/sampling.h's rule step by step. Rows run in parallel on the pool (each row is independent and
// computed by the same code whatever the thread count).
#include "cpu_backend.h"

#include "core/sampling.h"
#include "thread_pool.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace mamba::cpu {
namespace {

using namespace sampling;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/** Builds the tile's heap (leaves [kTile, 2·kTile)) from p[start, start + kTile) with zeros past n; returns its root. */
double buildTile(const double* p, int64_t start, int64_t n, double* heap) {
    for (int j = 0; j < kTile; ++j) heap[kTile + j] = start + j < n ? p[start + j] : 0.0;
    for (int k = kTile - 1; k >= 1; --k) heap[k] = heap[2 * k] + heap[2 * k + 1];
    return heap[1];
}

/** Descends a heap of `leaves` leaves with mass `acc` to the left of its root; returns the leaf. */
int64_t descend(const double* heap, int64_t leaves, double u, double& acc) {
    int64_t k = 1;
    while (k < leaves) {
        const double left = heap[2 * k], right = heap[2 * k + 1];
        if (right > 0.0 && (left == 0.0 || u >= acc + left)) {
            acc = acc + left;
            k = 2 * k + 1;
        } else {
            k = 2 * k;
        }
    }
    return k - leaves;
}

struct RowWork {
    std::vector<float> w;
    std::vector<double> p, q, top, tile;
    std::vector<int64_t> keys;
};

/** The pairwise tree over p[0, n): tile roots into top's leaves, then the heap over tiles. Returns the total. */
double buildTree(const double* p, int64_t n, const ScratchLayout& L, RowWork& s) {
    s.top.assign(static_cast<size_t>(2 * L.tiles_pow2), 0.0);
    for (int64_t t = 0; t < L.tiles; ++t) s.top[L.tiles_pow2 + t] = buildTile(p, t * kTile, n, s.tile.data());
    for (int64_t k = L.tiles_pow2 - 1; k >= 1; --k) s.top[k] = s.top[2 * k] + s.top[2 * k + 1];
    return s.top[1];
}

int32_t sampleRow(const float* x, int vocab, const RowParams& rp, uint64_t& rng, uint32_t* seen, int32_t& errIndex,
                  RowWork& s) {
    errIndex = -1;
    for (int i = 0; i < vocab; ++i) {
        if (std::isnan(x[i])) { errIndex = i; return kErrNaN; }
        if (x[i] == std::numeric_limits<float>::infinity()) { errIndex = i; return kErrPosInf; }
    }
    s.w.assign(x, x + vocab);
    float* w = s.w.data();
    if (rp.penalty != 1.0f) {
        for (int i = 0; i < vocab; ++i)
            if (seen[i >> 5] >> (i & 31) & 1u) w[i] = w[i] < 0.0f ? w[i] * rp.penalty : w[i] / rp.penalty;
    }
    int best = -1, finite = 0;
    float max = kNegInf;
    for (int i = 0; i < vocab; ++i) {
        if (w[i] > kNegInf) {
            ++finite;
            if (w[i] > max) { max = w[i]; best = i; }
        }
    }
    if (best < 0) return kErrAllNegInf;
    auto mark = [&](int id) {
        seen[id >> 5] |= 1u << (id & 31);
        return id;
    };
    if (rp.temperature == 0.0) return mark(best);

    s.p.resize(static_cast<size_t>(vocab));
    double* p = s.p.data();
    // d first, then exp64 over the array (vectorised); -Inf tokens get d = -Inf, whose exp64 is 0.
    for (int i = 0; i < vocab; ++i) p[i] = (static_cast<double>(w[i]) - static_cast<double>(max)) / rp.temperature;
    exp64Array(p, vocab);

    const ScratchLayout L(vocab);
    s.tile.resize(2 * kTile);
    const bool kActive = rp.top_k > 0 && rp.top_k < finite;
    double* q = p;  // the final weights
    if (kActive || rp.top_p < 1.0) {
        s.q.assign(static_cast<size_t>(vocab), 0.0);
        s.keys.resize(static_cast<size_t>(vocab));
        bool normKnown = false;
        double norm = 0.0;
        for (int tier = 0; tier <= 2; ++tier) {
            // A tier is every finite token with w >= cutValue: a prefix of the order (w desc, id asc), so what it
            // decides is what sorting every token would decide. The last tier holds every finite token.
            const float cutValue =
                tier < 2 ? static_cast<float>(max + rp.temperature * std::log(tierCut(tier))) : kNegInf;
            int64_t n = 0, positiveOutside = 0;
            for (int i = 0; i < vocab; ++i) {
                if (!(w[i] > kNegInf)) continue;
                if (w[i] >= cutValue) s.keys[n++] = packDescending(w[i], i);
                else if (p[i] > 0.0) ++positiveOutside;
            }
            if (kActive && n < rp.top_k && tier < 2) continue;
            int64_t keep = n;
            float kth = kNegInf;
            if (kActive) {
                // Only the top-k set needs its order: select the k-th key, bring the ties of its value forward, and
                // sort those (keys are unique, so the sorted prefix is the full sort's). A near-flat row puts every
                // token in tier 0; sorting all of them cost milliseconds per token.
                const auto first = s.keys.begin(), kthAt = first + (rp.top_k - 1);
                std::nth_element(first, kthAt, first + n);
                kth = w[keyId(*kthAt)];
                const auto tiesEnd = std::partition(kthAt + 1, first + n, [&](int64_t key) { return w[keyId(key)] == kth; });
                keep = tiesEnd - first;
                std::sort(first, tiesEnd);
            } else {
                std::sort(s.keys.begin(), s.keys.begin() + n);
            }
            if (rp.top_p < 1.0) {
                if (!normKnown) {
                    for (int i = 0; i < vocab; ++i) s.q[i] = w[i] < kth ? 0.0 : p[i];
                    norm = buildTree(s.q.data(), vocab, L, s);
                    normKnown = true;
                }
                double c = 0.0;
                bool reached = false;
                for (int64_t j = 0; j < keep; ++j) {
                    c = c + p[keyId(s.keys[j])] / norm;
                    if (c >= rp.top_p) { keep = j + 1; reached = true; break; }
                }
                if (!reached && !kActive && positiveOutside > 0) continue;  // the nucleus reaches below this tier
            }
            std::fill(s.q.begin(), s.q.end(), 0.0);
            for (int64_t j = 0; j < keep; ++j) {
                const int id = keyId(s.keys[j]);
                s.q[id] = p[id];
            }
            break;
        }
        q = s.q.data();
    }
    if (rp.min_p > 0.0)
        for (int i = 0; i < vocab; ++i)
            if (q[i] < rp.min_p) q[i] = 0.0;

    const double total = buildTree(q, vocab, L, s);
    const double u = nextDouble(rng) * total;
    double acc = 0.0;
    const int64_t t = descend(s.top.data(), L.tiles_pow2, u, acc);
    buildTile(q, t * kTile, vocab, s.tile.data());
    const int64_t id = t * kTile + descend(s.tile.data(), kTile, u, acc);
    return mark(static_cast<int>(id));
}

}  // namespace

void CpuBackend::sampleTokens(const SampleArgs& a) {
    const auto* params = static_cast<const RowParams*>(a.params);
    parallelFor(a.batch, 1, [&](int64_t lo, int64_t hi) {
        RowWork work;
        for (int64_t b = lo; b < hi; ++b)
            a.out[b] = sampleRow(a.logits + b * a.ld, a.vocab, params[b], a.rng[b], a.seen + b * a.seen_words,
                                 a.err_index[b], work);
    });
}

}  // namespace mamba::cpu
