// Double-precision references (reference.h), the host-side 16-bit rounding, and the central-difference
// checks that prove the hand-derived backward references.
#include "reference.h"
#include "op_test.h"
#include "reference_mamba3.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace optest {

// ---------------------------------------------------------------- inputs

std::vector<float> uniform(Rng& rng, int64_t n, double lo, double hi) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) {
        x = static_cast<float>(rng.uniform(lo, hi));
        if (x == 0.f) x = static_cast<float>(lo + 0.375 * (hi - lo));
        if (x == 0.f) x = 1e-3f;
    }
    return v;
}

float dtBias(Rng& rng) {
    const double delta0 = std::exp(rng.uniform(std::log(0.001), std::log(0.1)));
    return static_cast<float>(delta0 + std::log(-std::expm1(-delta0)));  // softplus⁻¹(Δ0)
}

// ---------------------------------------------------------------- 16-bit grids

namespace {

/** The value of a finite bf16/f16 bit pattern with the sign bit clear. */
double gridValue(uint32_t p, int dtype) {
    if (dtype == DTYPE_BF16) {
        const uint32_t f32 = p << 16;
        float f;
        std::memcpy(&f, &f32, 4);
        return f;
    }
    const int e = static_cast<int>((p >> 10) & 31), m = static_cast<int>(p & 1023);
    return e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
}

uint32_t infBits(int dtype) { return dtype == DTYPE_BF16 ? 0x7F80u : 0x7C00u; }
/** Where the grid would continue past its largest finite value: rounding up to it means overflow to ∞. */
double overflowValue(int dtype) { return dtype == DTYPE_BF16 ? std::ldexp(1.0, 128) : std::ldexp(1.0, 16); }

}  // namespace

uint16_t roundToHalf(float x, int dtype) {
    const uint32_t sign = std::signbit(x) ? 0x8000u : 0u, inf = infBits(dtype);
    if (std::isnan(x)) return static_cast<uint16_t>(sign | inf | (dtype == DTYPE_BF16 ? 0x40u : 0x200u));
    const double m = std::fabs(static_cast<double>(x));
    auto value = [&](uint32_t p) { return p == inf ? overflowValue(dtype) : gridValue(p, dtype); };
    if (m >= value(inf)) return static_cast<uint16_t>(sign | inf);
    // The non-negative patterns 0 … inf are increasing in value: find value(lo) ≤ m < value(hi) by bisection.
    uint32_t lo = 0, hi = inf;
    while (hi - lo > 1) {
        const uint32_t mid = (lo + hi) / 2;
        (value(mid) <= m ? lo : hi) = mid;
    }
    const double below = m - value(lo), above = value(hi) - m;
    const uint32_t p = below < above ? lo : above < below ? hi : (lo % 2 == 0 ? lo : hi);  // ties to the even pattern
    return static_cast<uint16_t>(sign | p);
}

float halfToFloat(uint16_t bits, int dtype) {
    const uint32_t p = bits & 0x7FFFu, inf = infBits(dtype);
    double v;
    if (p == inf)
        v = std::numeric_limits<double>::infinity();
    else if (p > inf)
        v = std::numeric_limits<double>::quiet_NaN();
    else
        v = gridValue(p, dtype);
    return static_cast<float>((bits & 0x8000u) ? -v : v);
}

float roundToTf32(float x) {
    if (!std::isfinite(x) || x == 0.f) return x;
    int e;
    std::frexp(static_cast<double>(x), &e);           // |x| = f·2^e, f in [0.5, 1)
    const double unit = std::ldexp(1.0, e - 11);      // 11 significant bits: 1 implicit + 10 stored
    return static_cast<float>(std::nearbyint(x / unit) * unit);  // the default rounding mode: nearest even
}

const char* dtypeName(int dtype) {
    switch (dtype) {
        case DTYPE_F32: return "F32";
        case DTYPE_TF32: return "TF32";
        case DTYPE_BF16: return "BF16";
        case DTYPE_F16: return "F16";
    }
    return "?";
}

