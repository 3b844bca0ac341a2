// The token sampler's cases (Ops::sampleTokens), registered from allCases(). The reference below is the rule of
// core/sampling.h written as plainly as possible — every finite token sorted, the pairwise tree as a recursion —
// so it shares only exp64, nextDouble and the key packing with the backends (exp64 itself is checked against
// std::exp here). Every output must equal the reference bit for bit: ids, error indices, random states and seen
// sets. The cases cover greedy, temperature, top-k, top-p, min-p, the repetition penalty and combinations; ties
// (k-th value tied, whole rows tied), -Inf banned tokens, NaN/+Inf/all--Inf rows, vocabularies around the tile
// (1, 7, 1023, 1024, 1025) and 50,280, strided logits, and nuclei that reach past the first candidate tiers and
// past the CUDA kernel's shared-memory capacity (thousands of tokens).
#include "op_test.h"
#include "core/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace optest {

using namespace mamba::sampling;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

double treeSum(const std::vector<double>& p, int64_t lo, int64_t hi) {
    if (hi - lo == 1) return lo < static_cast<int64_t>(p.size()) ? p[lo] : 0.0;
    const int64_t mid = lo + (hi - lo) / 2;
    return treeSum(p, lo, mid) + treeSum(p, mid, hi);
}

}  // namespace

int32_t referenceSampleRow(const float* x, int vocab, const RowParams& rp, uint64_t& rng, uint32_t* seen,
                           int32_t& errIndex) {
    errIndex = -1;
    for (int i = 0; i < vocab; ++i) {
        if (std::isnan(x[i])) { errIndex = i; return kErrNaN; }
        if (x[i] == std::numeric_limits<float>::infinity()) { errIndex = i; return kErrPosInf; }
    }
    std::vector<float> w(x, x + vocab);
    for (int i = 0; i < vocab; ++i)
        if (rp.penalty != 1.0f && (seen[i / 32] >> (i % 32) & 1u)) w[i] = w[i] < 0 ? w[i] * rp.penalty : w[i] / rp.penalty;
    int best = -1, finite = 0;
    for (int i = 0; i < vocab; ++i)
        if (w[i] > kNegInf) {
            ++finite;
            if (best < 0 || w[i] > w[best]) best = i;
        }
    if (best < 0) return kErrAllNegInf;
    int32_t id = best;
    if (rp.temperature != 0.0) {
        std::vector<double> p(static_cast<size_t>(vocab));
        for (int i = 0; i < vocab; ++i)
            p[i] = w[i] == kNegInf ? 0.0 : exp64((static_cast<double>(w[i]) - w[best]) / rp.temperature);
        std::vector<int64_t> order;
        for (int i = 0; i < vocab; ++i)
            if (w[i] > kNegInf) order.push_back(packDescending(w[i], i));
        std::sort(order.begin(), order.end());
        size_t keep = order.size();
        if (rp.top_k > 0 && rp.top_k < finite) {
            const float kth = w[keyId(order[rp.top_k - 1])];
            for (int i = 0; i < vocab; ++i)
                if (w[i] < kth) p[i] = 0.0;
            keep = 0;
            while (keep < order.size() && w[keyId(order[keep])] >= kth) ++keep;
        }
        if (rp.top_p < 1.0) {
            int64_t n2 = 1;
            while (n2 < vocab) n2 <<= 1;
            const double norm = treeSum(p, 0, n2);
            double c = 0.0;
            for (size_t j = 0; j < keep; ++j) {
                c = c + p[keyId(order[j])] / norm;
                if (c >= rp.top_p) {
                    for (size_t k = j + 1; k < order.size(); ++k) p[keyId(order[k])] = 0.0;
                    break;
                }
            }
        }
        if (rp.min_p > 0.0)
            for (double& v : p)
                if (v < rp.min_p) v = 0.0;
        int64_t n2 = 1;
        while (n2 < vocab) n2 <<= 1;
        const double u = nextDouble(rng) * treeSum(p, 0, n2);
        double acc = 0.0;
        int64_t lo = 0, hi = n2;
        while (hi - lo > 1) {
            const int64_t mid = lo + (hi - lo) / 2;
            const double left = treeSum(p, lo, mid), right = treeSum(p, mid, hi);
            if (right > 0.0 && (left == 0.0 || u >= acc + left)) {
                acc = acc + left;
                lo = mid;
            } else {
                hi = mid;
            }
        }
        id = static_cast<int32_t>(lo);
    }
    seen[id / 32] |= 1u << (id % 32);
    return id;
}

