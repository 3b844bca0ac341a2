// Checks every op of the CUDA backend (ops/ops.h) against plain double-precision C++ on fresh random
// inputs (outputs poisoned with NaN before each call) — the inference stages, the named fusions (normLinear,
// selectiveScan with its Δ projection) fused and unfused, every gemm kind, and the training stages
// (backward products, rmsnorm/conv/scan backward, the scan with checkpoints, reductions, AdamW, losses; each
// training reduction also rerun and compared bit for bit), then contexts: two backends on two threads (one
// capturing a graph) give the bits of one backend alone — then times the kernels with CUDA events against
// their HBM floor. Exit status 1 when any check fails.
//
//   kernel_test [--seed N] [--no-timing] [--lmhead FILE]
//
// --lmhead FILE writes the B=1 LM-head matvec times (50280 × d_model, F32 and BF16) for the Java
// decode benchmark, which has no LM head in its API to time.
#include "core/backends.h"
#include "core/buffer.h"
#include "core/errors.h"
#include "cuda/cuda_backend.h"
#include "cuda/kernels.h"
#include "mamba/mamba.h"
#include "ops/ops.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

using namespace mamba;
using mamba::cuda::CudaBackend;
using mamba::cuda::ScanAlgo;

namespace {

constexpr double kHbmBytesPerSec = 4.26e12;  // measured device-to-device copy rate of the H200 here
const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::mt19937_64 rng;
std::shared_ptr<Ops> context;  // the context under test (newCudaBackend(0))
CudaBackend* be = nullptr;     // the same, with the test hooks
int failures = 0;

// ---------------- helpers ----------------

/** Uniform floats in [lo, hi): SplitMix64 seeded from the run's generator (fast enough for GB of weights). */
std::vector<float> randv(size_t n, double lo, double hi) {
    uint64_t s = rng();
    std::vector<float> v(n);
    for (auto& x : v) {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        x = static_cast<float>(lo + (hi - lo) * (static_cast<double>(z >> 11) * 0x1.0p-53));
    }
    return v;
}

struct Dev {  // a device buffer through the backend under test
    float* p = nullptr;
    int64_t n = 0;
    Dev() = default;
    explicit Dev(int64_t n_) : p(be->alloc(n_)), n(n_) {}
    explicit Dev(const std::vector<float>& h) : Dev(static_cast<int64_t>(h.size())) { put(h); }
    ~Dev() { if (p) be->release(p); }
    Dev(const Dev&) = delete;
    Dev& operator=(const Dev&) = delete;
    Dev(Dev&& o) noexcept : p(o.p), n(o.n) { o.p = nullptr; }
    Dev& operator=(Dev&& o) noexcept {
        std::swap(p, o.p);
        std::swap(n, o.n);
        return *this;
    }
    void put(const std::vector<float>& h) { be->upload(p, h.data(), static_cast<int64_t>(h.size())); }
    std::vector<float> get(int64_t count = -1) const {
        std::vector<float> h(static_cast<size_t>(count < 0 ? n : count));
        be->download(h.data(), p, static_cast<int64_t>(h.size()));
        return h;
    }
    void poison() { put(std::vector<float>(static_cast<size_t>(n), kNaN)); }
};

float roundBf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
float roundF16(float v) { return __half2float(__float2half_rn(v)); }
float roundTo(float v, int dtype) {
    return dtype == DTYPE_BF16 ? roundBf16(v) : dtype == DTYPE_F16 ? roundF16(v) : v;
}
const char* dtypeName(int d) {
    switch (d) {
        case DTYPE_F32: return "f32";
        case DTYPE_TF32: return "tf32";
        case DTYPE_BF16: return "bf16";
        default: return "f16";
    }
}

/** max |got − want| / max |want| over the selected elements; NaN or Inf in got gives +inf. */
struct Err {
    double num = 0, den = 0;
    bool bad = false;
    void add(double got, double want) {
        if (!std::isfinite(got)) bad = true;
        num = std::max(num, std::fabs(got - want));
        den = std::max(den, std::fabs(want));
    }
    double value() const { return bad ? INFINITY : den > 0 ? num / den : num; }
};

bool bitsEqual(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void report(const std::string& op, const std::string& shape, const std::string& dtype, double err, double tol) {
    const bool ok = err <= tol;
    if (!ok) ++failures;
    std::printf("| %-26s | %-34s | %-5s | %9.2e | %7.0e | %s |\n", op.c_str(), shape.c_str(), dtype.c_str(), err, tol,
                ok ? "pass" : "FAIL");
    std::fflush(stdout);
}

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, f);
    std::vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    return buf;
}

double silu(double x) { return x / (1.0 + std::exp(-x)); }
double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

/** y = beta·y + x·Wᵀ (+ bias) through the one dispatch point. */
void linear(const float* x, int64_t ldx, int64_t rows, const Matrix& w, const float* bias, float* y, int64_t ldy,
            float beta, GemmMode mode = GemmMode::Fast) {
    be->gemm(Gemm::forward(mode, x, ldx, rows, w, bias, y, ldy, beta));
}

// ---------------- checks ----------------

void checkTransfers() {
    auto h = randv(10007, -1, 1);
    Dev a(h), b(10007);
    b.poison();
    be->copy(b.p, a.p, 10007);
    Err e;
    auto back = b.get();
    for (size_t i = 0; i < h.size(); ++i) e.add(back[i], h[i]);
    be->zero(a.p + 5, 100);
    auto z = a.get();
    for (int i = 5; i < 105; ++i) e.add(z[i], 0.0);
    e.add(z[4], h[4]);
    e.add(z[105], h[105]);
    report("upload/copy/zero/download", "n=10007", "f32", e.value(), 0);
}

/** The table in `dtype` storage on the device: f32 values, or the 2-byte copy alone (no f32 table). */
void checkEmbed(int dtype, int d) {
    const int V = 1000, rows = 37;
    auto table = randv(static_cast<size_t>(V) * d, -1, 1);
    std::vector<int32_t> ids(rows);
    std::uniform_int_distribution<int> pick(0, V - 1);
    for (auto& i : ids) i = pick(rng);
    std::vector<float> idbits(rows);
    std::memcpy(idbits.data(), ids.data(), rows * sizeof(int32_t));
    const bool lowp = dtype == DTYPE_BF16 || dtype == DTYPE_F16;
    const int64_t n = static_cast<int64_t>(V) * d;
    Dev dt(table), dlow(lowp ? (n + 1) / 2 : 0), di(idbits), dout(static_cast<int64_t>(rows) * d);
    if (lowp) be->toLowPrecision(dt.p, dlow.p, n, dtype);
    const Matrix m{lowp ? nullptr : dt.p, lowp ? dlow.p : nullptr, dtype, V, d};
    dout.poison();
    be->embed(m, reinterpret_cast<const int32_t*>(di.p), rows, dout.p);
    auto got = dout.get();
    Err e;
    for (int r = 0; r < rows; ++r)
        for (int j = 0; j < d; ++j)
            e.add(got[static_cast<size_t>(r) * d + j], roundTo(table[static_cast<size_t>(ids[r]) * d + j], dtype));
    report("embed", fmt("rows=%d d=%d V=%d", rows, d, V), dtypeName(dtype), e.value(), 0);
}

void checkNegExp() {
    auto h = randv(4099, -3, 3);
    Dev in(h), out(4099);
    out.poison();
    be->negExp(in.p, out.p, 4099);
    Err e;
    auto got = out.get();
    for (size_t i = 0; i < h.size(); ++i) e.add(got[i], -std::exp(static_cast<double>(h[i])));
    report("negExp", "n=4099", "f32", e.value(), 1e-6);
}

void checkToLowp(int dtype) {
    const int64_t n = 100003;
    auto h = randv(static_cast<size_t>(n), -4, 4);
    h[0] = 1.0f + 1.0f / 256;  // ties and extremes
    h[1] = 65504.f;
    h[2] = -3.0e-8f;
    Dev src(h), dst((n + 1) / 2);
    dst.poison();
    be->toLowPrecision(src.p, dst.p, n, dtype);
    auto raw = dst.get();
    std::vector<uint16_t> bits(static_cast<size_t>(n));
    std::memcpy(bits.data(), raw.data(), static_cast<size_t>(n) * 2);
    int64_t mismatches = 0;
    for (int64_t i = 0; i < n; ++i) {
        uint16_t want;
        if (dtype == DTYPE_BF16) {
            __nv_bfloat16 b = __float2bfloat16_rn(h[i]);
            std::memcpy(&want, &b, 2);
        } else {
            __half b = __float2half_rn(h[i]);
            std::memcpy(&want, &b, 2);
        }
        mismatches += bits[i] != want;
    }
    report("toLowPrecision", fmt("n=%lld, bit-exact", static_cast<long long>(n)), dtypeName(dtype),
           static_cast<double>(mismatches), 0);
}

/** A 2-byte bf16/f16 pattern as f32 (host reference; exact). */
float lowpBitsToFloat(uint16_t v, int dtype) {
    if (dtype == DTYPE_BF16) {
        __nv_bfloat16_raw r;
        r.x = v;
        return __bfloat162float(__nv_bfloat16(r));
    }
    __half_raw r;
    r.x = v;
    return __half2float(__half(r));
}

/** fromLowPrecision: every 16-bit pattern that is a number converts exactly (and toLowPrecision gives it back). */
void checkFromLowp(int dtype) {
    std::vector<uint16_t> bits;
    for (uint32_t b = 0; b < 65536; ++b)
        if (std::isfinite(lowpBitsToFloat(static_cast<uint16_t>(b), dtype))) bits.push_back(static_cast<uint16_t>(b));
    const int64_t n = static_cast<int64_t>(bits.size()) - 1;  // odd: the last 2-byte value fills half a float
    std::vector<float> packed(static_cast<size_t>((n + 1) / 2), 0.f);
    std::memcpy(packed.data(), bits.data(), static_cast<size_t>(n) * 2);
    Dev src(packed), dst(n), back((n + 1) / 2);
    dst.poison();
    be->fromLowPrecision(src.p, dtype, dst.p, n);
    be->toLowPrecision(dst.p, back.p, n, dtype);
    auto got = dst.get(), again = back.get();
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) {
        const float want = lowpBitsToFloat(bits[i], dtype);
        wrong += std::memcmp(&got[i], &want, 4) != 0;
    }
    wrong += std::memcmp(again.data(), packed.data(), static_cast<size_t>(n) * 2) != 0;
    report("fromLowPrecision", fmt("all %lld finite values, exact", static_cast<long long>(n)), dtypeName(dtype),
           static_cast<double>(wrong), 0);
}

void checkRmsnorm(int64_t rows, int d, int64_t ldx, int64_t ldy) {
    auto x = randv(static_cast<size_t>(rows * ldx), -2, 2);
    auto w = randv(static_cast<size_t>(d), 0.5, 1.5);
    Dev dx(x), dw(w), dy(rows * ldy);
    dy.poison();
    be->rmsnorm(RmsNormArgs{dx.p, ldx, dw.p, rows, d, 1e-5f, dy.p, ldy});
    auto y = dy.get();
    Err e;
    for (int64_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int j = 0; j < d; ++j) ss += static_cast<double>(x[r * ldx + j]) * x[r * ldx + j];
        const double s = 1.0 / std::sqrt(ss / d + 1e-5);
        for (int j = 0; j < d; ++j) e.add(y[r * ldy + j], w[j] * (x[r * ldx + j] * s));
    }
    report("rmsnorm", fmt("rows=%lld d=%d ldx=%lld", static_cast<long long>(rows), d, static_cast<long long>(ldx)),
           "f32", e.value(), 2e-6);
}

/**
 * Weights of a linear in the storage of `dtype`: the f32 master, and for BF16/F16 the 2-byte copy made by the
 * backend. matrix() hands the products only the storage of `dtype` (no f32 pointer for BF16/F16, as the
 * runtime does for inference); master() is the f32 matrix the backward reads.
 */
