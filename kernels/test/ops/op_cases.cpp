// THE table of op cases: every op of ops.h × shapes × storage dtype × GemmMode. Each case draws fresh
// random inputs from its own seed, uploads them, poisons every output with NaN, and compares what the
// backend wrote with the double-precision reference (reference.h).
//
// Tolerances (stated per case, printed with every result):
//   nmax = max|got − ref| / max|ref| over one output (the default);  rel = elementwise relative error;
//   bits = number of values whose bit patterns differ (tol 0).
// F32 numbers are set about 10× above what a correct f32 implementation shows on these shapes. Products
// with 16-bit storage compare against the ROUNDED weights; the activations may also be rounded by the
// backend (TF32/F16: 2⁻¹¹ relative, BF16: 2⁻⁹), which the per-dtype gemm tolerance allows for.
#include "op_test.h"
#include "reference.h"

#include <algorithm>
#include <array>
#include <functional>
#include <cmath>
#include <cstring>
#include <cstdarg>
#include <cstdio>
#include <limits>
#include <utility>
#include <stdexcept>

namespace optest {
namespace {

using ref::Vec;

constexpr float kNormEps = 1e-5f;
constexpr int kIgnore = -100;

// ---- tolerances (nmax unless said otherwise) ----
constexpr double kTolNorm = 1e-5;      // rmsnorm, rmsnormBackward
constexpr double kTolConv = 1e-5;      // convSilu, convSiluBackward
constexpr double kTolScan = 2e-5;      // selectiveScan (out, h, checkpoints)
constexpr double kTolScanBwd = 5e-5;   // selectiveScanBackward (sums over steps and states of f32 terms)
constexpr double kTolNegExp = 2e-6;    // rel
constexpr double kTolLoss = 1e-5;      // crossEntropy loss / dlogits, mse dy
constexpr double kTolSum = 1e-9;       // sumOfSquares, mse loss: rel, accumulated in double
constexpr double kTolAdamW = 1e-6;     // p, m, v
constexpr double kTolAdamWStep = 5e-5; // the update p_new − p_old, relative to its largest value

double gemmTol(int dtype) {
    switch (dtype) {
        case DTYPE_TF32: return 3e-3;  // activations may be rounded to 10 mantissa bits
        case DTYPE_BF16: return 1e-2;  // … to 7 mantissa bits
        case DTYPE_F16: return 3e-3;   // … to 10 mantissa bits
        default: return 1e-5;
    }
}
/** Elementwise outputs that may be computed from 16-bit-rounded activations. */
double activationTol(int dtype, double f32tol) { return std::max(f32tol, gemmTol(dtype)); }

std::string format(const char* f, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, f);
    std::vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    return buf;
}

const char* modeName(GemmMode m) {
    switch (m) {
        case GemmMode::Fast: return "fast";
        case GemmMode::Pedantic: return "pedantic";
        case GemmMode::Deterministic: return "det";
        default: return "repro";
    }
}
double storageBytes(int dtype) { return dtype == DTYPE_BF16 || dtype == DTYPE_F16 ? 2.0 : 4.0; }

using Outputs = std::vector<std::vector<float>>;

/** A double's 8 bytes as two floats, for bit-for-bit comparison of returned sums. */
std::vector<float> doubleBits(double d) {
    std::vector<float> v(2);
    std::memcpy(v.data(), &d, sizeof d);
    return v;
}

Prepared start(Ops& ops) {
    Prepared p;
    p.arena = std::make_shared<Arena>(ops);
    return p;
}

/** A weight uploaded in its storage type, and the values the reference must use. */
struct Weight {
    Matrix m{};
    Vec stored;   // the values the backend's storage holds (rounded for TF32/BF16/F16)
    Vec masters;  // the f32 values before rounding
};

/** W [out, in] uniform in ±bound; 16-bit types get their bits (and, when asked, the f32 masters). */
Weight putWeight(Arena& A, Rng& rng, int out, int in, int dtype, double bound, bool withMasters) {
    std::vector<float> w = uniform(rng, static_cast<int64_t>(out) * in, -bound, bound);
    Weight r;
    r.masters = toDouble(w);
    if (dtype == DTYPE_F32 || dtype == DTYPE_TF32) {
        if (dtype == DTYPE_TF32)
            for (float& v : w) v = roundToTf32(v);
        r.m = Matrix{A.put(w), nullptr, dtype, out, in};
        r.stored = toDouble(w);
        r.masters = r.stored;
    } else {
        std::vector<uint16_t> h(w.size());
        r.stored.resize(w.size());
        for (size_t i = 0; i < w.size(); ++i) {
            h[i] = roundToHalf(w[i], dtype);
            r.stored[i] = halfToFloat(h[i], dtype);
        }
        r.m = Matrix{withMasters ? A.put(w) : nullptr, A.putHalf(h), dtype, out, in};
    }
    return r;
}

/** Rows r % 4 == 3 scaled to about 1e-3, where eps inside the rms matters (catches a dropped or misplaced eps). */
void shrinkSomeRows(std::vector<float>& x, int64_t rows, int64_t ld, int64_t width) {
    for (int64_t r = 3; r < rows; r += 4)
        for (int64_t j = 0; j < width; ++j) x[r * ld + j] *= 2e-3f;
}

/** A [rows, ld] host buffer: random in the first width columns, poison in the padding. */
std::vector<float> padded(Rng& rng, int64_t rows, int64_t ld, int64_t width, double lo, double hi) {
    std::vector<float> v(static_cast<size_t>(rows * ld), poisonValue());
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < width; ++j) v[r * ld + j] = static_cast<float>(rng.uniform(lo, hi));
    return v;
}

// ================================================================ gemm

Prepared gemmForwardCase(Ops& ops, uint64_t seed, GemmMode mode, int dtype, int64_t rows, int out, int in, bool withBias,
                         float beta, bool pad) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const int64_t ldx = in + (pad ? 5 : 0), ldy = out + (pad ? 3 : 0);
    const std::vector<float> x = padded(rng, rows, ldx, in, -1, 1);
    const Weight w = putWeight(*A, rng, out, in, dtype, 1.0 / std::sqrt(in), false);
    const std::vector<float> bias = withBias ? uniform(rng, out, -0.5, 0.5) : std::vector<float>{};
    std::vector<float> y0 = beta != 0 ? padded(rng, rows, ldy, out, -1, 1)
                                      : std::vector<float>(static_cast<size_t>(rows * ldy), poisonValue());
    float* dy = A->put(y0);
    const Gemm g = Gemm::forward(mode, A->put(x), ldx, rows, w.m, withBias ? A->put(bias) : nullptr, dy, ldy, beta);
    p.call = [&ops, g] { ops.gemm(g); };
    const Vec want = ref::gemmForward(dense(x, rows, ldx, in), rows, w.stored, out, in, toDouble(bias), beta,
                                      dense(y0, rows, ldy, out));
    const double tol = gemmTol(dtype);
    p.check = [=] {
        const std::vector<float> got = A->get(dy, rows * ldy);
        return std::vector<Compare>{nmax("y", strip(got, rows, ldy, out), want, tol), padding("y", got, rows, ldy, out)};
    };
    p.outputs = [=] { return Outputs{A->get(dy, rows * ldy)}; };
    p.flops = 2.0 * rows * out * in;
    p.bytes = storageBytes(dtype) * out * in + 4.0 * rows * (in + out * (beta != 0 ? 2 : 1));
    return p;
}

/**
 * A forward product whose x comes rounded to W's 2-byte type (Gemm::a16, as the tape's producers write it): y against
 * the reference on the rounded x, and bit for bit the same product of the widened values in f32 — on every path: one
 * that rounds x itself (CUDA's cuBLAS path, the tensor-core tier) rounds them to themselves, one that does not (the
 * gemv, the CPU) multiplies them as they are.
 */
Prepared gemmRoundedInputCase(Ops& ops, uint64_t seed, GemmMode mode, int dtype, int64_t rows, int out, int in, int64_t ld16,
                              bool bias) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const std::vector<float> x = padded(rng, rows, in, in, -1, 1);
    std::vector<uint16_t> x16(static_cast<size_t>(rows * ld16), 0xDEADu);
    std::vector<float> xr(static_cast<size_t>(rows * in));  // the rounded values in f32
    for (int64_t r = 0; r < rows; ++r)
        for (int k = 0; k < in; ++k) {
            x16[r * ld16 + k] = roundToHalf(x[r * in + k], dtype);
            xr[r * in + k] = halfToFloat(x16[r * ld16 + k], dtype);
        }
    const Weight w = putWeight(*A, rng, out, in, dtype, 1.0 / std::sqrt(in), false);
    const std::vector<float> b = uniform(rng, out, -0.5, 0.5), y0 = uniform(rng, rows * out, -1, 1);
    const float* db = bias ? A->put(b) : nullptr;
    const void* dx16 = A->putHalf(x16);
    const float beta = bias ? 0.f : 1.f;
    float* y = A->put(y0);
    const Gemm g = Gemm::forward(mode, nullptr, in, rows, w.m, db, y, out, beta).withRoundedInput(dx16, ld16);
    p.call = [&ops, g] { ops.gemm(g); };
    const Vec want = ref::gemmForward(toDouble(xr), rows, w.stored, out, in, bias ? toDouble(b) : Vec{}, beta, toDouble(y0));
    p.check = [=, &ops] {
        const std::vector<float> got = A->get(y, rows * out);
        float* yPlain = A->put(y0);
        ops.gemm(Gemm::forward(mode, A->put(xr), in, rows, w.m, db, yPlain, out, beta));
        return std::vector<Compare>{nmax("y", got, want, gemmTol(dtype)),
                                    bits("y = the product of the widened x", got, A->get(yPlain, rows * out))};
    };
    p.outputs = [=] { return Outputs{A->get(y, rows * out)}; };
    p.flops = 2.0 * rows * out * in;
    return p;
}

/**
 * A forward product that also leaves its x rounded to W's 2-byte type (Gemm::keep16) for the weight gradient: y bit for
 * bit the same product without keep16, and the kept values bit for bit x rounded to nearest even. Backends that do
 * not round their operands (no Capabilities::rounds_backward_operands) must refuse keep16 with invalid_argument.
 */
Prepared gemmKeepCase(Ops& ops, uint64_t seed, GemmMode mode, int dtype, int64_t rows, int out, int in) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const int64_t ldx = in + 3;
    const std::vector<float> x = padded(rng, rows, ldx, in, -1, 1);
    const Weight w = putWeight(*A, rng, out, in, dtype, 1.0 / std::sqrt(in), false);
    const float* dx = A->put(x);
    float *y = A->poisoned(rows * out), *yPlain = A->poisoned(rows * out);
    float* keep = A->poisoned((rows * in + 1) / 2);
    const Gemm g = Gemm::forward(mode, dx, ldx, rows, w.m, nullptr, y, out, 0.f).keepingRoundedX(keep);
    if (!ops.capabilities().rounds_backward_operands) {
        p.check = [=, &ops] {
            double refused = 0;
            try {
                ops.gemm(g);
            } catch (const std::invalid_argument&) {
                refused = 1;
            }
            return std::vector<Compare>{Compare{"keep16 refused (invalid_argument)", "bits", 1 - refused, 0}};
        };
        return p;
    }
    p.call = [&ops, g] { ops.gemm(g); };
    const Vec want = ref::gemmForward(dense(x, rows, ldx, in), rows, w.stored, out, in, {}, 0.f, {});
    std::vector<uint16_t> wantKeep;
    for (int64_t r = 0; r < rows; ++r)
        for (int k = 0; k < in; ++k) wantKeep.push_back(roundToHalf(x[r * ldx + k], dtype));
    p.check = [=, &ops] {
        const std::vector<float> got = A->get(y, rows * out);
        ops.gemm(Gemm::forward(mode, dx, ldx, rows, w.m, nullptr, yPlain, out, 0.f));
        return std::vector<Compare>{nmax("y", got, want, gemmTol(dtype)),
                                    bits("y = the product without keep16", got, A->get(yPlain, rows * out)),
                                    bits16("keep16 = round(x)", A->getHalf(keep, rows * in), wantKeep)};
    };
    p.outputs = [=] { return Outputs{A->get(y, rows * out)}; };
    p.flops = 2.0 * rows * out * in;
    return p;
}

/**
 * GEMM_DETERMINISTIC's promise, batch invariance: a probe row's output is bitwise the same whether it is computed
 * alone or among M − 1 other rows of random content, at any position, for every M in `batches` (and for y with
 * beta = 1 and a bias). The reference check of the M = 1 run keeps the kernel honest. A prefill's or a forward's
 * products are such products over B·T rows, so this is also "step, prefill and forward agree for the GEMM part".
 */
Prepared gemmInvarianceCase(Ops& ops, uint64_t seed, int dtype, int out, int in, std::vector<int64_t> batches) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const Weight w = putWeight(*A, rng, out, in, dtype, 1.0 / std::sqrt(in), false);
    const std::vector<float> bias = uniform(rng, out, -0.5, 0.5);
    const std::vector<float> probe = uniform(rng, in, -1, 1), probeY = uniform(rng, out, -1, 1);
    const float* dbias = A->put(bias);
    struct Run {
        int64_t rows, at;
        float* y;
        Gemm g;
    };
    auto runs = std::make_shared<std::vector<Run>>();
    for (int64_t M : batches) {
        std::vector<float> x = uniform(rng, M * in, -1, 1), y = uniform(rng, M * out, -1, 1);
        const int64_t at = (M - 1) / 2 + (M > 3 ? 1 : 0);  // not always row 0
        std::copy(probe.begin(), probe.end(), x.begin() + at * in);
        std::copy(probeY.begin(), probeY.end(), y.begin() + at * out);
        float* dy = A->put(y);
        runs->push_back(Run{M, at, dy, Gemm::forward(GemmMode::Deterministic, A->put(x), in, M, w.m, dbias, dy, out, 1.f)});
    }
    p.call = [&ops, runs] {
        for (const Run& r : *runs) ops.gemm(r.g);
    };
    const Vec want = ref::gemmForward(toDouble(probe), 1, w.stored, out, in, toDouble(bias), 1.f, toDouble(probeY));
    p.check = [=] {
        std::vector<Compare> cmp;
        const std::vector<float> alone = A->get(runs->front().y, out);
        cmp.push_back(nmax("y (B=1)", alone, want, gemmTol(dtype)));
        for (size_t i = 1; i < runs->size(); ++i) {
            const Run& r = (*runs)[i];
            const std::vector<float> all = A->get(r.y, r.rows * out);
            const std::vector<float> row(all.begin() + r.at * out, all.begin() + (r.at + 1) * out);
            cmp.push_back(bits("y row " + std::to_string(r.at) + " of B=" + std::to_string(r.rows) + " vs B=1", row, alone));
        }
        return cmp;
    };
    return p;
}

/**
 * On the CPU, GEMM_DETERMINISTIC equals a plain scalar statement of its fixed order bit for bit: lane j of 8
 * accumulates x[k]·w[k] (one fma) for k ≡ j mod 8, then ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)).
 */
Prepared gemmFixedOrderCase(Ops& ops, uint64_t seed, GemmMode mode, int dtype, int64_t rows, int out, int in) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const std::vector<float> x = uniform(rng, rows * in, -1, 1);
    // 16-bit weights: the kernel widens them exactly, so the scalar order runs on the widened values.
    const Weight wt = putWeight(*A, rng, out, in, dtype, 1.0, false);
    const std::vector<float> w(wt.stored.begin(), wt.stored.end());
    float* dy = A->poisoned(rows * out);
    const Gemm g = Gemm::forward(mode, A->put(x), in, rows, wt.m, nullptr, dy, out, 0.f);
    p.call = [&ops, g] { ops.gemm(g); };
    std::vector<float> want(static_cast<size_t>(rows * out));
    for (int64_t r = 0; r < rows; ++r)
        for (int o = 0; o < out; ++o) {
            float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int k = 0; k < in; ++k) l[k % 8] = std::fma(x[r * in + k], w[static_cast<int64_t>(o) * in + k], l[k % 8]);
            want[r * out + o] = 0.f + (((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7])));
        }
    p.check = [=] { return std::vector<Compare>{bits("y vs the scalar fixed order", A->get(dy, rows * out), want)}; };
    return p;
}

/**
 * A product of a real model's shape for the GEMM table (--time): only three sampled rows are checked against the
 * double reference, so even M = 4096 prepares in moments.
 */
Prepared gemmShapeCase(Ops& ops, uint64_t seed, GemmMode mode, int dtype, int64_t rows, int out, int in) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const std::vector<float> x = uniform(rng, rows * in, -1, 1);
    const Weight w = putWeight(*A, rng, out, in, dtype, 1.0 / std::sqrt(in), false);
    float* dy = A->poisoned(rows * out);
    const Gemm g = Gemm::forward(mode, A->put(x), in, rows, w.m, nullptr, dy, out, 0.f);
    p.call = [&ops, g] { ops.gemm(g); };
    const int64_t sample[] = {0, rows / 2, rows - 1};
    std::vector<double> xs;
    for (int64_t r : sample) xs.insert(xs.end(), x.begin() + r * in, x.begin() + (r + 1) * in);
    const Vec want = ref::gemmForward(xs, 3, w.stored, out, in, Vec{}, 0.f, Vec(3 * static_cast<size_t>(out), 0.0));
    p.check = [=] {
        const std::vector<float> got = A->get(dy, rows * out);
        std::vector<float> rowsGot;
        for (int64_t r : sample) rowsGot.insert(rowsGot.end(), got.begin() + r * out, got.begin() + (r + 1) * out);
        return std::vector<Compare>{nmax("y (3 sampled rows)", rowsGot, want, gemmTol(dtype))};
    };
    p.flops = 2.0 * rows * out * in;
    p.bytes = storageBytes(dtype) * out * in + 4.0 * rows * (in + out);
    return p;
}

Prepared gemmBackwardDataCase(Ops& ops, uint64_t seed, int dtype, int64_t rows, int out, int in, float beta, bool pad) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const int64_t lddy = out + (pad ? 4 : 0), lddx = in + (pad ? 6 : 0);
    const std::vector<float> dy = padded(rng, rows, lddy, out, -1, 1);
    // A 16-bit matrix carries its masters (the CPU's operand) and its 2-byte copy (CUDA's tensor-core operand).
    const Weight w = putWeight(*A, rng, out, in, dtype, 1.0 / std::sqrt(out), true);
    std::vector<float> dx0 = beta != 0 ? padded(rng, rows, lddx, in, -1, 1)
                                       : std::vector<float>(static_cast<size_t>(rows * lddx), poisonValue());
    float* ddx = A->put(dx0);
    const Gemm g = Gemm::backwardData(GemmMode::Reproducible, A->put(dy), lddy, rows, w.m, ddx, lddx, beta);
    p.call = [&ops, g] { ops.gemm(g); };
    const Vec want = ref::gemmBackwardData(dense(dy, rows, lddy, out), rows, w.masters, out, in, beta,
                                           dense(dx0, rows, lddx, in));
    p.check = [=] {
        const std::vector<float> got = A->get(ddx, rows * lddx);
        return std::vector<Compare>{nmax("dx", strip(got, rows, lddx, in), want, gemmTol(dtype)),
                                    padding("dx", got, rows, lddx, in)};
    };
    p.outputs = [=] { return Outputs{A->get(ddx, rows * lddx)}; };
    p.flops = 2.0 * rows * out * in;
    p.bytes = 4.0 * out * in + 4.0 * rows * (out + in * (beta != 0 ? 2 : 1));
    return p;
}

Prepared gemmWeightGradCase(Ops& ops, uint64_t seed, int dtype, int64_t rows, int out, int in, bool withBias, bool pad) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const int64_t lddy = out + (pad ? 3 : 0), ldx = in + (pad ? 7 : 0);
    const std::vector<float> dy = padded(rng, rows, lddy, out, -1, 1), x = padded(rng, rows, ldx, in, -1, 1);
    const std::vector<float> dw0 = uniform(rng, static_cast<int64_t>(out) * in, -0.5, 0.5);  // accumulated into
    const std::vector<float> db0 = uniform(rng, out, -0.5, 0.5);
    float* ddw = A->put(dw0);
    float* ddb = withBias ? A->put(db0) : nullptr;
    const Gemm g = Gemm::weightGrad(GemmMode::Reproducible, dtype, A->put(dy), lddy, A->put(x), ldx, rows, out, in, ddw, ddb);
    p.call = [&ops, g] { ops.gemm(g); };
    Vec wantW = toDouble(dw0), wantB = toDouble(db0);
    ref::gemmWeightGrad(dense(dy, rows, lddy, out), dense(x, rows, ldx, in), rows, out, in, wantW,
                        withBias ? &wantB : nullptr);
    p.check = [=] {
        // (16-bit operands: dy and x rounded; the bias gradient sums the unrounded dy in f32 on every backend)
        std::vector<Compare> c{nmax("dw", A->get(ddw, static_cast<int64_t>(out) * in), wantW, gemmTol(dtype))};
        if (withBias) c.push_back(nmax("dbias", A->get(ddb, out), wantB, gemmTol(DTYPE_F32)));
        return c;
    };
    p.outputs = [=] {
        Outputs o{A->get(ddw, static_cast<int64_t>(out) * in)};
        if (withBias) o.push_back(A->get(ddb, out));
        return o;
    };
    p.flops = 2.0 * rows * out * in;
    p.bytes = 4.0 * (2.0 * out * in + rows * (out + in));
    return p;
}

/**
 * Ops::linearBackward: a weight's input gradient (beta) and weight gradient (accumulated, with dbias) over one dy, each
 * against its double reference as the two separate products are.
 */
Prepared linearBackwardCase(Ops& ops, uint64_t seed, int dtype, int64_t rows, int out, int in, float beta, bool pad) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const int64_t lddy = out + (pad ? 3 : 0), ldx = in + (pad ? 7 : 0), lddx = in + (pad ? 5 : 0);
    const std::vector<float> dy = padded(rng, rows, lddy, out, -1, 1), x = padded(rng, rows, ldx, in, -1, 1);
    const Weight w = putWeight(*A, rng, out, in, dtype, 1.0 / std::sqrt(out), true);
    const std::vector<float> dx0 = beta != 0 ? padded(rng, rows, lddx, in, -1, 1)
                                             : std::vector<float>(static_cast<size_t>(rows * lddx), poisonValue());
    const std::vector<float> dw0 = uniform(rng, static_cast<int64_t>(out) * in, -0.5, 0.5), db0 = uniform(rng, out, -0.5, 0.5);
    float* ddx = A->put(dx0);
    float* ddw = A->put(dw0);
    float* ddb = A->put(db0);
    const float* ddy = A->put(dy);
    const Gemm data = Gemm::backwardData(GemmMode::Reproducible, ddy, lddy, rows, w.m, ddx, lddx, beta);
    const Gemm weight = Gemm::weightGrad(GemmMode::Reproducible, dtype, ddy, lddy, A->put(x), ldx, rows, out, in, ddw, ddb);
    p.call = [&ops, data, weight] { ops.linearBackward(data, weight); };
    const Vec dyd = dense(dy, rows, lddy, out);
    const Vec wantX = ref::gemmBackwardData(dyd, rows, w.masters, out, in, beta, dense(dx0, rows, lddx, in));
    Vec wantW = toDouble(dw0), wantB = toDouble(db0);
    ref::gemmWeightGrad(dyd, dense(x, rows, ldx, in), rows, out, in, wantW, &wantB);
    p.check = [=] {
        const std::vector<float> got = A->get(ddx, rows * lddx);
        return std::vector<Compare>{nmax("dx", strip(got, rows, lddx, in), wantX, gemmTol(dtype)),
                                    padding("dx", got, rows, lddx, in),
                                    nmax("dw", A->get(ddw, static_cast<int64_t>(out) * in), wantW, gemmTol(dtype)),
                                    nmax("dbias", A->get(ddb, out), wantB, gemmTol(DTYPE_F32))};
    };
    p.outputs = [=] {
        return Outputs{A->get(ddx, rows * lddx), A->get(ddw, static_cast<int64_t>(out) * in), A->get(ddb, out)};
    };
    p.flops = 4.0 * rows * out * in;
    p.bytes = 4.0 * (3.0 * out * in + rows * (out + 2.0 * in));
    return p;
}