namespace ref {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double silu(double x) { return x * sigmoid(x); }
double dsilu(double x) {
    const double s = sigmoid(x);
    return s * (1.0 + x * (1.0 - s));
}
double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }
double dsoftplus(double x) { return x > 20.0 ? 1.0 : sigmoid(x); }

// ---------------------------------------------------------------- products

Vec gemmForward(const Vec& x, int64_t rows, const Vec& w, int out, int in, const Vec& bias, double beta, const Vec& y0) {
    Vec y(static_cast<size_t>(rows * out));
    for (int64_t r = 0; r < rows; ++r)
        for (int o = 0; o < out; ++o) {
            double s = 0;
            for (int i = 0; i < in; ++i) s += x[r * in + i] * w[static_cast<int64_t>(o) * in + i];
            if (!bias.empty()) s += bias[o];
            if (beta != 0) s += beta * y0[r * out + o];
            y[r * out + o] = s;
        }
    return y;
}

Vec gemmBackwardData(const Vec& dy, int64_t rows, const Vec& w, int out, int in, double beta, const Vec& dx0) {
    Vec dx(static_cast<size_t>(rows * in));
    for (int64_t r = 0; r < rows; ++r)
        for (int i = 0; i < in; ++i) {
            double s = 0;
            for (int o = 0; o < out; ++o) s += dy[r * out + o] * w[static_cast<int64_t>(o) * in + i];
            if (beta != 0) s += beta * dx0[r * in + i];
            dx[r * in + i] = s;
        }
    return dx;
}

void gemmWeightGrad(const Vec& dy, const Vec& x, int64_t rows, int out, int in, Vec& dw, Vec* dbias) {
    for (int o = 0; o < out; ++o) {
        for (int i = 0; i < in; ++i) {
            double s = 0;
            for (int64_t r = 0; r < rows; ++r) s += dy[r * out + o] * x[r * in + i];
            dw[static_cast<int64_t>(o) * in + i] += s;
        }
        if (dbias) {
            double s = 0;
            for (int64_t r = 0; r < rows; ++r) s += dy[r * out + o];
            (*dbias)[o] += s;
        }
    }
}

// ---------------------------------------------------------------- normalisation

Vec rmsnorm(const Vec& x, int64_t rows, int d, const Vec& w, double eps) {
    Vec y(x.size());
    for (int64_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int j = 0; j < d; ++j) ss += x[r * d + j] * x[r * d + j];
        const double rho = 1.0 / std::sqrt(ss / d + eps);
        for (int j = 0; j < d; ++j) y[r * d + j] = w[j] * x[r * d + j] * rho;
    }
    return y;
}

void rmsnormBackward(const Vec& x, int64_t rows, int d, const Vec& w, const Vec& dy, double eps, double beta,
                     const Vec& dx0, Vec& dx, Vec& dw) {
    dx.assign(static_cast<size_t>(rows * d), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
        const double* xr = &x[r * d];
        const double* gr = &dy[r * d];
        double ss = 0;
        for (int j = 0; j < d; ++j) ss += xr[j] * xr[j];
        const double rho = 1.0 / std::sqrt(ss / d + eps);
        double mean_gx = 0;  // mean(g ⊙ x̂) with g = w ⊙ dy
        for (int j = 0; j < d; ++j) mean_gx += w[j] * gr[j] * rho * xr[j];
        mean_gx /= d;
        for (int j = 0; j < d; ++j) {
            const double xhat = rho * xr[j];
            dx[r * d + j] = rho * (w[j] * gr[j] - xhat * mean_gx) + (beta != 0 ? beta * dx0[r * d + j] : 0.0);
            dw[j] += gr[j] * xhat;
        }
    }
}

// ---------------------------------------------------------------- conv

double ConvProblem::input(int b, int s, int d) const {
    const int H = width - 1;
    if (s >= 0) return x[(static_cast<int64_t>(b) * steps + s) * channels + d];
    return history[(static_cast<int64_t>(b) * channels + d) * H + H + s];  // s = −1 is the newest entry
}