struct Weight {
    int out, in, dtype;
    std::vector<float> host;  // f32 master
    Dev f32;
    Dev lowp;
    Weight(int out_, int in_, int dtype_) : out(out_), in(in_), dtype(dtype_) {
        const double bound = 1.0 / std::sqrt(static_cast<double>(in));
        host = randv(static_cast<size_t>(out) * in, -bound, bound);
        f32 = Dev(host);
        if (dtype == DTYPE_BF16 || dtype == DTYPE_F16) {
            lowp = Dev((static_cast<int64_t>(out) * in + 1) / 2);
            be->toLowPrecision(f32.p, lowp.p, static_cast<int64_t>(out) * in, dtype);
        }
    }
    Matrix matrix() const {
        const bool lp = dtype == DTYPE_BF16 || dtype == DTYPE_F16;
        return Matrix{lp ? nullptr : f32.p, lp ? lowp.p : nullptr, dtype, out, in};
    }
    Matrix master() const { return Matrix{f32.p, lowp.p, dtype, out, in}; }
};

void checkLinear(int dtype, int out, int in, int64_t rows, bool bias, float beta, int pad) {
    Weight W(out, in, dtype);
    const int64_t ldx = in + pad, ldy = out + pad;
    auto x = randv(static_cast<size_t>(rows * ldx), -1, 1);
    auto b = randv(static_cast<size_t>(out), -0.5, 0.5);
    auto y0 = randv(static_cast<size_t>(rows * ldy), -1, 1);
    Dev dx(x), db(b), dy(rows * ldy);
    if (beta == 0.f) dy.poison();
    else dy.put(y0);
    linear(dx.p, ldx, rows, W.matrix(), bias ? db.p : nullptr, dy.p, ldy, beta);
    auto y = dy.get();
    const bool gemv = rows <= mamba::cuda::kGemvMaxRows;
    const bool lowp = dtype == DTYPE_BF16 || dtype == DTYPE_F16;
    Err e;
    for (int64_t r = 0; r < rows; ++r)
        for (int o = 0; o < out; ++o) {
            double acc = 0;
            for (int k = 0; k < in; ++k) {
                const double wv = roundTo(W.host[static_cast<size_t>(o) * in + k], dtype);
                const double xv = lowp && !gemv ? roundTo(x[r * ldx + k], dtype) : x[r * ldx + k];
                acc += wv * xv;
            }
            if (bias) acc += b[o];
            if (beta != 0.f) acc += beta * static_cast<double>(y0[r * ldy + o]);
            e.add(y[r * ldy + o], acc);
        }
    // the reference uses the stored (rounded) weights, so only accumulation order (and TF32's rounding
    // of both operands on tensor cores) remains
    const double tol = dtype == DTYPE_TF32 && !gemv ? 5e-3 : lowp && !gemv ? 1e-4 : 1e-5;
    report(gemv ? "linear (own gemv)" : "linear (cuBLAS)",
           fmt("rows=%lld out=%d in=%d%s beta=%g pad=%d", static_cast<long long>(rows), out, in, bias ? " +b" : "",
               beta, pad),
           dtypeName(dtype), e.value(), tol);
    // padding columns of y untouched
    if (pad > 0 && beta == 0.f) {
        bool untouched = true;
        for (int64_t r = 0; r < rows; ++r)
            for (int j = out; j < ldy; ++j) untouched &= std::isnan(y[r * ldy + j]);
        if (!untouched) report("linear leaves y padding", fmt("out=%d pad=%d", out, pad), dtypeName(dtype), 1, 0);
    }
}

/** Row r of a multi-row gemv equals the same row computed alone, bit for bit. */
void checkGemvRowIndependence(int dtype, int out, int in) {
    Weight W(out, in, dtype);
    const int rows = 4;
    auto x = randv(static_cast<size_t>(rows) * in, -1, 1);
    Dev dx(x), dy(static_cast<int64_t>(rows) * out), d1(out);
    dy.poison();
    d1.poison();
    linear(dx.p, in, rows, W.matrix(), nullptr, dy.p, out, 0.f);
    linear(dx.p + 2 * in, in, 1, W.matrix(), nullptr, d1.p, out, 0.f);
    auto all = dy.get();
    auto one = d1.get();
    const int diff = std::memcmp(all.data() + 2 * out, one.data(), static_cast<size_t>(out) * 4) != 0;
    report("gemv row independence", fmt("B=4 row 2 vs B=1, %dx%d", out, in), dtypeName(dtype), diff, 0);
}

/** GemmMode::Reproducible takes the same kernels as Fast (the training forward): same bits, and again on a rerun. */
void checkReproducibleMode(int dtype, int64_t rows) {
    const int out = 384, in = 256;
    Weight W(out, in, dtype);
    auto x = randv(static_cast<size_t>(rows) * in, -1, 1);
    auto b = randv(out, -0.5, 0.5);
    Dev dx(x), db(b), y1(rows * out), y2(rows * out), y3(rows * out);
    linear(dx.p, in, rows, W.matrix(), db.p, y1.p, out, 0.f, GemmMode::Fast);
    linear(dx.p, in, rows, W.matrix(), db.p, y2.p, out, 0.f, GemmMode::Reproducible);
    linear(dx.p, in, rows, W.matrix(), db.p, y3.p, out, 0.f, GemmMode::Reproducible);
    auto a1 = y1.get(), a2 = y2.get(), a3 = y3.get();
    report("gemm Reproducible == Fast", fmt("rows=%lld %dx%d, and rerun", static_cast<long long>(rows), out, in),
           dtypeName(dtype), bitsEqual(a1, a2) && bitsEqual(a2, a3) ? 0 : 1, 0);
}

/** Contract violations are reported as std::invalid_argument before anything runs; capture rules hold. */
void checkContracts() {
    int wrong = 0;
    auto expectInvalid = [&](const char* what, const std::function<void()>& fn) {
        try {
            fn();
            std::printf("  no error for: %s\n", what);
            ++wrong;
        } catch (const std::invalid_argument&) {
        } catch (const std::exception& e) {
            std::printf("  wrong error for %s: %s\n", what, e.what());
            ++wrong;
        }
    };
    Weight W(64, 32, DTYPE_BF16);
    Dev x(4 * 32), y(4 * 64), dx(4 * 32), nx(4 * 32), nw(32);
    const Matrix no_lowp{W.f32.p, nullptr, DTYPE_BF16, 64, 32};
    expectInvalid("BF16 Forward without 2-byte values",
                  [&] { linear(x.p, 32, 4, no_lowp, nullptr, y.p, 64, 0.f); });
    expectInvalid("BF16 BackwardData without 2-byte values",
                  [&] { be->gemm(Gemm::backwardData(GemmMode::Reproducible, y.p, 64, 4, no_lowp, dx.p, 32, 0.f)); });
    expectInvalid("Forward lda < in", [&] { linear(x.p, 16, 4, W.matrix(), nullptr, y.p, 64, 0.f); });
    expectInvalid("normLinear on another input", [&] {
        be->normLinear(RmsNormArgs{nx.p, 32, nw.p, 4, 32, 1e-5f, dx.p, 32},
                       Gemm::forward(GemmMode::Fast, x.p, 32, 4, W.matrix(), nullptr, y.p, 64, 0.f));
    });
    report("contract violations throw invalid_argument", "gemm, normLinear", "-", wrong, 0);

    // Inside a capture nothing may allocate or transfer; the context works again after endCapture.
    int bad = 0;
    auto ctx = newCudaBackend(0);
    ctx->beginCapture();
    try {
        ctx->alloc(16);
        ++bad;
    } catch (const std::logic_error&) {
    }
    try {
        std::vector<float> h(16, 1.f);
        ctx->upload(x.p, h.data(), 16);
        ++bad;
    } catch (const std::logic_error&) {
    }
    ctx->zero(y.p, 16);  // captured
    void* g = ctx->endCapture();
    y.put(std::vector<float>(static_cast<size_t>(y.n), 5.f));
    be->synchronize();  // another context's stream: its upload must be done before ctx's replay
    ctx->replay(g);
    ctx->synchronize();
    ctx->destroyGraph(g);
    auto z = y.get(16);
    for (float v : z) bad += v != 0.f;
    float* p = ctx->alloc(16);
    ctx->release(p);
    report("capture: no alloc/upload, context usable after", "logic_error, captured zero replays", "-", bad, 0);
}

struct ConvCase {
    int B, T, E, K;
};

void checkConv(const ConvCase& cc, int calls) {
    const int H = cc.K - 1;
    const int64_t ldx = 2 * cc.E + 3, ldu = cc.E + 1, hstride = static_cast<int64_t>(cc.E) * H + 5;
    auto w = randv(static_cast<size_t>(cc.E) * cc.K, -0.5, 0.5);
    auto bias = randv(static_cast<size_t>(cc.E), -0.5, 0.5);
    auto hist0 = randv(static_cast<size_t>(cc.B * hstride), -1, 1);
    Dev dw(w), db(bias), dh(hist0);
    std::vector<double> hist(hist0.begin(), hist0.end());
    Err eu, eh;
    for (int call = 0; call < calls; ++call) {
        const int T = call == 0 ? cc.T : 1 + call;  // then a few shorter calls continue the history
        auto x = randv(static_cast<size_t>(cc.B) * T * ldx, -1, 1);
        Dev dx(x), du(static_cast<int64_t>(cc.B) * T * ldu);
        du.poison();
        ConvArgs a{dx.p, ldx, dw.p, db.p, dh.p, hstride, du.p, ldu, cc.B, T, cc.E, cc.K};
        be->convSilu(a);
        auto u = du.get();
        for (int b = 0; b < cc.B; ++b) {
            for (int d = 0; d < cc.E; ++d) {
                double* hd = hist.data() + b * hstride + static_cast<int64_t>(d) * H;
                std::vector<double> seq(hd, hd + H);  // old history then this call's inputs
                for (int t = 0; t < T; ++t) seq.push_back(x[(static_cast<int64_t>(b) * T + t) * ldx + d]);
                for (int t = 0; t < T; ++t) {
                    double acc = bias[d];
                    for (int k = 0; k < cc.K; ++k) acc += static_cast<double>(w[d * cc.K + k]) * seq[t + k];
                    eu.add(u[(static_cast<int64_t>(b) * T + t) * ldu + d], silu(acc));
                }
                for (int i = 0; i < H; ++i) hd[i] = seq[seq.size() - H + i];
            }
        }
    }
    auto hgot = dh.get();
    for (size_t i = 0; i < hist.size(); ++i) eh.add(hgot[i], hist[i]);
    const std::string shape = fmt("B=%d T=%d E=%d K=%d calls=%d", cc.B, cc.T, cc.E, cc.K, calls);
    report("convSilu output", shape, "f32", eu.value(), 1e-6);
    report("convSilu history", shape, "f32", eh.value(), 0);
}

struct ScanCase {
    int B, T, E, N;
    ScanAlgo algo;
    int chunk;
};

const char* algoName(ScanAlgo a) {
    return a == ScanAlgo::Sequential ? "sequential" : a == ScanAlgo::Chunked ? "chunked" : "auto";
}