/**
 * Ops::linearBackward with dy handed over already rounded to the weight's 2-byte type (Gemm::a16, rows lddy apart, as
 * the LM loss does): against the double reference on the rounded dy, and bit for bit against the same call with that
 * dy widened to f32 (a backend that rounds dy itself rounds it to the same values).
 */
Prepared linearBackwardRoundedCase(Ops& ops, uint64_t seed, int dtype, int64_t rows, int out, int in, float beta,
                                   int64_t lddy, int64_t ldx, bool roundDy, bool roundX) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const int64_t lddx = in + 5;
    const std::vector<float> dy = padded(rng, rows, lddy, out, -1, 1), x = padded(rng, rows, ldx, in, -1, 1);
    // the operands handed over rounded, and the f32 values they stand for
    auto round = [dtype](const std::vector<float>& v, std::vector<uint16_t>& v16, std::vector<float>& wide) {
        v16.resize(v.size());
        wide.resize(v.size());
        for (size_t i = 0; i < v.size(); ++i) {
            v16[i] = roundToHalf(v[i], dtype);
            wide[i] = halfToFloat(v16[i], dtype);
        }
    };
    std::vector<uint16_t> dy16, x16;
    std::vector<float> dyWide, xWide;
    round(dy, dy16, dyWide);
    round(x, x16, xWide);
    if (!roundDy) dyWide = dy;
    if (!roundX) xWide = x;
    const Weight w = putWeight(*A, rng, out, in, dtype, 1.0 / std::sqrt(out), true);
    const std::vector<float> dx0 = padded(rng, rows, lddx, in, -1, 1);
    const std::vector<float> dw0 = uniform(rng, static_cast<int64_t>(out) * in, -0.5, 0.5);
    struct Outs { float *dx, *dw; };
    auto outs = [=] { return Outs{A->put(dx0), A->put(dw0)}; };
    const Outs rounded = outs(), plain = outs();
    const float* dyF = A->put(dyWide);
    const float* xF = A->put(xWide);
    Gemm data = Gemm::backwardData(GemmMode::Reproducible, dyF, lddy, rows, w.m, rounded.dx, lddx, beta);
    Gemm weight = Gemm::weightGrad(GemmMode::Reproducible, dtype, dyF, lddy, xF, ldx, rows, out, in, rounded.dw, nullptr);
    if (roundDy) {
        const void* d16 = A->putHalf(dy16);
        data = data.withRoundedDy(d16, lddy);
        weight = weight.withRoundedDy(d16, lddy);
    }
    if (roundX) weight = weight.withRoundedX(A->putHalf(x16), ldx);
    p.call = [&ops, data, weight] { ops.linearBackward(data, weight); };
    const Vec dyd = dense(dyWide, rows, lddy, out);
    const Vec wantX = ref::gemmBackwardData(dyd, rows, w.masters, out, in, beta, dense(dx0, rows, lddx, in));
    Vec wantW = toDouble(dw0);
    ref::gemmWeightGrad(dyd, dense(xWide, rows, ldx, in), rows, out, in, wantW, nullptr);
    p.check = [=, &ops] {
        const std::vector<float> gotX = A->get(rounded.dx, rows * lddx);
        const std::vector<float> gotW = A->get(rounded.dw, static_cast<int64_t>(out) * in);
        // the same products over the f32 operands the rounded ones stand for
        ops.linearBackward(
            Gemm::backwardData(GemmMode::Reproducible, dyF, lddy, rows, w.m, plain.dx, lddx, beta),
            Gemm::weightGrad(GemmMode::Reproducible, dtype, dyF, lddy, xF, ldx, rows, out, in, plain.dw, nullptr));
        return std::vector<Compare>{nmax("dx", strip(gotX, rows, lddx, in), wantX, gemmTol(dtype)),
                                    padding("dx", gotX, rows, lddx, in),
                                    nmax("dw", gotW, wantW, gemmTol(dtype)),
                                    bits("dx = f32 path", gotX, A->get(plain.dx, rows * lddx)),
                                    bits("dw = f32 path", gotW, A->get(plain.dw, static_cast<int64_t>(out) * in))};
    };
    p.outputs = [=] {
        return Outputs{A->get(rounded.dx, rows * lddx), A->get(rounded.dw, static_cast<int64_t>(out) * in)};
    };
    p.flops = 4.0 * rows * out * in;
    return p;
}

// ================================================================ norms

/** An rmsnorm case's rows x ([rows, ldx], some rows shrunk toward eps) and weight w [d]. */
std::pair<std::vector<float>, std::vector<float>> rmsnormInputs(Rng& rng, int64_t rows, int64_t ldx, int d) {
    std::vector<float> x = padded(rng, rows, ldx, d, -2, 2);
    shrinkSomeRows(x, rows, ldx, d);
    return {x, uniform(rng, d, 0.5, 1.5)};
}

Prepared rmsnormCase(Ops& ops, uint64_t seed, int64_t rows, int d) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const int64_t ldx = d + 4, ldy = d + 2;
    const auto [x, w] = rmsnormInputs(rng, rows, ldx, d);
    float* dy = A->poisoned(rows * ldy);
    const RmsNormArgs a{A->put(x), ldx, A->put(w), rows, d, kNormEps, dy, ldy};
    p.call = [&ops, a] { ops.rmsnorm(a); };
    const Vec want = ref::rmsnorm(dense(x, rows, ldx, d), rows, d, toDouble(w), kNormEps);
    p.check = [=] {
        const std::vector<float> got = A->get(dy, rows * ldy);
        return std::vector<Compare>{nmax("y", strip(got, rows, ldy, d), want, kTolNorm), padding("y", got, rows, ldy, d)};
    };
    p.bytes = 4.0 * (2.0 * rows * d + d);
    return p;
}

/** aligned: rows of exactly d floats (the model's layout, where the rmsnorm sums 16-byte chunks); else padded. */
Prepared normLinearCase(Ops& ops, uint64_t seed, GemmMode mode, int dtype, int64_t rows, int d, int out, bool withBias,
                        bool aligned = false) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const int64_t ldx = aligned ? d : d + 3, ldn = aligned ? d : d + 1, ldo = out + 2;
    std::vector<float> x = padded(rng, rows, ldx, d, -2, 2);
    shrinkSomeRows(x, rows, ldx, d);
    const std::vector<float> nw = uniform(rng, d, 0.5, 1.5);
    const Weight w = putWeight(*A, rng, out, d, dtype, 1.0 / std::sqrt(d), false);
    const std::vector<float> bias = withBias ? uniform(rng, out, -0.5, 0.5) : std::vector<float>{};
    float* dn = A->poisoned(rows * ldn);
    float* dout = A->poisoned(rows * ldo);
    const float *dx = A->put(x), *dnw = A->put(nw), *db = withBias ? A->put(bias) : nullptr;
    const RmsNormArgs norm{dx, ldx, dnw, rows, d, kNormEps, dn, ldn};
    const Gemm lin = Gemm::forward(mode, dn, ldn, rows, w.m, db, dout, ldo, 0.f);
    // DETERMINISTIC promises the bits of the two ops run apart (a decode step's fused product = a prefill's rmsnorm
    // kernel + product): a twin runs them apart.
    const bool det = mode == GemmMode::Deterministic;
    float* dn2 = det ? A->poisoned(rows * ldn) : nullptr;
    float* dout2 = det ? A->poisoned(rows * ldo) : nullptr;
    const RmsNormArgs norm2{dx, ldx, dnw, rows, d, kNormEps, dn2, ldn};
    const Gemm lin2 = Gemm::forward(mode, dn2, ldn, rows, w.m, db, dout2, ldo, 0.f);
    p.call = [&ops, norm, lin, det, norm2, lin2] {
        ops.normLinear(norm, lin);
        if (det) {
            ops.rmsnorm(norm2);
            ops.gemm(lin2);
        }
    };
    // The named fusion must equal rmsnorm, then the product of the normalised rows.
    const Vec n = ref::rmsnorm(dense(x, rows, ldx, d), rows, d, toDouble(nw), kNormEps);
    const Vec y = ref::gemmForward(n, rows, w.stored, out, d, toDouble(bias), 0.0, {});
    const double ntol = activationTol(dtype, kTolNorm), ytol = gemmTol(dtype) + kTolNorm;
    p.check = [=] {
        const std::vector<float> gn = A->get(dn, rows * ldn), gy = A->get(dout, rows * ldo);
        std::vector<Compare> c{nmax("norm.y", strip(gn, rows, ldn, d), n, ntol), padding("norm.y", gn, rows, ldn, d),
                               nmax("y", strip(gy, rows, ldo, out), y, ytol), padding("y", gy, rows, ldo, out)};
        if (det) {
            const std::vector<float> gn2 = A->get(dn2, rows * ldn), gy2 = A->get(dout2, rows * ldo);
            c.push_back(bits("norm.y = rmsnorm apart", strip(gn, rows, ldn, d), strip(gn2, rows, ldn, d)));
            c.push_back(bits("y = rmsnorm + gemm apart", strip(gy, rows, ldo, out), strip(gy2, rows, ldo, out)));
        }
        return c;
    };
    p.flops = 2.0 * rows * out * d;
    p.bytes = storageBytes(dtype) * out * d + 4.0 * rows * (2 * d + out);
    return p;
}

/**
 * normLinearConv (decode's in_proj then conv): B rows of one step, the product [x | z] = rmsnorm(h)·Wᵀ (2·E outputs),
 * then u = SiLU(conv(history ++ x)) over the first E outputs. Against the double reference, and bit for bit against
 * the same backend running normLinear and convSilu separately (a fused epilogue must be the conv kernel's step).
 */
Prepared normLinearConvCase(Ops& ops, uint64_t seed, GemmMode mode, int dtype, int B, int d, int E, int K,
                            bool aligned = false) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const int64_t ldx = aligned ? d : d + 3, ldn = aligned ? d : d + 1, ldo = 2 * E + 2, ldu = E + 4, H = static_cast<int64_t>(E) * (K - 1), hstride = H + 3;
    const std::vector<float> x = padded(rng, B, ldx, d, -2, 2);
    const std::vector<float> nw = uniform(rng, d, 0.5, 1.5);
    const Weight w = putWeight(*A, rng, 2 * E, d, dtype, 1.0 / std::sqrt(d), false);
    const std::vector<float> cw = uniform(rng, static_cast<int64_t>(E) * K, -1.5 / std::sqrt(K), 1.5 / std::sqrt(K));
    const std::vector<float> cb = uniform(rng, E, -0.5, 0.5);
    const std::vector<float> hist = padded(rng, B, hstride, H, -1, 1);
    const float *dx = A->put(x), *dnw = A->put(nw), *dcw = A->put(cw), *dcb = A->put(cb);
    // the fused call and its separate twin, each with its own outputs and history
    float *dn = A->poisoned(B * ldn), *dxz = A->poisoned(B * ldo), *du = A->poisoned(B * ldu), *dh = A->put(hist);
    float *dn2 = A->poisoned(B * ldn), *dxz2 = A->poisoned(B * ldo), *du2 = A->poisoned(B * ldu), *dh2 = A->put(hist);
    const RmsNormArgs norm{dx, ldx, dnw, B, d, kNormEps, dn, ldn}, norm2{dx, ldx, dnw, B, d, kNormEps, dn2, ldn};
    const Gemm lin = Gemm::forward(mode, dn, ldn, B, w.m, nullptr, dxz, ldo, 0.f);
    const Gemm lin2 = Gemm::forward(mode, dn2, ldn, B, w.m, nullptr, dxz2, ldo, 0.f);
    const ConvArgs conv{dxz, ldo, dcw, dcb, dh, hstride, du, ldu, B, 1, E, K};
    const ConvArgs conv2{dxz2, ldo, dcw, dcb, dh2, hstride, du2, ldu, B, 1, E, K};
    // The twin: DETERMINISTIC promises the bits of rmsnorm, product and conv run apart (a prefill's); the fast modes
    // the conv kernel's step behind their own normLinear (a fused rmsnorm may sum in another order there).
    const bool det = mode == GemmMode::Deterministic;
    p.call = [&ops, norm, lin, conv, norm2, lin2, conv2, det] {
        ops.normLinearConv(norm, lin, conv);
        if (det) {
            ops.rmsnorm(norm2);
            ops.gemm(lin2);
        } else {
            ops.normLinear(norm2, lin2);
        }
        ops.convSilu(conv2);
    };
    const Vec n = ref::rmsnorm(dense(x, B, ldx, d), B, d, toDouble(nw), kNormEps);
    const Vec y = ref::gemmForward(n, B, w.stored, 2 * E, d, {}, 0.0, {});
    ref::ConvProblem cp;
    cp.batch = B, cp.steps = 1, cp.channels = E, cp.width = K;
    cp.x.resize(static_cast<size_t>(B) * E);
    for (int b = 0; b < B; ++b)
        for (int e = 0; e < E; ++e) cp.x[static_cast<size_t>(b) * E + e] = y[static_cast<size_t>(b) * 2 * E + e];
    cp.w = toDouble(cw);
    cp.bias = toDouble(cb);
    cp.history = dense(hist, B, hstride, H);
    const ref::ConvResult want = ref::convSilu(cp);
    const double ytol = gemmTol(dtype) + kTolNorm, utol = ytol + kTolConv;
    p.check = [=] {
        const std::vector<float> gn = A->get(dn, B * ldn), gy = A->get(dxz, B * ldo), gu = A->get(du, B * ldu),
                                 gh = A->get(dh, B * hstride);
        const std::vector<float> gy2 = A->get(dxz2, B * ldo), gu2 = A->get(du2, B * ldu), gh2 = A->get(dh2, B * hstride);
        return std::vector<Compare>{nmax("norm.y", strip(gn, B, ldn, d), n, activationTol(dtype, kTolNorm)),
                                    nmax("xz", strip(gy, B, ldo, 2 * E), y, ytol), padding("xz", gy, B, ldo, 2 * E),
                                    nmax("u", strip(gu, B, ldu, E), want.u, utol), padding("u", gu, B, ldu, E),
                                    nmax("history", strip(gh, B, hstride, H), want.history, ytol),
                                    padding("history", gh, B, hstride, H),
                                    bits("xz = separate ops", strip(gy, B, ldo, 2 * E), strip(gy2, B, ldo, 2 * E)),
                                    bits("u = separate ops", strip(gu, B, ldu, E), strip(gu2, B, ldu, E)),
                                    bits("history = separate ops", strip(gh, B, hstride, H), strip(gh2, B, hstride, H))};
    };
    p.flops = 2.0 * B * 2 * E * d;
    p.bytes = storageBytes(dtype) * 2.0 * E * d + 4.0 * B * (d + 3 * E + 2 * H);
    return p;
}

// aligned: every leading dimension a multiple of 4 (with d % 4 == 0, CUDA's float4 path), else odd paddings.
Prepared rmsnormBackwardCase(Ops& ops, uint64_t seed, int64_t rows, int d, float beta, bool tiny, bool aligned = false) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const int64_t ldx = d + (aligned ? 4 : 3), lddy = d + (aligned ? 0 : 5), lddx = d + (aligned ? 8 : 2);
    // tiny: every row about 1e-3, where eps matters (mixed rows would let the tiny ones, whose gradients are
    // ~1/rms larger, dominate the normalisation of the comparison).
    const std::vector<float> x = padded(rng, rows, ldx, d, tiny ? -4e-3 : -2, tiny ? 4e-3 : 2);
    const std::vector<float> w = uniform(rng, d, 0.5, 1.5);
    const std::vector<float> dyv = padded(rng, rows, lddy, d, -1, 1);
    const std::vector<float> dx0 = beta != 0 ? padded(rng, rows, lddx, d, -1, 1)
                                             : std::vector<float>(static_cast<size_t>(rows * lddx), poisonValue());
    const std::vector<float> dw0 = uniform(rng, d, -0.5, 0.5);
    float* ddx = A->put(dx0);
    float* ddw = A->put(dw0);
    const RmsNormBackwardArgs a{A->put(x), ldx, A->put(w), A->put(dyv), lddy, rows, d, kNormEps, ddx, lddx, beta, ddw};
    p.call = [&ops, a] { ops.rmsnormBackward(a); };
    Vec wantX, wantW = toDouble(dw0);
    ref::rmsnormBackward(dense(x, rows, ldx, d), rows, d, toDouble(w), dense(dyv, rows, lddy, d), kNormEps, beta,
                         dense(dx0, rows, lddx, d), wantX, wantW);
    p.check = [=] {
        const std::vector<float> gx = A->get(ddx, rows * lddx);
        return std::vector<Compare>{nmax("dx", strip(gx, rows, lddx, d), wantX, kTolNorm),
                                    padding("dx", gx, rows, lddx, d), nmax("dw", A->get(ddw, d), wantW, kTolNorm)};
    };
    p.outputs = [=] { return Outputs{A->get(ddx, rows * lddx), A->get(ddw, d)}; };
    p.bytes = 4.0 * rows * d * (beta != 0 ? 4 : 3);
    return p;
}

// ================================================================ small inference stages

Prepared embedCase(Ops& ops, uint64_t seed, int dtype, int vocab, int d, int64_t rows) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const std::vector<float> table = uniform(rng, static_cast<int64_t>(vocab) * d, -1, 1);
    std::vector<float> stored(table.size());  // what the table holds after rounding to its storage type
    Matrix m{};
    if (dtype == DTYPE_F32) {
        stored = table;
        m = Matrix::f32Of(A->put(table), vocab, d);
    } else {
        std::vector<uint16_t> h(table.size());
        for (size_t i = 0; i < h.size(); ++i) {
            h[i] = roundToHalf(table[i], dtype);
            stored[i] = halfToFloat(h[i], dtype);
        }
        m = Matrix{nullptr, A->putHalf(h), dtype, vocab, d};
    }
    std::vector<int32_t> ids(static_cast<size_t>(rows));
    for (auto& id : ids) id = rng.below(vocab);
    ids[0] = vocab - 1;                        // the last row of the table
    if (rows > 2) ids[rows - 1] = ids[1];      // a repeated id
    if (rows > 3) ids[2] = 0;
    float* dout = A->poisoned(rows * d);
    const int32_t* dids = A->putInts(ids);
    p.call = [&ops, m, dids, rows, dout] { ops.embed(m, dids, rows, dout); };
    std::vector<float> want(static_cast<size_t>(rows * d));
    for (int64_t r = 0; r < rows; ++r)
        for (int j = 0; j < d; ++j) want[r * d + j] = stored[static_cast<int64_t>(ids[r]) * d + j];
    p.check = [=] { return std::vector<Compare>{bits("out", A->get(dout, rows * d), want)}; };
    p.bytes = (storageBytes(dtype) + 4.0) * rows * d;
    return p;
}

Prepared negExpCase(Ops& ops, uint64_t seed, int channels, int d_state) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const int64_t n = static_cast<int64_t>(channels) * d_state;
    std::vector<float> a_log(static_cast<size_t>(n));
    for (int c = 0; c < channels; ++c)
        for (int s = 0; s < d_state; ++s)  // S4D-real log(1..N), jittered; then some trained-looking extremes
            a_log[static_cast<int64_t>(c) * d_state + s] = static_cast<float>(std::log(s + 1.0) + rng.uniform(-0.3, 0.3));
    for (int i = 0; i < std::min<int64_t>(n, 8); ++i) a_log[i] = static_cast<float>(rng.uniform(-6, 8));
    float* da = A->poisoned(n);
    const float* dl = A->put(a_log);
    p.call = [&ops, dl, da, n] { ops.negExp(dl, da, n); };
    Vec want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) want[i] = -std::exp(static_cast<double>(a_log[i]));
    p.check = [=] { return std::vector<Compare>{rel("a", A->get(da, n), want, kTolNegExp)}; };
    p.bytes = 8.0 * n;
    return p;
}

// ---- toLowPrecision / fromLowPrecision: exact ----

/** f32 inputs that exercise round-to-nearest-even: ties (both parities), neighbours of ties, overflow, subnormals. */
std::vector<float> roundingInputs(Rng& rng, int dtype) {
    std::vector<float> v;
    auto fromBits = [](uint32_t b) {
        float f;
        std::memcpy(&f, &b, 4);
        return f;
    };
    const uint32_t lowMask = dtype == DTYPE_BF16 ? 0xFFFFu : 0x1FFFu;  // f32 mantissa bits below the 16-bit type's
    for (int i = 0; i < 2000; ++i) {
        // A random finite value in the type's range; then its low bits set to a tie, tie ± 1, all ones or zero.
        const double mag = dtype == DTYPE_BF16 ? std::ldexp(1.0, rng.below(200) - 100) : std::ldexp(1.0, rng.below(29) - 14);
        const float base = static_cast<float>(rng.uniform(1.0, 2.0) * mag * (rng.below(2) ? -1 : 1));
        const uint32_t b = floatBits(base) & ~lowMask, half = (lowMask + 1) / 2;
        const uint32_t lows[] = {half, half - 1, half + 1, lowMask, 0, static_cast<uint32_t>(rng.bits()) & lowMask};
        v.push_back(fromBits(b | lows[i % 6]));
    }
    // Midpoints of neighbouring 16-bit values (exact ties in f32, incl. subnormal f16) and their f32 neighbours.
    for (int i = 0; i < 500; ++i) {
        const uint16_t h = static_cast<uint16_t>(rng.bits() & (dtype == DTYPE_BF16 ? 0x7F7E : 0x7BFE));
        const double mid = 0.5 * (static_cast<double>(halfToFloat(h, dtype)) + halfToFloat(h + 1, dtype));
        const float f = static_cast<float>(mid);
        v.push_back(f);
        v.push_back(std::nextafter(f, 0.f));
        v.push_back(-std::nextafter(f, 1e30f));
    }
    const float specials[] = {0.f, -0.f, 1.f, -1.f, 65504.f, 65519.f, 65520.f, 70000.f, -1e6f, 1e-8f, 2.98023223876953125e-08f,
                              3e-5f, 6.1e-5f, 3.4e38f, -3.39e38f, 1e-40f, -1e-42f,
                              std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::min(), std::numeric_limits<float>::max()};
    v.insert(v.end(), std::begin(specials), std::end(specials));
    return v;
}