ConvResult convSilu(const ConvProblem& p) {
    const int K = p.width, H = K - 1;
    const int64_t R = static_cast<int64_t>(p.batch) * p.steps;
    ConvResult res;
    res.pre.resize(static_cast<size_t>(R * p.channels));
    res.u.resize(res.pre.size());
    res.history.resize(static_cast<size_t>(p.batch) * p.channels * H);
    for (int b = 0; b < p.batch; ++b)
        for (int t = 0; t < p.steps; ++t)
            for (int d = 0; d < p.channels; ++d) {
                // c_t[d] = bias[d] + Σ_k w[d, k]·x_{t−(K−1)+k}[d]
                double c = p.bias[d];
                for (int k = 0; k < K; ++k) c += p.w[static_cast<int64_t>(d) * K + k] * p.input(b, t - H + k, d);
                const int64_t i = (static_cast<int64_t>(b) * p.steps + t) * p.channels + d;
                res.pre[i] = c;
                res.u[i] = silu(c);
            }
    for (int b = 0; b < p.batch; ++b)
        for (int d = 0; d < p.channels; ++d)
            for (int i = 0; i < H; ++i)
                res.history[(static_cast<int64_t>(b) * p.channels + d) * H + i] = p.input(b, p.steps - H + i, d);
    return res;
}

void convSiluBackward(const ConvProblem& p, const Vec& du, Vec& dx, Vec& dw, Vec& dbias) {
    const int K = p.width, H = K - 1, T = p.steps, C = p.channels;
    const ConvResult fwd = convSilu(p);
    dx.assign(fwd.pre.size(), 0.0);
    for (int b = 0; b < p.batch; ++b)
        for (int d = 0; d < C; ++d)
            for (int t = 0; t < T; ++t) {
                const int64_t i = (static_cast<int64_t>(b) * T + t) * C + d;
                const double dc = du[i] * dsilu(fwd.pre[i]);  // ∂L/∂c_t[d]
                dbias[d] += dc;
                for (int k = 0; k < K; ++k) {
                    const int s = t - H + k;  // c_t reads x_s through tap k
                    dw[static_cast<int64_t>(d) * K + k] += dc * p.input(b, s, d);
                    if (s >= 0) dx[(static_cast<int64_t>(b) * T + s) * C + d] += dc * p.w[static_cast<int64_t>(d) * K + k];
                }
            }
}

// ---------------------------------------------------------------- selective scan

double ScanResult::state(const ScanProblem& p, int b, int t, int d, int n) const {
    return states[((static_cast<int64_t>(b) * (p.steps + 1) + t) * p.channels + d) * p.d_state + n];
}

ScanResult selectiveScan(const ScanProblem& p) {
    const int T = p.steps, C = p.channels, N = p.d_state;
    ScanResult res;
    res.out.resize(static_cast<size_t>(p.batch) * T * C);
    res.y.resize(res.out.size());
    res.states.resize(static_cast<size_t>(p.batch) * (T + 1) * C * N);
    for (int b = 0; b < p.batch; ++b)
        for (int d = 0; d < C; ++d) {
            std::vector<double> h(p.h0.begin() + (static_cast<int64_t>(b) * C + d) * N,
                                  p.h0.begin() + (static_cast<int64_t>(b) * C + d + 1) * N);
            for (int t = 0; t <= T; ++t) {
                for (int n = 0; n < N; ++n)
                    res.states[((static_cast<int64_t>(b) * (T + 1) + t) * C + d) * N + n] = h[n];
                if (t == T) break;
                const int64_t r = static_cast<int64_t>(b) * T + t;
                const double delta = softplus(p.dt[r * C + d]), u = p.u[r * C + d];
                double y = p.d_skip[d] * u;
                for (int n = 0; n < N; ++n) {
                    // h_t = exp(Δ·A)·h_{t−1} + Δ·u·B_t;  y_t = h_t·C_t + D·u
                    h[n] = std::exp(delta * p.a[static_cast<int64_t>(d) * N + n]) * h[n] + delta * u * p.B[r * N + n];
                    y += h[n] * p.C[r * N + n];
                }
                res.y[r * C + d] = y;
                res.out[r * C + d] = y * silu(p.z[r * C + d]);
            }
        }
    return res;
}