void checkScan(const ScanCase& sc) {
    const int B = sc.B, T = sc.T, E = sc.E, N = sc.N;
    const int64_t R = static_cast<int64_t>(B) * T;
    const int dt_rank = 3;
    const int64_t ldbc = dt_rank + 2 * N + 1, ldz = 2 * E, hstride = static_cast<int64_t>(E) * N + 7;
    auto dt = randv(static_cast<size_t>(R * E), -4.5, -1.0);
    for (size_t i = 0; i < dt.size(); i += 97) dt[i] = 21.f + static_cast<float>(i % 3);  // softplus threshold
    for (size_t i = 3; i < dt.size(); i += 89) dt[i] = 2.5f;
    std::vector<float> a(static_cast<size_t>(E) * N);
    {
        auto alog = randv(a.size(), 0.0, std::log(16.0));
        for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(-std::exp(static_cast<double>(alog[i])));
    }
    auto bc = randv(static_cast<size_t>(R * ldbc), -1, 1);
    auto u = randv(static_cast<size_t>(R * E), -1, 1);
    auto z = randv(static_cast<size_t>(R * ldz), -2, 2);
    auto dsk = randv(static_cast<size_t>(E), 0.5, 1.5);
    auto h0 = randv(static_cast<size_t>(B * hstride), -1, 1);
    Dev ddt(dt), da(a), dbc(bc), du(u), dz(z), dd(dsk), dh(h0), dout(R * E);
    dout.poison();
    ScanArgs s{ddt.p, da.p, dbc.p + dt_rank, ldbc, du.p, dz.p + E, ldz, dd.p, dh.p, hstride, dout.p, B, T, E, N};
    be->setScanAlgo(sc.algo, sc.chunk);
    be->selectiveScan(s, nullptr, nullptr);
    be->setScanAlgo(ScanAlgo::Auto, 0);
    auto out = dout.get();
    auto hgot = dh.get();
    Err eo, eh;
    for (int b = 0; b < B; ++b) {
        for (int d = 0; d < E; ++d) {
            std::vector<double> h(static_cast<size_t>(N));
            for (int n = 0; n < N; ++n) h[n] = h0[b * hstride + static_cast<int64_t>(d) * N + n];
            for (int t = 0; t < T; ++t) {
                const int64_t r = static_cast<int64_t>(b) * T + t;
                const double delta = softplus(dt[r * E + d]);
                const double uu = u[r * E + d];
                double y = 0;
                for (int n = 0; n < N; ++n) {
                    h[n] = std::exp(delta * a[static_cast<size_t>(d) * N + n]) * h[n] +
                           delta * bc[r * ldbc + dt_rank + n] * uu;
                    y += h[n] * bc[r * ldbc + dt_rank + N + n];
                }
                eo.add(out[r * E + d], (y + dsk[d] * uu) * silu(z[r * ldz + E + d]));
            }
            for (int n = 0; n < N; ++n) eh.add(hgot[b * hstride + static_cast<int64_t>(d) * N + n], h[n]);
        }
        // the gap between rows of h must be untouched
        for (int64_t i = static_cast<int64_t>(E) * N; i < hstride; ++i) eh.add(hgot[b * hstride + i], h0[b * hstride + i]);
    }
    const std::string shape =
        fmt("B=%d T=%d E=%d N=%d %s%s", B, T, E, N, algoName(sc.algo), sc.chunk ? fmt(" L=%d", sc.chunk).c_str() : "");
    report("selectiveScan output", shape, "f32", eo.value(), 2e-5);
    report("selectiveScan state", shape, "f32", eh.value(), 2e-5);
}

/** normLinear: rmsnorm, then a product on its output (one gemv kernel for decode when fused) against double. */
void checkNormLinear(int dtype, int rows, int d, int out, bool fused) {
    be->setFusion(fused);
    Weight W(out, d, dtype);
    const int64_t ldx = d + 4, ldy = d;
    auto x = randv(static_cast<size_t>(rows * ldx), -2, 2);
    auto nw = randv(static_cast<size_t>(d), 0.5, 1.5);
    auto bias = randv(static_cast<size_t>(out), -0.5, 0.5);
    Dev dx(x), dnw(nw), db(bias), dy(rows * ldy), dz(static_cast<int64_t>(rows) * out);
    dy.poison();
    dz.poison();
    const RmsNormArgs norm{dx.p, ldx, dnw.p, rows, d, 1e-5f, dy.p, ldy};
    const Gemm lin = Gemm::forward(GemmMode::Fast, dy.p, ldy, rows, W.matrix(), db.p, dz.p, out, 0.f);
    const bool took = be->normLinearFuses(norm, lin);
    be->normLinear(norm, lin);
    auto y = dy.get();
    auto z = dz.get();
    be->setFusion(true);
    Err ey, ez;
    for (int r = 0; r < rows; ++r) {
        double ss = 0;
        for (int j = 0; j < d; ++j) ss += static_cast<double>(x[r * ldx + j]) * x[r * ldx + j];
        const double sc = 1.0 / std::sqrt(ss / d + 1e-5);
        std::vector<double> yr(static_cast<size_t>(d));
        for (int j = 0; j < d; ++j) {
            yr[j] = nw[j] * (x[r * ldx + j] * sc);
            ey.add(y[r * ldy + j], yr[j]);
        }
        for (int o = 0; o < out; ++o) {
            double acc = bias[o];
            for (int k = 0; k < d; ++k) acc += roundTo(W.host[static_cast<size_t>(o) * d + k], dtype) * yr[k];
            ez.add(z[static_cast<size_t>(r) * out + o], acc);
        }
    }
    const std::string shape = fmt("rows=%d d=%d out=%d %s", rows, d, out, fused ? "fused" : "unfused");
    report("normLinear: norm", shape, dtypeName(dtype), ey.value(), 2e-6);
    report("normLinear: linear", shape, dtypeName(dtype), ez.value(), 1e-5);
    // decode-sized rows with a 16-byte weight take the fused kernel exactly when fusion is on
    report("normLinear: fused kernel taken", shape, dtypeName(dtype), took == (fused && rows <= 8) ? 0 : 1, 0);
}

/** selectiveScan with its Δ projection (computed inside the scan for decode when fused) against double. */
void checkDtScan(int dtype, int B, int E, int N, int R, bool fused) {
    be->setFusion(fused);
    const int X = R + 2 * N + 3;  // xdbl row: δ | B | C | padding
    Weight Wdt(E, R, dtype);
    auto xdbl = randv(static_cast<size_t>(B) * X, -1, 1);
    auto dtb = randv(static_cast<size_t>(E), -4.5, -1.5);
    std::vector<float> a(static_cast<size_t>(E) * N);
    for (auto& v : a) v = static_cast<float>(-std::exp(std::uniform_real_distribution<double>(0, 2.7)(rng)));
    auto u = randv(static_cast<size_t>(B) * E, -1, 1);
    auto z = randv(static_cast<size_t>(B) * 2 * E, -2, 2);
    auto dsk = randv(static_cast<size_t>(E), 0.5, 1.5);
    auto h0 = randv(static_cast<size_t>(B) * E * N, -1, 1);
    Dev dx(xdbl), db(dtb), da(a), du(u), dz(z), dd(dsk), dh(h0), ddt(static_cast<int64_t>(B) * E),
        dout(static_cast<int64_t>(B) * E);
    ddt.poison();
    dout.poison();
    const Gemm proj = Gemm::forward(GemmMode::Fast, dx.p, X, B, Wdt.matrix(), db.p, ddt.p, E, 0.f);
    ScanArgs s{ddt.p, da.p, dx.p + R, X, du.p, dz.p + E, 2 * E, dd.p, dh.p, static_cast<int64_t>(E) * N, dout.p,
               B, 1, E, N};
    const bool took = be->scanFusesDtProjection(s, &proj, nullptr);
    be->selectiveScan(s, &proj, nullptr);
    auto dt = ddt.get(), out = dout.get(), h = dh.get();
    be->setFusion(true);
    Err edt, eo, eh;
    for (int b = 0; b < B; ++b)
        for (int d = 0; d < E; ++d) {
            double acc = dtb[d];
            for (int k = 0; k < R; ++k)
                acc += roundTo(Wdt.host[static_cast<size_t>(d) * R + k], dtype) * static_cast<double>(xdbl[b * X + k]);
            edt.add(dt[b * E + d], acc);
            const double delta = softplus(acc), uu = u[b * E + d];
            double y = 0;
            for (int n = 0; n < N; ++n) {
                const size_t i = (static_cast<size_t>(b) * E + d) * N + n;
                const double hn = std::exp(delta * a[static_cast<size_t>(d) * N + n]) * h0[i] +
                                  delta * xdbl[b * X + R + n] * uu;
                eh.add(h[i], hn);
                y += hn * xdbl[b * X + R + N + n];
            }
            eo.add(out[b * E + d], (y + dsk[d] * uu) * silu(z[static_cast<size_t>(b) * 2 * E + E + d]));
        }
    const std::string shape = fmt("B=%d E=%d N=%d rank=%d %s", B, E, N, R, fused ? "fused" : "unfused");
    report("dt_proj -> scan: dt", shape, dtypeName(dtype), edt.value(), 1e-5);
    report("dt_proj -> scan: output", shape, dtypeName(dtype), eo.value(), 2e-5);
    report("dt_proj -> scan: state", shape, dtypeName(dtype), eh.value(), 2e-5);
    report("dt_proj -> scan: fused kernel taken", shape, dtypeName(dtype), took == fused ? 0 : 1, 0);
}

/** One Mamba layer's parameters on the host (decode shapes, scaled down), for the graph and context checks. */
struct LayerHost {
    int D, E, N = 16, K = 4, R = 16, X;
    std::vector<float> win, wx, wdt, wout, normw, convw, convb, dtb, dsk, a;
    explicit LayerHost(int D_) : D(D_), E(2 * D_), X(16 + 2 * 16) {
        win = randv(static_cast<size_t>(2 * E) * D, -0.06, 0.06);
        wx = randv(static_cast<size_t>(X) * E, -0.04, 0.04);
        wdt = randv(static_cast<size_t>(E) * R, -0.25, 0.25);
        wout = randv(static_cast<size_t>(D) * E, -0.04, 0.04);
        normw = randv(D, 0.5, 1.5);
        convw = randv(static_cast<size_t>(E) * K, -0.5, 0.5);
        convb = randv(E, -0.5, 0.5);
        dtb = randv(E, -4.5, -1.5);
        dsk = randv(E, 0.5, 1.5);
        a.resize(static_cast<size_t>(E) * N);
        for (int d = 0; d < E; ++d)
            for (int n = 0; n < N; ++n) a[static_cast<size_t>(d) * N + n] = -(n + 1.0f);
    }
    int64_t stateRow() const { return static_cast<int64_t>(E) * (K - 1) + static_cast<int64_t>(E) * N; }
};

/**
 * The layer on one context (any CudaBackend, not only the global one): weights in `dtype` storage (the
 * 2-byte copy alone for BF16/F16), activations for B rows, and a decode step made of the ops the model
 * calls — normLinear (norm + in_proj), convSilu, gemm (x_proj), selectiveScan with dtProj, gemm (out_proj).
 */
struct LayerOn {
    CudaBackend& ctx;
    const LayerHost& h;
    int dtype, B;
    Buffer win, wx, wdt, wout, normw, convw, convb, dtb, dsk, a;
    Buffer resid, normed, xz, uu, xdbl, dt, gated, state;

    Buffer weight(const std::vector<float>& v) {
        const int64_t n = static_cast<int64_t>(v.size());
        Buffer f(ctx, n);
        ctx.upload(f.data(), v.data(), n);
        if (dtype != DTYPE_BF16 && dtype != DTYPE_F16) return f;
        Buffer low(ctx, (n + 1) / 2);
        ctx.toLowPrecision(f.data(), low.data(), n, dtype);
        return low;  // the f32 values are released: the products must not need them
    }
    Buffer values(const std::vector<float>& v) {
        Buffer b(ctx, static_cast<int64_t>(v.size()));
        ctx.upload(b.data(), v.data(), static_cast<int64_t>(v.size()));
        return b;
    }
    Matrix matrix(const Buffer& b, int out, int in) const {
        const bool lp = dtype == DTYPE_BF16 || dtype == DTYPE_F16;
        return Matrix{lp ? nullptr : b.data(), lp ? b.data() : nullptr, dtype, out, in};
    }
    LayerOn(CudaBackend& c, const LayerHost& host, int dt_, int B_)
        : ctx(c), h(host), dtype(dt_), B(B_), win(weight(host.win)), wx(weight(host.wx)), wdt(weight(host.wdt)),
          wout(weight(host.wout)), normw(values(host.normw)), convw(values(host.convw)), convb(values(host.convb)),
          dtb(values(host.dtb)), dsk(values(host.dsk)), a(values(host.a)), resid(c, int64_t{B_} * host.D),
          normed(c, int64_t{B_} * host.D), xz(c, int64_t{B_} * 2 * host.E), uu(c, int64_t{B_} * host.E),
          xdbl(c, int64_t{B_} * host.X), dt(c, int64_t{B_} * host.E), gated(c, int64_t{B_} * host.E),
          state(c, B_ * host.stateRow()) {}