Prepared toLowPrecisionCase(Ops& ops, uint64_t seed, int dtype) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const std::vector<float> x = roundingInputs(rng, dtype);
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<uint16_t> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = roundToHalf(x[i], dtype);
    const float* dx = A->put(x);
    void* dh = A->poisonedHalf(n);
    p.call = [&ops, dx, dh, n, dtype] { ops.toLowPrecision(dx, dh, n, dtype); };
    p.check = [=] {
        // NaN in, NaN out (any payload), checked apart from the bit comparison.
        std::vector<Compare> c{bits16("bits", A->getHalf(dh, n), want)};
        std::vector<float> nan{std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()};
        const float* dn = A->put(nan);
        void* hn = A->poisonedHalf(2);
        A->ops().toLowPrecision(dn, hn, 2, dtype);
        const std::vector<uint16_t> got = A->getHalf(hn, 2);
        double bad = 0;
        for (uint16_t g : got) bad += std::isnan(halfToFloat(g, dtype)) ? 0 : 1;
        c.push_back(Compare{"NaN", "bits", bad, 0});
        return c;
    };
    p.bytes = 6.0 * n;
    return p;
}

Prepared fromLowPrecisionCase(Ops& ops, uint64_t seed, int dtype) {
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    // Every non-NaN 16-bit pattern: from() must give its exact value, and to(from(h)) must give h back.
    std::vector<uint16_t> h;
    std::vector<float> want;
    for (uint32_t b = 0; b < 0x10000u; ++b) {
        const float f = halfToFloat(static_cast<uint16_t>(b), dtype);
        if (std::isnan(f)) continue;
        h.push_back(static_cast<uint16_t>(b));
        want.push_back(f);
    }
    const int64_t n = static_cast<int64_t>(h.size());
    const void* dh = A->putHalf(h);
    float* df = A->poisoned(n);
    p.call = [&ops, dh, df, n, dtype] { ops.fromLowPrecision(dh, dtype, df, n); };
    p.check = [=] {
        std::vector<Compare> c{bits("value", A->get(df, n), want)};
        void* back = A->poisonedHalf(n);
        A->ops().toLowPrecision(df, back, n, dtype);
        c.push_back(bits16("to(from(h))", A->getHalf(back, n), h));
        return c;
    };
    p.bytes = 6.0 * n;
    return p;
}

// ================================================================ conv

struct ConvSetup {
    int B, T, C, K;
    int64_t ldx, ldu, hstride;
    std::vector<float> x, w, bias, hist;  // x [B·T, ldx] (the conv half of in_proj's output), hist [B, hstride]
    ref::ConvProblem prob() const {
        ref::ConvProblem p;
        p.batch = B, p.steps = T, p.channels = C, p.width = K;
        p.x = dense(x, static_cast<int64_t>(B) * T, ldx, C);
        p.w = toDouble(w);
        p.bias = toDouble(bias);
        p.history = dense(hist, B, hstride, static_cast<int64_t>(C) * (K - 1));
        return p;
    }
};

ConvSetup convSetup(Rng& rng, int B, int T, int C, int K) {
    ConvSetup s{B, T, C, K, 2 * C, C + 4, static_cast<int64_t>(C) * (K - 1) + 3, {}, {}, {}, {}};
    s.x = uniform(rng, static_cast<int64_t>(B) * T * s.ldx, -1, 1);
    s.w = uniform(rng, static_cast<int64_t>(C) * K, -1.5 / std::sqrt(K), 1.5 / std::sqrt(K));
    s.bias = uniform(rng, C, -0.5, 0.5);
    s.hist = padded(rng, B, s.hstride, static_cast<int64_t>(C) * (K - 1), -1, 1);
    return s;
}

/** 2-byte values (bf16, or f16) widened to f32, e.g. for Outputs. */
std::vector<float> widenAll(const std::vector<uint16_t>& v, int dtype) {
    std::vector<float> f;
    f.reserve(v.size());
    for (uint16_t h : v) f.push_back(halfToFloat(h, dtype));
    return f;
}

/** A 2-byte output [rows, ld] written by a call in place of an f32 one (Rounded16), and how its values are checked. */
struct RoundedOut {
    Rounded16 out;
    int width;
    /** Rows of width 2-byte values (the padding past width left alone), from a poisoned buffer. */
    static RoundedOut poisoned(Arena* A, int64_t rows, int width, int dtype) {
        const int64_t ld = width + 3;  // odd: rows start at any 2-byte offset
        return RoundedOut{Rounded16{A->poisonedHalf(rows * ld), ld, dtype}, width};
    }
    /**
     * The values against the reference (widened; bf16 8e-3, f16 2e-3 of the largest), bit for bit the rounding of
     * `f32` (the same backend's f32 output of the same call), and the padding untouched.
     */
    std::vector<Compare> check(Arena* A, const std::string& what, int64_t rows, const Vec& want,
                               const std::vector<float>& f32) const {
        const std::vector<uint16_t> all = A->getHalf(out.data, rows * out.ld);
        std::vector<uint16_t> got, rounded;
        std::vector<float> widened;
        Compare pad{what + "16.pad", "bits", 0, 0};
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t k = 0; k < out.ld; ++k) {
                const uint16_t v = all[r * out.ld + k];
                if (k >= width) {
                    pad.err += v != 0xDEADu;
                    continue;
                }
                got.push_back(v);
                widened.push_back(halfToFloat(v, out.dtype));
                rounded.push_back(roundToHalf(f32[r * width + k], out.dtype));
            }
        return {nmax(what + "16", widened, want, out.dtype == DTYPE_BF16 ? 8e-3 : 2e-3),
                bits16(what + "16 = round(f32 " + what + ")", got, rounded), pad};
    }
};

/**
 * The rmsnorm writing its rows rounded (RmsNormArgs::y16, as Mamba-1's rounded tape asks): the values against the double
 * reference and bit for bit the rounding of the same backend's f32 rows. With out > 0, then the Forward product taking
 * those rows as its rounded x (normLinear with y16 and Gemm::a16), against the double product of the rounded rows.
 */
Prepared rmsnormRoundedCase(Ops& ops, uint64_t seed, int64_t rows, int d, int dtype16, int out = 0) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const int64_t ldx = d + 4, ldo = out + 2;
    const auto [x, w] = rmsnormInputs(rng, rows, ldx, d);
    const RoundedOut y16 = RoundedOut::poisoned(A, rows, d, dtype16);
    RmsNormArgs a{A->put(x), ldx, A->put(w), rows, d, kNormEps, nullptr, 0};
    a.y16 = y16.out;
    const Weight wl = out > 0 ? putWeight(*A, rng, out, d, dtype16, 1.0 / std::sqrt(d), false) : Weight{};
    float* dout = out > 0 ? A->poisoned(rows * ldo) : nullptr;
    const Gemm lin = out > 0 ? Gemm::forward(GemmMode::Fast, nullptr, d, rows, wl.m, nullptr, dout, ldo, 0.f)
                                   .withRoundedInput(y16.out.data, y16.out.ld)
                             : Gemm{};
    p.call = [&ops, a, lin, out] {
        if (out > 0) ops.normLinear(a, lin);
        else ops.rmsnorm(a);
    };
    const Vec want = ref::rmsnorm(dense(x, rows, ldx, d), rows, d, toDouble(w), kNormEps);
    p.check = [=, &ops] {
        RmsNormArgs f32 = a;  // the same rows in f32
        f32.y16 = Rounded16{};
        f32.y = A->poisoned(rows * d);
        f32.ldy = d;
        ops.rmsnorm(f32);
        std::vector<Compare> c = y16.check(A, "y", rows, want, A->get(f32.y, rows * d));
        if (out > 0) {  // the product of the rows as rounded
            const std::vector<uint16_t> all = A->getHalf(y16.out.data, rows * y16.out.ld);
            Vec xr;
            for (int64_t r = 0; r < rows; ++r)
                for (int k = 0; k < d; ++k) xr.push_back(halfToFloat(all[r * y16.out.ld + k], dtype16));
            const Vec wantY = ref::gemmForward(xr, rows, wl.stored, out, d, {}, 0.0, {});
            const std::vector<float> gy = A->get(dout, rows * ldo);
            c.push_back(nmax("linear.y", strip(gy, rows, ldo, out), wantY, gemmTol(dtype16)));
            c.push_back(padding("linear.y", gy, rows, ldo, out));
        }
        return c;
    };
    p.outputs = [=] { return Outputs{widenAll(A->getHalf(y16.out.data, rows * y16.out.ld), dtype16)}; };
    p.bytes = 4.0 * rows * d + 2.0 * rows * d;
    return p;
}

/** The conv against the double reference; with dtype16 BF16/F16 u is also written rounded (ConvArgs::u16). */
Prepared convSiluCase(Ops& ops, uint64_t seed, int B, int T, int C, int K, int dtype16 = DTYPE_F32) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const ConvSetup s = convSetup(rng, B, T, C, K);
    const int64_t R = static_cast<int64_t>(B) * T, H = static_cast<int64_t>(C) * (K - 1);
    float* du = A->poisoned(R * s.ldu);
    float* dh = A->put(s.hist);
    ConvArgs a{A->put(s.x), s.ldx, A->put(s.w), A->put(s.bias), dh, s.hstride, du, s.ldu, B, T, C, K};
    const bool rounded = dtype16 != DTYPE_F32;
    const RoundedOut u16 = RoundedOut::poisoned(A, R, C, dtype16);
    if (rounded) a.u16 = u16.out;
    p.call = [&ops, a] { ops.convSilu(a); };
    const ref::ConvResult want = ref::convSilu(s.prob());
    std::vector<float> wantHist(want.history.begin(), want.history.end());  // copies of inputs: exact
    const int64_t ldu = s.ldu, hstride = s.hstride;
    p.check = [=] {
        const std::vector<float> gu = A->get(du, R * ldu), gh = A->get(dh, B * hstride);
        std::vector<Compare> c{nmax("u", strip(gu, R, ldu, C), want.u, kTolConv), padding("u", gu, R, ldu, C),
                               bits("history", strip(gh, B, hstride, H), wantHist), padding("history", gh, B, hstride, H)};
        if (rounded)  // the rounded copy of the call's own f32 u
            for (const Compare& x : u16.check(A, "u", R, want.u, strip(gu, R, ldu, C))) c.push_back(x);
        return c;
    };
    p.bytes = 4.0 * (2.0 * R * C + 2.0 * B * H);
    return p;
}

/** History carry: one call over T steps equals a call over T/2 then one over the rest, bit for bit. */
Prepared convSplitCase(Ops& ops, uint64_t seed, int B, int T, int C, int K) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const ConvSetup s = convSetup(rng, B, T, C, K);
    const int T1 = T / 2, T2 = T - T1;
    const int64_t R = static_cast<int64_t>(B) * T;
    // The two halves' inputs, each [B·Ti, ldx] with rows b·Ti + t.
    std::vector<float> x1(static_cast<size_t>(B) * T1 * s.ldx), x2(static_cast<size_t>(B) * T2 * s.ldx);
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t) {
            const float* src = &s.x[(static_cast<int64_t>(b) * T + t) * s.ldx];
            float* dst = t < T1 ? &x1[(static_cast<int64_t>(b) * T1 + t) * s.ldx] : &x2[(static_cast<int64_t>(b) * T2 + t - T1) * s.ldx];
            std::copy(src, src + s.ldx, dst);
        }
    const float *w = A->put(s.w), *bias = A->put(s.bias);
    float *hAll = A->put(s.hist), *hSplit = A->put(s.hist);
    float* uAll = A->poisoned(R * s.ldu);
    float* u1 = A->poisoned(static_cast<int64_t>(B) * T1 * s.ldu);
    float* u2 = A->poisoned(static_cast<int64_t>(B) * T2 * s.ldu);
    const ConvArgs all{A->put(s.x), s.ldx, w, bias, hAll, s.hstride, uAll, s.ldu, B, T, C, K};
    const ConvArgs first{T1 > 0 ? A->put(x1) : nullptr, s.ldx, w, bias, hSplit, s.hstride, u1, s.ldu, B, T1, C, K};
    const ConvArgs second{A->put(x2), s.ldx, w, bias, hSplit, s.hstride, u2, s.ldu, B, T2, C, K};
    const int64_t ldu = s.ldu, hstride = s.hstride;
    p.check = [=, &ops] {
        ops.convSilu(all);
        if (T1 > 0) ops.convSilu(first);
        ops.convSilu(second);
        const std::vector<float> ga = A->get(uAll, R * ldu), g1 = A->get(u1, static_cast<int64_t>(B) * T1 * ldu),
                                 g2 = A->get(u2, static_cast<int64_t>(B) * T2 * ldu);
        std::vector<float> joined(ga.size());
        for (int b = 0; b < B; ++b)
            for (int t = 0; t < T; ++t) {
                const float* src = t < T1 ? &g1[(static_cast<int64_t>(b) * T1 + t) * ldu] : &g2[(static_cast<int64_t>(b) * T2 + t - T1) * ldu];
                std::copy(src, src + ldu, &joined[(static_cast<int64_t>(b) * T + t) * ldu]);
            }
        return std::vector<Compare>{bits("u", strip(joined, R, ldu, C), strip(ga, R, ldu, C)),
                                    bits("history", A->get(hSplit, B * hstride), A->get(hAll, B * hstride))};
    };
    return p;
}

/** The conv backward against the double reference; with dtype16 BF16/F16, dx written rounded (Rounded16). */
Prepared convSiluBackwardCase(Ops& ops, uint64_t seed, int B, int T, int C, int K, int dtype16 = DTYPE_F32) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const ConvSetup s = convSetup(rng, B, T, C, K);
    const int64_t R = static_cast<int64_t>(B) * T, lddx = C + 2;
    const std::vector<float> du = padded(rng, R, s.ldu, C, -1, 1);
    const std::vector<float> dw0 = uniform(rng, static_cast<int64_t>(C) * K, -0.5, 0.5), db0 = uniform(rng, C, -0.5, 0.5);
    float* ddx = A->poisoned(R * lddx);
    float* ddw = A->put(dw0);
    float* ddb = A->put(db0);
    ConvBackwardArgs a{A->put(s.x), s.ldx, A->put(s.hist), s.hstride, A->put(s.w), A->put(s.bias), A->put(du),
                       s.ldu, ddx, lddx, ddw, ddb, B, T, C, K, nullptr, nullptr, 0};
    const bool rounded = dtype16 != DTYPE_F32;
    const RoundedOut dx16 = RoundedOut::poisoned(A, R, C, dtype16);
    if (rounded) {
        a.dx = nullptr;
        a.dx16 = dx16.out;
    }
    p.call = [&ops, a] { ops.convSiluBackward(a); };
    Vec wantX, wantW = toDouble(dw0), wantB = toDouble(db0);
    ref::convSiluBackward(s.prob(), dense(du, R, s.ldu, C), wantX, wantW, wantB);
    p.check = [=, &ops] {
        std::vector<Compare> c{nmax("dw", A->get(ddw, static_cast<int64_t>(C) * K), wantW, kTolConv),
                               nmax("dbias", A->get(ddb, C), wantB, kTolConv)};
        if (!rounded) {
            const std::vector<float> gx = A->get(ddx, R * lddx);
            c.push_back(nmax("dx", strip(gx, R, lddx, C), wantX, kTolConv));
            c.push_back(padding("dx", gx, R, lddx, C));
            return c;
        }
        ConvBackwardArgs f32 = a;  // the same call with an f32 dx (fresh accumulators)
        f32.dx16 = Rounded16{};
        f32.dx = A->poisoned(R * lddx);
        f32.dw = A->put(dw0);
        f32.dbias = A->put(db0);
        ops.convSiluBackward(f32);
        for (const Compare& x : dx16.check(A, "dx", R, wantX, strip(A->get(f32.dx, R * lddx), R, lddx, C))) c.push_back(x);
        return c;
    };
    p.outputs = [=] {
        Outputs o{A->get(ddw, static_cast<int64_t>(C) * K), A->get(ddb, C)};
        o.push_back(rounded ? widenAll(A->getHalf(dx16.out.data, R * dx16.out.ld), dtype16) : A->get(ddx, R * lddx));
        return o;
    };
    p.bytes = 4.0 * 3.0 * R * C;
    return p;
}

double dotOf(const Vec& a, const Vec& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

/**
 * State carry: the conv backward with the gradient of the end history given (dhistory_end) and the starting history's
 * gradient asked for (dhistory). Reference: central differences of L = Σ du ⊙ u + Σ dEnd ⊙ history_end (the double
 * forward) over x, the starting history, w and bias.
 */
Prepared convSiluBackwardCarryCase(Ops& ops, uint64_t seed, int B, int T, int C, int K) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const ConvSetup s = convSetup(rng, B, T, C, K);
    const int64_t R = static_cast<int64_t>(B) * T, lddx = C + 2, H = static_cast<int64_t>(C) * (K - 1);
    const std::vector<float> du = padded(rng, R, s.ldu, C, -1, 1);
    const std::vector<float> dend = padded(rng, B, s.hstride, H, -1, 1);
    const std::vector<float> dw0 = uniform(rng, static_cast<int64_t>(C) * K, -0.5, 0.5), db0 = uniform(rng, C, -0.5, 0.5);
    float* ddx = A->poisoned(R * lddx);
    float* ddh = A->poisoned(B * s.hstride);
    float* ddw = A->put(dw0);
    float* ddb = A->put(db0);
    const ConvBackwardArgs a{A->put(s.x), s.ldx, A->put(s.hist), s.hstride, A->put(s.w), A->put(s.bias), A->put(du),
                             s.ldu, ddx, lddx, ddw, ddb, B, T, C, K, A->put(dend), ddh, s.hstride};
    p.call = [&ops, a] { ops.convSiluBackward(a); };
    ref::ConvProblem pr = s.prob();
    const Vec duD = dense(du, R, s.ldu, C), dendD = dense(dend, B, s.hstride, H);
    auto loss = [&pr, &duD, &dendD] {
        const ref::ConvResult r = ref::convSilu(pr);
        return dotOf(r.u, duD) + dotOf(r.history, dendD);
    };
    const Vec wantX = centralDifferences(pr.x, loss), wantH = centralDifferences(pr.history, loss);
    Vec wantW = centralDifferences(pr.w, loss), wantB = centralDifferences(pr.bias, loss);
    for (size_t i = 0; i < wantW.size(); ++i) wantW[i] += dw0[i];
    for (size_t i = 0; i < wantB.size(); ++i) wantB[i] += db0[i];
    const int64_t hstride = s.hstride;
    p.check = [=] {
        const std::vector<float> gx = A->get(ddx, R * lddx), gh = A->get(ddh, B * hstride);
        return std::vector<Compare>{nmax("dx", strip(gx, R, lddx, C), wantX, kTolConv), padding("dx", gx, R, lddx, C),
                                    nmax("dhistory", strip(gh, B, hstride, H), wantH, kTolConv),
                                    padding("dhistory", gh, B, hstride, H),
                                    nmax("dw", A->get(ddw, static_cast<int64_t>(C) * K), wantW, kTolConv),
                                    nmax("dbias", A->get(ddb, C), wantB, kTolConv)};
    };
    p.outputs = [=] {
        return Outputs{A->get(ddx, R * lddx), A->get(ddh, B * hstride), A->get(ddw, static_cast<int64_t>(C) * K), A->get(ddb, C)};
    };
    p.bytes = 4.0 * 3.0 * R * C;
    return p;
}

// ================================================================ selective scan

/** The scan's inputs as the mixer produces them, in the layouts the model uses. */
struct ScanSetup {
    int B, T, C, N, rank;
    bool proj;                   // dt comes from dt_proj (a Forward product) inside the call
    bool biasInScan;             // dt's bias is the scan's (ScanArgs::dt_bias, as Mamba-1 runs), not in dt / the product
    int64_t ldx;                 // x_proj output [R, rank + 2N]: δ | B | C (with proj) or B | C (+3 padding)
    int64_t ldz;                 // in_proj output [R, 2C]: z is the second half
    std::vector<float> xdbl, xz, u, dt, dtBiasV, a, dSkip, h0;
    Weight wdt;                  // dt_proj [C, rank] when proj
    int64_t hstride;
    ref::ScanProblem prob;       // the same inputs in double (dt from the double-precision projection, bias included)
    Vec dtWritten;               // proj: what the product writes to dt (without the bias when biasInScan)
};

// x_dbl rows: [δ (rank) | B | C] then padding. Unprojected setups pad by ldxPad: 3 (odd strides, the scalar paths) by
// default, 4 for the 16-byte-aligned rows of real models (rank a multiple of 4, even N: the vector loads).
ScanSetup scanSetup(Arena& A, Rng& rng, int B, int T, int C, int N, bool proj, int dtype, bool bigDt = false,
                    int ldxPad = 3, bool biasInScan = false) {
    ScanSetup s{};
    s.B = B, s.T = T, s.C = C, s.N = N, s.proj = proj, s.biasInScan = biasInScan, s.rank = proj ? 6 : 0;
    const int64_t R = static_cast<int64_t>(B) * T;
    s.ldx = proj ? s.rank + 2 * N : 2 * N + ldxPad;
    s.ldz = 2 * C;
    s.hstride = static_cast<int64_t>(C) * N + 5;
    s.xdbl = padded(rng, R, s.ldx, proj ? s.rank + 2 * N : 2 * N, -1, 1);
    s.xz = uniform(rng, R * s.ldz, -3, 3);
    s.u = uniform(rng, R * C, -0.3, 2.0);  // SiLU outputs
    s.dtBiasV.resize(C);
    for (float& b : s.dtBiasV) b = dtBias(rng);
    std::vector<float> a_log(static_cast<size_t>(C) * N);
    for (int d = 0; d < C; ++d)
        for (int n = 0; n < N; ++n) a_log[static_cast<int64_t>(d) * N + n] = static_cast<float>(std::log(n + 1.0) + rng.uniform(-0.1, 0.1));
    s.a.resize(a_log.size());
    for (size_t i = 0; i < a_log.size(); ++i) s.a[i] = static_cast<float>(-std::exp(static_cast<double>(a_log[i])));
    s.dSkip = uniform(rng, C, 0.5, 1.5);
    s.h0 = padded(rng, B, s.hstride, static_cast<int64_t>(C) * N, -1, 1);

    ref::ScanProblem& p = s.prob;
    p.batch = B, p.steps = T, p.channels = C, p.d_state = N;
    const int off = s.rank;  // B_t starts after δ
    p.B.resize(static_cast<size_t>(R * N));
    p.C.resize(p.B.size());
    for (int64_t r = 0; r < R; ++r)
        for (int n = 0; n < N; ++n) {
            p.B[r * N + n] = s.xdbl[r * s.ldx + off + n];
            p.C[r * N + n] = s.xdbl[r * s.ldx + off + N + n];
        }
    if (proj) {
        s.wdt = putWeight(A, rng, C, s.rank, dtype, 1.0 / std::sqrt(s.rank), false);
        p.dt = ref::gemmForward(dense(s.xdbl, R, s.ldx, s.rank), R, s.wdt.stored, C, s.rank, toDouble(s.dtBiasV), 0.0, {});
        s.dtWritten = biasInScan ? ref::gemmForward(dense(s.xdbl, R, s.ldx, s.rank), R, s.wdt.stored, C, s.rank, {}, 0.0, {}) : p.dt;
    } else {
        s.dt.resize(static_cast<size_t>(R * C));
        p.dt.resize(s.dt.size());
        for (int64_t r = 0; r < R; ++r)
            for (int d = 0; d < C; ++d) {  // bigDt: around softplus's threshold 20 (Δ = dt above it)
                const double bias = s.dtBiasV[d], x = bigDt ? rng.uniform(15, 25) : bias + rng.uniform(-0.5, 0.5);
                s.dt[r * C + d] = static_cast<float>(biasInScan ? x - bias : x);
                p.dt[r * C + d] = biasInScan ? static_cast<double>(s.dt[r * C + d]) + bias : s.dt[r * C + d];
            }
    }
    p.a = toDouble(s.a);
    p.u = toDouble(s.u);
    p.z.resize(static_cast<size_t>(R * C));
    for (int64_t r = 0; r < R; ++r)
        for (int d = 0; d < C; ++d) p.z[r * C + d] = s.xz[r * s.ldz + C + d];
    p.d_skip = toDouble(s.dSkip);
    p.h0 = dense(s.h0, B, s.hstride, static_cast<int64_t>(C) * N);
    return s;
}