ScanGrads selectiveScanBackward(const ScanProblem& p, const Vec& dout) {
    const int T = p.steps, C = p.channels, N = p.d_state;
    const int64_t R = static_cast<int64_t>(p.batch) * T;
    const ScanResult fwd = selectiveScan(p);
    ScanGrads g;
    g.ddt.assign(static_cast<size_t>(R * C), 0.0);
    g.du = g.dz = g.ddt;
    g.dB.assign(static_cast<size_t>(R * N), 0.0);
    g.dC = g.dB;
    g.da_log.assign(static_cast<size_t>(C) * N, 0.0);
    g.dd_skip.assign(static_cast<size_t>(C), 0.0);
    for (int b = 0; b < p.batch; ++b)
        for (int d = 0; d < C; ++d) {
            std::vector<double> G(N, 0.0);  // ∂L/∂h_t, carried backwards
            for (int t = T - 1; t >= 0; --t) {
                const int64_t r = static_cast<int64_t>(b) * T + t, i = r * C + d;
                const double z = p.z[i], u = p.u[i], delta = softplus(p.dt[i]);
                // gate: out = y·SiLU(z)
                const double dy = dout[i] * silu(z);
                g.dz[i] = dout[i] * fwd.y[i] * dsilu(z);
                g.dd_skip[d] += dy * u;
                double du = p.d_skip[d] * dy, ddelta = 0;
                for (int n = 0; n < N; ++n) {
                    const double A = p.a[static_cast<int64_t>(d) * N + n];
                    const double abar = std::exp(delta * A);
                    const double hprev = fwd.state(p, b, t, d, n), hcur = fwd.state(p, b, t + 1, d, n);
                    G[n] += dy * p.C[r * N + n];
                    g.dC[r * N + n] += dy * hcur;
                    g.dB[r * N + n] += G[n] * delta * u;
                    du += delta * G[n] * p.B[r * N + n];
                    ddelta += G[n] * (A * abar * hprev + p.B[r * N + n] * u);
                    g.da_log[static_cast<int64_t>(d) * N + n] += G[n] * delta * abar * hprev * A;  // dA/dA_log = A
                    G[n] *= abar;
                }
                g.du[i] = du;
                g.ddt[i] = ddelta * dsoftplus(p.dt[i]);
            }
        }
    return g;
}

// ---------------------------------------------------------------- training utilities

void adamw(const AdamWStep& s, double& p, double g, double& m, double& v) {
    g *= s.grad_scale;
    p *= 1.0 - s.lr * s.weight_decay;  // decoupled decay first (torch.optim.AdamW)
    m = s.beta1 * m + (1.0 - s.beta1) * g;
    v = s.beta2 * v + (1.0 - s.beta2) * g * g;
    const double denom = std::sqrt(v) / std::sqrt(s.bias_correction2) + s.eps;
    p -= s.lr / s.bias_correction1 * m / denom;
}

double crossEntropyRow(const double* logits, int vocab, int target, double scale, double* dlogits, bool* correct) {
    int best = 0;
    for (int k = 1; k < vocab; ++k)
        if (logits[k] > logits[best]) best = k;
    double sum = 0;
    for (int k = 0; k < vocab; ++k) sum += std::exp(logits[k] - logits[best]);
    if (dlogits)
        for (int k = 0; k < vocab; ++k) dlogits[k] = scale * (std::exp(logits[k] - logits[best]) / sum - (k == target));
    if (correct) *correct = best == target;
    return std::log(sum) + logits[best] - logits[target];  // −log softmax[target]
}

}  // namespace ref

// ---------------------------------------------------------------- self-checks of the references

namespace {

using ref::Vec;

/** Central difference of f along every entry of x, compared with the analytic gradient. */
template <class Loss>
Compare centralDifferences(const std::string& what, Vec& x, const Vec& analytic, Loss loss, double tol) {
    const double h = 1e-6;
    Vec want(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        const double saved = x[i];
        x[i] = saved + h;
        const double up = loss();
        x[i] = saved - h;
        const double down = loss();
        x[i] = saved;
        want[i] = (up - down) / (2 * h);
    }
    // In double: max |analytic − fd| / max |fd|.
    double err = 0, mx = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        err = std::max(err, std::fabs(analytic[i] - want[i]));
        mx = std::max(mx, std::fabs(want[i]));
    }
    return Compare{what, "nmax", mx > 0 ? err / mx : err, tol};
}