    void step() {
        const int D = h.D, E = h.E, N = h.N, K = h.K, R = h.R, X = h.X;
        const int64_t srow = h.stateRow();
        ctx.normLinear(RmsNormArgs{resid.data(), D, normw.data(), B, D, 1e-5f, normed.data(), D},
                       Gemm::forward(GemmMode::Fast, normed.data(), D, B, matrix(win, 2 * E, D), nullptr, xz.data(),
                                     2 * E, 0.f));
        ctx.convSilu(
            ConvArgs{xz.data(), 2 * E, convw.data(), convb.data(), state.data(), srow, uu.data(), E, B, 1, E, K});
        ctx.gemm(Gemm::forward(GemmMode::Fast, uu.data(), E, B, matrix(wx, X, E), nullptr, xdbl.data(), X, 0.f));
        const Gemm proj =
            Gemm::forward(GemmMode::Fast, xdbl.data(), X, B, matrix(wdt, E, R), dtb.data(), dt.data(), E, 0.f);
        ctx.selectiveScan(ScanArgs{dt.data(), a.data(), xdbl.data() + R, X, uu.data(), xz.data() + E, 2 * E, dsk.data(),
                                   state.data() + static_cast<int64_t>(E) * (K - 1), srow, gated.data(), B, 1, E, N},
                          &proj, nullptr);
        ctx.gemm(Gemm::forward(GemmMode::Fast, gated.data(), E, B, matrix(wout, D, E), nullptr, resid.data(), D, 1.f));
    }
    void start(const std::vector<float>& x, const std::vector<float>& st) {
        ctx.upload(resid.data(), x.data(), static_cast<int64_t>(x.size()));
        ctx.upload(state.data(), st.data(), static_cast<int64_t>(st.size()));
    }
    /** resid then state, downloaded. */
    std::vector<float> result() {
        std::vector<float> out(static_cast<size_t>(resid.size() + state.size()));
        ctx.download(out.data(), resid.data(), resid.size());
        ctx.download(out.data() + resid.size(), state.data(), state.size());
        return out;
    }
    /** `steps` decode steps from (x, st): eager, or one captured step replayed `steps` times. */
    std::vector<float> run(const std::vector<float>& x, const std::vector<float>& st, int steps, bool graph) {
        start(x, st);
        if (!graph) {
            for (int i = 0; i < steps; ++i) step();
            return result();
        }
        ctx.beginCapture();
        try {
            step();
        } catch (...) {
            ctx.destroyGraph(ctx.endCapture());
            throw;
        }
        void* g = ctx.endCapture();
        for (int i = 0; i < steps; ++i) ctx.replay(g);
        auto r = result();
        ctx.destroyGraph(g);
        return r;
    }
};

/** A captured decode step replays to the same bits as the same calls made eagerly. */
void checkGraph(int dtype, int B, int D = 256) {
    LayerHost host(D);
    LayerOn layer(*be, host, dtype, B);
    auto x = randv(static_cast<size_t>(B) * host.D, -1, 1);
    auto st = randv(static_cast<size_t>(B * host.stateRow()), -0.5, 0.5);
    auto eager = layer.run(x, st, 5, false);
    auto graph = layer.run(x, st, 5, true);
    report("graph replay == eager", fmt("B=%d d=%d, 5 decode steps, %s", B, D, B > 8 ? "cuBLAS" : "gemv"),
           dtypeName(dtype), bitsEqual(eager, graph) ? 0 : 1, 0);
}

/**
 * Contexts share nothing: two new contexts on two threads — one capturing and replaying graphs, the other
 * running eagerly and allocating and freeing its buffers meanwhile — give the bits of the test's context
 * running alone, round after round.
 */
void checkContexts(int dtype, int B) {
    LayerHost host(256);
    auto x = randv(static_cast<size_t>(B) * host.D, -1, 1);
    auto st = randv(static_cast<size_t>(B * host.stateRow()), -0.5, 0.5);
    std::vector<float> want_eager, want_graph;
    {
        LayerOn layer(*be, host, dtype, B);
        want_eager = layer.run(x, st, 4, false);
        want_graph = layer.run(x, st, 4, true);
    }
    const int rounds = 6;
    std::string err[2];
    int bad[2] = {0, 0};
    auto worker = [&](int id) {
        try {
            auto ctx = newCudaBackend(0);
            CudaBackend& c = static_cast<CudaBackend&>(*ctx);
            if (id == 0) {
                LayerOn layer(c, host, dtype, B);  // one set of buffers, graphs captured again and again
                for (int r = 0; r < rounds; ++r) bad[id] += !bitsEqual(layer.run(x, st, 4, true), want_graph);
            } else {
                for (int r = 0; r < rounds; ++r) {  // fresh weights and buffers each round: cudaMalloc/cudaFree
                    LayerOn layer(c, host, dtype, B);
                    bad[id] += !bitsEqual(layer.run(x, st, 4, false), want_eager);
                }
            }
        } catch (const std::exception& e) {
            err[id] = e.what();
        }
    };
    std::thread t0(worker, 0), t1(worker, 1);
    t0.join();
    t1.join();
    for (int id = 0; id < 2; ++id)
        if (!err[id].empty()) std::printf("  context thread %d failed: %s\n", id, err[id].c_str());
    const std::string shape = fmt("B=%d, %d rounds, %s", B, rounds, B > 8 ? "cuBLAS" : "gemv");
    report("2 contexts: graph thread", shape, dtypeName(dtype), err[0].empty() ? bad[0] : 1, 0);
    report("2 contexts: eager thread", shape, dtypeName(dtype), err[1].empty() ? bad[1] : 1, 0);
}

/** A context made for a Tensor is cheap: its stream, no cuBLAS handle or workspaces until a product needs them. */
void checkCheapContext() {
    size_t free0 = 0, free1 = 0, total = 0;
    be->synchronize();
    cudaMemGetInfo(&free0, &total);
    double err = 0;
    {
        auto ctx = newCudaBackend(0);
        float* p = ctx->alloc(1024);
        auto v = randv(1024, -1, 1);
        std::vector<float> back(1024);
        ctx->upload(p, v.data(), 1024);
        ctx->download(back.data(), p, 1024);
        err += back != v;
        cudaMemGetInfo(&free1, &total);
        ctx->release(p);
        const Capabilities c = ctx->capabilities();
        err += !(c.training && c.graphs && c.lowp_storage && !c.host);
    }
    const double used_mib = (static_cast<double>(free0) - static_cast<double>(free1)) / (1 << 20);
    std::printf("  (a context with one 4 KiB buffer took %.1f MiB of device memory)\n", used_mib);
    report("context for a Tensor is cheap", "alloc/upload/download, < 16 MiB", "-", err + (used_mib < 16 ? 0 : 1), 0);
}

void checkOom() {
    double err = 0;
    try {
        be->alloc(int64_t(1) << 42);  // 16 TiB
        err = 1;
    } catch (const OutOfMemoryError& e) {
        std::printf("  (expected) %s\n", e.what());
    }
    try {
        Dev ok(1 << 20);
        auto v = randv(1 << 20, -1, 1);
        ok.put(v);
        if (ok.get() != v) err = 1;
    } catch (const std::exception& e) {
        std::printf("  allocation after OOM failed: %s\n", e.what());
        err = 1;
    }
    report("alloc 16 TiB throws, next ok", "OutOfMemoryError", "-", err, 0);
}

// ---------------- training stages (train_*.cu) ----------------

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double dsilu(double x) {
    const double s = sigmoid(x);
    return s * (1.0 + x * (1.0 - s));
}

/** BackwardData: dx = beta·dx + dy·W in W's storage type (16-bit: dy rounded, tensor cores, f32 accumulation). */
void checkLinearBackward(int out, int in, int64_t rows, float beta, int pad, int dtype) {
    Weight W(out, in, dtype);
    const int64_t lddy = out + pad, lddx = in + pad;
    auto dy = randv(static_cast<size_t>(rows * lddy), -1, 1);
    auto dx0 = randv(static_cast<size_t>(rows * lddx), -1, 1);
    Dev ddy(dy), ddx(rows * lddx);
    if (beta == 0.f) ddx.poison();
    else ddx.put(dx0);
    be->gemm(Gemm::backwardData(GemmMode::Reproducible, ddy.p, lddy, rows, W.master(), ddx.p, lddx, beta));
    auto got = ddx.get();
    Err e;
    for (int64_t r = 0; r < rows; ++r)
        for (int i = 0; i < in; ++i) {
            double acc = beta != 0.f ? beta * static_cast<double>(dx0[r * lddx + i]) : 0.0;
            for (int o = 0; o < out; ++o)
                acc += static_cast<double>(dy[r * lddy + o]) * W.host[static_cast<size_t>(o) * in + i];
            e.add(got[r * lddx + i], acc);
        }
    report("gemm BackwardData",
           fmt("rows=%lld out=%d in=%d beta=%g pad=%d", static_cast<long long>(rows), out, in, beta, pad),
           dtypeName(dtype), e.value(), dtype == DTYPE_BF16 ? 1e-2 : dtype == DTYPE_F32 ? 1e-5 : 3e-3);
}

/** WeightGrad: dw += dyᵀ·x, dbias += Σ dy; twice from the same start must give the same bits. */
void checkLinearWeightGrad(int out, int in, int64_t rows, bool bias, int pad) {
    const int64_t lddy = out + pad, ldx = in + pad;
    auto dy = randv(static_cast<size_t>(rows * lddy), -1, 1);
    auto x = randv(static_cast<size_t>(rows * ldx), -1, 1);
    auto dw0 = randv(static_cast<size_t>(out) * in, -1, 1);
    auto db0 = randv(static_cast<size_t>(out), -1, 1);
    Dev ddy(dy), dx(x), ddw(dw0), ddb(db0);
    be->gemm(Gemm::weightGrad(GemmMode::Reproducible, DTYPE_F32, ddy.p, lddy, dx.p, ldx, rows, out, in, ddw.p, bias ? ddb.p : nullptr));
    auto gw = ddw.get(), gb = ddb.get();
    Err ew, eb;
    for (int o = 0; o < out; ++o) {
        double sb = db0[o];
        for (int64_t r = 0; r < rows; ++r) sb += dy[r * lddy + o];
        eb.add(gb[o], bias ? sb : db0[o]);
        for (int i = 0; i < in; ++i) {
            double acc = dw0[static_cast<size_t>(o) * in + i];
            for (int64_t r = 0; r < rows; ++r) acc += static_cast<double>(dy[r * lddy + o]) * x[r * ldx + i];
            ew.add(gw[static_cast<size_t>(o) * in + i], acc);
        }
    }
    ddw.put(dw0);
    ddb.put(db0);
    be->gemm(Gemm::weightGrad(GemmMode::Reproducible, DTYPE_F32, ddy.p, lddy, dx.p, ldx, rows, out, in, ddw.p, bias ? ddb.p : nullptr));
    const bool same = bitsEqual(gw, ddw.get()) && bitsEqual(gb, ddb.get());
    const std::string shape =
        fmt("rows=%lld out=%d in=%d%s pad=%d", static_cast<long long>(rows), out, in, bias ? " +b" : "", pad);
    report("gemm WeightGrad dW", shape, "f32", ew.value(), 1e-5);
    if (bias) report("gemm WeightGrad dbias", shape, "f32", eb.value(), 1e-5);
    report("gemm WeightGrad rerun", shape + ", bitwise", "f32", same ? 0 : 1, 0);
}