/** The reference's states before steps 0, chunk, 2·chunk, … in the checkpoint layout [B][chunks][C, N]. */
Vec checkpointsOf(const ref::ScanProblem& p, const ref::ScanResult& r, int chunk) {
    const int chunks = (p.steps + chunk - 1) / chunk;
    Vec v;
    for (int b = 0; b < p.batch; ++b)
        for (int c = 0; c < chunks; ++c)
            for (int d = 0; d < p.channels; ++d)
                for (int n = 0; n < p.d_state; ++n) v.push_back(r.state(p, b, c * chunk, d, n));
    return v;
}

/** The scan (with dt_proj inside when proj) against the double reference; dt's bias in the scan unless biasInScan is false. */
Prepared scanCase(Ops& ops, uint64_t seed, int B, int T, int C, int N, bool proj, int chunk, int dtype, bool bigDt = false,
                  bool alignedRows = false, bool shapeIndependent = false, bool biasInScan = true) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const ScanSetup s = scanSetup(*A, rng, B, T, C, N, proj, dtype, bigDt, alignedRows ? 4 : 3, biasInScan);
    const int64_t R = static_cast<int64_t>(B) * T, hn = static_cast<int64_t>(C) * N;
    const float* xdbl = A->put(s.xdbl);
    const float* xz = A->put(s.xz);
    float* ddt = proj ? A->poisoned(R * C) : A->put(s.dt);
    float* dh = A->put(s.h0);
    float* dout = A->poisoned(R * C);
    const int chunks = chunk > 0 ? (T + chunk - 1) / chunk : 0;
    float* dck = chunk > 0 ? A->poisoned(static_cast<int64_t>(B) * chunks * hn) : nullptr;
    ScanArgs a{ddt, A->put(s.a), xdbl + s.rank, s.ldx, A->put(s.u), xz + C, s.ldz, A->put(s.dSkip), dh,
               s.hstride, dout, B, T, C, N};
    a.shape_independent = shapeIndependent;
    const float* bias = A->put(s.dtBiasV);
    if (biasInScan) a.dt_bias = bias;
    const GemmMode mode = chunk > 0 ? GemmMode::Reproducible : GemmMode::Fast;
    const Gemm g = proj ? Gemm::forward(mode, xdbl, s.ldx, R, s.wdt.m, biasInScan ? nullptr : bias, ddt, C, 0.f) : Gemm{};
    const ScanCheckpoints ck{dck, chunk};
    p.call = [&ops, a, g, ck, proj, chunk] { ops.selectiveScan(a, proj ? &g : nullptr, chunk > 0 ? &ck : nullptr); };
    const ref::ScanResult want = ref::selectiveScan(s.prob);
    Vec wantH;
    for (int b = 0; b < B; ++b)
        for (int64_t i = 0; i < hn; ++i) wantH.push_back(want.state(s.prob, b, T, static_cast<int>(i / N), static_cast<int>(i % N)));
    const Vec wantCk = chunk > 0 ? checkpointsOf(s.prob, want, chunk) : Vec{};
    const Vec wantDt = s.dtWritten;
    const double tol = proj ? activationTol(dtype, kTolScan) : kTolScan;
    const double dtTol = gemmTol(dtype);
    const int64_t hstride = s.hstride;
    p.check = [=] {
        const std::vector<float> gh = A->get(dh, B * hstride);
        std::vector<Compare> c{nmax("out", A->get(dout, R * C), want.out, tol), nmax("h", strip(gh, B, hstride, hn), wantH, tol),
                               padding("h", gh, B, hstride, hn)};
        if (proj) c.push_back(nmax("dt", A->get(ddt, R * C), wantDt, dtTol));
        if (chunk > 0) c.push_back(nmax("ckpt", A->get(dck, static_cast<int64_t>(B) * chunks * hn), wantCk, tol));
        return c;
    };
    p.outputs = [=] {
        Outputs o{A->get(dout, R * C), A->get(dh, B * hstride)};
        if (proj) o.push_back(A->get(ddt, R * C));
        if (chunk > 0) o.push_back(A->get(dck, static_cast<int64_t>(B) * chunks * hn));
        return o;
    };
    // dt, u, z, B, C, out per step and channel; h in and out.
    p.bytes = 4.0 * (R * (4.0 * C + 2.0 * N) + 2.0 * B * hn);
    p.flops = 0;
    return p;
}

/**
 * The scan writing its output rounded (ScanArgs::out16, as Mamba-1's rounded tape asks, with checkpoints when chunk > 0):
 * the values against the double reference, and bit for bit the rounding of the same backend's f32 output of the same
 * call (from the same starting state); the state and checkpoints as the f32 call leaves them.
 */
Prepared scanRoundedCase(Ops& ops, uint64_t seed, int B, int T, int C, int N, int chunk, int dtype16) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const ScanSetup s = scanSetup(*A, rng, B, T, C, N, false, DTYPE_F32, false, 4);
    const int64_t R = static_cast<int64_t>(B) * T, hn = static_cast<int64_t>(C) * N;
    const int chunks = chunk > 0 ? (T + chunk - 1) / chunk : 0;
    const int64_t ck_n = static_cast<int64_t>(B) * chunks * hn;
    const float* xz = A->put(s.xz);
    ScanArgs a{A->put(s.dt), A->put(s.a), A->put(s.xdbl), s.ldx, A->put(s.u), xz + C, s.ldz, A->put(s.dSkip),
               A->put(s.h0), s.hstride, nullptr, B, T, C, N};
    const RoundedOut out16 = RoundedOut::poisoned(A, R, C, dtype16);
    a.out16 = out16.out;
    const ScanCheckpoints ck{chunk > 0 ? A->poisoned(ck_n) : nullptr, chunk};
    p.call = [&ops, a, ck] { ops.selectiveScan(a, nullptr, ck.chunk > 0 ? &ck : nullptr); };
    const ref::ScanResult want = ref::selectiveScan(s.prob);
    const int64_t hstride = s.hstride;
    p.check = [=, &ops] {
        ScanArgs f32 = a;  // the same call with the f32 output
        f32.out16 = Rounded16{};
        f32.out = A->poisoned(R * C);
        f32.h = A->put(s.h0);
        const ScanCheckpoints ck32{chunk > 0 ? A->poisoned(ck_n) : nullptr, chunk};
        ops.selectiveScan(f32, nullptr, chunk > 0 ? &ck32 : nullptr);
        std::vector<Compare> c = out16.check(A, "out", R, want.out, A->get(f32.out, R * C));
        c.push_back(bits("h = the f32 call's", A->get(a.h, B * hstride), A->get(f32.h, B * hstride)));
        if (chunk > 0) c.push_back(bits("ckpt = the f32 call's", A->get(ck.data, ck_n), A->get(ck32.data, ck_n)));
        return c;
    };
    p.outputs = [=] { return Outputs{widenAll(A->getHalf(out16.out.data, R * out16.out.ld), dtype16)}; };
    p.bytes = 4.0 * (R * (4.0 * C + 2.0 * N) + 2.0 * B * hn) - 2.0 * R * C;
    return p;
}

/** Rows t0 ≤ t < t1 of every batch row of a [B·T, ld] buffer, as a [B·(t1 − t0), ld] buffer. */
std::vector<float> stepRange(const std::vector<float>& v, int64_t ld, int B, int T, int t0, int t1) {
    std::vector<float> out;
    for (int b = 0; b < B; ++b)
        out.insert(out.end(), v.begin() + (static_cast<int64_t>(b) * T + t0) * ld, v.begin() + (static_cast<int64_t>(b) * T + t1) * ld);
    return out;
}

/**
 * DETERMINISTIC inference (ScanArgs::shape_independent): one call over T steps equals T one-step calls bit for bit
 * (outputs and final state), and so do the same rows run in a batch of one; and both are within the scan tolerance
 * of the double reference. On CUDA a shape-dependent plan (the wide layout from 32 steps, the chunked scan for long
 * sequences on small grids) would fail the bitwise part.
 */
Prepared scanShapeIndependentCase(Ops& ops, uint64_t seed, int B, int T, int C, int N) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const ScanSetup s = scanSetup(*A, rng, B, T, C, N, false, DTYPE_F32);
    const int64_t hn = static_cast<int64_t>(C) * N;
    const float *a = A->put(s.a), *dskip = A->put(s.dSkip);
    // rows [b0, b0 + nb) of steps [t0, t1), reading and advancing the state h (hstride per row)
    auto args = [&](int b0, int nb, int t0, int t1, float* h, float* out) {
        auto rows = [&](const std::vector<float>& v, int64_t ld) {
            const std::vector<float> r = stepRange(v, ld, B, T, t0, t1);
            const int64_t per = static_cast<int64_t>(t1 - t0) * ld;
            return A->put(std::vector<float>(r.begin() + b0 * per, r.begin() + (b0 + nb) * per));
        };
        const float* xz = rows(s.xz, s.ldz);
        ScanArgs sa{rows(s.dt, C), a, rows(s.xdbl, s.ldx), s.ldx, rows(s.u, C), xz + C, s.ldz, dskip, h, s.hstride, out,
                    nb, t1 - t0, C, N};
        sa.shape_independent = true;
        return sa;
    };
    std::vector<float> h0rows(s.h0.begin(), s.h0.begin() + static_cast<int64_t>(B) * s.hstride);
    float* hWhole = A->put(h0rows);
    float* hSteps = A->put(h0rows);
    float* hLone = A->put(std::vector<float>(s.h0.begin(), s.h0.begin() + s.hstride));  // row 0 alone
    float* outWhole = A->poisoned(static_cast<int64_t>(B) * T * C);
    float* outLone = A->poisoned(static_cast<int64_t>(T) * C);
    std::vector<float*> outSteps;
    std::vector<ScanArgs> steps;
    for (int t = 0; t < T; ++t) {
        outSteps.push_back(A->poisoned(static_cast<int64_t>(B) * C));
        steps.push_back(args(0, B, t, t + 1, hSteps, outSteps.back()));
    }
    const ScanArgs whole = args(0, B, 0, T, hWhole, outWhole), lone = args(0, 1, 0, T, hLone, outLone);
    p.call = [&ops, whole, lone, steps] {
        ops.selectiveScan(whole, nullptr, nullptr);
        ops.selectiveScan(lone, nullptr, nullptr);
        for (const ScanArgs& st : steps) ops.selectiveScan(st, nullptr, nullptr);
    };
    const ref::ScanResult want = ref::selectiveScan(s.prob);
    const int64_t hstride = s.hstride;
    p.check = [=] {
        const std::vector<float> gw = A->get(outWhole, static_cast<int64_t>(B) * T * C);
        std::vector<float> gs(gw.size());  // the steps' outputs in [B, T, C] order
        for (int t = 0; t < T; ++t) {
            const std::vector<float> o = A->get(outSteps[t], static_cast<int64_t>(B) * C);
            for (int b = 0; b < B; ++b)
                std::copy(o.begin() + static_cast<int64_t>(b) * C, o.begin() + static_cast<int64_t>(b + 1) * C,
                          gs.begin() + (static_cast<int64_t>(b) * T + t) * C);
        }
        const std::vector<float> hw = strip(A->get(hWhole, B * hstride), B, hstride, hn);
        const std::vector<float> row0(gw.begin(), gw.begin() + static_cast<int64_t>(T) * C);
        return std::vector<Compare>{nmax("out", gw, want.out, kTolScan),
                                    bits("out (T steps)", gs, gw),
                                    bits("h (T steps)", strip(A->get(hSteps, B * hstride), B, hstride, hn), hw),
                                    bits("out (row 0 alone)", A->get(outLone, static_cast<int64_t>(T) * C), row0),
                                    bits("h (row 0 alone)", strip(A->get(hLone, hstride), 1, hstride, hn),
                                         std::vector<float>(hw.begin(), hw.begin() + hn))};
    };
    return p;
}

/** State carry: the scan over T steps as two calls (T/2, then the rest) against the one-sequence reference. */
Prepared scanSplitCase(Ops& ops, uint64_t seed, int B, int T, int C, int N) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const ScanSetup s = scanSetup(*A, rng, B, T, C, N, false, DTYPE_F32);
    const int T1 = T / 2, T2 = T - T1;
    const int64_t hn = static_cast<int64_t>(C) * N;
    float* dh = A->put(s.h0);
    const float *a = A->put(s.a), *dskip = A->put(s.dSkip);
    auto half = [&](int t0, int t1, float* out) {
        const float* xz = A->put(stepRange(s.xz, s.ldz, B, T, t0, t1));
        return ScanArgs{A->put(stepRange(s.dt, C, B, T, t0, t1)), a, A->put(stepRange(s.xdbl, s.ldx, B, T, t0, t1)), s.ldx,
                        A->put(stepRange(s.u, C, B, T, t0, t1)), xz + C, s.ldz, dskip, dh, s.hstride, out, B, t1 - t0, C, N};
    };
    float* out1 = A->poisoned(static_cast<int64_t>(B) * T1 * C);
    float* out2 = A->poisoned(static_cast<int64_t>(B) * T2 * C);
    const ScanArgs first = half(0, T1, out1), second = half(T1, T, out2);
    p.call = [&ops, first, second] {
        ops.selectiveScan(first, nullptr, nullptr);
        ops.selectiveScan(second, nullptr, nullptr);
    };
    const ref::ScanResult want = ref::selectiveScan(s.prob);
    Vec wantH;
    for (int b = 0; b < B; ++b)
        for (int64_t i = 0; i < hn; ++i) wantH.push_back(want.state(s.prob, b, T, static_cast<int>(i / N), static_cast<int>(i % N)));
    const int64_t hstride = s.hstride;
    p.check = [=] {
        const std::vector<float> g1 = A->get(out1, static_cast<int64_t>(B) * T1 * C), g2 = A->get(out2, static_cast<int64_t>(B) * T2 * C);
        std::vector<float> joined;
        for (int b = 0; b < B; ++b) {
            joined.insert(joined.end(), g1.begin() + static_cast<int64_t>(b) * T1 * C, g1.begin() + static_cast<int64_t>(b + 1) * T1 * C);
            joined.insert(joined.end(), g2.begin() + static_cast<int64_t>(b) * T2 * C, g2.begin() + static_cast<int64_t>(b + 1) * T2 * C);
        }
        return std::vector<Compare>{nmax("out", joined, want.out, kTolScan),
                                    nmax("h", strip(A->get(dh, B * hstride), B, hstride, hn), wantH, kTolScan)};
    };
    return p;
}

/**
 * The scan backward against the double reference; ddt_bias always, dt's bias in the scan (dt_bias) unless biasInScan
 * is false. With dtype16 BF16/F16, ddt and dz are written
 * rounded (as Mamba-1's backward asks where its products round dy) and checked against the same call's f32 outputs;
 * mixed: ddt alone rounded, dz in f32 (no model asks for it; CUDA takes it through its general kernel).
 */
Prepared scanBackwardCase(Ops& ops, uint64_t seed, int B, int T, int C, int N, int chunk, bool bigDt = false,
                          bool alignedRows = false, int dtype16 = DTYPE_F32, bool biasInScan = true, bool mixed = false) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const ScanSetup s = scanSetup(*A, rng, B, T, C, N, false, DTYPE_F32, bigDt, alignedRows ? 4 : 3, biasInScan);
    const int64_t R = static_cast<int64_t>(B) * T, hn = static_cast<int64_t>(C) * N;
    const int64_t lddbc = 2 * N + 3, lddz = C + 5;
    const ref::ScanResult fwd = ref::selectiveScan(s.prob);
    const Vec ck = checkpointsOf(s.prob, fwd, chunk);
    const std::vector<float> ckf(ck.begin(), ck.end());  // the checkpoints a forward would have written
    const std::vector<float> doutv = uniform(rng, R * C, -1, 1);
    const std::vector<float> dal0 = uniform(rng, hn, -0.5, 0.5), dd0 = uniform(rng, C, -0.5, 0.5);
    const float* xdbl = A->put(s.xdbl);
    const float* xz = A->put(s.xz);
    const std::vector<float> dbias0 = uniform(rng, C, -0.5, 0.5);
    const bool rounded = dtype16 != DTYPE_F32;
    float *ddt = A->poisoned(R * C), *ddbc = A->poisoned(R * lddbc), *ddu = A->poisoned(R * C),
          *ddz = A->poisoned(R * lddz), *ddal = A->put(dal0), *ddd = A->put(dd0), *ddbias = A->put(dbias0);
    ScanBackwardArgs a{A->put(s.dt), A->put(s.a), xdbl, s.ldx, A->put(s.u), xz + C, s.ldz, A->put(s.dSkip),
                       A->put(ckf), chunk, A->put(doutv), ddt, ddbc, lddbc, ddu, ddz, lddz, ddal, ddd, B, T, C, N, nullptr, nullptr, 0};
    a.ddt_bias = ddbias;
    if (biasInScan) a.dt_bias = A->put(s.dtBiasV);
    const RoundedOut ddt16 = RoundedOut::poisoned(A, R, C, dtype16), dz16 = RoundedOut::poisoned(A, R, C, dtype16);
    const bool dz_rounded = rounded && !mixed;
    if (rounded) {
        a.ddt = nullptr;
        a.ddt16 = ddt16.out;
    }
    if (dz_rounded) {
        a.dz = nullptr;
        a.dz16 = dz16.out;
    }
    p.call = [&ops, a] { ops.selectiveScanBackward(a); };
    const ref::ScanGrads g = ref::selectiveScanBackward(s.prob, toDouble(doutv));
    Vec wantBC(static_cast<size_t>(R * 2 * N)), wantAl = toDouble(dal0), wantD = toDouble(dd0), wantBias = toDouble(dbias0);
    for (int64_t r = 0; r < R; ++r)
        for (int d = 0; d < C; ++d) wantBias[d] += g.ddt[r * C + d];
    for (int64_t r = 0; r < R; ++r)
        for (int n = 0; n < N; ++n) {
            wantBC[r * 2 * N + n] = g.dB[r * N + n];
            wantBC[r * 2 * N + N + n] = g.dC[r * N + n];
        }
    for (size_t i = 0; i < wantAl.size(); ++i) wantAl[i] += g.da_log[i];
    for (int d = 0; d < C; ++d) wantD[d] += g.dd_skip[d];
    p.check = [=, &ops] {
        const std::vector<float> gbc = A->get(ddbc, R * lddbc);
        std::vector<Compare> c{nmax("dbc", strip(gbc, R, lddbc, 2 * N), wantBC, kTolScanBwd),
                               padding("dbc", gbc, R, lddbc, 2 * N),
                               nmax("du", A->get(ddu, R * C), g.du, kTolScanBwd),
                               nmax("da_log", A->get(ddal, hn), wantAl, kTolScanBwd),
                               nmax("dd_skip", A->get(ddd, C), wantD, kTolScanBwd),
                               nmax("ddt_bias", A->get(ddbias, C), wantBias, kTolScanBwd)};
        if (!dz_rounded) {
            const std::vector<float> gz = A->get(ddz, R * lddz);
            for (Compare x : {nmax("dz", strip(gz, R, lddz, C), g.dz, kTolScanBwd), padding("dz", gz, R, lddz, C)})
                c.push_back(x);
        }
        if (!rounded) {
            c.push_back(nmax("ddt", A->get(ddt, R * C), g.ddt, kTolScanBwd));
            return c;
        }
        // the same call with f32 outputs (fresh accumulators): the rounded values must be its rounding
        ScanBackwardArgs f32 = a;
        f32.ddt16 = f32.dz16 = Rounded16{};
        f32.ddt = A->poisoned(R * C);
        f32.dz = A->poisoned(R * lddz);
        f32.dbc = A->poisoned(R * lddbc);
        f32.du = A->poisoned(R * C);
        f32.da_log = A->put(dal0);
        f32.dd_skip = A->put(dd0);
        f32.ddt_bias = A->put(dbias0);
        ops.selectiveScanBackward(f32);
        for (const Compare& x : ddt16.check(A, "ddt", R, g.ddt, A->get(f32.ddt, R * C))) c.push_back(x);
        if (dz_rounded)
            for (const Compare& x : dz16.check(A, "dz", R, g.dz, strip(A->get(f32.dz, R * lddz), R, lddz, C))) c.push_back(x);
        return c;
    };
    p.outputs = [=] {
        Outputs o{A->get(ddbc, R * lddbc), A->get(ddu, R * C), A->get(ddal, hn), A->get(ddd, C), A->get(ddbias, C)};
        o.push_back(rounded ? widenAll(A->getHalf(ddt16.out.data, R * ddt16.out.ld), dtype16) : A->get(ddt, R * C));
        o.push_back(dz_rounded ? widenAll(A->getHalf(dz16.out.data, R * dz16.out.ld), dtype16) : A->get(ddz, R * lddz));
        return o;
    };
    p.bytes = 4.0 * R * (9.0 * C + 4.0 * N);
    return p;
}

/**
 * State carry: the scan backward with ∂L/∂h_end given (dh_end) and ∂L/∂h_0 asked for (dh_start). Reference: central
 * differences of L = Σ dout ⊙ out + Σ dEnd ⊙ h_T (the double forward) over every input: dt, B, C, u, z, h_0, A, D.
 */