Vec randomVec(Rng& rng, size_t n, double lo, double hi) {
    Vec v(n);
    for (auto& x : v) x = rng.uniform(lo, hi);
    return v;
}

double dot(const Vec& a, const Vec& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

std::vector<Compare> checkScanBackward() {
    Rng rng(11);
    ref::ScanProblem p;
    p.batch = 2, p.steps = 6, p.channels = 3, p.d_state = 4;
    const int64_t R = p.batch * p.steps;
    p.dt = randomVec(rng, R * p.channels, -5.0, 1.0);
    p.dt[1] = 25.0;  // one value above the softplus threshold
    Vec a_log(p.channels * p.d_state);
    for (int d = 0; d < p.channels; ++d)
        for (int n = 0; n < p.d_state; ++n) a_log[d * p.d_state + n] = std::log(n + 1.0) + rng.uniform(-0.2, 0.2);
    p.B = randomVec(rng, R * p.d_state, -1, 1);
    p.C = randomVec(rng, R * p.d_state, -1, 1);
    p.u = randomVec(rng, R * p.channels, -0.3, 2);
    p.z = randomVec(rng, R * p.channels, -3, 3);
    p.d_skip = randomVec(rng, p.channels, 0.5, 1.5);
    p.h0 = randomVec(rng, p.batch * p.channels * p.d_state, -1, 1);
    const Vec dout = randomVec(rng, R * p.channels, -1, 1);
    auto setA = [&] {
        p.a.resize(a_log.size());
        for (size_t i = 0; i < a_log.size(); ++i) p.a[i] = -std::exp(a_log[i]);
    };
    setA();
    const ref::ScanGrads g = ref::selectiveScanBackward(p, dout);
    auto loss = [&] {
        setA();
        return dot(ref::selectiveScan(p).out, dout);
    };
    std::vector<Compare> out;
    out.push_back(centralDifferences("ddt", p.dt, g.ddt, loss, 1e-6));
    out.push_back(centralDifferences("dB", p.B, g.dB, loss, 1e-6));
    out.push_back(centralDifferences("dC", p.C, g.dC, loss, 1e-6));
    out.push_back(centralDifferences("du", p.u, g.du, loss, 1e-6));
    out.push_back(centralDifferences("dz", p.z, g.dz, loss, 1e-6));
    out.push_back(centralDifferences("da_log", a_log, g.da_log, loss, 1e-6));
    out.push_back(centralDifferences("dd_skip", p.d_skip, g.dd_skip, loss, 1e-6));
    return out;
}

std::vector<Compare> checkConvBackward(int width) {
    Rng rng(12 + width);
    ref::ConvProblem p;
    p.batch = 2, p.steps = 5, p.channels = 3, p.width = width;
    p.x = randomVec(rng, p.batch * p.steps * p.channels, -1, 1);
    p.w = randomVec(rng, p.channels * width, -0.8, 0.8);
    p.bias = randomVec(rng, p.channels, -0.5, 0.5);
    p.history = randomVec(rng, p.batch * p.channels * (width - 1), -1, 1);
    const Vec du = randomVec(rng, p.x.size(), -1, 1);
    Vec dx, dw(p.w.size(), 0.0), db(p.bias.size(), 0.0);
    ref::convSiluBackward(p, du, dx, dw, db);
    auto loss = [&] { return dot(ref::convSilu(p).u, du); };
    return {centralDifferences("dx", p.x, dx, loss, 1e-6), centralDifferences("dw", p.w, dw, loss, 1e-6),
            centralDifferences("dbias", p.bias, db, loss, 1e-6)};
}

std::vector<Compare> checkRmsnormBackward() {
    Rng rng(13);
    const int rows = 3, d = 7;
    const double eps = 1e-5;
    Vec x = randomVec(rng, rows * d, -2, 2), w = randomVec(rng, d, 0.5, 1.5);
    const Vec dy = randomVec(rng, rows * d, -1, 1);
    Vec dx, dw(d, 0.0);
    ref::rmsnormBackward(x, rows, d, w, dy, eps, 0.0, {}, dx, dw);
    auto loss = [&] { return dot(ref::rmsnorm(x, rows, d, w, eps), dy); };
    return {centralDifferences("dx", x, dx, loss, 1e-6), centralDifferences("dw", w, dw, loss, 1e-6)};
}

std::vector<Compare> checkCrossEntropy() {
    Rng rng(14);
    const int vocab = 9;
    Vec logits = randomVec(rng, vocab, -3, 3);
    const int target = 4;
    Vec dl(vocab);
    ref::crossEntropyRow(logits.data(), vocab, target, 1.0, dl.data(), nullptr);
    auto loss = [&] { return ref::crossEntropyRow(logits.data(), vocab, target, 1.0, nullptr, nullptr); };
    return {centralDifferences("dlogits", logits, dl, loss, 1e-6)};
}

std::vector<Compare> checkHalfRounding() {
    // The bisection rounding against hand-worked bit patterns.
    struct Known { float x; int dtype; uint16_t bits; };
    const Known known[] = {
        {1.0f, DTYPE_BF16, 0x3F80},        {1.0f, DTYPE_F16, 0x3C00},
        {-2.5f, DTYPE_BF16, 0xC020},       {-2.5f, DTYPE_F16, 0xC100},
        {1.00390625f, DTYPE_BF16, 0x3F80}, // 1 + 2^-8: halfway between 0x3F80 and 0x3F81 → even 0x3F80
        {1.01171875f, DTYPE_BF16, 0x3F82}, // 1 + 3·2^-8: halfway between 0x3F81 and 0x3F82 → even 0x3F82
        {1.00048828125f, DTYPE_F16, 0x3C00},  // 1 + 2^-11: tie → 0x3C00
        {1.00146484375f, DTYPE_F16, 0x3C02},  // 1 + 3·2^-11: tie → 0x3C02
        {65504.f, DTYPE_F16, 0x7BFF},      {65519.f, DTYPE_F16, 0x7BFF},
        {65520.f, DTYPE_F16, 0x7C00},      // max + half ulp → ∞
        {5.9604644775390625e-08f, DTYPE_F16, 0x0001},  // 2^-24, the smallest subnormal
        {2.98023223876953125e-08f, DTYPE_F16, 0x0000}, // 2^-25: tie between 0 and 2^-24 → 0
        {3.0e38f, DTYPE_BF16, 0x7F62},     {3.4e38f, DTYPE_BF16, 0x7F80},
        {-0.0f, DTYPE_F16, 0x8000},
    };
    std::vector<uint16_t> got, want;
    for (const Known& k : known) {
        got.push_back(roundToHalf(k.x, k.dtype));
        want.push_back(k.bits);
    }
    std::vector<float> tf_got = {roundToTf32(1.0f + 0x1.0p-11f), roundToTf32(1.0f + 0x1.8p-10f), roundToTf32(-3.0f)};
    std::vector<float> tf_want = {1.0f, 1.0f + 0x1.0p-9f, -3.0f};
    return {bits16("known", got, want), bits("tf32", tf_got, tf_want)};
}

}  // namespace

std::vector<SelfCheck> referenceSelfChecks() {
    std::vector<SelfCheck> checks = {
        {"selfcheck.halfRounding", "hand-worked patterns", checkHalfRounding},
        {"selfcheck.scanBackward", "B=2 T=6 C=3 N=4 vs central differences", checkScanBackward},
        {"selfcheck.convBackward", "B=2 T=5 C=3 K=4 vs central differences", [] { return checkConvBackward(4); }},
        {"selfcheck.convBackward", "B=2 T=5 C=3 K=1 vs central differences", [] { return checkConvBackward(1); }},
        {"selfcheck.rmsnormBackward", "rows=3 d=7 vs central differences", checkRmsnormBackward},
        {"selfcheck.crossEntropy", "vocab=9 vs central differences", checkCrossEntropy},
    };
    for (SelfCheck& c : mamba3SelfChecks()) checks.push_back(std::move(c));
    return checks;
}

}  // namespace optest
