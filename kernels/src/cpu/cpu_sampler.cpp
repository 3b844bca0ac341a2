// The CPU backend's token sampler: the plain twin of cuda/sample_tokens.cu and of the Java TokenSampler,
// following core/sampling.h's rule step by step. Rows run in parallel on the pool (each row is independent and
// computed by the same code whatever the thread count).
#include "cpu_backend.h"

#include "core/sampling.h"
#include "thread_pool.h"

#include <algorithm>
#include <cmath>
#include <functional>
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
    std::vector<float> w, heap;
    std::vector<double> p, q, top, tile;
    std::vector<int64_t> keys;
};

// The two scans every row makes, written as independent lanes so that they vectorise: a decode step of a small
// model samples 50k logits, and the early-exit scalar loops cost as much as the step's head product.
constexpr int kLanes = 8;

bool anyNanOrPosInf(const float* x, int n) {
    const float inf = std::numeric_limits<float>::infinity();
    int bad[kLanes] = {};
    int i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (int j = 0; j < kLanes; ++j) bad[j] |= (x[i + j] != x[i + j]) | (x[i + j] == inf);
    int any = 0;
    for (int j = 0; j < kLanes; ++j) any |= bad[j];
    for (; i < n; ++i) any |= (x[i] != x[i]) | (x[i] == inf);
    return any != 0;
}

/** The largest value of w (no NaN, no +Inf) above −Inf, and how many are above −Inf (−Inf when none). */
float finiteMax(const float* w, int n, int& finite) {
    float m[kLanes];
    int c[kLanes] = {};
    for (int j = 0; j < kLanes; ++j) m[j] = kNegInf;
    int i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (int j = 0; j < kLanes; ++j) {
            const float v = w[i + j];
            m[j] = v > m[j] ? v : m[j];
            c[j] += v > kNegInf;
        }
    float max = kNegInf;
    finite = 0;
    for (int j = 0; j < kLanes; ++j) {
        max = m[j] > max ? m[j] : max;
        finite += c[j];
    }
    for (; i < n; ++i) {
        max = w[i] > max ? w[i] : max;
        finite += w[i] > kNegInf;
    }
    return max;
}

/** The k-th largest of the finite values of w (1 <= k < their count): a min-heap of the k largest seen so far. */
float kthLargest(const float* w, int vocab, int k, std::vector<float>& heap) {
    heap.clear();
    const auto greater = std::greater<float>();
    for (int i = 0; i < vocab; ++i) {
        const float v = w[i];
        if (!(v > kNegInf)) continue;
        if (static_cast<int>(heap.size()) < k) {
            heap.push_back(v);
            std::push_heap(heap.begin(), heap.end(), greater);
        } else if (v > heap.front()) {
            std::pop_heap(heap.begin(), heap.end(), greater);
            heap.back() = v;
            std::push_heap(heap.begin(), heap.end(), greater);
        }
    }
    return heap.front();
}

/** The final weights: q = p on the first `keep` sorted keys, 0 elsewhere. */
void keepOnly(const double* p, int64_t keep, RowWork& s) {
    std::fill(s.q.begin(), s.q.end(), 0.0);
    for (int64_t j = 0; j < keep; ++j) {
        const int id = keyId(s.keys[j]);
        s.q[id] = p[id];
    }
}

/** The pairwise tree over p[0, n): tile roots into top's leaves, then the heap over tiles. Returns the total. */
double buildTree(const double* p, int64_t n, const ScratchLayout& L, RowWork& s) {
    s.top.assign(static_cast<size_t>(2 * L.tiles_pow2), 0.0);
    for (int64_t t = 0; t < L.tiles; ++t) s.top[L.tiles_pow2 + t] = buildTile(p, t * kTile, n, s.tile.data());
    for (int64_t k = L.tiles_pow2 - 1; k >= 1; --k) s.top[k] = s.top[2 * k] + s.top[2 * k + 1];
    return s.top[1];
}

/**
 * Top-k (and top-p within it) into s.q. The top-k set is every finite token with w >= the k-th largest w (its ties
 * included): one pass with a k-entry min-heap of values finds that w, and only the set is sorted. (A near-flat row —
 * random weights, high temperature — put all 50k tokens in the first candidate tier, and selecting among them was
 * the most expensive part of a CPU decode step.)
 */