Prepared scanBackwardCarryCase(Ops& ops, uint64_t seed, int B, int T, int C, int N, int chunk) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const ScanSetup s = scanSetup(*A, rng, B, T, C, N, false, DTYPE_F32);
    const int64_t R = static_cast<int64_t>(B) * T, hn = static_cast<int64_t>(C) * N;
    const int64_t lddbc = 2 * N + 3, lddz = C + 5;
    const ref::ScanResult fwd = ref::selectiveScan(s.prob);
    const Vec ck = checkpointsOf(s.prob, fwd, chunk);
    const std::vector<float> ckf(ck.begin(), ck.end());
    const std::vector<float> doutv = uniform(rng, R * C, -1, 1);
    const std::vector<float> dend = padded(rng, B, s.hstride, hn, -1, 1);
    const std::vector<float> dal0 = uniform(rng, hn, -0.5, 0.5), dd0 = uniform(rng, C, -0.5, 0.5);
    const float* xdbl = A->put(s.xdbl);
    const float* xz = A->put(s.xz);
    float *ddt = A->poisoned(R * C), *ddbc = A->poisoned(R * lddbc), *ddu = A->poisoned(R * C),
          *ddz = A->poisoned(R * lddz), *ddal = A->put(dal0), *ddd = A->put(dd0), *dh0 = A->poisoned(B * s.hstride);
    const ScanBackwardArgs a{A->put(s.dt), A->put(s.a), xdbl, s.ldx, A->put(s.u), xz + C, s.ldz, A->put(s.dSkip),
                             A->put(ckf), chunk, A->put(doutv), ddt, ddbc, lddbc, ddu, ddz, lddz, ddal, ddd, B, T, C, N,
                             A->put(dend), dh0, s.hstride};
    p.call = [&ops, a] { ops.selectiveScanBackward(a); };
    ref::ScanProblem pr = s.prob;
    const Vec doutD = toDouble(doutv), dendD = dense(dend, B, s.hstride, hn);
    auto loss = [&pr, &doutD, &dendD, B, T, C, N] {
        const ref::ScanResult r = ref::selectiveScan(pr);
        double l = dotOf(r.out, doutD);
        for (int b = 0; b < B; ++b)
            for (int d = 0; d < C; ++d)
                for (int n = 0; n < N; ++n) l += r.state(pr, b, T, d, n) * dendD[(static_cast<int64_t>(b) * C + d) * N + n];
        return l;
    };
    const Vec wDt = centralDifferences(pr.dt, loss), wB = centralDifferences(pr.B, loss), wC = centralDifferences(pr.C, loss);
    const Vec wU = centralDifferences(pr.u, loss), wZ = centralDifferences(pr.z, loss), wH = centralDifferences(pr.h0, loss);
    const Vec wA = centralDifferences(pr.a, loss), wD = centralDifferences(pr.d_skip, loss);
    Vec wantBC(static_cast<size_t>(R * 2 * N)), wantAl = toDouble(dal0), wantD = toDouble(dd0);
    for (int64_t r = 0; r < R; ++r)
        for (int n = 0; n < N; ++n) {
            wantBC[r * 2 * N + n] = wB[r * N + n];
            wantBC[r * 2 * N + N + n] = wC[r * N + n];
        }
    for (size_t i = 0; i < wantAl.size(); ++i) wantAl[i] += wA[i] * pr.a[i];  // ∂/∂A_log = ∂/∂a · a
    for (int d = 0; d < C; ++d) wantD[d] += wD[d];
    const int64_t hstride = s.hstride;
    p.check = [=] {
        const std::vector<float> gbc = A->get(ddbc, R * lddbc), gz = A->get(ddz, R * lddz), gh = A->get(dh0, B * hstride);
        return std::vector<Compare>{
            nmax("ddt", A->get(ddt, R * C), wDt, kTolScanBwd),        nmax("dbc", strip(gbc, R, lddbc, 2 * N), wantBC, kTolScanBwd),
            nmax("du", A->get(ddu, R * C), wU, kTolScanBwd),          nmax("dz", strip(gz, R, lddz, C), wZ, kTolScanBwd),
            nmax("da_log", A->get(ddal, hn), wantAl, kTolScanBwd),    nmax("dd_skip", A->get(ddd, C), wantD, kTolScanBwd),
            nmax("dh_start", strip(gh, B, hstride, hn), wH, kTolScanBwd), padding("dh_start", gh, B, hstride, hn)};
    };
    p.outputs = [=] {
        return Outputs{A->get(ddt, R * C), A->get(ddbc, R * lddbc), A->get(ddu, R * C), A->get(ddz, R * lddz),
                       A->get(ddal, hn),   A->get(ddd, C),          A->get(dh0, B * hstride)};
    };
    p.bytes = 4.0 * R * (9.0 * C + 4.0 * N);
    return p;
}

// ================================================================ training utilities

Prepared scaleCase(Ops& ops, uint64_t seed, int64_t n) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const std::vector<float> x = uniform(rng, n, -2, 2);
    const float s = 0.999f;  // close to 1 so that timing's repeated calls stay normal numbers
    float* dx = A->put(x);
    p.call = [&ops, dx, n, s] { ops.scale(dx, n, s); };
    std::vector<float> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = static_cast<float>(static_cast<double>(x[i]) * s);  // exact product, one rounding
    p.check = [=] { return std::vector<Compare>{bits("x", A->get(dx, n), want)}; };
    p.bytes = 8.0 * n;
    return p;
}

/** A double the backend wrote into its memory (2 floats). */
double getDouble(Arena* A, const float* d) {
    const std::vector<float> f = A->get(d, 2);
    double v;
    std::memcpy(&v, f.data(), sizeof v);
    return v;
}

void putDouble(Ops& ops, float* d, double v) {
    float f[2];
    std::memcpy(f, &v, sizeof v);
    ops.upload(d, f, 2);
}

Prepared sumIntoCase(Ops& ops, uint64_t seed, int64_t n, bool squares) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const std::vector<float> x = uniform(rng, n, -2, 2);
    const float* dx = A->put(x);
    float* dout = A->poisoned(2);
    p.call = [&ops, dx, n, squares, dout] { ops.sumInto(dx, n, squares, reinterpret_cast<double*>(dout)); };
    double want = 0, scale = 0;
    for (float v : x) {
        want += squares ? static_cast<double>(v) * v : v;
        scale += std::fabs(static_cast<double>(v)) * (squares ? std::fabs(v) : 1.0);
    }
    // Σ x (signed) can cancel: its error is bounded by the sum of magnitudes, so the relative tolerance scales with it
    const double tol = squares ? kTolSum : kTolSum * scale / std::max(std::fabs(want), 1e-300);
    p.check = [=] { return std::vector<Compare>{relScalar("sum", getDouble(A, dout), want, tol)}; };
    p.outputs = [=] { return Outputs{doubleBits(getDouble(A, dout))}; };
    p.bytes = 4.0 * n;
    return p;
}

/** optimizerControl against the host arithmetic it replaced, bit for bit (norm, grad_scale, skip). */
Prepared optimizerControlCase(Ops& ops, uint64_t seed, double ss0, double ss1, double loss, double count, bool lossBad,
                              float clip, float lossScale) {
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    float* dsums = A->poisoned(4);
    float* dloss = A->poisoned(2);
    float* dnorm = A->poisoned(2);
    AdamWArgs base{};
    base.lr = 1e-3f, base.beta1 = 0.9f, base.beta2 = 0.999f, base.eps = 1e-8f, base.weight_decay = 0.1f;
    base.bias_correction1 = 0.1f, base.bias_correction2 = 0.001f, base.grad_scale = 7.f;
    const AdamWFactors f0 = adamwFactors(base);
    constexpr int kF = sizeof(AdamWFactors) / sizeof(float);
    float* dfac = A->put(std::vector<float>(reinterpret_cast<const float*>(&f0), reinterpret_cast<const float*>(&f0) + kF));
    putDouble(ops, dsums, ss0);
    putDouble(ops, dsums + 2, ss1);
    putDouble(ops, dloss, loss);
    p.call = [&ops, dsums, dloss, count, lossBad, clip, lossScale, dfac, dnorm] {
        OptimizerControlArgs a{};
        a.sums = reinterpret_cast<const double*>(dsums);
        a.nsums = 2;
        a.loss_sum = reinterpret_cast<const double*>(dloss);
        a.loss_count = count;
        a.loss_bad = lossBad;
        a.clip = clip;
        a.loss_scale = lossScale;
        a.factors = reinterpret_cast<AdamWFactors*>(dfac);
        a.norm = reinterpret_cast<double*>(dnorm);
        ops.optimizerControl(a);
    };
    // The host code this replaced (TrainerRuntime::optimizerStep before 2026-12-02), literally.
    double ss = ss0;
    ss += ss1;
    const double norm = std::sqrt(ss) / lossScale;
    const bool lossNonfinite = count > 0 && !std::isfinite(static_cast<float>(loss / count));
    const bool skip = !std::isfinite(norm) || lossBad || lossNonfinite;
    float gs = clip > 0.f && norm > clip ? static_cast<float>(clip / (norm + 1e-6)) : 1.f;
    gs /= lossScale;
    p.check = [=] {
        const double gotNorm = getDouble(A, dnorm);
        const std::vector<float> f = A->get(dfac, kF);
        AdamWFactors got;
        std::memcpy(&got, f.data(), sizeof got);
        const auto halves = [](double v) {
            std::vector<float> f(2);
            std::memcpy(f.data(), &v, sizeof v);
            return f;
        };
        std::vector<Compare> c{bits("norm (double bits)", halves(gotNorm), halves(norm)),
                               bits("skip", {got.skip}, {skip ? 1.f : 0.f}),
                               bits("step (untouched)", {got.step}, {f0.step})};
        if (!skip) c.push_back(bits("grad_scale", {got.grad_scale}, {gs}));
        return c;
    };
    return p;
}

/** Data-parallel training's rank-order sum: bitwise the scalar fold ((s0 + s1) + s2) + … in f32. */
Prepared sumRanksCase(Ops& ops, uint64_t seed, int ranks, int64_t n) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const std::vector<float> s = uniform(rng, ranks * n, -1, 1);
    const float* ds = A->put(s);
    float* dout = A->poisoned(n);
    p.call = [&ops, ds, ranks, n, dout] { ops.sumRanks(ds, ranks, n, dout); };
    std::vector<float> want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        float acc = s[static_cast<size_t>(i)];
        for (int r = 1; r < ranks; ++r) acc = acc + s[static_cast<size_t>(r * n + i)];
        want[static_cast<size_t>(i)] = acc;
    }
    p.check = [=] { return std::vector<Compare>{bits("out vs the scalar rank-order fold", A->get(dout, n), want)}; };
    p.bytes = 4.0 * (ranks + 1) * n;
    return p;
}

/** A skipped AdamW leaves p, m and v bit for bit. */
Prepared adamwSkipCase(Ops& ops, uint64_t seed, int64_t n) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const std::vector<float> p0 = uniform(rng, n, -1, 1), g = uniform(rng, n, -0.1, 0.1), m0 = uniform(rng, n, -0.05, 0.05),
                             v0 = uniform(rng, n, 1e-6, 1e-2);
    AdamWArgs args{};
    args.lr = 1e-2f, args.beta1 = 0.9f, args.beta2 = 0.999f, args.eps = 1e-8f, args.weight_decay = 0.1f;
    args.bias_correction1 = 0.5f, args.bias_correction2 = 0.01f, args.grad_scale = 1.f;
    AdamWFactors f = adamwFactors(args);
    f.skip = 1.f;
    constexpr int kF = sizeof(AdamWFactors) / sizeof(float);
    const float* df = A->put(std::vector<float>(reinterpret_cast<const float*>(&f), reinterpret_cast<const float*>(&f) + kF));
    float *dp = A->put(p0), *dm = A->put(m0), *dv = A->put(v0);
    const float* dg = A->put(g);
    p.call = [&ops, dp, dg, dm, dv, n, df] { ops.adamw(dp, dg, dm, dv, n, reinterpret_cast<const AdamWFactors*>(df), true); };
    p.check = [=] {
        return std::vector<Compare>{bits("p", A->get(dp, n), p0), bits("m", A->get(dm, n), m0), bits("v", A->get(dv, n), v0)};
    };
    return p;
}

/**
 * Ops::adamwGroup over a flat set of tensors (sizes not multiples of 4, alignment gaps holding random values that must
 * stay as they are, decay on and off, copies in BF16/F16, in f32, and none): p, m, v and the storage bit for bit what
 * adamw per tensor and toLowPrecision / copy give on the same backend (a skipped step: nothing updated, the copies
 * still written), and p against the double reference.
 */
Prepared adamwGroupCase(Ops& ops, uint64_t seed, int lowpDtype, bool skip) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const std::vector<int64_t> sizes{768, 5, 1536 * 3 + 2, 16, 4099, 1, 3000};
    std::vector<AdamWTensor> table;
    int64_t n = 0, bytes = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
        AdamWTensor t{};
        t.offset = n;
        t.n = sizes[i];
        t.decayed = i % 2 == 0;
        const bool matrix = i % 3 != 1, none = i == 3;
        t.store_dtype = matrix ? lowpDtype : DTYPE_F32;
        t.store_byte = none ? -1 : bytes;
        if (!none) bytes += (t.n * (matrix ? 2 : 4) + 63) / 64 * 64;
        n += (t.n + 15) / 16 * 16 + (i % 2 ? 16 : 0);  // the ParamTable's 16-float alignment, sometimes a wider gap
        table.push_back(t);
    }
    const std::vector<float> p0 = uniform(rng, n, -1, 1), g = uniform(rng, n, -0.1, 0.1);
    const std::vector<float> m0 = uniform(rng, n, -0.05, 0.05), v0 = uniform(rng, n, 1e-6, 1e-2);
    AdamWArgs args{};
    args.lr = 1e-2f, args.beta1 = 0.9f, args.beta2 = 0.999f, args.eps = 1e-8f, args.weight_decay = 0.1f;
    args.bias_correction1 = static_cast<float>(1 - std::pow(0.9, 3));
    args.bias_correction2 = static_cast<float>(1 - std::pow(0.999, 3));
    args.grad_scale = 0.75f;
    AdamWFactors f = adamwFactors(args);
    f.skip = skip ? 1.f : 0.f;
    constexpr int kF = sizeof(AdamWFactors) / sizeof(float);
    const auto* df = reinterpret_cast<const AdamWFactors*>(
        A->put(std::vector<float>(reinterpret_cast<const float*>(&f), reinterpret_cast<const float*>(&f) + kF)));
    const auto* dtable = reinterpret_cast<const AdamWTensor*>(
        A->put(std::vector<float>(reinterpret_cast<const float*>(table.data()),
                                  reinterpret_cast<const float*>(table.data() + table.size()))));
    const int64_t storeFloats = bytes / 4;
    struct Set { float *p, *m, *v, *store; };
    auto fresh = [=] { return Set{A->put(p0), A->put(m0), A->put(v0), A->poisoned(storeFloats)}; };
    const Set grouped = fresh(), apart = fresh();
    const float* dg = A->put(g);
    const AdamWGroupArgs a{grouped.p, dg, grouped.m, grouped.v, n, dtable, static_cast<int>(table.size()),
                           grouped.store, df};
    p.call = [&ops, a] { ops.adamwGroup(a); };
    const ref::AdamWStep st{args.lr, args.beta1, args.beta2, args.eps, args.weight_decay, args.bias_correction1,
                            args.bias_correction2, args.grad_scale};
    Vec wantP;
    auto entries = [table](const std::vector<float>& v) {  // the tensors' values, in table order
        std::vector<float> e;
        for (const AdamWTensor& t : table) e.insert(e.end(), v.begin() + t.offset, v.begin() + t.offset + t.n);
        return e;
    };
    auto gaps = [table, n](const std::vector<float>& v) {  // the values between and after the tensors
        std::vector<float> e;
        int64_t from = 0;
        for (const AdamWTensor& t : table) {
            e.insert(e.end(), v.begin() + from, v.begin() + t.offset);
            from = t.offset + t.n;
        }
        e.insert(e.end(), v.begin() + from, v.begin() + n);
        return e;
    };
    for (const AdamWTensor& t : table)
        for (int64_t i = t.offset; i < t.offset + t.n; ++i) {
            double pi = p0[i], mi = m0[i], vi = v0[i];
            if (!skip) {
                ref::AdamWStep s2 = st;
                if (!t.decayed) s2.weight_decay = 0.f;
                ref::adamw(s2, pi, g[i], mi, vi);
            }
            wantP.push_back(pi);
        }
    p.check = [=, &ops] {
        for (const AdamWTensor& t : table) {
            ops.adamw(apart.p + t.offset, dg + t.offset, apart.m + t.offset, apart.v + t.offset, t.n, df, t.decayed != 0);
        }
        for (const AdamWTensor& t : table) {
            if (t.store_byte < 0) continue;
            void* at = reinterpret_cast<char*>(apart.store) + t.store_byte;
            if (t.store_dtype == DTYPE_F32) ops.copy(static_cast<float*>(at), apart.p + t.offset, t.n);
            else ops.toLowPrecision(apart.p + t.offset, at, t.n, t.store_dtype);
        }
        const std::vector<float> gotP = A->get(grouped.p, n);
        return std::vector<Compare>{nmax("p", entries(gotP), wantP, kTolAdamW),
                                    bits("p = adamw per tensor (gaps untouched)", gotP, A->get(apart.p, n)),
                                    bits("m = adamw per tensor", A->get(grouped.m, n), A->get(apart.m, n)),
                                    bits("v = adamw per tensor", A->get(grouped.v, n), A->get(apart.v, n)),
                                    bits("p's gaps as they were", gaps(gotP), gaps(p0)),
                                    bits16("storage = toLowPrecision / copy", A->getHalf(grouped.store, storeFloats * 2),
                                           A->getHalf(apart.store, storeFloats * 2))};
    };
    p.outputs = [=] { return Outputs{A->get(grouped.p, n), A->get(grouped.m, n), A->get(grouped.v, n)}; };
    p.bytes = 4.0 * 7 * n;
    return p;
}

Prepared adamwCase(Ops& ops, uint64_t seed, int64_t n, int step, float weightDecay, float gradScale) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const std::vector<float> p0 = uniform(rng, n, -1, 1), g = uniform(rng, n, -0.1, 0.1);
    // Step 1 starts from zero moments (as training does); later steps from moments a run would have.
    std::vector<float> m0(static_cast<size_t>(n), 0.f), v0(static_cast<size_t>(n), 0.f);
    if (step > 1) {
        m0 = uniform(rng, n, -0.05, 0.05);
        v0 = uniform(rng, n, 1e-6, 1e-2);
    }
    AdamWArgs args{};
    args.lr = 1e-2f, args.beta1 = 0.9f, args.beta2 = 0.999f, args.eps = 1e-8f, args.weight_decay = weightDecay;
    args.bias_correction1 = static_cast<float>(1 - std::pow(0.9, step));
    args.bias_correction2 = static_cast<float>(1 - std::pow(0.999, step));
    args.grad_scale = gradScale;
    float *dp = A->put(p0), *dm = A->put(m0), *dv = A->put(v0);
    const float* dg = A->put(g);
    const AdamWFactors f = adamwFactors(args);
    constexpr int kF = sizeof(AdamWFactors) / sizeof(float);
    const float* df = A->put(std::vector<float>(reinterpret_cast<const float*>(&f), reinterpret_cast<const float*>(&f) + kF));
    const bool decayed = weightDecay != 0.f;
    p.call = [&ops, dp, dg, dm, dv, n, df, decayed] {
        ops.adamw(dp, dg, dm, dv, n, reinterpret_cast<const AdamWFactors*>(df), decayed);
    };
    // The reference uses the float arguments as given.
    const ref::AdamWStep st{args.lr, args.beta1, args.beta2, args.eps, args.weight_decay, args.bias_correction1,
                            args.bias_correction2, args.grad_scale};
    Vec wantP(static_cast<size_t>(n)), wantM(wantP.size()), wantV(wantP.size()), wantStep(wantP.size());
    for (int64_t i = 0; i < n; ++i) {
        double pi = p0[i], mi = m0[i], vi = v0[i];
        ref::adamw(st, pi, g[i], mi, vi);
        wantP[i] = pi, wantM[i] = mi, wantV[i] = vi, wantStep[i] = pi - p0[i];
    }
    p.check = [=] {
        const std::vector<float> gp = A->get(dp, n);
        std::vector<float> stepGot(gp.size());
        Vec stepWant(gp.size());
        for (size_t i = 0; i < gp.size(); ++i) stepGot[i] = static_cast<float>(static_cast<double>(gp[i]) - p0[i]);
        return std::vector<Compare>{nmax("p", gp, wantP, kTolAdamW), nmax("p-p0", stepGot, wantStep, kTolAdamWStep),
                                    nmax("m", A->get(dm, n), wantM, kTolAdamW), nmax("v", A->get(dv, n), wantV, kTolAdamW)};
    };
    p.outputs = [=] { return Outputs{A->get(dp, n), A->get(dm, n), A->get(dv, n)}; };
    p.bytes = 4.0 * 7 * n;
    return p;
}

Prepared mseCase(Ops& ops, uint64_t seed, int64_t n) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const std::vector<float> y = uniform(rng, n, -1, 1), t = uniform(rng, n, -1, 1);
    const float scale = static_cast<float>(1.0 / n);
    const float *dy = A->put(y), *dt = A->put(t);
    float* dd = A->poisoned(n);
    float* dloss = A->poisoned(2);
    p.call = [&ops, dy, dt, n, scale, dd, dloss] { ops.mse(dy, dt, n, scale, dd, reinterpret_cast<double*>(dloss)); };
    double want = 0;
    Vec wantD(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        const double e = static_cast<double>(y[i]) - t[i];
        want += e * e;
        wantD[i] = scale * 2.0 * e;
    }
    p.check = [=] {
        // The loss: f32 differences squared in double, so its relative error is about 2⁻²³ (not 1e-16).
        return std::vector<Compare>{relScalar("loss", getDouble(A, dloss), want, 1e-6), nmax("dy", A->get(dd, n), wantD, kTolLoss)};
    };
    p.outputs = [=] {
        return Outputs{A->get(dd, n), doubleBits(getDouble(A, dloss))};
    };
    p.bytes = 12.0 * n;
    return p;
}

// Rounded: the gradient in a 2-byte type (dlogits16), in place (ld16 = 2·vocab), as the LM loss hands it to the head
enum class Grad { None, Separate, Aliased, Rounded };