namespace {

/** A row of a case: its settings and how its logits are made. */
struct RowSpec {
    RowParams params;
    enum Logits { Random, Ties, Flat, NearFlat, LongTail, NaNAt, PosInfAt, AllNegInf } logits = Random;
    int banned = 0;       // -Inf tokens (random ids)
    int history = 0;      // seen ids (random)
    uint64_t seed = 1;
};

RowParams params(double t, int k = 0, double p = 1.0, double minP = 0.0, float penalty = 1.0f) {
    return RowParams{t, p, minP, penalty, k, 0};
}

std::vector<float> makeLogits(Rng& rng, const RowSpec& s, int vocab) {
    std::vector<float> x = uniform(rng, vocab, -6, 6);
    switch (s.logits) {
        case RowSpec::Ties:  // a few values only: ties at the k-th value, inside the nucleus, at the max
            for (float& v : x) v = static_cast<float>(rng.below(5)) - 2.0f;
            break;
        case RowSpec::Flat:
            for (float& v : x) v = 0.5f;
            break;
        case RowSpec::NearFlat:  // an untrained model's logits: every token within 0.1 of the best, few exact ties
            for (float& v : x) v = static_cast<float>(rng.uniform(-0.05, 0.05));
            break;
        case RowSpec::LongTail:  // one leader and a tail far below it holding most of the mass
            for (float& v : x) v = -11.0f + static_cast<float>(rng.uniform(-0.5, 0.5));
            x[rng.below(vocab)] = 0.0f;
            break;
        default: break;
    }
    for (int b = 0; b < s.banned; ++b) x[rng.below(vocab)] = kNegInf;
    if (s.logits == RowSpec::NaNAt) x[vocab / 2] = std::numeric_limits<float>::quiet_NaN(), x[vocab - 1] = NAN;
    if (s.logits == RowSpec::PosInfAt) x[vocab / 3] = std::numeric_limits<float>::infinity();
    if (s.logits == RowSpec::AllNegInf) std::fill(x.begin(), x.end(), kNegInf);
    return x;
}

template <class T>
std::vector<float> asFloats(const std::vector<T>& v) {
    std::vector<float> f((v.size() * sizeof(T) + 3) / 4);
    std::memcpy(f.data(), v.data(), v.size() * sizeof(T));
    return f;
}

/** `draws` consecutive calls of the op on the same rows (the logits change between draws), checked after each. */
Prepared sampleCase(Ops& ops, uint64_t seed, int vocab, int ldExtra, const std::vector<RowSpec>& rows, int draws) {
    Rng rng(seed);
    Prepared p;
    p.arena = std::make_shared<Arena>(ops);
    Arena* A = p.arena.get();
    const int B = static_cast<int>(rows.size());
    const int64_t ld = vocab + ldExtra, words = (vocab + 31) / 32;
    std::vector<RowParams> prm;
    std::vector<uint64_t> rngs;
    std::vector<uint32_t> seen(static_cast<size_t>(B * words), 0u);
    for (int b = 0; b < B; ++b) {
        prm.push_back(rows[b].params);
        rngs.push_back(rows[b].seed);
        for (int h = 0; h < rows[b].history; ++h) {
            const int id = rng.below(vocab);
            seen[b * words + id / 32] |= 1u << (id % 32);
        }
    }
    std::vector<std::vector<float>> logits;
    for (int d = 0; d < draws; ++d) {
        std::vector<float> all(static_cast<size_t>(B * ld), poisonValue());
        for (int b = 0; b < B; ++b) {
            const std::vector<float> x = makeLogits(rng, rows[b], vocab);
            std::copy(x.begin(), x.end(), all.begin() + b * ld);
        }
        logits.push_back(all);
    }
    // Expected results of every draw.
    std::vector<std::vector<int32_t>> wantOut, wantErr;
    std::vector<std::vector<uint64_t>> wantRng;
    std::vector<std::vector<uint32_t>> wantSeen;
    {
        std::vector<uint64_t> r = rngs;
        std::vector<uint32_t> s = seen;
        for (int d = 0; d < draws; ++d) {
            std::vector<int32_t> o(B), e(B);
            for (int b = 0; b < B; ++b)
                o[b] = referenceSampleRow(logits[d].data() + b * ld, vocab, prm[b], r[b], s.data() + b * words, e[b]);
            wantOut.push_back(o);
            wantErr.push_back(e);
            wantRng.push_back(r);
            wantSeen.push_back(s);
        }
    }
    float* dLogits = A->put(logits[0]);
    float* dParams = A->put(asFloats(prm));
    float* dRng = A->put(asFloats(rngs));
    float* dSeen = A->put(asFloats(seen));
    float* dOut = A->poisoned(2 * B);
    const ScratchLayout layout(vocab);
    float* dScratch = A->poisoned((layout.bytes * B + 3) / 4);
    SampleArgs a;
    a.logits = dLogits;
    a.ld = ld;
    a.batch = B;
    a.vocab = vocab;
    a.params = dParams;
    a.rng = reinterpret_cast<uint64_t*>(dRng);
    a.seen = reinterpret_cast<uint32_t*>(dSeen);
    a.seen_words = words;
    a.out = reinterpret_cast<int32_t*>(dOut);
    a.err_index = reinterpret_cast<int32_t*>(dOut) + B;
    a.scratch = dScratch;
    a.needs = 0;  // as the runtime computes it: a backend may skip the stages no row needs
    for (const RowParams& r : prm)
        if (r.temperature != 0.0)
            a.needs |= kNeedsSampling | (r.top_k > 0 ? kNeedsTopK : 0u) | (r.top_p < 1.0 ? kNeedsTopP : 0u);
    p.call = [&ops, a] { ops.sampleTokens(a); };
    p.check = [=, &ops] {
        std::vector<Compare> cs;
        for (int d = 0; d < draws; ++d) {
            if (d > 0) {  // the first draw is the harness's call
                A->set(dLogits, logits[d]);
                ops.sampleTokens(a);
            }
            const std::vector<float> out = A->get(dOut, 2 * B);
            std::vector<int32_t> want = wantOut[d];  // then the error indices (-1 where none)
            want.insert(want.end(), wantErr[d].begin(), wantErr[d].end());
            const std::string n = "draw" + std::to_string(d) + ".";
            cs.push_back(bits(n + "ids+errors", out, asFloats(want)));
            cs.push_back(bits(n + "rng", A->get(dRng, 2 * B), asFloats(wantRng[d])));
            cs.push_back(bits(n + "seen", A->get(dSeen, B * words), asFloats(wantSeen[d])));
        }
        return cs;
    };
    p.bytes = 4.0 * B * vocab;
    return p;
}

/** exp64 against std::exp over [-708, 0] and its edges (relative error < 4e-16), and exp64(0) == 1 exactly. */
Compare exp64Accuracy() {
    Compare c{"exp64", "rel", 0, 4e-16};
    Rng rng(7);
    std::vector<double> ds;
    for (int i = 0; i < 200000; ++i) {
        const double d = i < 1000 ? -i * 0.34657359027997264 : -rng.uniform(0, i % 2 ? 30 : 708);
        const double want = std::exp(d), got = exp64(d);
        c.err = std::max(c.err, std::fabs(got - want) / want);
        ds.push_back(d);
    }
    for (double d : {0.0, -0.0, -708.0, -708.5, -709.0, -1e300, -std::numeric_limits<double>::infinity()}) ds.push_back(d);
    std::vector<double> v = ds;
    exp64Array(v.data(), static_cast<int64_t>(v.size()));  // the CPU backend's vectorised form: the same bits
    for (size_t i = 0; i < ds.size(); ++i) {
        const double e = exp64(ds[i]);
        if (std::memcmp(&v[i], &e, sizeof e) != 0) c.err = 1;
    }
    if (exp64(0.0) != 1.0 || exp64(-0.0) != 1.0 || exp64(-709.0) != 0.0) c.err = 1;
    return c;
}

}  // namespace