void keepTopK(const float* w, const double* p, int vocab, const RowParams& rp, const ScratchLayout& L, RowWork& s) {
    const float kth = kthLargest(w, vocab, rp.top_k, s.heap);
    int64_t n = 0;
    for (int i = 0; i < vocab; ++i)
        if (w[i] > kNegInf && w[i] >= kth) s.keys[n++] = packDescending(w[i], i);
    std::sort(s.keys.begin(), s.keys.begin() + n);
    int64_t keep = n;
    if (rp.top_p < 1.0) {
        for (int i = 0; i < vocab; ++i) s.q[i] = w[i] < kth ? 0.0 : p[i];
        const double norm = buildTree(s.q.data(), vocab, L, s);
        double c = 0.0;
        for (int64_t j = 0; j < keep; ++j) {
            c = c + p[keyId(s.keys[j])] / norm;
            if (c >= rp.top_p) { keep = j + 1; break; }
        }
    }
    keepOnly(p, keep, s);
}

/**
 * Top-p alone into s.q, over tiers of candidates: a tier is every finite token with w >= its cut value, a prefix of
 * the order (w desc, id asc), so what it decides is what sorting every token would decide. The last tier holds every
 * finite token.
 */
void keepNucleus(const float* w, const double* p, int vocab, float max, const RowParams& rp, const ScratchLayout& L,
                 RowWork& s) {
    const double norm = buildTree(p, vocab, L, s);
    for (int tier = 0; tier <= 2; ++tier) {
        const float cutValue = tier < 2 ? static_cast<float>(max + rp.temperature * std::log(tierCut(tier))) : kNegInf;
        int64_t n = 0, positiveOutside = 0;
        for (int i = 0; i < vocab; ++i) {
            if (!(w[i] > kNegInf)) continue;
            if (w[i] >= cutValue) s.keys[n++] = packDescending(w[i], i);
            else if (p[i] > 0.0) ++positiveOutside;
        }
        std::sort(s.keys.begin(), s.keys.begin() + n);
        int64_t keep = n;
        double c = 0.0;
        bool reached = false;
        for (int64_t j = 0; j < keep; ++j) {
            c = c + p[keyId(s.keys[j])] / norm;
            if (c >= rp.top_p) { keep = j + 1; reached = true; break; }
        }
        if (!reached && positiveOutside > 0 && tier < 2) continue;  // the nucleus reaches below this tier
        keepOnly(p, keep, s);
        return;
    }
}

int32_t sampleRow(const float* x, int vocab, const RowParams& rp, uint64_t& rng, uint32_t* seen, int32_t& errIndex,
                  RowWork& s) {
    errIndex = -1;
    if (anyNanOrPosInf(x, vocab))  // the index is looked for only when there is one
        for (int i = 0; i < vocab; ++i) {
            if (std::isnan(x[i])) { errIndex = i; return kErrNaN; }
            if (x[i] == std::numeric_limits<float>::infinity()) { errIndex = i; return kErrPosInf; }
        }
    const float* w = x;  // the logits as the rule sees them: a penalised copy only when there is a penalty
    if (rp.penalty != 1.0f) {
        s.w.assign(x, x + vocab);
        float* pw = s.w.data();
        for (int i = 0; i < vocab; ++i)
            if (seen[i >> 5] >> (i & 31) & 1u) pw[i] = pw[i] < 0.0f ? pw[i] * rp.penalty : pw[i] / rp.penalty;
        w = pw;
    }
    int finite = 0;
    float max = finiteMax(w, vocab, finite);
    if (finite == 0) return kErrAllNegInf;
    int best = 0;  // the first token of the largest value
    while (!(w[best] == max)) ++best;
    max = w[best];
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
        if (kActive) keepTopK(w, p, vocab, rp, L, s);
        else keepNucleus(w, p, vocab, max, rp, L, s);
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
        // Per thread and reused: a row's scratch is ~1.6 MB at a 50k vocabulary, and fresh vectors of that size
        // are fresh mmaps whose page faults cost more than the greedy row itself (every decode step samples).
        static thread_local RowWork work;
        for (int64_t b = lo; b < hi; ++b)
            a.out[b] = sampleRow(a.logits + b * a.ld, a.vocab, params[b], a.rng[b], a.seen + b * a.seen_words,
                                 a.err_index[b], work);
    });
}

}  // namespace mamba::cpu