Prepared crossEntropyCase(Ops& ops, uint64_t seed, int64_t rows, int vocab, Grad grad, bool bigLogits = false,
                          int dtype16 = DTYPE_BF16) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    // bigLogits: e^x overflows f32 past 88, so only a max-subtracted softmax survives these.
    std::vector<float> logits = bigLogits ? uniform(rng, rows * vocab, -30, 95) : uniform(rng, rows * vocab, -4, 4);
    std::vector<int32_t> targets(static_cast<size_t>(rows));
    int valid = 0;
    for (int64_t r = 0; r < rows; ++r) {
        targets[r] = rng.below(vocab);
        if (r % 3 == 0) logits[r * vocab + targets[r]] += 8.f;  // the model is right on these rows
        if (r % 5 == 2) targets[r] = kIgnore;                   // padding rows
        valid += targets[r] != kIgnore;
    }
    const float scale = 1.f / static_cast<float>(std::max(valid, 1));
    float* dl = A->put(logits);
    float *dloss = A->poisoned(rows), *dcorrect = A->poisoned(rows);
    float* dgrad = grad == Grad::Separate ? A->poisoned(rows * vocab) : grad == Grad::Aliased ? dl : nullptr;
    const int32_t* dtargets = A->putInts(targets);
    CrossEntropyArgs a{dl, rows, vocab, dtargets, kIgnore, scale, dloss, dcorrect, dgrad};
    const int64_t ld16 = 2 * static_cast<int64_t>(vocab);
    if (grad == Grad::Rounded) {
        a.dlogits16 = dl;
        a.ld16 = ld16;
        a.dtype16 = dtype16;
    }
    p.call = [&ops, a] { ops.crossEntropy(a); };
    Vec wantLoss(static_cast<size_t>(rows), 0.0), wantGrad(static_cast<size_t>(rows * vocab), 0.0);
    std::vector<float> wantCorrect(static_cast<size_t>(rows), 0.f);
    const Vec ld = toDouble(logits);
    for (int64_t r = 0; r < rows; ++r) {
        if (targets[r] == kIgnore) continue;  // loss 0, correct 0, gradient 0
        bool correct = false;
        wantLoss[r] = ref::crossEntropyRow(&ld[r * vocab], vocab, targets[r], scale, &wantGrad[r * vocab], &correct);
        wantCorrect[r] = correct ? 1.f : 0.f;
    }
    p.check = [=, &ops] {
        std::vector<Compare> c{nmax("loss", A->get(dloss, rows), wantLoss, kTolLoss),
                               bits("correct", A->get(dcorrect, rows), wantCorrect)};
        if (dgrad) c.push_back(nmax("dlogits", A->get(dgrad, rows * vocab), wantGrad, kTolLoss));
        if (grad == Grad::Rounded) {
            // the 2-byte values against the reference, and bit for bit the rounding of the f32 gradient that the
            // same backend writes for the same logits
            const std::vector<uint16_t> all = A->getHalf(dl, rows * ld16);
            std::vector<uint16_t> got16;
            std::vector<float> widened;
            for (int64_t r = 0; r < rows; ++r)
                for (int k = 0; k < vocab; ++k) {
                    got16.push_back(all[r * ld16 + k]);
                    widened.push_back(halfToFloat(all[r * ld16 + k], dtype16));
                }
            c.push_back(nmax("dlogits16", widened, wantGrad, dtype16 == DTYPE_BF16 ? 8e-3 : 2e-3));
            CrossEntropyArgs f32 = a;
            f32.logits = A->put(logits);
            f32.loss = A->poisoned(rows);
            f32.correct = A->poisoned(rows);
            f32.dlogits = A->poisoned(rows * vocab);
            f32.dlogits16 = nullptr;
            ops.crossEntropy(f32);
            std::vector<uint16_t> want16;
            for (float v : A->get(f32.dlogits, rows * vocab)) want16.push_back(roundToHalf(v, dtype16));
            c.push_back(bits16("dlogits16 = round(f32 dlogits)", got16, want16));
        }
        return c;
    };
    p.outputs = [=] {
        Outputs o{A->get(dloss, rows), A->get(dcorrect, rows)};
        if (dgrad) o.push_back(A->get(dgrad, rows * vocab));
        if (grad == Grad::Rounded) o.push_back(A->get(dl, rows * vocab));
        return o;
    };
    p.bytes = 4.0 * rows * vocab * (dgrad ? 2 : 1);
    return p;
}

/**
 * embedBackward: dtable [vocab, d] (random, accumulated into) += dx rows by id. Ids hit 0 and vocab − 1 and
 * repeat (`repeats`: a few ids take most rows). Compared with the double sum and, bit for bit, with the plain
 * f32 loop over rows that the op's contract says it equals.
 */
Prepared embedBackwardCase(Ops& ops, uint64_t seed, int vocab, int d, int64_t rows, bool padded, bool repeats) {
    Rng rng(seed);
    Prepared p = start(ops);
    Arena* A = p.arena.get();
    const int64_t ldx = padded ? d + 5 : d;
    const std::vector<float> dx = uniform(rng, rows * ldx, -1, 1);
    const std::vector<float> table0 = uniform(rng, static_cast<int64_t>(vocab) * d, -1, 1);
    std::vector<int32_t> ids(static_cast<size_t>(rows));
    for (auto& id : ids) id = repeats && rng.below(4) != 0 ? rng.below(std::min(vocab, 3)) : rng.below(vocab);
    ids[0] = vocab - 1;
    if (rows > 1) ids[rows - 1] = 0;
    if (rows > 3) ids[2] = ids[1];  // a repeated id on neighbouring rows
    float* dtable = A->put(table0);
    const EmbedBackwardArgs a{A->put(dx), ldx, A->putInts(ids), rows, vocab, d, dtable};
    p.call = [&ops, a] { ops.embedBackward(a); };
    Vec want = toDouble(table0);
    std::vector<float> loop = table0;
    for (int64_t r = 0; r < rows; ++r)
        for (int j = 0; j < d; ++j) {
            want[static_cast<int64_t>(ids[r]) * d + j] += dx[r * ldx + j];
            loop[static_cast<int64_t>(ids[r]) * d + j] += dx[r * ldx + j];
        }
    const int64_t n = static_cast<int64_t>(vocab) * d;
    p.check = [=] {
        const std::vector<float> got = A->get(dtable, n);
        return std::vector<Compare>{nmax("dtable", got, want, kTolLoss), bits("dtable=loop", got, loop)};
    };
    p.outputs = [=] { return Outputs{A->get(dtable, n)}; };
    p.bytes = 4.0 * rows * d * 3;
    return p;
}

// ================================================================ determinism

/** Restores the CPU thread count however the case ends. */
struct ThreadsGuard {
    int saved = cpuThreads();
    ~ThreadsGuard() { setCpuThreads(saved); }
};

/**
 * The base case run twice on fresh copies of the same inputs (same seed) must give bit-identical outputs;
 * with `threads`, once each under setCpuThreads(1), (2), (3).
 */
Case determinism(const Case& base, bool threads) {
    Case c = base;
    c.op = (threads ? "det.threads." : "det.repeat.") + base.op;
    c.needs |= threads ? NEED_HOST_THREADS : NEED_NONE;
    auto prep = base.prepare;
    c.prepare = [prep, threads](Ops& ops, uint64_t seed) {
        Prepared p = start(ops);
        p.check = [prep, threads, seed, &ops] {
            auto once = [&] {
                Prepared q = prep(ops, seed);
                q.call();
                ops.synchronize();
                return q.outputs();
            };
            std::vector<Outputs> runs;
            std::vector<std::string> labels;
            if (threads) {
                ThreadsGuard guard;
                for (int t : {1, 2, 3}) {
                    setCpuThreads(t);
                    runs.push_back(once());
                    labels.push_back(std::to_string(t) + "thr");
                }
            } else {
                runs.push_back(once());
                runs.push_back(once());
                labels = {"run1", "run2"};
            }
            std::vector<Compare> cmp;
            for (size_t r = 1; r < runs.size(); ++r)
                for (size_t o = 0; o < runs[0].size(); ++o)
                    cmp.push_back(bits("out" + std::to_string(o) + " " + labels[r] + " vs " + labels[0], runs[r][o], runs[0][o]));
            return cmp;
        };
        return p;
    };
    return c;
}

/**
 * The base case's call recorded once (beginCapture … endCapture, which runs nothing on a device that records)
 * and replayed: the replay must produce what the reference says. Timing times the replay.
 */
Case graphed(const Case& base) {
    Case c = base;
    c.op = "graph." + base.op;
    c.needs |= NEED_GRAPHS;
    auto prep = base.prepare;
    c.prepare = [prep](Ops& ops, uint64_t seed) {
        Prepared p = prep(ops, seed);
        ops.synchronize();  // the uploads are done before recording starts
        ops.beginCapture();
        try {
            p.call();
        } catch (...) {
            ops.destroyGraph(ops.endCapture());
            throw;
        }
        std::shared_ptr<void> graph(ops.endCapture(), [&ops](void* g) { ops.destroyGraph(g); });
        p.call = [&ops, graph] { ops.replay(graph.get()); };
        return p;
    };
    return c;
}

}  // namespace

// ================================================================ the table