void checkRmsnormBackward(int64_t rows, int d, float beta, int pad) {
    const int64_t ldx = d + pad, lddy = d + 2 * pad, lddx = d + 3 * pad;
    const double eps = 1e-5;
    auto x = randv(static_cast<size_t>(rows * ldx), -2, 2);
    auto w = randv(static_cast<size_t>(d), 0.5, 1.5);
    auto dy = randv(static_cast<size_t>(rows * lddy), -1, 1);
    auto dx0 = randv(static_cast<size_t>(rows * lddx), -1, 1);
    auto dw0 = randv(static_cast<size_t>(d), -1, 1);
    Dev dX(x), dW(w), dDY(dy), dDX(rows * lddx), dDW(dw0);
    if (beta == 0.f) dDX.poison();
    else dDX.put(dx0);
    const RmsNormBackwardArgs norm_back{dX.p, ldx, dW.p, dDY.p, lddy, rows, d, static_cast<float>(eps),
                                        dDX.p, lddx, beta, dDW.p};
    be->rmsnormBackward(norm_back);
    auto gx = dDX.get(), gw = dDW.get();
    Err ex, ew;
    std::vector<double> accw(dw0.begin(), dw0.end());
    for (int64_t r = 0; r < rows; ++r) {
        double ss = 0, dot = 0;
        for (int j = 0; j < d; ++j) ss += static_cast<double>(x[r * ldx + j]) * x[r * ldx + j];
        const double rho = 1.0 / std::sqrt(ss / d + eps);
        for (int j = 0; j < d; ++j) dot += static_cast<double>(w[j]) * dy[r * lddy + j] * x[r * ldx + j] * rho;
        const double mean = dot / d;  // mean(g ⊙ x̂)
        for (int j = 0; j < d; ++j) {
            const double xh = x[r * ldx + j] * rho;
            double v = rho * (static_cast<double>(w[j]) * dy[r * lddy + j] - xh * mean);
            if (beta != 0.f) v += beta * static_cast<double>(dx0[r * lddx + j]);
            ex.add(gx[r * lddx + j], v);
            accw[j] += dy[r * lddy + j] * xh;
        }
    }
    for (int j = 0; j < d; ++j) ew.add(gw[j], accw[j]);
    dDW.put(dw0);
    if (beta != 0.f) dDX.put(dx0);
    be->rmsnormBackward(norm_back);
    const bool same = bitsEqual(gx, dDX.get()) && bitsEqual(gw, dDW.get());
    const std::string shape = fmt("rows=%lld d=%d beta=%g pad=%d", static_cast<long long>(rows), d, beta, pad);
    report("rmsnormBackward dx", shape, "f32", ex.value(), 1e-5);
    report("rmsnormBackward dw", shape, "f32", ew.value(), 1e-5);
    report("rmsnormBackward rerun", shape + ", bitwise", "f32", same ? 0 : 1, 0);
}

void checkConvBackward(int B, int T, int E, int K) {
    const int H = K - 1;
    const int64_t ldx = 2 * E + 3, ldu = E + 1, lddx = 2 * E + 5, hstride = static_cast<int64_t>(E) * H + 5;
    const int64_t R = static_cast<int64_t>(B) * T;
    auto x = randv(static_cast<size_t>(R * ldx), -1, 1);
    auto w = randv(static_cast<size_t>(E) * K, -0.5, 0.5);
    auto bias = randv(static_cast<size_t>(E), -0.5, 0.5);
    auto hist = randv(static_cast<size_t>(B * hstride), -1, 1);
    auto du = randv(static_cast<size_t>(R * ldu), -1, 1);
    auto dw0 = randv(static_cast<size_t>(E) * K, -1, 1);
    auto db0 = randv(static_cast<size_t>(E), -1, 1);
    Dev dX(x), dW(w), dB(bias), dH(hist), dU(du), dDX(R * lddx), dDW(dw0), dDB(db0);
    dDX.poison();
    ConvBackwardArgs c{dX.p, ldx, dH.p, hstride, dW.p, dB.p, dU.p, ldu, dDX.p, lddx, dDW.p, dDB.p, B, T, E, K, nullptr, nullptr, 0};
    be->convSiluBackward(c);
    auto gx = dDX.get(), gw = dDW.get(), gb = dDB.get();
    Err ex, ew, eb;
    std::vector<double> accw(dw0.begin(), dw0.end()), accb(db0.begin(), db0.end());
    for (int b = 0; b < B; ++b)
        for (int d = 0; d < E; ++d) {
            std::vector<double> seq, dc(static_cast<size_t>(T));
            for (int i = 0; i < H; ++i) seq.push_back(hist[b * hstride + static_cast<int64_t>(d) * H + i]);
            for (int t = 0; t < T; ++t) seq.push_back(x[(static_cast<int64_t>(b) * T + t) * ldx + d]);
            for (int t = 0; t < T; ++t) {
                double acc = bias[d];
                for (int k = 0; k < K; ++k) acc += static_cast<double>(w[d * K + k]) * seq[t + k];
                dc[t] = du[(static_cast<int64_t>(b) * T + t) * ldu + d] * dsilu(acc);
                accb[d] += dc[t];
                for (int k = 0; k < K; ++k) accw[d * K + k] += dc[t] * seq[t + k];
            }
            for (int s = 0; s < T; ++s) {
                double acc = 0;
                for (int k = 0; k < K; ++k)
                    if (s + H - k < T) acc += static_cast<double>(w[d * K + k]) * dc[s + H - k];
                ex.add(gx[(static_cast<int64_t>(b) * T + s) * lddx + d], acc);
            }
        }
    for (size_t i = 0; i < accw.size(); ++i) ew.add(gw[i], accw[i]);
    for (size_t i = 0; i < accb.size(); ++i) eb.add(gb[i], accb[i]);
    dDW.put(dw0);
    dDB.put(db0);
    be->convSiluBackward(c);
    const bool same = bitsEqual(gx, dDX.get()) && bitsEqual(gw, dDW.get()) && bitsEqual(gb, dDB.get()) &&
                      bitsEqual(hist, dH.get());
    const std::string shape = fmt("B=%d T=%d E=%d K=%d", B, T, E, K);
    report("convSiluBackward dx", shape, "f32", ex.value(), 1e-5);
    report("convSiluBackward dw", shape, "f32", ew.value(), 1e-5);
    report("convSiluBackward dbias", shape, "f32", eb.value(), 1e-5);
    report("convSiluBackward rerun", shape + ", bitwise", "f32", same ? 0 : 1, 0);
}

/** Random inputs of a scan in the layout the model uses (B/C inside x_proj's output, z inside xz). */
struct ScanData {
    int B, T, E, N, dt_rank = 3;
    int64_t R, ldbc, ldz, hstride;
    std::vector<float> dt, a, bc, u, z, dsk, h0;
    ScanData(int B_, int T_, int E_, int N_) : B(B_), T(T_), E(E_), N(N_) {
        R = static_cast<int64_t>(B) * T;
        ldbc = dt_rank + 2 * N + 1;
        ldz = 2 * E;
        hstride = static_cast<int64_t>(E) * N + 7;
        dt = randv(static_cast<size_t>(R * E), -4.5, -1.0);
        for (size_t i = 0; i < dt.size(); i += 97) dt[i] = 21.f + static_cast<float>(i % 3);  // softplus threshold
        for (size_t i = 3; i < dt.size(); i += 89) dt[i] = 2.5f;
        a.resize(static_cast<size_t>(E) * N);
        auto alog = randv(a.size(), 0.0, std::log(16.0));
        for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(-std::exp(static_cast<double>(alog[i])));
        bc = randv(static_cast<size_t>(R * ldbc), -1, 1);
        u = randv(static_cast<size_t>(R * E), -1, 1);
        z = randv(static_cast<size_t>(R * ldz), -2, 2);
        dsk = randv(static_cast<size_t>(E), 0.5, 1.5);
        h0 = randv(static_cast<size_t>(B * hstride), -1, 1);
    }
    double Bv(int64_t r, int n) const { return bc[r * ldbc + dt_rank + n]; }
    double Cv(int64_t r, int n) const { return bc[r * ldbc + dt_rank + N + n]; }
    /** Double-precision states h_t (after step t) of row b, channel d: [T+1][N], index 0 = h0. */
    std::vector<double> states(int b, int d) const {
        std::vector<double> h(static_cast<size_t>(T + 1) * N);
        for (int n = 0; n < N; ++n) h[n] = h0[b * hstride + static_cast<int64_t>(d) * N + n];
        for (int t = 0; t < T; ++t) {
            const int64_t r = static_cast<int64_t>(b) * T + t;
            const double delta = softplus(dt[r * E + d]), uu = u[r * E + d];
            for (int n = 0; n < N; ++n)
                h[(t + 1) * N + n] = std::exp(delta * a[static_cast<size_t>(d) * N + n]) * h[t * N + n] +
                                     delta * Bv(r, n) * uu;
        }
        return h;
    }
};

void checkScanTrain(int B, int T, int E, int N, int chunk) {
    ScanData S(B, T, E, N);
    const int chunks = (T + chunk - 1) / chunk;
    Dev ddt(S.dt), da(S.a), dbc(S.bc), du(S.u), dz(S.z), dd(S.dsk), dh(S.h0), dout(S.R * E),
        dck(static_cast<int64_t>(B) * chunks * E * N);
    dout.poison();
    dck.poison();
    ScanArgs s{ddt.p, da.p, dbc.p + S.dt_rank, S.ldbc, du.p, dz.p + E, S.ldz, dd.p, dh.p, S.hstride, dout.p, B, T, E, N};
    const ScanCheckpoints ckpt{dck.p, chunk};
    be->selectiveScan(s, nullptr, &ckpt);
    auto out = dout.get(), hgot = dh.get(), ck = dck.get();
    Err eo, eh, ec;
    for (int b = 0; b < B; ++b) {
        for (int d = 0; d < E; ++d) {
            auto h = S.states(b, d);
            for (int t = 0; t < T; ++t) {
                const int64_t r = static_cast<int64_t>(b) * T + t;
                double y = S.dsk[d] * static_cast<double>(S.u[r * E + d]);
                for (int n = 0; n < N; ++n) y += h[(t + 1) * N + n] * S.Cv(r, n);
                eo.add(out[r * E + d], y * silu(S.z[r * S.ldz + E + d]));
                if (t % chunk == 0)
                    for (int n = 0; n < N; ++n)
                        ec.add(ck[((static_cast<int64_t>(b) * chunks + t / chunk) * E + d) * N + n], h[t * N + n]);
            }
            for (int n = 0; n < N; ++n) eh.add(hgot[b * S.hstride + static_cast<int64_t>(d) * N + n], h[T * N + n]);
        }
        for (int64_t i = static_cast<int64_t>(E) * N; i < S.hstride; ++i)
            eh.add(hgot[b * S.hstride + i], S.h0[b * S.hstride + i]);  // the gap between rows is untouched
    }
    const std::string shape = fmt("B=%d T=%d E=%d N=%d chunk=%d", B, T, E, N, chunk);
    report("scan + checkpoints output", shape, "f32", eo.value(), 2e-5);
    report("scan + checkpoints state", shape, "f32", eh.value(), 2e-5);
    report("scan + checkpoints ckpts", shape, "f32", ec.value(), 2e-5);
}