std::vector<Case> samplingCases() {
    std::vector<Case> t;
    auto add = [&t](const std::string& shape, int vocab, int ldExtra, std::vector<RowSpec> rows, int draws) {
        t.push_back(Case{"sampleTokens", shape, DTYPE_F32, "-", NEED_NONE, false,
                         [=](Ops& o, uint64_t s) { return sampleCase(o, s, vocab, ldExtra, rows, draws); }});
    };
    auto row = [](RowParams p, RowSpec::Logits l = RowSpec::Random, int banned = 0, int history = 0, uint64_t seed = 1) {
        RowSpec r;
        r.params = p;
        r.logits = l;
        r.banned = banned;
        r.history = history;
        r.seed = seed;
        return r;
    };
    // Every option alone and combined, on one batch (rows are independent: each has its own settings and stream).
    std::vector<RowSpec> mixed = {
        row(params(0.0)),                                                  // greedy
        row(params(0.0, 0, 1, 0, 1.3f), RowSpec::Random, 0, 40),           // greedy + penalty
        row(params(1.0), RowSpec::Random, 0, 0, 11),                       // temperature
        row(params(0.7, 40), RowSpec::Random, 3, 0, 12),                   // top-k, banned tokens
        row(params(1.3, 0, 0.9), RowSpec::Random, 0, 0, 13),               // top-p
        row(params(0.9, 0, 1, 0.05), RowSpec::Random, 0, 0, 14),           // min-p
        row(params(0.8, 50, 0.95, 0.02, 1.2f), RowSpec::Random, 5, 60, 15),  // everything
        row(params(1.0, 3), RowSpec::Ties, 0, 0, 16),                      // top-k with the k-th value tied
        row(params(1.0, 0, 0.5), RowSpec::Ties, 0, 0, 17),                 // top-p cutting a tie group
        row(params(2.0, 0, 0.99), RowSpec::Flat, 0, 0, 18),                // a flat row: every token ties
        row(params(0.5, 1), RowSpec::Random, 0, 0, 19),                    // top-k 1
        row(params(1.0, 0, 1, 0, 0.5f), RowSpec::Random, 0, 500, 20),      // penalty < 1
    };
    for (int vocab : {1, 7, 1000, 1023, 1024, 1025, 50280})
        add("vocab=" + std::to_string(vocab) + " rows=12 mixed draws=3", vocab, 0, mixed, 3);
    add("vocab=3001 ld+ rows=12 mixed draws=2", 3001, 37, mixed, 2);
    // Nuclei and top-k sets past the first candidate tiers and past 2048 candidates (the CUDA kernel's shared tier).
    add("vocab=50280 longtail top-p/top-k", 50280, 0,
        {row(params(1.0, 0, 0.9), RowSpec::LongTail, 0, 0, 21), row(params(1.0, 0, 0.999999), RowSpec::LongTail, 0, 0, 22),
         row(params(1.0, 30000), RowSpec::LongTail, 0, 0, 23), row(params(1.0, 4000, 0.5), RowSpec::LongTail, 0, 0, 24),
         row(params(3.0, 0, 0.97), RowSpec::Random, 0, 0, 25), row(params(1.0, 0, 0.3, 0.0, 1.0f), RowSpec::Flat, 0, 0, 26)},
        2);
    // Near-flat rows (an untrained model): the top-k set is found by selection, not by sorting the candidates.
    add("vocab=50280 near-flat top-k", 50280, 0,
        {row(params(0.8, 50, 0.95), RowSpec::NearFlat, 0, 0, 27), row(params(1.0, 1), RowSpec::NearFlat, 0, 0, 28),
         row(params(0.8, 50, 0.95, 0.0, 1.2f), RowSpec::NearFlat, 0, 3000, 29), row(params(1.0, 50279), RowSpec::NearFlat, 0, 0, 30),
         row(params(1.0, 2500, 0.9), RowSpec::NearFlat, 7, 0, 32)},
        3);
    // Batches that need only some stages (the CUDA backend launches only those).
    add("vocab=5000 greedy rows only", 5000, 0,
        {row(params(0.0)), row(params(0.0, 0, 1, 0, 1.5f), RowSpec::Random, 0, 300), row(params(0.0), RowSpec::Ties)}, 3);
    add("vocab=5000 temperature/min-p rows only", 5000, 0,
        {row(params(0.7)), row(params(1.0, 0, 1, 0.1), RowSpec::Random, 0, 0, 41), row(params(0.0))}, 3);
    add("vocab=5000 top-k rows, no top-p", 5000, 0, {row(params(0.7, 20)), row(params(1.0, 7), RowSpec::Ties, 0, 0, 42)}, 3);
    add("vocab=5000 top-p rows, no top-k", 5000, 0, {row(params(0.7, 0, 0.8)), row(params(1.0, 0, 0.6), RowSpec::Ties, 0, 0, 43)}, 3);
    // Rejected rows: the lowest offending id is reported and nothing is drawn or marked; the other rows sample.
    add("vocab=1500 errors", 1500, 0,
        {row(params(1.0), RowSpec::NaNAt), row(params(0.0), RowSpec::PosInfAt), row(params(1.0), RowSpec::AllNegInf),
         row(params(1.0, 5, 0.9), RowSpec::Random, 1400, 0, 31)},
        1);
    t.push_back(Case{"sampleTokens.exp64", "vs std::exp", DTYPE_F32, "-", NEED_HOST_THREADS, false, [](Ops& o, uint64_t) {
                         Prepared p;
                         p.arena = std::make_shared<Arena>(o);
                         p.check = [] { return std::vector<Compare>{exp64Accuracy()}; };
                         return p;
                     }});
    return t;
}

}  // namespace optest