std::vector<Case> allCases() {
    std::vector<Case> t;
    auto add = [&t](std::string op, std::string shape, int dtype, std::string mode, unsigned needs, bool big,
                    std::function<Prepared(Ops&, uint64_t)> prep) {
        t.push_back(Case{std::move(op), std::move(shape), dtype, std::move(mode), needs, big, std::move(prep)});
    };
    const int dtypes[] = {DTYPE_F32, DTYPE_TF32, DTYPE_BF16, DTYPE_F16};
    auto lowp = [](int dtype) { return dtype == DTYPE_F32 ? NEED_NONE : NEED_LOWP; };
    const int64_t gemmRows[] = {1, 3, 8, 9, 64, 257};

    // ---- gemm Forward: modes × bias × beta × rows (F32), ld > width on half of them ----
    for (int dtype : dtypes)
        for (GemmMode mode : {GemmMode::Fast, GemmMode::Reproducible, GemmMode::Pedantic, GemmMode::Deterministic})
            for (int64_t rows : gemmRows)
                for (bool bias : {true, false})
                    for (float beta : {0.f, 1.f}) {
                        // 16-bit storage: the two combinations bias+beta0 and nobias+beta1 are enough.
                        if (dtype != DTYPE_F32 && bias == (beta != 0)) continue;
                        const bool pad = (mode == GemmMode::Reproducible) != bias;
                        const int out = 72, in = 56;
                        add("gemm.forward",
                            format("rows=%lld out=%d in=%d %s beta=%g%s", static_cast<long long>(rows), out, in,
                                   bias ? "bias" : "nobias", beta, pad ? " ld+" : ""),
                            dtype, modeName(mode), lowp(dtype), false, [=](Ops& o, uint64_t s) {
                                return gemmForwardCase(o, s, mode, dtype, rows, out, in, bias, beta, pad);
                            });
                    }
    // GEMM_DETERMINISTIC: batch invariance on every backend and storage type, and the CPU's exact fixed order.
    // On CUDA the widths below make the tensor-core tier pick every one of its tiles on an H200 (132 SMs): out = 72
    // and 200 the narrow ones, 9000 the 32-wide, 17000 the 64-wide and the 128×128 tile (tiles change speed only).
    const std::vector<int64_t> issueBatches = {1, 2, 3, 7, 8, 9, 13, 61, 128, 257};
    for (int dtype : dtypes) {
        add("invariant.gemm.forward", "B=1..257 out=72 in=200 bias beta=1", dtype, "det", lowp(dtype), false,
            [=](Ops& o, uint64_t s) { return gemmInvarianceCase(o, s, dtype, 72, 200, issueBatches); });
        add("invariant.gemm.forward", "B=1..4096 out=200 in=264 bias beta=1", dtype, "det", lowp(dtype), false,
            [=](Ops& o, uint64_t s) {
                return gemmInvarianceCase(o, s, dtype, 200, 264, {1, 5, 16, 17, 64, 65, 300, 1000, 4096});
            });
    }
    for (int dtype : {DTYPE_BF16, DTYPE_F16}) {
        add("invariant.gemm.forward", "B=1..300 out=9000 in=72 bias beta=1", dtype, "det", lowp(dtype), false,
            [=](Ops& o, uint64_t s) { return gemmInvarianceCase(o, s, dtype, 9000, 72, {1, 16, 33, 300}); });
        add("invariant.gemm.forward", "B=1..300 out=17000 in=40 bias beta=1", dtype, "det", lowp(dtype), false,
            [=](Ops& o, uint64_t s) { return gemmInvarianceCase(o, s, dtype, 17000, 40, {1, 9, 61, 128, 300}); });
        // Narrow, deep weights: on Hopper their chains are cut into parts of k (tensorTierParts), few-rows and TMA
        // tiles alike; the last width leaves a last part with a partial k tile.
        add("invariant.gemm.forward", "B=1..300 out=192 in=2048 bias beta=1 (split over k)", dtype, "det", lowp(dtype),
            false, [=](Ops& o, uint64_t s) { return gemmInvarianceCase(o, s, dtype, 192, 2048, {1, 5, 16, 17, 64, 65, 300}); });
        add("invariant.gemm.forward", "B=1..128 out=100 in=1160 bias beta=1 (split over k)", dtype, "det", lowp(dtype),
            false, [=](Ops& o, uint64_t s) { return gemmInvarianceCase(o, s, dtype, 100, 1160, {1, 9, 61, 128}); });
        // Wide, deep weights (out_proj-like): 2 parts of 1344 and 4 parts of 1344, both with a partial last k tile;
        // 520 outputs are not a whole number of 64- or 256-wide blocks.
        add("invariant.gemm.forward", "B=1..300 out=1024 in=2600 bias beta=1 (split over k)", dtype, "det", lowp(dtype),
            false, [=](Ops& o, uint64_t s) { return gemmInvarianceCase(o, s, dtype, 1024, 2600, {1, 16, 65, 300}); });
        add("invariant.gemm.forward", "B=1..300 out=520 in=5200 bias beta=1 (split over k)", dtype, "det", lowp(dtype),
            false, [=](Ops& o, uint64_t s) { return gemmInvarianceCase(o, s, dtype, 520, 5200, {1, 17, 64, 65, 300}); });
    }
    for (int dtype : {DTYPE_F32, DTYPE_BF16, DTYPE_F16})
        add("invariant.gemm.forward", "B=1..257 out=40 in=13 bias beta=1 (odd width)", dtype, "det", lowp(dtype), false,
            [=](Ops& o, uint64_t s) { return gemmInvarianceCase(o, s, dtype, 40, 13, issueBatches); });
    // The CPU's fixed order, bit for bit: every row count in det mode, and the decode product of 16-bit weights
    // (up to 16 rows) in every mode; rows = 1 and 6 take different micro-kernels, out = 7 and 70 leave remainders.
    for (int dtype : {DTYPE_F32, DTYPE_BF16, DTYPE_F16})
        for (int in : {5, 8, 61, 768})
            for (int64_t rows : {1, 6}) {
                const int out = in == 768 ? 70 : 7;
                const std::string shape = format("rows=%lld out=%d in=%d", static_cast<long long>(rows), out, in);
                add("fixedorder.gemm.forward", shape, dtype, "det", NEED_HOST_THREADS | lowp(dtype), false,
                    [=](Ops& o, uint64_t s) { return gemmFixedOrderCase(o, s, GemmMode::Deterministic, dtype, rows, out, in); });
                if (dtype != DTYPE_F32)
                    add("fixedorder.gemm.forward", shape, dtype, "fast", NEED_HOST_THREADS | lowp(dtype), false,
                        [=](Ops& o, uint64_t s) { return gemmFixedOrderCase(o, s, GemmMode::Fast, dtype, rows, out, in); });
            }
    // Several column/row tiles, and a long reduction.
    for (int dtype : dtypes)
        for (GemmMode mode : {GemmMode::Fast, GemmMode::Reproducible, GemmMode::Deterministic}) {
            add("gemm.forward", "rows=257 out=300 in=200 bias beta=0 ld+", dtype, modeName(mode), lowp(dtype), false,
                [=](Ops& o, uint64_t s) { return gemmForwardCase(o, s, mode, dtype, 257, 300, 200, true, 0.f, true); });
            add("gemm.forward", "rows=9 out=24 in=1000 nobias beta=1", dtype, modeName(mode), lowp(dtype), false,
                [=](Ops& o, uint64_t s) { return gemmForwardCase(o, s, mode, dtype, 9, 24, 1000, false, 1.f, false); });
        }
    // Forward products given their x rounded (Gemm::a16): cuBLAS reads it in place (ld16 = in, a multiple of 8) or copies
    // it (ld16 = in + 3); a few rows (the gemv) and the deterministic tier take it widened
    for (int dtype : {DTYPE_BF16, DTYPE_F16})
        for (GemmMode mode : {GemmMode::Reproducible, GemmMode::Deterministic})
            for (auto [rows, in, ld16] : {std::array<int, 3>{131, 72, 72}, {131, 75, 78}, {3, 72, 72}})
                add("gemm.forward", format("rows=%d out=200 in=%d ld16=%d rounded x (a16)%s", rows, in, ld16,
                                           rows == 3 ? " bias" : ""),
                    dtype, modeName(mode), NEED_LOWP, false, [=](Ops& o, uint64_t s) {
                        return gemmRoundedInputCase(o, s, mode, dtype, rows, 200, in, ld16, rows == 3);
                    });
    // Forward products that keep their rounded x for the weight gradient (Gemm::keep16): the cuBLAS path packs into
    // it (in % 8 == 0) or copies its packed chunk there (in = 75); the deterministic tier rounds x a second time.
    for (int dtype : {DTYPE_BF16, DTYPE_F16})
        for (GemmMode mode : {GemmMode::Reproducible, GemmMode::Deterministic})
            for (int in : {72, 75})
                add("gemm.forward", format("rows=131 out=200 in=%d keep16", in), dtype, modeName(mode),
                    NEED_TRAINING | NEED_LOWP, false,
                    [=](Ops& o, uint64_t s) { return gemmKeepCase(o, s, mode, dtype, 131, 200, in); });
    // 16-bit weights, more rows than the CPU's fixed-order decode kernel takes, with the weights widened in several
    // blocks (Fast: ≈ 2^19 weights per block, so 524 rows here; Reproducible: 256-row tiles).
    for (int dtype : {DTYPE_BF16, DTYPE_F16})
        for (GemmMode mode : {GemmMode::Fast, GemmMode::Reproducible})
            add("gemm.forward", "rows=20 out=700 in=1000 nobias beta=1 ld+", dtype, modeName(mode), NEED_LOWP, false,
                [=](Ops& o, uint64_t s) { return gemmForwardCase(o, s, mode, dtype, 20, 700, 1000, false, 1.f, true); });
    // Realistic sizes (--big / --time): a 130m-class in_proj at decode and prefill, and the LM head at decode.
    for (int dtype : dtypes)
        for (GemmMode mode : {GemmMode::Fast, GemmMode::Reproducible, GemmMode::Pedantic, GemmMode::Deterministic}) {
            add("gemm.forward", "rows=1 out=3072 in=768 (in_proj decode)", dtype, modeName(mode), lowp(dtype), true,
                [=](Ops& o, uint64_t s) { return gemmForwardCase(o, s, mode, dtype, 1, 3072, 768, false, 0.f, false); });
            add("gemm.forward", "rows=512 out=3072 in=768 (in_proj prefill)", dtype, modeName(mode), lowp(dtype), true,
                [=](Ops& o, uint64_t s) { return gemmForwardCase(o, s, mode, dtype, 512, 3072, 768, false, 0.f, false); });
            add("gemm.forward", "rows=1 out=50280 in=768 (lm head)", dtype, modeName(mode), lowp(dtype), true,
                [=](Ops& o, uint64_t s) { return gemmForwardCase(o, s, mode, dtype, 1, 50280, 768, false, 0.f, false); });
        }

    // The GEMM table (--time): in_proj and out_proj of the four Mamba-1 sizes at decode (M = 1, 8), batched decode
    // (64, 256) and prefill/training (4096, 16384) sizes, every mode; BF16 (tensor-core tier) and F32 (scalar tier,
    // up to 4096 rows: it reads the weights once per 8 rows).
    struct Shape {
        const char* name;
        int out, in;
    };
    const Shape shapes[] = {{"130m in_proj", 3072, 768},   {"130m out_proj", 768, 1536},  {"370m in_proj", 4096, 1024},
                            {"370m out_proj", 1024, 2048}, {"1.4b in_proj", 8192, 2048},  {"1.4b out_proj", 2048, 4096},
                            {"2.8b in_proj", 10240, 2560}, {"2.8b out_proj", 2560, 5120}};
    for (int dtype : {DTYPE_F32, DTYPE_BF16})
        for (GemmMode mode : {GemmMode::Fast, GemmMode::Pedantic, GemmMode::Deterministic})
            for (const Shape& s : shapes)
                for (int64_t rows : {1, 8, 64, 256, 4096, 16384}) {
                    if (dtype == DTYPE_F32 && (rows > 4096 || (mode == GemmMode::Deterministic && rows > 256))) continue;
                    add("bench.gemm.forward",
                        format("rows=%lld out=%d in=%d (%s)", static_cast<long long>(rows), s.out, s.in, s.name),
                        dtype, modeName(mode), lowp(dtype), true, [=](Ops& o, uint64_t seed) {
                            return gemmShapeCase(o, seed, mode, dtype, rows, s.out, s.in);
                        });
                }

    // ---- gemm BackwardData, WeightGrad (Reproducible; operands in the weight's storage type) ----
    for (int64_t rows : gemmRows)
        for (float beta : {0.f, 1.f}) {
            const bool pad = beta != 0;
            add("gemm.backwardData", format("rows=%lld out=72 in=56 beta=%g%s", static_cast<long long>(rows), beta, pad ? " ld+" : ""),
                DTYPE_F32, "repro", NEED_TRAINING, false,
                [=](Ops& o, uint64_t s) { return gemmBackwardDataCase(o, s, DTYPE_F32, rows, 72, 56, beta, pad); });
        }
    for (int dtype : {DTYPE_BF16, DTYPE_F16, DTYPE_TF32}) {  // 16-bit: tensor cores on CUDA, the masters on the CPU
        const int need = NEED_TRAINING | NEED_LOWP;
        add("gemm.backwardData", "rows=64 out=72 in=56 beta=0", dtype, "repro", need, false,
            [=](Ops& o, uint64_t s) { return gemmBackwardDataCase(o, s, dtype, 64, 72, 56, 0.f, false); });
        add("gemm.backwardData", "rows=257 out=300 in=200 beta=1 ld+", dtype, "repro", need, false,
            [=](Ops& o, uint64_t s) { return gemmBackwardDataCase(o, s, dtype, 257, 300, 200, 1.f, true); });
        add("gemm.weightGrad", "rows=257 out=300 in=200 dbias ld+", dtype, "repro", need, false,
            [=](Ops& o, uint64_t s) { return gemmWeightGradCase(o, s, dtype, 257, 300, 200, true, true); });
        // Past the 32 MiB packing workspace: two chunks of rows (in order, through beta = 1 for dW).
        add("gemm.backwardData", "rows=4200 out=4096 in=8 beta=1 (chunks)", dtype, "repro", need, false,
            [=](Ops& o, uint64_t s) { return gemmBackwardDataCase(o, s, dtype, 4200, 4096, 8, 1.f, false); });
        add("gemm.weightGrad", "rows=4200 out=4096 in=8 dbias (chunks)", dtype, "repro", need, false,
            [=](Ops& o, uint64_t s) { return gemmWeightGradCase(o, s, dtype, 4200, 4096, 8, true, false); });
    }
    for (int dtype : {DTYPE_BF16, DTYPE_F16}) {  // timing rows (130m in_proj, 512 rows)
        add("gemm.backwardData", "rows=512 out=3072 in=768", dtype, "repro", NEED_TRAINING | NEED_LOWP, true,
            [=](Ops& o, uint64_t s) { return gemmBackwardDataCase(o, s, dtype, 512, 3072, 768, 0.f, false); });
        add("gemm.weightGrad", "rows=512 out=3072 in=768 dbias", dtype, "repro", NEED_TRAINING | NEED_LOWP, true,
            [=](Ops& o, uint64_t s) { return gemmWeightGradCase(o, s, dtype, 512, 3072, 768, true, false); });
    }
    add("gemm.backwardData", "rows=257 out=300 in=200 beta=1 ld+", DTYPE_F32, "repro", NEED_TRAINING, false,
        [=](Ops& o, uint64_t s) { return gemmBackwardDataCase(o, s, DTYPE_F32, 257, 300, 200, 1.f, true); });
    add("gemm.backwardData", "rows=512 out=3072 in=768", DTYPE_F32, "repro", NEED_TRAINING, true,
        [=](Ops& o, uint64_t s) { return gemmBackwardDataCase(o, s, DTYPE_F32, 512, 3072, 768, 0.f, false); });
    for (int64_t rows : gemmRows)
        for (bool bias : {true, false}) {
            const bool pad = !bias;
            add("gemm.weightGrad", format("rows=%lld out=72 in=56 %s%s", static_cast<long long>(rows), bias ? "dbias" : "nodbias", pad ? " ld+" : ""),
                DTYPE_F32, "repro", NEED_TRAINING, false,
                [=](Ops& o, uint64_t s) { return gemmWeightGradCase(o, s, DTYPE_F32, rows, 72, 56, bias, pad); });
        }
    add("gemm.weightGrad", "rows=257 out=300 in=200 dbias ld+", DTYPE_F32, "repro", NEED_TRAINING, false,
        [=](Ops& o, uint64_t s) { return gemmWeightGradCase(o, s, DTYPE_F32, 257, 300, 200, true, true); });
    add("gemm.weightGrad", "rows=512 out=3072 in=768 dbias", DTYPE_F32, "repro", NEED_TRAINING, true,
        [=](Ops& o, uint64_t s) { return gemmWeightGradCase(o, s, DTYPE_F32, 512, 3072, 768, true, false); });

    // ---- linearBackward: both backward products over one dy ----
    for (int dtype : {DTYPE_F32, DTYPE_TF32, DTYPE_BF16, DTYPE_F16}) {
        const int need = NEED_TRAINING | (dtype == DTYPE_F32 ? NEED_NONE : NEED_LOWP);
        add("linearBackward", "rows=64 out=72 in=56 beta=0", dtype, "repro", need, false,
            [=](Ops& o, uint64_t s) { return linearBackwardCase(o, s, dtype, 64, 72, 56, 0.f, false); });
        add("linearBackward", "rows=257 out=300 in=200 beta=1 ld+ dbias", dtype, "repro", need, false,
            [=](Ops& o, uint64_t s) { return linearBackwardCase(o, s, dtype, 257, 300, 200, 1.f, true); });
    }
    // Operands handed over rounded: dy (a16) as the LM loss writes it, x (b16) as a forward product kept it (keep16);
    // rows 16-byte aligned (CUDA reads them in place) and not (CUDA copies them to the packed layout first) — every
    // way bit for bit the products over the f32 operands they stand for
    struct Rounded { bool dy, x; int64_t lddy, ldx; };
    for (int dtype : {DTYPE_BF16, DTYPE_F16})
        for (Rounded r : {Rounded{true, false, 400, 79}, Rounded{true, false, 206, 79}, Rounded{false, true, 206, 72},
                          Rounded{false, true, 206, 75}, Rounded{true, true, 400, 72}})
            add("linearBackward",
                format("rows=131 out=200 in=72 beta=1 rounded %s lddy=%d ldx=%d",
                       r.dy && r.x ? "dy+x" : r.dy ? "dy (a16)" : "x (b16)", static_cast<int>(r.lddy),
                       static_cast<int>(r.ldx)),
                dtype, "repro", NEED_TRAINING | NEED_LOWP, false, [=](Ops& o, uint64_t s) {
                    return linearBackwardRoundedCase(o, s, dtype, 131, 200, 72, 1.f, r.lddy, r.ldx, r.dy, r.x);
                });
    // Past CUDA's largest packing workspace (256 MiB): chunks of rows, dW through beta = 1 (CUDA only: 540 MB of dy).
    add("linearBackward", "rows=33000 out=4096 in=8 beta=1 (chunks)", DTYPE_BF16, "repro",
        NEED_TRAINING | NEED_LOWP | NEED_GRAPHS, false,
        [=](Ops& o, uint64_t s) { return linearBackwardCase(o, s, DTYPE_BF16, 33000, 4096, 8, 1.f, false); });

    // ---- norms ----
    for (int64_t rows : {1, 7, 64})
        for (int d : {96, 1000})
            add("rmsnorm", format("rows=%lld d=%d ld+%s", static_cast<long long>(rows), d, rows > 3 ? " tiny rows" : ""), DTYPE_F32, "-", NEED_NONE, false,
                [=](Ops& o, uint64_t s) { return rmsnormCase(o, s, rows, d); });
    add("rmsnorm", "rows=512 d=768", DTYPE_F32, "-", NEED_NONE, true, [=](Ops& o, uint64_t s) { return rmsnormCase(o, s, 512, 768); });
    // rows written rounded (Mamba-1's rounded tape): alone, and into a product that takes them (normLinear, a16)
    for (int dtype16 : {DTYPE_BF16, DTYPE_F16})
        for (int64_t rows : {1, 7, 100}) {
            add("rmsnorm", format("rows=%lld d=%d y16", static_cast<long long>(rows), rows == 7 ? 1000 : 96), dtype16, "-",
                NEED_NONE, false, [=](Ops& o, uint64_t s) { return rmsnormRoundedCase(o, s, rows, rows == 7 ? 1000 : 96, dtype16); });
            add("normLinear", format("rows=%lld d=96 out=80 y16 (rounded x)", static_cast<long long>(rows)), dtype16, "fast",
                NEED_LOWP, false, [=](Ops& o, uint64_t s) { return rmsnormRoundedCase(o, s, rows, 96, dtype16, 80); });
        }
    add("rmsnorm", "rows=16384 d=768 y16", DTYPE_BF16, "-", NEED_NONE, true,
        [=](Ops& o, uint64_t s) { return rmsnormRoundedCase(o, s, 16384, 768, DTYPE_BF16); });
    for (int dtype : dtypes)
        for (GemmMode mode : {GemmMode::Fast, GemmMode::Reproducible, GemmMode::Deterministic})
            for (int64_t rows : {1, 5, 9, 64})
                add("normLinear", format("rows=%lld d=96 out=80 %s %s%s", static_cast<long long>(rows), rows == 9 ? "bias" : "nobias",
                                         rows == 5 ? "aligned" : "ld+", rows > 3 ? " tiny rows" : ""),
                    dtype, modeName(mode), lowp(dtype), false,
                    [=](Ops& o, uint64_t s) { return normLinearCase(o, s, mode, dtype, rows, 96, 80, rows == 9, rows == 5); });
    for (int dtype : dtypes)
        for (GemmMode mode : {GemmMode::Fast, GemmMode::Deterministic})
            for (int B : {1, 3, 8})
                for (bool aligned : {false, true})
                    add("normLinearConv", format("B=%d d=96 E=72 K=4 (decode)%s", B, aligned ? " aligned" : ""), dtype,
                        modeName(mode), lowp(dtype), false,
                        [=](Ops& o, uint64_t s) { return normLinearConvCase(o, s, mode, dtype, B, 96, 72, 4, aligned); });
    // DETERMINISTIC's fused decode product (the chain tile: one row, 256 … 2048 inputs): both of the rmsnorm's sum
    // orders (128 threads up to 1,024 wide, 256 beyond), 16-byte and single sums (aligned or padded rows), conv widths 4
    // and 3 — bit for bit against the ops run apart
    for (int dtype : dtypes)
        for (int d : {264, 1040})
            for (bool aligned : {false, true}) {
                add("normLinear", format("rows=1 d=%d out=72 %s (det decode)", d, aligned ? "aligned" : "ld+"), dtype, "det",
                    lowp(dtype), false,
                    [=](Ops& o, uint64_t s) { return normLinearCase(o, s, GemmMode::Deterministic, dtype, 1, d, 72, true, aligned); });
                const int K = d == 264 ? 4 : 3;
                add("normLinearConv", format("B=1 d=%d E=40 K=%d%s (det decode)", d, K, aligned ? " aligned" : ""), dtype,
                    "det", lowp(dtype), false,
                    [=](Ops& o, uint64_t s) { return normLinearConvCase(o, s, GemmMode::Deterministic, dtype, 1, d, 40, K, aligned); });
            }
    // the real decode shapes, fused, in both modes (timed with --big --time); 2.8b's width takes the rmsnorm's
    // 256-thread sum order, and normLinear's rows = 5 the chain tile's several rows
    for (int dtype : dtypes)
        for (GemmMode mode : {GemmMode::Fast, GemmMode::Deterministic}) {
            add("normLinearConv", "B=1 d=768 E=1536 K=4 (130m decode)", dtype, modeName(mode), lowp(dtype), true,
                [=](Ops& o, uint64_t s) { return normLinearConvCase(o, s, mode, dtype, 1, 768, 1536, 4, true); });
            add("normLinearConv", "B=1 d=2560 E=5120 K=4 (2.8b decode)", dtype, modeName(mode), lowp(dtype), true,
                [=](Ops& o, uint64_t s) { return normLinearConvCase(o, s, mode, dtype, 1, 2560, 5120, 4, true); });
            for (int64_t rows : {1, 5})
                add("normLinear", format("rows=%lld d=768 out=3072 (decode)", static_cast<long long>(rows)), dtype,
                    modeName(mode), lowp(dtype), true,
                    [=](Ops& o, uint64_t s) { return normLinearCase(o, s, mode, dtype, rows, 768, 3072, false, true); });
        }
    for (int64_t rows : {1, 7, 64, 100})  // CUDA: 32 rows per block, the last one short at 100
        for (int d : {96, 1000})
            for (float beta : {0.f, 1.f})
                add("rmsnormBackward", format("rows=%lld d=%d beta=%g ld+", static_cast<long long>(rows), d, beta), DTYPE_F32, "-",
                    NEED_TRAINING, false, [=](Ops& o, uint64_t s) { return rmsnormBackwardCase(o, s, rows, d, beta, false); });
    add("rmsnormBackward", "rows=8 d=96 beta=0 ld+ tiny rows", DTYPE_F32, "-", NEED_TRAINING, false,
        [=](Ops& o, uint64_t s) { return rmsnormBackwardCase(o, s, 8, 96, 0.f, true); });
    for (int64_t rows : {7, 100})  // d and the leading dimensions multiples of 4: CUDA's float4 path (d 1,000: lanes with fewer groups)
        for (int d : {96, 1000})
            for (float beta : {0.f, 1.f})
                add("rmsnormBackward", format("rows=%lld d=%d beta=%g aligned", static_cast<long long>(rows), d, beta),
                    DTYPE_F32, "-", NEED_TRAINING, false,
                    [=](Ops& o, uint64_t s) { return rmsnormBackwardCase(o, s, rows, d, beta, false, true); });
    for (int d : {768, 2048})  // the 130m and 1.3b training shapes (B 8 × T 2,048 rows; timing), aligned as the model's
        add("rmsnormBackward", format("rows=16384 d=%d beta=1 aligned", d), DTYPE_F32, "-", NEED_TRAINING, true,
            [=](Ops& o, uint64_t s) { return rmsnormBackwardCase(o, s, 16384, d, 1.f, false, true); });

    // ---- embed, negExp, 16-bit conversions ----
    for (int dtype : {DTYPE_F32, DTYPE_BF16, DTYPE_F16})
        add("embed", "vocab=50 d=96 rows=9", dtype, "-", lowp(dtype), false,
            [=](Ops& o, uint64_t s) { return embedCase(o, s, dtype, 50, 96, 9); });
    add("embed", "vocab=50280 d=768 rows=512", DTYPE_F32, "-", NEED_NONE, true,
        [=](Ops& o, uint64_t s) { return embedCase(o, s, DTYPE_F32, 50280, 768, 512); });
    for (bool padded : {false, true})
        add("embedBackward", format("vocab=50 d=96 rows=9%s", padded ? " ld+" : ""), DTYPE_F32, "-", NEED_TRAINING, false,
            [=](Ops& o, uint64_t s) { return embedBackwardCase(o, s, 50, 96, 9, padded, false); });
    add("embedBackward", "vocab=1 d=8 rows=5", DTYPE_F32, "-", NEED_TRAINING, false,
        [=](Ops& o, uint64_t s) { return embedBackwardCase(o, s, 1, 8, 5, false, false); });
    add("embedBackward", "vocab=7 d=40 rows=1000 repeats", DTYPE_F32, "-", NEED_TRAINING, false,
        [=](Ops& o, uint64_t s) { return embedBackwardCase(o, s, 7, 40, 1000, false, true); });
    add("embedBackward", "vocab=33 d=1100 rows=64 ld+ repeats", DTYPE_F32, "-", NEED_TRAINING, false,
        [=](Ops& o, uint64_t s) { return embedBackwardCase(o, s, 33, 1100, 64, true, true); });
    add("embedBackward", "vocab=50280 d=768 rows=2048", DTYPE_F32, "-", NEED_TRAINING, true,
        [=](Ops& o, uint64_t s) { return embedBackwardCase(o, s, 50280, 768, 2048, false, false); });
    for (int n : {12, 16, 64})
        add("negExp", format("channels=72 d_state=%d", n), DTYPE_F32, "-", NEED_NONE, false,
            [=](Ops& o, uint64_t s) { return negExpCase(o, s, 72, n); });
    for (int dtype : {DTYPE_BF16, DTYPE_F16}) {
        add("toLowPrecision", "ties, +-1ulp, overflow, subnormals, +-0, +-inf, NaN", dtype, "-", NEED_LOWP, false,
            [=](Ops& o, uint64_t s) { return toLowPrecisionCase(o, s, dtype); });
        add("fromLowPrecision", "all 16-bit patterns but NaN; to(from(h)) == h", dtype, "-", NEED_LOWP, false,
            [=](Ops& o, uint64_t s) { return fromLowPrecisionCase(o, s, dtype); });
    }

    // ---- conv ----
    for (int T : {1, 7, 64})
        for (int C : {72, 160})
            for (int K : {4, 2, 1}) {
                if (C == 160 && K != 4) continue;
                add("convSilu", format("B=2 T=%d C=%d K=%d ld+", T, C, K), DTYPE_F32, "-", NEED_NONE, false,
                    [=](Ops& o, uint64_t s) { return convSiluCase(o, s, 2, T, C, K); });
            }
    add("convSilu", "B=1 T=512 C=1536 K=4", DTYPE_F32, "-", NEED_NONE, true,
        [=](Ops& o, uint64_t s) { return convSiluCase(o, s, 1, 512, 1536, 4); });
    add("convSilu", "B=8 T=1 C=1536 K=4 (decode)", DTYPE_F32, "-", NEED_NONE, true,
        [=](Ops& o, uint64_t s) { return convSiluCase(o, s, 8, 1, 1536, 4); });
    for (int T : {2, 7, 64})
        for (int K : {4, 2})
            add("convSilu.split", format("B=2 T=%d as %d+%d C=72 K=%d", T, T / 2, T - T / 2, K), DTYPE_F32, "-", NEED_NONE, false,
                [=](Ops& o, uint64_t s) { return convSplitCase(o, s, 2, T, 72, K); });
    for (int T : {1, 7, 64})
        for (int C : {72, 160})
            for (int K : {4, 2, 1}) {
                if (C == 160 && K != 4) continue;
                add("convSiluBackward", format("B=2 T=%d C=%d K=%d ld+", T, C, K), DTYPE_F32, "-", NEED_TRAINING, false,
                    [=](Ops& o, uint64_t s) { return convSiluBackwardCase(o, s, 2, T, C, K); });
            }
    for (int T : {9, 2})  // T 2 < K − 1: the end history still holds starting-history slots
        add("convSiluBackward.carry", format("B=2 T=%d C=70 K=4 dhistory_end+dhistory", T), DTYPE_F32, "-", NEED_TRAINING,
            false, [=](Ops& o, uint64_t s) { return convSiluBackwardCarryCase(o, s, 2, T, 70, 4); });
    for (int K : {3, 8})  // the other compile-time widths of the CUDA kernel (two tiles of steps)
        add("convSiluBackward", format("B=2 T=64 C=72 K=%d ld+", K), DTYPE_F32, "-", NEED_TRAINING, false,
            [=](Ops& o, uint64_t s) { return convSiluBackwardCase(o, s, 2, 64, 72, K); });
    for (int dtype : {DTYPE_BF16, DTYPE_F16})  // u also written rounded (x_proj's x in Mamba-1's rounded tape)
        for (int T : {1, 70})  // the stepwise and the parallel kernel
            add("convSilu", format("B=2 T=%d C=72 K=4 u16", T), dtype, "-", NEED_LOWP, false,
                [=](Ops& o, uint64_t s) { return convSiluCase(o, s, 2, T, 72, 4, dtype); });
    for (int dtype : {DTYPE_BF16, DTYPE_F16})  // dx written rounded (in_proj's dy where its products round it)
        add("convSiluBackward", "B=2 T=70 C=72 K=4 dx16", dtype, "-", NEED_TRAINING, false,
            [=](Ops& o, uint64_t s) { return convSiluBackwardCase(o, s, 2, 70, 72, 4, dtype); });
    add("convSiluBackward", "B=1 T=512 C=1536 K=4", DTYPE_F32, "-", NEED_TRAINING, true,
        [=](Ops& o, uint64_t s) { return convSiluBackwardCase(o, s, 1, 512, 1536, 4); });
    // the 130m training step's shape (B 8 × T 2,048: 512 partials per weight)
    add("convSiluBackward", "B=8 T=2048 C=1536 K=4", DTYPE_F32, "-", NEED_TRAINING, true,
        [=](Ops& o, uint64_t s) { return convSiluBackwardCase(o, s, 8, 2048, 1536, 4); });

    // ---- selective scan: T × d_state × dtProj × checkpoints ----
    auto chunkFor = [](int T) { return T <= 7 ? 4 : T <= 64 ? 16 : 64; };
    for (int T : {1, 7, 64, 300})
        for (int N : {16, 64, 12})
            for (bool proj : {false, true})
                for (bool ck : {false, true}) {
                    const int chunk = ck ? chunkFor(T) : 0;
                    add("selectiveScan",
                        format("B=2 T=%d C=72 N=%d %s %s", T, N, proj ? "dtProj" : "dt", ck ? format("ckpt/%d", chunk).c_str() : "nockpt"),
                        DTYPE_F32, proj ? (ck ? "repro" : "fast") : "-", ck ? NEED_TRAINING : NEED_NONE, false,
                        [=](Ops& o, uint64_t s) { return scanCase(o, s, 2, T, 72, N, proj, chunk, DTYPE_F32); });
                }
    for (int dtype : {DTYPE_TF32, DTYPE_BF16, DTYPE_F16})
        for (bool ck : {false, true})
            add("selectiveScan", format("B=2 T=64 C=72 N=16 dtProj %s", ck ? "ckpt/16" : "nockpt"), dtype, ck ? "repro" : "fast",
                NEED_LOWP | (ck ? NEED_TRAINING : NEED_NONE), false,
                [=](Ops& o, uint64_t s) { return scanCase(o, s, 2, 64, 72, 16, true, ck ? 16 : 0, dtype); });
    // the chunked training forward at the checkpoint intervals of the d_state-16 backward's pieces (16) and past them
    // (24: pieces of 16 + 8), short last chunks; the backward on the same tapes
    for (int ck : {16, 24}) {
        add("selectiveScan", format("B=2 T=203 C=72 N=16 dt ckpt/%d", ck), DTYPE_F32, "-", NEED_TRAINING, false,
            [=](Ops& o, uint64_t s) { return scanCase(o, s, 2, 203, 72, 16, false, ck, DTYPE_F32); });
        add("selectiveScanBackward", format("B=2 T=203 C=72 N=16 ckpt/%d aligned rows", ck), DTYPE_F32, "-", NEED_TRAINING,
            false, [=](Ops& o, uint64_t s) { return scanBackwardCase(o, s, 2, 203, 72, 16, ck, false, true); });
    }
    // the output written rounded (Mamba-1's rounded tape): the training forward (checkpoints) and a plain scan
    for (int dtype : {DTYPE_BF16, DTYPE_F16})
        for (auto [T, ck] : {std::array<int, 2>{203, 16}, {64, 0}})
            add("selectiveScan", format("B=2 T=%d C=72 N=16 %s out16", T, ck ? "ckpt/16" : "nockpt"), dtype, "-",
                NEED_LOWP | (ck ? NEED_TRAINING : NEED_NONE), false,
                [=](Ops& o, uint64_t s) { return scanRoundedCase(o, s, 2, T, 72, 16, ck, dtype); });
    add("selectiveScan", "B=8 T=2048 C=1536 N=16 ckpt/16 out16", DTYPE_BF16, "-", NEED_TRAINING | NEED_LOWP, true,
        [=](Ops& o, uint64_t s) { return scanRoundedCase(o, s, 8, 2048, 1536, 16, 16, DTYPE_BF16); });
    for (int T : {7, 40, 200, 203})  // below and above the staged walk's 16 steps, the wide layout's 32, the chunked scan's minimum
        add("det.steps.selectiveScan", format("B=3 T=%d C=72 N=16 shape-independent: = T steps = row alone", T), DTYPE_F32,
            "det", NEED_NONE, false, [=](Ops& o, uint64_t s) { return scanShapeIndependentCase(o, s, 3, T, 72, 16); });
    // the staged walk (few blocks, ≥ 16 steps) with other state sizes: a last lane with 1 of 4 states (N = 5), 8 and 4
    // channels per block (N = 64, 128; 15-step tiles at 128), a last block with idle channels (C = 37)
    for (int N : {5, 64, 128})
        add("det.steps.selectiveScan", format("B=2 T=70 C=37 N=%d shape-independent: = T steps = row alone", N), DTYPE_F32,
            "det", NEED_NONE, false, [=](Ops& o, uint64_t s) { return scanShapeIndependentCase(o, s, 2, 70, 37, N); });
    for (int T : {2, 7, 64})
        add("selectiveScan.split", format("B=2 T=%d as %d+%d C=72 N=16 h carried", T, T / 2, T - T / 2), DTYPE_F32, "-", NEED_NONE,
            false, [=](Ops& o, uint64_t s) { return scanSplitCase(o, s, 2, T, 72, 16); });
    for (bool ck : {false, true})
        add("selectiveScan", format("B=2 T=7 C=72 N=16 dt in [15,25] %s", ck ? "ckpt/4" : "nockpt"), DTYPE_F32, "-",
            ck ? NEED_TRAINING : NEED_NONE, false,
            [=](Ops& o, uint64_t s) { return scanCase(o, s, 2, 7, 72, 16, false, ck ? 4 : 0, DTYPE_F32, true); });
    add("selectiveScan", "B=1 T=512 C=1536 N=16 dtProj", DTYPE_F32, "fast", NEED_NONE, true,
        [=](Ops& o, uint64_t s) { return scanCase(o, s, 1, 512, 1536, 16, true, 0, DTYPE_F32); });
    // a one-row DETERMINISTIC prefill of the 370m shape: the sequential narrow walk over 4,096 steps
    add("selectiveScan", "B=1 T=4096 C=2048 N=16 shape-independent (det prefill) aligned rows", DTYPE_F32, "det", NEED_NONE, true,
        [=](Ops& o, uint64_t s) { return scanCase(o, s, 1, 4096, 2048, 16, false, 0, DTYPE_F32, false, true, true); });
    // the same prefill as the fast modes run it, and prefills of other widths and batches in both: which scan pays
    add("selectiveScan", "B=1 T=4096 C=2048 N=16 (fast prefill) aligned rows", DTYPE_F32, "-", NEED_NONE, true,
        [=](Ops& o, uint64_t s) { return scanCase(o, s, 1, 4096, 2048, 16, false, 0, DTYPE_F32, false, true, false); });
    for (auto [B, T, C] : {std::array<int, 3>{1, 4096, 1536}, {1, 4096, 5120}, {4, 1024, 2048}})
        for (bool det : {true, false})
            add("selectiveScan", format("B=%d T=%d C=%d N=16 (%s prefill) aligned rows", B, T, C, det ? "det" : "fast"), DTYPE_F32,
                det ? "det" : "-", NEED_NONE, true,
                [=](Ops& o, uint64_t s) { return scanCase(o, s, B, T, C, 16, false, 0, DTYPE_F32, false, true, det); });
    add("selectiveScan", "B=8 T=1 C=1536 N=16 (decode)", DTYPE_F32, "-", NEED_NONE, true,
        [=](Ops& o, uint64_t s) { return scanCase(o, s, 8, 1, 1536, 16, false, 0, DTYPE_F32); });
    // batched decode of the 130m and 2.8b shapes, rows aligned like a model's x_proj output
    for (int B : {16, 64})
        for (int C : {1536, 5120})
            add("selectiveScan", format("B=%d T=1 C=%d N=16 (batched decode) aligned rows", B, C), DTYPE_F32, "-", NEED_NONE, true,
                [=](Ops& o, uint64_t s) { return scanCase(o, s, B, 1, C, 16, false, 0, DTYPE_F32, false, true); });
    add("selectiveScan", "B=4 T=256 C=1536 N=16 ckpt/64", DTYPE_F32, "-", NEED_TRAINING, true,
        [=](Ops& o, uint64_t s) { return scanCase(o, s, 4, 256, 1536, 16, false, 64, DTYPE_F32); });
    for (int T : {1, 7, 64, 300})
        for (int N : {16, 64, 12})
            add("selectiveScanBackward", format("B=2 T=%d C=72 N=%d ckpt/%d", T, N, chunkFor(T)), DTYPE_F32, "-", NEED_TRAINING, false,
                [=](Ops& o, uint64_t s) { return scanBackwardCase(o, s, 2, T, 72, N, chunkFor(T)); });
    // ddt and dz written rounded (Mamba-1 where its products round dy): both kernels of the CUDA backward
    for (int dtype : {DTYPE_BF16, DTYPE_F16})
        for (auto [T, N, ck] : {std::array<int, 3>{67, 16, 16}, {70, 12, 16}})
            add("selectiveScanBackward", format("B=2 T=%d C=72 N=%d ckpt/%d ddt16+dz16", T, N, ck), dtype, "-", NEED_TRAINING,
                false, [=](Ops& o, uint64_t s) { return scanBackwardCase(o, s, 2, T, 72, N, ck, false, true, dtype); });
    add("selectiveScanBackward", "B=2 T=67 C=72 N=16 ckpt/16 ddt16 alone (dz f32)", DTYPE_BF16, "-", NEED_TRAINING, false,
        [=](Ops& o, uint64_t s) { return scanBackwardCase(o, s, 2, 67, 72, 16, 16, false, true, DTYPE_BF16, true, true); });
    add("selectiveScanBackward", "B=2 T=7 C=72 N=16 ckpt/4 dt in [15,25]", DTYPE_F32, "-", NEED_TRAINING, false,
        [=](Ops& o, uint64_t s) { return scanBackwardCase(o, s, 2, 7, 72, 16, 4, true); });
    add("selectiveScanBackward.carry", "B=2 T=12 C=20 N=4 ckpt/4 dh_end+dh_start", DTYPE_F32, "-", NEED_TRAINING, false,
        [=](Ops& o, uint64_t s) { return scanBackwardCarryCase(o, s, 2, 12, 20, 4, 4); });
    add("selectiveScanBackward.carry", "B=2 T=6 C=72 N=16 ckpt/4 dh_end+dh_start", DTYPE_F32, "-", NEED_TRAINING, false,
        [=](Ops& o, uint64_t s) { return scanBackwardCarryCase(o, s, 2, 6, 72, 16, 4); });
    // d_state past 128: 8 states per lane (the wide instantiation of the CUDA backward)
    add("selectiveScanBackward", "B=2 T=70 C=24 N=160 ckpt/16", DTYPE_F32, "-", NEED_TRAINING, false,
        [=](Ops& o, uint64_t s) { return scanBackwardCase(o, s, 2, 70, 24, 160, 16); });
    // B and C rows 16-byte aligned like a model's x_proj output (the vector-load path); small then the 130m shapes
    add("selectiveScanBackward", "B=2 T=67 C=72 N=16 ckpt/16 aligned rows", DTYPE_F32, "-", NEED_TRAINING, false,
        [=](Ops& o, uint64_t s) { return scanBackwardCase(o, s, 2, 67, 72, 16, 16, false, true); });
    // the d_state-16 kernel's pieces of 16 steps: chunks of several pieces with a short last one, channels past the
    // last full block (40 = 32 + 8)
    add("selectiveScanBackward", "B=2 T=67 C=72 N=16 ckpt/24 aligned rows", DTYPE_F32, "-", NEED_TRAINING, false,
        [=](Ops& o, uint64_t s) { return scanBackwardCase(o, s, 2, 67, 72, 16, 24, false, true); });
    add("selectiveScanBackward", "B=3 T=100 C=40 N=16 ckpt/64", DTYPE_F32, "-", NEED_TRAINING, false,
        [=](Ops& o, uint64_t s) { return scanBackwardCase(o, s, 3, 100, 40, 16, 64); });
    add("selectiveScanBackward", "B=4 T=256 C=1536 N=16 ckpt/64", DTYPE_F32, "-", NEED_TRAINING, true,
        [=](Ops& o, uint64_t s) { return scanBackwardCase(o, s, 4, 256, 1536, 16, 64, false, true); });
    // the 130m training shape at B 8 × T 1024 (chunk-parallel forward; the backward's 384 blocks fill 73% of the H200's slots: one group)
    add("selectiveScan", "B=8 T=1024 C=1536 N=16 ckpt/64", DTYPE_F32, "-", NEED_TRAINING, true,
        [=](Ops& o, uint64_t s) { return scanCase(o, s, 8, 1024, 1536, 16, false, 64, DTYPE_F32); });
    add("selectiveScanBackward", "B=8 T=1024 C=1536 N=16 ckpt/64", DTYPE_F32, "-", NEED_TRAINING, true,
        [=](Ops& o, uint64_t s) { return scanBackwardCase(o, s, 8, 1024, 1536, 16, 64, false, true); });
    // the 130m LM training step's shape (B 8 × T 2048: 32 chunks; timing)
    add("selectiveScanBackward", "B=8 T=2048 C=1536 N=16 ckpt/64", DTYPE_F32, "-", NEED_TRAINING, true,
        [=](Ops& o, uint64_t s) { return scanBackwardCase(o, s, 8, 2048, 1536, 16, 64, false, true); });
    // one long sequence (a stream trained window by window): 48 (row, channel block) blocks, so groups of chunks and
    // the carry kernels
    add("selectiveScanBackward", "B=1 T=2048 C=1536 N=16 ckpt/64", DTYPE_F32, "-", NEED_TRAINING, true,
        [=](Ops& o, uint64_t s) { return scanBackwardCase(o, s, 1, 2048, 1536, 16, 64, false, true); });
    // the same shapes with Mamba-1's training tape (a checkpoint every 16 steps: one piece per chunk)
    for (int T : {1024, 2048}) {
        add("selectiveScan", format("B=8 T=%d C=1536 N=16 ckpt/16", T), DTYPE_F32, "-", NEED_TRAINING, true,
            [=](Ops& o, uint64_t s) { return scanCase(o, s, 8, T, 1536, 16, false, 16, DTYPE_F32); });
        add("selectiveScanBackward", format("B=8 T=%d C=1536 N=16 ckpt/16", T), DTYPE_F32, "-", NEED_TRAINING, true,
            [=](Ops& o, uint64_t s) { return scanBackwardCase(o, s, 8, T, 1536, 16, 16, false, true); });
    }
    add("selectiveScanBackward", "B=1 T=2048 C=1536 N=16 ckpt/16", DTYPE_F32, "-", NEED_TRAINING, true,
        [=](Ops& o, uint64_t s) { return scanBackwardCase(o, s, 1, 2048, 1536, 16, 16, false, true); });
    // the training forward on the rest of the benchmark's shapes: the 130m backbone's B 8 × T 256, one long row, the
    // 2048 × 48 model's 4,096 channels
    for (auto [B, T, C] : {std::array<int, 3>{8, 256, 1536}, {1, 2048, 1536}, {8, 2048, 4096}})
        add("selectiveScan", format("B=%d T=%d C=%d N=16 ckpt/16 aligned rows", B, T, C), DTYPE_F32, "-", NEED_TRAINING, true,
            [=](Ops& o, uint64_t s) { return scanCase(o, s, B, T, C, 16, false, 16, DTYPE_F32, false, true); });

    // the training forward as the staged walk (enough blocks to fill the GPU twice) at a size the default run takes:
    // a partial last block of channels, a tile and checkpoint grid that the length does not divide, d_state 13
    for (auto [N, ck] : {std::array<int, 2>{16, 16}, {16, 24}, {13, 16}})
        add("selectiveScan", format("B=3 T=203 C=1432 N=%d ckpt/%d (training walk)", N, ck), DTYPE_F32, "-", NEED_TRAINING,
            false, [=](Ops& o, uint64_t s) { return scanCase(o, s, 3, 203, 1432, N, false, ck, DTYPE_F32); });
    // dt with its bias already in it (no ScanArgs::dt_bias): the training walk and the d_state-16 backward
    add("selectiveScan", "B=3 T=203 C=1432 N=16 ckpt/16 (training walk) bias in dt", DTYPE_F32, "-", NEED_TRAINING, false,
        [=](Ops& o, uint64_t s) { return scanCase(o, s, 3, 203, 1432, 16, false, 16, DTYPE_F32, false, false, false, false); });
    add("selectiveScanBackward", "B=2 T=67 C=72 N=16 ckpt/16 aligned rows bias in dt", DTYPE_F32, "-", NEED_TRAINING, false,
        [=](Ops& o, uint64_t s) { return scanBackwardCase(o, s, 2, 67, 72, 16, 16, false, true, DTYPE_F32, false); });

    // ---- data-parallel: the rank-order sum (every backend; n = 3·2^20 + 7 exceeds one CUDA grid pass) ----
    for (int ranks : {1, 2, 3, 8})
        for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{100003}})
            add("sumRanks", format("ranks=%d n=%lld", ranks, static_cast<long long>(n)), DTYPE_F32, "-", NEED_NONE, false,
                [=](Ops& o, uint64_t s) { return sumRanksCase(o, s, ranks, n); });
    add("sumRanks", "ranks=2 n=3145735", DTYPE_F32, "-", NEED_NONE, false,
        [=](Ops& o, uint64_t s) { return sumRanksCase(o, s, 2, 3 * (int64_t{1} << 20) + 7); });

    // ---- training utilities ----
    for (int64_t n : {1, 1000, 100003}) {
        add("scale", format("n=%lld", static_cast<long long>(n)), DTYPE_F32, "-", NEED_TRAINING, false,
            [=](Ops& o, uint64_t s) { return scaleCase(o, s, n); });
        add("sumOfSquares", format("n=%lld", static_cast<long long>(n)), DTYPE_F32, "-", NEED_TRAINING, false,
            [=](Ops& o, uint64_t s) { return sumIntoCase(o, s, n, true); });
        add("sumInto", format("n=%lld (sum)", static_cast<long long>(n)), DTYPE_F32, "-", NEED_TRAINING, false,
            [=](Ops& o, uint64_t s) { return sumIntoCase(o, s, n, false); });
        add("mse", format("n=%lld", static_cast<long long>(n)), DTYPE_F32, "-", NEED_TRAINING, false,
            [=](Ops& o, uint64_t s) { return mseCase(o, s, n); });
        add("adamw", format("n=%lld step=1 wd=0.1", static_cast<long long>(n)), DTYPE_F32, "-", NEED_TRAINING, false,
            [=](Ops& o, uint64_t s) { return adamwCase(o, s, n, 1, 0.1f, 1.f); });
        add("adamw", format("n=%lld step=10 wd=0 grad_scale=0.5", static_cast<long long>(n)), DTYPE_F32, "-", NEED_TRAINING, false,
            [=](Ops& o, uint64_t s) { return adamwCase(o, s, n, 10, 0.f, 0.5f); });
    }
    add("sumOfSquares", "n=1048576", DTYPE_F32, "-", NEED_TRAINING, false,
        [=](Ops& o, uint64_t s) { return sumIntoCase(o, s, 1 << 20, true); });
    // the optimizer's decision: clipped, unclipped, loss-scaled, skipped on an infinite norm, a bad loss flag, a NaN
    // loss, a loss that overflows float, nothing counted
    struct ControlCase { const char* name; double ss0, ss1, loss, count; bool bad; float clip, scale; };
    const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
    for (const ControlCase& c : {ControlCase{"clipped", 3.7, 0.25, 12.0, 4.0, false, 1.f, 1.f},
                                 ControlCase{"unclipped", 0.04, 0.0, 1.0, 1.0, false, 1.f, 1.f},
                                 ControlCase{"no clip, loss scale 2^16", 1.3e9, 2.0e8, 5.0, 2.0, false, 0.f, 65536.f},
                                 ControlCase{"clipped, loss scale 2^10", 9.0e6, 1.0, 5.0, 2.0, false, 0.5f, 1024.f},
                                 ControlCase{"infinite norm: skip", inf, 1.0, 1.0, 1.0, false, 1.f, 1.f},
                                 ControlCase{"host's bad loss: skip", 1.0, 1.0, 1.0, 1.0, true, 1.f, 1.f},
                                 ControlCase{"NaN loss: skip", 1.0, 1.0, nan, 1.0, false, 1.f, 1.f},
                                 ControlCase{"loss past float: skip", 1.0, 1.0, 1e39, 1.0, false, 1.f, 1.f},
                                 ControlCase{"nothing counted", 1.0, 1.0, 0.0, 0.0, false, 1.f, 1.f}})
        add("optimizerControl", c.name, DTYPE_F32, "-", NEED_TRAINING, false, [=](Ops& o, uint64_t s) {
            return optimizerControlCase(o, s, c.ss0, c.ss1, c.loss, c.count, c.bad, c.clip, c.scale);
        });
    add("adamw", "n=100003 skipped", DTYPE_F32, "-", NEED_TRAINING, false,
        [=](Ops& o, uint64_t s) { return adamwSkipCase(o, s, 100003); });
    add("adamw", "n=16777216 step=10 wd=0.1", DTYPE_F32, "-", NEED_TRAINING, true,
        [=](Ops& o, uint64_t s) { return adamwCase(o, s, 1 << 24, 10, 0.1f, 1.f); });
    for (int dt : {DTYPE_BF16, DTYPE_F16})
        for (bool skip : {false, true})
            add("adamwGroup", format("7 tensors, copies %s and f32%s", dtypeName(dt), skip ? ", step skipped" : ""),
                DTYPE_F32, "-", NEED_TRAINING, false,
                [=](Ops& o, uint64_t s) { return adamwGroupCase(o, s, dt, skip); });
    for (int vocab : {37, 1000})
        for (Grad g : {Grad::Separate, Grad::Aliased, Grad::None})
            add("crossEntropy",
                format("rows=13 vocab=%d %s ignored=rows%%5==2", vocab,
                       g == Grad::Separate ? "dlogits" : g == Grad::Aliased ? "dlogits=logits" : "no-dlogits"),
                DTYPE_F32, "-", NEED_TRAINING, false, [=](Ops& o, uint64_t s) { return crossEntropyCase(o, s, 13, vocab, g); });
    for (int dt : {DTYPE_BF16, DTYPE_F16})
        for (int vocab : {1000, 50277})
            add("crossEntropy", format("rows=7 vocab=%d dlogits16=logits (%s, ld 2·vocab)", vocab, dtypeName(dt)),
                DTYPE_F32, "-", NEED_TRAINING, false,
                [=](Ops& o, uint64_t s) { return crossEntropyCase(o, s, 7, vocab, Grad::Rounded, false, dt); });
    add("crossEntropy", "rows=13 vocab=1000 dlogits logits in [-30,95]", DTYPE_F32, "-", NEED_TRAINING, false,
        [=](Ops& o, uint64_t s) { return crossEntropyCase(o, s, 13, 1000, Grad::Separate, true); });
    // CUDA stages a row in shared memory when it fits (16-byte copies when vocab % 4 == 0, else 4-byte ones) and reads
    // it from global memory when it does not (past ≈ 56k logits on Hopper)
    add("crossEntropy", "rows=5 vocab=50277 dlogits=logits (staged by 4 bytes)", DTYPE_F32, "-", NEED_TRAINING, false,
        [=](Ops& o, uint64_t s) { return crossEntropyCase(o, s, 5, 50277, Grad::Aliased); });
    add("crossEntropy", "rows=3 vocab=65540 dlogits (past shared memory)", DTYPE_F32, "-", NEED_TRAINING, false,
        [=](Ops& o, uint64_t s) { return crossEntropyCase(o, s, 3, 65540, Grad::Separate); });
    add("crossEntropy", "rows=3 vocab=65540 dlogits16=logits (BF16, past shared memory: written over its own row)",
        DTYPE_F32, "-", NEED_TRAINING, false,
        [=](Ops& o, uint64_t s) { return crossEntropyCase(o, s, 3, 65540, Grad::Rounded, false, DTYPE_BF16); });
    add("crossEntropy", "rows=512 vocab=50280 dlogits=logits", DTYPE_F32, "-", NEED_TRAINING, true,
        [=](Ops& o, uint64_t s) { return crossEntropyCase(o, s, 512, 50280, Grad::Aliased); });

    // ---- determinism: the training ops, twice on the same inputs; on the CPU also over thread counts ----
    // Sizes that split into several tasks / tiles / reduction chunks on 2 and 3 threads.
    std::vector<Case> training;
    auto train = [&training](std::string op, std::string shape, std::function<Prepared(Ops&, uint64_t)> prep) {
        training.push_back(Case{std::move(op), std::move(shape), DTYPE_F32, "repro", NEED_TRAINING, false, std::move(prep)});
    };
    train("gemm.forward", "rows=257 out=300 in=200 bias beta=1", [](Ops& o, uint64_t s) {
        return gemmForwardCase(o, s, GemmMode::Reproducible, DTYPE_F32, 257, 300, 200, true, 1.f, false);
    });
    train("gemm.forward.det", "rows=257 out=300 in=200 bias beta=1", [](Ops& o, uint64_t s) {
        return gemmForwardCase(o, s, GemmMode::Deterministic, DTYPE_F32, 257, 300, 200, true, 1.f, false);
    });
    for (GemmMode mode : {GemmMode::Fast, GemmMode::Deterministic})  // 16-bit weights: both CPU kernels
        for (int64_t rows : {9, 257})
            training.push_back(Case{"gemm.forward", format("rows=%lld out=300 in=200 bias beta=1", static_cast<long long>(rows)),
                                    DTYPE_BF16, modeName(mode), NEED_LOWP, false, [=](Ops& o, uint64_t s) {
                                        return gemmForwardCase(o, s, mode, DTYPE_BF16, rows, 300, 200, true, 1.f, false);
                                    }});
    train("gemm.backwardData", "rows=257 out=300 in=200 beta=0",
          [](Ops& o, uint64_t s) { return gemmBackwardDataCase(o, s, DTYPE_F32, 257, 300, 200, 0.f, false); });
    train("gemm.weightGrad", "rows=257 out=300 in=200 dbias",
          [](Ops& o, uint64_t s) { return gemmWeightGradCase(o, s, DTYPE_F32, 257, 300, 200, true, false); });
    train("rmsnormBackward", "rows=257 d=1000 beta=1",
          [](Ops& o, uint64_t s) { return rmsnormBackwardCase(o, s, 257, 1000, 1.f, false); });
    train("convSiluBackward", "B=4 T=64 C=160 K=4", [](Ops& o, uint64_t s) { return convSiluBackwardCase(o, s, 4, 64, 160, 4); });
    train("selectiveScan", "B=3 T=64 C=160 N=16 dtProj ckpt/16",
          [](Ops& o, uint64_t s) { return scanCase(o, s, 3, 64, 160, 16, true, 16, DTYPE_F32); });
    train("selectiveScanBackward", "B=3 T=64 C=160 N=16 ckpt/16",
          [](Ops& o, uint64_t s) { return scanBackwardCase(o, s, 3, 64, 160, 16, 16); });
    train("sumOfSquares", "n=1048576", [](Ops& o, uint64_t s) { return sumIntoCase(o, s, 1 << 20, true); });
    train("adamw", "n=262147 step=10", [](Ops& o, uint64_t s) { return adamwCase(o, s, 262147, 10, 0.1f, 1.f); });
    train("mse", "n=1048576", [](Ops& o, uint64_t s) { return mseCase(o, s, 1 << 20); });
    train("crossEntropy", "rows=64 vocab=1000 dlogits=logits",
          [](Ops& o, uint64_t s) { return crossEntropyCase(o, s, 64, 1000, Grad::Aliased); });
    train("embedBackward", "vocab=1000 d=200 rows=4099 repeats",
          [](Ops& o, uint64_t s) { return embedBackwardCase(o, s, 1000, 200, 4099, false, true); });
    for (Case& c : mamba3Cases()) t.push_back(std::move(c));
    for (Case& c : samplingCases()) t.push_back(std::move(c));
    for (Case& c : mamba3TrainingCases()) training.push_back(std::move(c));
    // ---- graphs: the inference stages of a decode step, recorded and replayed (capabilities().graphs) ----
    const std::vector<Case> inference = {
        Case{"gemm.forward", "rows=1 out=72 in=56 bias beta=0", DTYPE_F32, "fast", NEED_NONE, false,
             [](Ops& o, uint64_t s) { return gemmForwardCase(o, s, GemmMode::Fast, DTYPE_F32, 1, 72, 56, true, 0.f, false); }},
        Case{"normLinear", "rows=1 d=96 out=80 nobias", DTYPE_F32, "fast", NEED_NONE, false,
             [](Ops& o, uint64_t s) { return normLinearCase(o, s, GemmMode::Fast, DTYPE_F32, 1, 96, 80, false); }},
        Case{"normLinear", "rows=1 d=96 out=80 nobias", DTYPE_BF16, "fast", NEED_LOWP, false,
             [](Ops& o, uint64_t s) { return normLinearCase(o, s, GemmMode::Fast, DTYPE_BF16, 1, 96, 80, false); }},
        Case{"rmsnorm", "rows=4 d=96", DTYPE_F32, "-", NEED_NONE, false, [](Ops& o, uint64_t s) { return rmsnormCase(o, s, 4, 96); }},
        Case{"embed", "vocab=50 d=96 rows=4", DTYPE_F32, "-", NEED_NONE, false,
             [](Ops& o, uint64_t s) { return embedCase(o, s, DTYPE_F32, 50, 96, 4); }},
        Case{"convSilu", "B=4 T=1 C=160 K=4", DTYPE_F32, "-", NEED_NONE, false,
             [](Ops& o, uint64_t s) { return convSiluCase(o, s, 4, 1, 160, 4); }},
        Case{"selectiveScan", "B=4 T=1 C=160 N=16 dtProj", DTYPE_F32, "fast", NEED_NONE, false,
             [](Ops& o, uint64_t s) { return scanCase(o, s, 4, 1, 160, 16, true, 0, DTYPE_F32); }},
    };
    for (const Case& c : inference) t.push_back(graphed(c));

    for (const Case& c : training) t.push_back(determinism(c, false));
    for (const Case& c : training) t.push_back(determinism(c, true));
    return t;
}

}  // namespace optest