/** The scan backward from the forward's checkpoints against reverse-mode differentiation in double. */
void checkScanBackward(int B, int T, int E, int N, int chunk) {
    ScanData S(B, T, E, N);
    const int chunks = (T + chunk - 1) / chunk;
    const int64_t R = S.R, lddbc = S.ldbc + 2, lddz = 2 * E + 1;
    Dev ddt(S.dt), da(S.a), dbc(S.bc), du(S.u), dz(S.z), dd(S.dsk), dh(S.h0), dout(R * E),
        dck(static_cast<int64_t>(B) * chunks * E * N);
    ScanArgs s{ddt.p, da.p, dbc.p + S.dt_rank, S.ldbc, du.p, dz.p + E, S.ldz, dd.p, dh.p, S.hstride, dout.p, B, T, E, N};
    const ScanCheckpoints ck{dck.p, chunk};
    be->selectiveScan(s, nullptr, &ck);
    auto g_out = randv(static_cast<size_t>(R * E), -1, 1);
    auto dal0 = randv(static_cast<size_t>(E) * N, -1, 1), ddk0 = randv(static_cast<size_t>(E), -1, 1);
    Dev dGout(g_out), dDDT(R * E), dDBC(R * lddbc), dDU(R * E), dDZ(R * lddz), dDAL(dal0), dDD(ddk0);
    dDDT.poison();
    dDBC.poison();
    dDU.poison();
    dDZ.poison();
    ScanBackwardArgs sb{ddt.p, da.p, dbc.p + S.dt_rank, S.ldbc, du.p, dz.p + E, S.ldz, dd.p, dck.p, chunk,
                        dGout.p, dDDT.p, dDBC.p + S.dt_rank, lddbc, dDU.p, dDZ.p + E, lddz, dDAL.p, dDD.p,
                        B, T, E, N, nullptr, nullptr, 0};
    be->selectiveScanBackward(sb);
    auto gdt = dDDT.get(), gbc = dDBC.get(), gu = dDU.get(), gz = dDZ.get(), gal = dDAL.get(), gd = dDD.get();
    // reference
    std::vector<double> rdt(static_cast<size_t>(R * E)), ru(rdt.size()), rz(rdt.size());
    std::vector<double> rB(static_cast<size_t>(R * N), 0.0), rC(rB.size(), 0.0);
    std::vector<double> rA(static_cast<size_t>(E) * N, 0.0), rD(static_cast<size_t>(E), 0.0);
    for (int b = 0; b < B; ++b)
        for (int d = 0; d < E; ++d) {
            auto h = S.states(b, d);
            std::vector<double> G(static_cast<size_t>(N), 0.0);
            for (int t = T - 1; t >= 0; --t) {
                const int64_t r = static_cast<int64_t>(b) * T + t;
                const double x = S.dt[r * E + d], delta = softplus(x), uu = S.u[r * E + d];
                const double zz = S.z[r * S.ldz + E + d], go = g_out[r * E + d];
                double y = S.dsk[d] * uu;
                for (int n = 0; n < N; ++n) y += h[(t + 1) * N + n] * S.Cv(r, n);
                const double sz = sigmoid(zz), dy = go * zz * sz;
                rz[r * E + d] = go * y * sz * (1.0 + zz * (1.0 - sz));
                rD[d] += dy * uu;
                double sGB = 0, sDelta = 0;
                for (int n = 0; n < N; ++n) {
                    const double an = S.a[static_cast<size_t>(d) * N + n], e = std::exp(delta * an);
                    const double gn = G[n] + dy * S.Cv(r, n);
                    rC[r * N + n] += dy * h[(t + 1) * N + n];
                    rB[r * N + n] += gn * delta * uu;
                    sGB += gn * S.Bv(r, n);
                    const double gah = gn * e * h[t * N + n];
                    sDelta += gah * an + gn * S.Bv(r, n) * uu;
                    rA[static_cast<size_t>(d) * N + n] += gah * delta;
                    G[n] = gn * e;
                }
                ru[r * E + d] = S.dsk[d] * dy + delta * sGB;
                rdt[r * E + d] = sDelta * (x > 20.0 ? 1.0 : sigmoid(x));
            }
        }
    Err edt, eb, ec, eu, ez, ea, ed;
    for (int64_t r = 0; r < R; ++r) {
        for (int d = 0; d < E; ++d) {
            edt.add(gdt[r * E + d], rdt[r * E + d]);
            eu.add(gu[r * E + d], ru[r * E + d]);
            ez.add(gz[r * lddz + E + d], rz[r * E + d]);
        }
        for (int n = 0; n < N; ++n) {
            eb.add(gbc[r * lddbc + S.dt_rank + n], rB[r * N + n]);
            ec.add(gbc[r * lddbc + S.dt_rank + N + n], rC[r * N + n]);
        }
        // columns outside the outputs keep their poison
        if (!std::isnan(gbc[r * lddbc]) || !std::isnan(gz[r * lddz])) eb.bad = true;
    }
    for (int d = 0; d < E; ++d) {
        ed.add(gd[d], ddk0[d] + rD[d]);
        for (int n = 0; n < N; ++n) {
            const size_t i = static_cast<size_t>(d) * N + n;
            ea.add(gal[i], dal0[i] + rA[i] * S.a[i]);
        }
    }
    dDAL.put(dal0);
    dDD.put(ddk0);
    be->selectiveScanBackward(sb);
    const bool same = bitsEqual(gdt, dDDT.get()) && bitsEqual(gbc, dDBC.get()) && bitsEqual(gu, dDU.get()) &&
                      bitsEqual(gz, dDZ.get()) && bitsEqual(gal, dDAL.get()) && bitsEqual(gd, dDD.get());
    const std::string shape = fmt("B=%d T=%d E=%d N=%d chunk=%d", B, T, E, N, chunk);
    const double tol = 1e-4;
    report("scanBackward ddt", shape, "f32", edt.value(), tol);
    report("scanBackward dB", shape, "f32", eb.value(), tol);
    report("scanBackward dC", shape, "f32", ec.value(), tol);
    report("scanBackward du", shape, "f32", eu.value(), tol);
    report("scanBackward dz", shape, "f32", ez.value(), tol);
    report("scanBackward dA_log", shape, "f32", ea.value(), tol);
    report("scanBackward dD", shape, "f32", ed.value(), tol);
    report("scanBackward rerun", shape + ", bitwise", "f32", same ? 0 : 1, 0);
}

/** A double the backend wrote into a 2-float device buffer. */
double deviceDouble(Dev& d) {
    auto f = d.get();
    double v;
    std::memcpy(&v, f.data(), sizeof v);
    return v;
}

double sumOfSquares(const float* x, int64_t n) {
    Dev out(2);
    be->sumInto(x, n, true, reinterpret_cast<double*>(out.p));
    return deviceDouble(out);
}

void checkReductions() {
    for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{8192}, int64_t{1000003}}) {
        auto x = randv(static_cast<size_t>(n), -2, 2);
        Dev dx(x);
        double want = 0;
        for (float v : x) want += static_cast<double>(v) * v;
        const double got = sumOfSquares(dx.p, n), again = sumOfSquares(dx.p, n);
        report("sumOfSquares", fmt("n=%lld (double)", static_cast<long long>(n)), "f64", std::fabs(got - want) / want,
               1e-11);
        report("sumOfSquares rerun", fmt("n=%lld, bitwise", static_cast<long long>(n)), "f64", got == again ? 0 : 1, 0);
    }
    {
        const int64_t n = 100003;
        auto x = randv(static_cast<size_t>(n), -2, 2);
        Dev dx(x);
        be->scale(dx.p, n, 0.37f);
        be->scale(nullptr, 0, 2.f);  // the trainer's probe: a no-op
        auto got = dx.get();
        Err e;
        for (int64_t i = 0; i < n; ++i) e.add(got[i], static_cast<double>(x[i] * 0.37f));
        report("scale", "n=100003, exact", "f32", e.value(), 0);
    }
    {
        const int64_t n = 100003;
        auto y = randv(static_cast<size_t>(n), -2, 2), t = randv(static_cast<size_t>(n), -2, 2);
        Dev dy(y), dt(t), dg(n);
        dg.poison();
        const float sc = 0.25f / static_cast<float>(n);
        Dev dsum(2);
        be->mse(dy.p, dt.p, n, sc, dg.p, reinterpret_cast<double*>(dsum.p));
        const double got = deviceDouble(dsum);
        auto g = dg.get();
        double want = 0;
        Err e;
        for (int64_t i = 0; i < n; ++i) {
            const double d = static_cast<double>(y[i]) - t[i];
            want += d * d;
            e.add(g[i], 2.0 * sc * d);
        }
        report("mse sum", "n=100003 (double)", "f64", std::fabs(got - want) / want, 1e-7);
        report("mse gradient", "n=100003", "f32", e.value(), 1e-6);
    }
}

void checkAdamW() {
    const int64_t n = 100003;
    auto p = randv(static_cast<size_t>(n), -1, 1), g = randv(static_cast<size_t>(n), -1, 1);
    auto m = randv(static_cast<size_t>(n), -0.1, 0.1), v = randv(static_cast<size_t>(n), 0, 0.01);
    g[0] = 0.f;
    m[0] = 0.f;
    v[0] = 0.f;
    Dev dp(p), dg(g), dm(m), dv(v);
    AdamWArgs a{};
    a.lr = 3e-3f;
    a.beta1 = 0.9f;
    a.beta2 = 0.999f;
    a.eps = 1e-8f;
    a.weight_decay = 0.05f;
    a.bias_correction1 = static_cast<float>(1.0 - std::pow(0.9, 7.0));
    a.bias_correction2 = static_cast<float>(1.0 - std::pow(0.999, 7.0));
    a.grad_scale = 0.8f;
    const AdamWFactors f = adamwFactors(a);
    Dev df(std::vector<float>(reinterpret_cast<const float*>(&f),
                              reinterpret_cast<const float*>(&f) + sizeof f / sizeof(float)));
    be->adamw(dp.p, dg.p, dm.p, dv.p, n, reinterpret_cast<const AdamWFactors*>(df.p), true);
    auto gp = dp.get(), gm = dm.get(), gv = dv.get();
    Err ep, em, ev;
    for (int64_t i = 0; i < n; ++i) {
        const double gi = static_cast<double>(g[i]) * a.grad_scale;
        const double mi = a.beta1 * static_cast<double>(m[i]) + (1.0 - a.beta1) * gi;
        const double vi = a.beta2 * static_cast<double>(v[i]) + (1.0 - a.beta2) * gi * gi;
        const double denom = std::sqrt(vi) / std::sqrt(static_cast<double>(a.bias_correction2)) + a.eps;
        const double pi = p[i] * (1.0 - static_cast<double>(a.lr) * a.weight_decay) -
                          static_cast<double>(a.lr) / a.bias_correction1 * mi / denom;
        ep.add(gp[i], pi);
        em.add(gm[i], mi);
        ev.add(gv[i], vi);
    }
    report("adamw p", "n=100003", "f32", ep.value(), 1e-6);
    report("adamw m", "n=100003", "f32", em.value(), 1e-6);
    report("adamw v", "n=100003", "f32", ev.value(), 1e-6);
}

void checkCrossEntropy(int64_t rows, int vocab, bool inPlace) {
    const int ignore = -100;
    const float sc = 1.f / 3.f;
    auto logits = randv(static_cast<size_t>(rows * vocab), -4, 4);
    std::vector<int32_t> tg(static_cast<size_t>(rows));
    std::uniform_int_distribution<int> pick(0, vocab - 1);
    for (int64_t r = 0; r < rows; ++r) tg[r] = r % 5 == 2 ? ignore : pick(rng);
    if (rows > 3 && vocab > 3) {  // a tie for the maximum: the smaller index wins
        logits[3 * vocab + 1] = 9.f;
        logits[3 * vocab + vocab - 1] = 9.f;
        tg[3] = 1;
    }
    std::vector<float> tbits(static_cast<size_t>(rows));
    std::memcpy(tbits.data(), tg.data(), tbits.size() * 4);
    Dev dl(logits), dt(tbits), dloss(rows), dcor(rows), dg(inPlace ? 0 : rows * vocab);
    dloss.poison();
    dcor.poison();
    if (!inPlace) dg.poison();
    float* grad = inPlace ? dl.p : dg.p;
    be->crossEntropy(CrossEntropyArgs{dl.p, rows, vocab, reinterpret_cast<const int32_t*>(dt.p), ignore, sc, dloss.p,
                                      dcor.p, grad});
    auto loss = dloss.get(), cor = dcor.get(), g = inPlace ? dl.get() : dg.get();
    Err el, eg;
    double wrong = 0;
    for (int64_t r = 0; r < rows; ++r) {
        const float* l = logits.data() + r * vocab;
        if (tg[r] == ignore) {
            el.add(loss[r], 0.0);
            wrong += cor[r] != 0.f;
            for (int k = 0; k < vocab; ++k) eg.add(g[r * vocab + k], 0.0);
            continue;
        }
        int best = 0;
        for (int k = 1; k < vocab; ++k)
            if (l[k] > l[best]) best = k;
        double mx = l[best], sum = 0;
        for (int k = 0; k < vocab; ++k) sum += std::exp(l[k] - mx);
        el.add(loss[r], std::log(sum) + mx - l[tg[r]]);
        wrong += cor[r] != (best == tg[r] ? 1.f : 0.f);
        for (int k = 0; k < vocab; ++k)
            eg.add(g[r * vocab + k], sc * (std::exp(l[k] - mx) / sum - (k == tg[r] ? 1.0 : 0.0)));
    }
    const std::string shape = fmt("rows=%lld V=%d%s", static_cast<long long>(rows), vocab, inPlace ? " in place" : "");
    report("crossEntropy loss", shape, "f32", el.value(), 1e-6);
    report("crossEntropy dlogits", shape, "f32", eg.value(), 1e-6);
    report("crossEntropy correct", shape, "f32", wrong, 0);
}

void checkTraining() {
    for (int dtype : {DTYPE_F32, DTYPE_BF16}) {
        checkLinearBackward(96, 64, 37, 0.f, 0, dtype);
        checkLinearBackward(80, 1536, 300, 1.f, 3, dtype);
    }
    checkLinearBackward(5, 7, 3, 0.5f, 1, DTYPE_F32);
    checkLinearWeightGrad(96, 64, 37, true, 0);
    checkLinearWeightGrad(80, 1536, 300, false, 3);
    checkLinearWeightGrad(1536, 48, 2000, true, 0);
    checkLinearWeightGrad(3, 5, 1, true, 1);
    checkRmsnormBackward(37, 64, 0.f, 0);
    checkRmsnormBackward(300, 768, 1.f, 3);
    checkRmsnormBackward(5, 2000, 0.5f, 1);
    for (const ConvCase& c : {ConvCase{2, 70, 40, 4}, ConvCase{1, 1, 64, 4}, ConvCase{3, 33, 130, 3},
                              ConvCase{2, 40, 17, 1}, ConvCase{1, 100, 33, 8}, ConvCase{2, 5, 64, 8}})
        checkConvBackward(c.B, c.T, c.E, c.K);
    for (auto [B, T, E, N, chunk] : {std::make_tuple(2, 70, 40, 4, 64), std::make_tuple(3, 130, 96, 16, 64),
                                     std::make_tuple(1, 50, 33, 5, 7), std::make_tuple(2, 20, 16, 64, 64),
                                     std::make_tuple(1, 17, 8, 200, 8), std::make_tuple(2, 1, 20, 16, 64),
                                     std::make_tuple(1, 9, 12, 1, 3), std::make_tuple(4, 64, 128, 16, 64)}) {
        checkScanTrain(B, T, E, N, chunk);
        checkScanBackward(B, T, E, N, chunk);
    }
    checkReductions();
    checkAdamW();
    checkCrossEntropy(37, 1000, false);
    checkCrossEntropy(37, 1000, true);
    checkCrossEntropy(12, 5, true);
    checkCrossEntropy(4, 50280, false);
}

// ---------------- timing ----------------

/** Median time per call (µs) of fn over `samples` samples of `iters` back-to-back calls, CUDA events. */
double timeUs(const std::function<void(int)>& fn, int iters = 20, int samples = 15) {
    cudaStream_t s = be->stream();
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int i = 0; i < 3; ++i) fn(i);
    be->synchronize();
    std::vector<float> ms;
    int call = 0;
    for (int k = 0; k < samples; ++k) {
        cudaEventRecord(e0, s);
        for (int i = 0; i < iters; ++i) fn(call++);
        cudaEventRecord(e1, s);
        cudaEventSynchronize(e1);
        float t = 0;
        cudaEventElapsedTime(&t, e0, e1);
        ms.push_back(t / iters);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2] * 1000.0;
}

void timingRow(const std::string& op, const std::string& shape, const char* dtype, double us, double bytes,
               double flops = 0, double peak = 0) {
    const double floor_us = bytes / kHbmBytesPerSec * 1e6;
    const double flop_us = peak > 0 ? flops / peak * 1e6 : 0;
    std::printf("| %-22s | %-30s | %-5s | %9.2f | %8.2f | %8.2f | %5.0f%% |\n", op.c_str(), shape.c_str(), dtype, us,
                floor_us, flop_us, 100.0 * std::max(floor_us, flop_us) / us);
    std::fflush(stdout);
}

/** Copies of one weight matrix spread over ≥ 320 MB so that timed calls read HBM, not L2. */
struct WeightPool {
    int out, in, dtype;
    std::vector<Dev> f32, lowp;
    WeightPool(int out_, int in_, int dtype_) : out(out_), in(in_), dtype(dtype_) {
        const int64_t n = static_cast<int64_t>(out) * in;
        const double bytes = static_cast<double>(n) * (dtype == DTYPE_BF16 || dtype == DTYPE_F16 ? 2 : 4);
        const int copies = static_cast<int>(std::min(64.0, std::max(2.0, std::ceil(320e6 / bytes))));
        auto h = randv(static_cast<size_t>(n), -0.05, 0.05);
        for (int c = 0; c < copies; ++c) {
            if (dtype == DTYPE_BF16 || dtype == DTYPE_F16) {
                Dev tmp(h);
                lowp.emplace_back((n + 1) / 2);
                be->toLowPrecision(tmp.p, lowp.back().p, n, dtype);
                f32.emplace_back(1);  // unused
            } else {
                f32.emplace_back(h);
            }
        }
        be->synchronize();
    }
    Matrix at(int i) const {
        const size_t c = static_cast<size_t>(i) % f32.size();
        return lowp.empty() ? Matrix{f32[c].p, nullptr, dtype, out, in} : Matrix{nullptr, lowp[c].p, dtype, out, in};
    }
    double bytes() const {
        return static_cast<double>(out) * in * (dtype == DTYPE_BF16 || dtype == DTYPE_F16 ? 2 : 4);
    }
};

void timeLinear(const std::string& name, int out, int in, int dtype, int rows, FILE* lm = nullptr, int dmodel = 0) {
    WeightPool pool(out, in, dtype);
    Dev x(randv(static_cast<size_t>(rows) * in, -1, 1)), y(static_cast<int64_t>(rows) * out);
    const double us = timeUs([&](int i) { linear(x.p, in, rows, pool.at(i), nullptr, y.p, out, 0.f); });
    const double bytes = pool.bytes() + 4.0 * rows * (in + out);
    const double flops = 2.0 * rows * out * in;
    const double peak = dtype == DTYPE_F32 ? 60e12 : dtype == DTYPE_TF32 ? 390e12 : 780e12;
    timingRow(name, fmt("%dx%d rows=%d%s", out, in, rows, rows > mamba::cuda::kGemvMaxRows ? " cuBLAS" : ""),
              dtypeName(dtype), us, bytes, flops, peak);
    if (lm) std::fprintf(lm, "%d\t%s\t%.3f\n", dmodel, dtypeName(dtype), us);
}

void timeStages() {
    std::printf("\n## Kernel timings (median of 15 × 20 back-to-back calls, CUDA events; floor = bytes / 4.26 TB/s; "
                "flop floor at 60/390/780 TFLOP/s for f32/tf32/bf16)\n\n");
    std::printf("| %-22s | %-30s | %-5s | %9s | %8s | %8s | %6s |\n", "op", "shape", "dtype", "us", "HBM us",
                "flop us", "of floor");
    std::printf("|---|---|---|---|---|---|---|\n");
    // Decode matrices of the 2.8b shape (d_model 2560, d_inner 5120, dt_rank 160, d_state 16).
    for (int dt : {DTYPE_F32, DTYPE_BF16}) {
        timeLinear("in_proj 2.8b", 10240, 2560, dt, 1);
        timeLinear("x_proj 2.8b", 192, 5120, dt, 1);
        timeLinear("dt_proj 2.8b", 5120, 160, dt, 1);
        timeLinear("out_proj 2.8b", 2560, 5120, dt, 1);
        timeLinear("in_proj 130m", 3072, 768, dt, 1);
        timeLinear("out_proj 130m", 768, 1536, dt, 1);
    }
    timeLinear("in_proj 2.8b", 10240, 2560, DTYPE_F16, 1);
    // group-size sweep of the big decode matvecs (auto choice first)
    for (int G : {16, 64}) {
        be->setGemvGroup(G);
        timeLinear(fmt("in_proj 2.8b G=%d", G), 10240, 2560, DTYPE_BF16, 1);
        timeLinear(fmt("out_proj 2.8b G=%d", G), 2560, 5120, DTYPE_BF16, 1);
        timeLinear(fmt("in_proj 1.4b G=%d", G), 8192, 2048, DTYPE_BF16, 1);
        timeLinear(fmt("lm head 768 G=%d", G), 50280, 768, DTYPE_BF16, 1);
    }
    be->setGemvGroup(0);
    timeLinear("in_proj 1.4b", 8192, 2048, DTYPE_BF16, 1);
    timeLinear("out_proj 1.4b", 2048, 4096, DTYPE_BF16, 1);
    timeLinear("in_proj 2.8b", 10240, 2560, DTYPE_BF16, 2);
    timeLinear("in_proj 2.8b", 10240, 2560, DTYPE_BF16, 4);
    timeLinear("in_proj 2.8b", 10240, 2560, DTYPE_BF16, 8);
    timeLinear("in_proj 2.8b", 10240, 2560, DTYPE_BF16, 16);
    timeLinear("in_proj 2.8b", 10240, 2560, DTYPE_BF16, 64);
    timeLinear("in_proj 370m", 4096, 1024, DTYPE_F32, 4096);
    timeLinear("in_proj 370m", 4096, 1024, DTYPE_TF32, 4096);
    timeLinear("in_proj 370m", 4096, 1024, DTYPE_BF16, 4096);

    {  // rmsnorm
        for (const auto& rd : {std::pair<int, int>{1, 2560}, {4096, 1024}}) {
            const int rows = rd.first, d = rd.second;
            Dev x(randv(static_cast<size_t>(rows) * d, -1, 1)), w(randv(d, 0.5, 1.5)),
                y(static_cast<int64_t>(rows) * d);
            const double us = timeUs([&](int) { be->rmsnorm(RmsNormArgs{x.p, d, w.p, rows, d, 1e-5f, y.p, d}); });
            timingRow("rmsnorm", fmt("rows=%d d=%d", rows, d), "f32", us, 8.0 * rows * d + 4.0 * d);
        }
    }
    {  // conv
        for (const auto& bte : {std::tuple<int, int, int>{1, 1, 5120}, {64, 1, 5120}, {1, 4096, 2048}}) {
            const int B = std::get<0>(bte), T = std::get<1>(bte), E = std::get<2>(bte);
            const int K = 4;
            Dev x(randv(static_cast<size_t>(B) * T * 2 * E, -1, 1)), w(randv(static_cast<size_t>(E) * K, -.5, .5)),
                b(randv(E, -.5, .5)), h(randv(static_cast<size_t>(B) * E * (K - 1), -1, 1)),
                u(static_cast<int64_t>(B) * T * E);
            ConvArgs c{x.p, 2 * E, w.p, b.p, h.p, static_cast<int64_t>(E) * (K - 1), u.p, E, B, T, E, K};
            const double us = timeUs([&](int) { be->convSilu(c); });
            timingRow("convSilu", fmt("B=%d T=%d E=%d", B, T, E), "f32", us,
                      8.0 * B * T * E + 8.0 * B * E * (K - 1) + 4.0 * E * (K + 1));
        }
    }
    {  // scan
        struct Sh { int B, T, E, N; ScanAlgo algo; };
        for (const Sh& sh : {Sh{1, 1, 5120, 16, ScanAlgo::Auto}, Sh{64, 1, 5120, 16, ScanAlgo::Auto},
                             Sh{1, 4096, 2048, 16, ScanAlgo::Sequential}, Sh{1, 4096, 2048, 16, ScanAlgo::Chunked},
                             Sh{4, 1024, 2048, 16, ScanAlgo::Sequential}, Sh{4, 1024, 2048, 16, ScanAlgo::Chunked},
                             Sh{1, 1024, 2048, 128, ScanAlgo::Sequential}, Sh{1, 1024, 2048, 128, ScanAlgo::Chunked}}) {
            const int64_t R = static_cast<int64_t>(sh.B) * sh.T;
            const int X = 64 + 2 * sh.N;
            Dev dt(randv(static_cast<size_t>(R) * sh.E, -4.5, -1.5)), a(randv(static_cast<size_t>(sh.E) * sh.N, -8, -1)),
                bc(randv(static_cast<size_t>(R) * X, -1, 1)), u(randv(static_cast<size_t>(R) * sh.E, -1, 1)),
                z(randv(static_cast<size_t>(R) * 2 * sh.E, -1, 1)), d(randv(sh.E, .5, 1.5)),
                h(randv(static_cast<size_t>(sh.B) * sh.E * sh.N, -1, 1)), out(R * sh.E);
            ScanArgs s{dt.p, a.p, bc.p + 64, X, u.p, z.p + sh.E, 2 * sh.E, d.p, h.p,
                       static_cast<int64_t>(sh.E) * sh.N, out.p, sh.B, sh.T, sh.E, sh.N};
            be->setScanAlgo(sh.algo, 0);
            const double us =
                timeUs([&](int) { be->selectiveScan(s, nullptr, nullptr); }, sh.T > 1 ? 5 : 20, sh.T > 1 ? 7 : 15);
            be->setScanAlgo(ScanAlgo::Auto, 0);
            const double bytes = 4.0 * R * (sh.E * 4 + 2 * sh.N) + 8.0 * sh.B * sh.E * sh.N;
            timingRow(fmt("scan %s", algoName(sh.algo)), fmt("B=%d T=%d E=%d N=%d", sh.B, sh.T, sh.E, sh.N), "f32", us,
                      bytes);
        }
    }
}

/** One synthetic B=1 decode step of a whole model (all 7 stages × layers) in a graph, PDL on and off. */
void timeDecodeChain(int D, int layers, int dtype) {
    const int E = 2 * D, N = 16, K = 4, R = (D + 15) / 16, X = R + 2 * N, B = 1;
    // Distinct weights for enough layers to cover ≥ 600 MB (far beyond L2); later layers reuse them.
    const double layer_bytes = (static_cast<double>(2 * E) * D + static_cast<double>(X) * E +
                                static_cast<double>(E) * R + static_cast<double>(D) * E) * (dtype == DTYPE_BF16 ? 2 : 4);
    const int distinct = static_cast<int>(std::min<double>(layers, std::ceil(600e6 / layer_bytes)));
    std::vector<Weight> win, wx, wdt, wout;
    for (int l = 0; l < distinct; ++l) {
        win.emplace_back(2 * E, D, dtype);
        wx.emplace_back(X, E, dtype);
        wdt.emplace_back(E, R, dtype);
        wout.emplace_back(D, E, dtype);
    }
    Dev nw(randv(D, .5, 1.5)), cw(randv(static_cast<size_t>(E) * K, -.5, .5)), cb(randv(E, -.5, .5)),
        dtb(randv(E, -4.5, -1.5)), dsk(randv(E, .5, 1.5)), a(randv(static_cast<size_t>(E) * N, -8, -1));
    const int64_t state_row = static_cast<int64_t>(E) * (K - 1 + N);
    Dev st(randv(static_cast<size_t>(layers) * state_row, -.5, .5));
    Dev resid(randv(D, -1, 1)), normed(D), xz(2 * E), uu(E), xdbl(X), dt(E), gated(E);
    auto step = [&]() {
        for (int layer = 0; layer < layers; ++layer) {
            const int l = layer % distinct;
            float* s = st.p + layer * state_row;
            be->normLinear(RmsNormArgs{resid.p, D, nw.p, B, D, 1e-5f, normed.p, D},
                           Gemm::forward(GemmMode::Fast, normed.p, D, B, win[l].matrix(), nullptr, xz.p, 2 * E, 0.f));
            ConvArgs c{xz.p, 2 * E, cw.p, cb.p, s, state_row, uu.p, E, B, 1, E, K};
            be->convSilu(c);
            linear(uu.p, E, B, wx[l].matrix(), nullptr, xdbl.p, X, 0.f);
            const Gemm proj = Gemm::forward(GemmMode::Fast, xdbl.p, X, B, wdt[l].matrix(), dtb.p, dt.p, E, 0.f);
            ScanArgs sa{dt.p, a.p, xdbl.p + R, X, uu.p, xz.p + E, 2 * E, dsk.p, s + static_cast<int64_t>(E) * (K - 1),
                        state_row, gated.p, B, 1, E, N};
            be->selectiveScan(sa, &proj, nullptr);
            linear(gated.p, E, B, wout[l].matrix(), nullptr, resid.p, D, 0.f);  // beta 0 keeps values bounded
        }
    };
    const double bytes = layer_bytes * layers;
    const bool pdl0 = be->pdl();
    for (int variant = 0; variant < 3; ++variant) {
        const bool pdl = variant < 2, fuse = variant == 0;
        be->setPdl(pdl);
        be->setFusion(fuse);
        const double eager = timeUs([&](int) { step(); }, 3, 9);
        be->beginCapture();
        step();
        void* g = be->endCapture();
        const double graph = timeUs([&](int) { be->replay(g); }, 5, 11);
        if (variant == 0) {  // the graph with host copies around it, as a decode step through the API sees it
            std::vector<float> hx = randv(D, -1, 1), hy(D);
            std::vector<double> us;
            for (int i = 0; i < 60; ++i) {
                const auto t0 = std::chrono::steady_clock::now();
                be->upload(resid.p, hx.data(), D);
                be->replay(g);
                be->download(hy.data(), resid.p, D);
                us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
            }
            std::sort(us.begin(), us.end());
            timingRow("chain + copies (host)", fmt("d=%d L=%d", D, layers), dtypeName(dtype), us[us.size() / 2], bytes);
        }
        be->destroyGraph(g);
        timingRow(fmt("chain %s%s", pdl ? "pdl" : "no-pdl", fuse ? "+fuse" : ""),
                  fmt("d=%d L=%d eager %.0fus", D, layers, eager), dtypeName(dtype), graph, bytes);
    }
    be->setPdl(pdl0);
    be->setFusion(true);
}

}  // namespace

int main(int argc, char** argv) {
    uint64_t seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    bool timing = true;
    const char* lmhead = nullptr;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--seed") && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
        else if (!std::strcmp(argv[i], "--no-timing")) timing = false;
        else if (!std::strcmp(argv[i], "--lmhead") && i + 1 < argc) lmhead = argv[++i];
    }
    rng.seed(seed);
    if (cudaDeviceCount() == 0) {
        std::printf("no CUDA device (%s): nothing to test\n", cudaUnavailableReason().c_str());
        return 0;
    }
    try {
        context = newCudaBackend(0);
        be = static_cast<CudaBackend*>(context.get());
        std::printf("# CUDA backend kernel test — %s, %d SMs, PDL %s, seed %llu\n\n", cudaDeviceName(0).c_str(),
                    be->multiprocessors(), be->pdl() ? "on" : "off", static_cast<unsigned long long>(seed));
        std::printf("| %-26s | %-34s | %-5s | %9s | %7s | %s |\n", "op", "shape", "dtype", "max rel", "tol", "result");
        std::printf("|---|---|---|---|---|---|\n");
        checkTransfers();
        checkNegExp();
        for (int dt : {DTYPE_F32, DTYPE_BF16, DTYPE_F16}) {
            checkEmbed(dt, 256);
            checkEmbed(dt, 260);  // rows not 16-byte multiples of the 2-byte table: element by element
        }
        checkToLowp(DTYPE_BF16);
        checkToLowp(DTYPE_F16);
        checkFromLowp(DTYPE_BF16);
        checkFromLowp(DTYPE_F16);
        checkRmsnorm(1, 768, 768, 768);
        checkRmsnorm(5, 2560, 2564, 2560);
        checkRmsnorm(3, 37, 41, 40);
        checkRmsnorm(64, 1024, 1024, 1024);
        checkRmsnorm(2, 6000, 6000, 6000);
        for (int dt : {DTYPE_F32, DTYPE_TF32, DTYPE_BF16, DTYPE_F16}) {
            for (int rows : {1, 3, 8}) {
                checkLinear(dt, 3072, 768, rows, false, 0.f, 0);
                checkLinear(dt, 80, 1536, rows, false, 0.f, 0);
                checkLinear(dt, 1536, 48, rows, true, 0.f, 0);
                checkLinear(dt, 768, 1536, rows, false, 1.f, 0);
            }
            checkLinear(dt, 37, 29, 5, true, 0.5f, 3);    // unaligned: scalar gemv path
            checkLinear(dt, 64, 40, 2, false, 0.f, 1);    // odd ldx: scalar gemv path
            checkLinear(dt, 300, 512, 9, true, 0.f, 4);   // smallest cuBLAS batch
            checkLinear(dt, 1024, 384, 200, false, 1.f, 0);
            checkLinear(dt, 37, 29, 33, true, 0.5f, 3);
            checkGemvRowIndependence(dt, 1000, 512);
            checkReproducibleMode(dt, 3);
            checkReproducibleMode(dt, 100);
        }
        checkLinear(DTYPE_BF16, 24, 2048, 9000, false, 0.f, 0);  // several activation-workspace chunks
        for (const ConvCase& c : {ConvCase{1, 1, 64, 4}, ConvCase{3, 1, 100, 4}, ConvCase{2, 5, 64, 4},
                                  ConvCase{2, 37, 100, 4}, ConvCase{1, 40, 33, 3}, ConvCase{2, 2, 50, 1},
                                  ConvCase{1, 20, 17, 1}, ConvCase{3, 30, 70, 8}})
            checkConv(c, 3);
        for (const ScanCase& s : {ScanCase{1, 1, 64, 16, ScanAlgo::Auto, 0}, ScanCase{3, 1, 100, 16, ScanAlgo::Auto, 0},
                                  ScanCase{2, 7, 64, 5, ScanAlgo::Sequential, 0},
                                  ScanCase{2, 16, 33, 64, ScanAlgo::Sequential, 0},
                                  ScanCase{1, 3, 40, 256, ScanAlgo::Sequential, 0},
                                  ScanCase{2, 300, 64, 16, ScanAlgo::Auto, 0},
                                  ScanCase{2, 300, 64, 16, ScanAlgo::Sequential, 0},
                                  ScanCase{1, 301, 48, 16, ScanAlgo::Chunked, 16},
                                  ScanCase{2, 50, 33, 5, ScanAlgo::Chunked, 7},
                                  ScanCase{1, 260, 16, 256, ScanAlgo::Chunked, 0},
                                  ScanCase{1, 1000, 32, 130, ScanAlgo::Auto, 0},
                                  ScanCase{1, 600, 64, 1, ScanAlgo::Auto, 0},
                                  ScanCase{2, 130, 48, 16, ScanAlgo::Auto, 0}})
            checkScan(s);
        for (int dt : {DTYPE_F32, DTYPE_BF16, DTYPE_F16}) {
            for (bool fused : {true, false}) {
                checkNormLinear(dt, 1, 768, 3072, fused);
                checkNormLinear(dt, 3, 2560, 512, fused);
                checkNormLinear(dt, 8, 128, 300, fused);
                checkNormLinear(dt, 8, 2048, 256, fused);  // 64 KiB of normalised rows: the shared-memory opt-in
                checkDtScan(dt, 1, 1536, 16, 48, fused);
                checkDtScan(dt, 4, 300, 16, 20, fused);
                checkDtScan(dt, 2, 64, 64, 7, fused);
            }
        }
        for (int dt : {DTYPE_F32, DTYPE_BF16}) {
            checkGraph(dt, 1);
            checkGraph(dt, 4);
            checkGraph(dt, 16);
            checkGraph(dt, 8, 2048);  // the fused gemv's shared-memory opt-in during a capture
            checkContexts(dt, 2);
            checkContexts(dt, 16);
        }
        checkCheapContext();
        checkContracts();
        checkOom();
        checkTraining();
        std::printf("\n%s: %d check(s) failed\n", failures ? "FAILED" : "ALL PASSED", failures);
        if (timing) {
            timeStages();
            std::printf("\n## Synthetic B=1 decode step (7 stages per layer, CUDA graph replay; eager time in shape)\n\n");
            std::printf("| %-22s | %-30s | %-5s | %9s | %8s | %8s | %6s |\n", "op", "shape", "dtype", "us", "HBM us",
                        "flop us", "of floor");
            std::printf("|---|---|---|---|---|---|---|\n");
            timeDecodeChain(768, 24, DTYPE_BF16);
            timeDecodeChain(2560, 64, DTYPE_BF16);
            if (lmhead) {
                FILE* f = std::fopen(lmhead, "w");
                std::printf("\n## LM head matvec (50280 x d_model, B=1)\n\n");
                std::printf("| %-22s | %-30s | %-5s | %9s | %8s | %8s | %6s |\n", "op", "shape", "dtype", "us",
                            "HBM us", "flop us", "of floor");
                std::printf("|---|---|---|---|---|---|---|\n");
                for (int d : {768, 1024, 2048, 2560})
                    for (int dt : {DTYPE_F32, DTYPE_BF16}) timeLinear("lm head", 50280, d, dt, 1, f, d);
                if (f) std::fclose(f);
            }
        }
    } catch (const std::exception& e) {
        std::printf("\nERROR: %s\n", e.what());
        return 2;
    }
    return failures ? 1 : 0;
}
