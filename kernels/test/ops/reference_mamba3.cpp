// The double-precision Mamba-3 SISO reference (reference_mamba3.h) and its self-checks: central differences
// of the forward for every input, and the state handoff (step by step, and split sequences).
#include "reference_mamba3.h"
#include "op_test.h"

#include <algorithm>
#include <cmath>

namespace optest {
namespace ref {

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kTwoPi = 2 * kPi;
constexpr double kEps = 1e-5;  // BCNorm and the gate norm

/** The heavy tail ht(u) = 1 + u (u ≥ 0), 1/(1 − u) (u < 0), and its derivative. */
double heavyTail(double u) { return u >= 0 ? 1 + u : 1 / (1 - u); }
double dHeavyTail(double u) { return u >= 0 ? 1 : 1 / ((1 - u) * (1 - u)); }

/** The per-(step, head) scalars of §3 step 3. */
struct HeadScalars {
    double delta, A, sig, alpha, beta, gamma;
    bool clamped;  // A is the floor −a_floor (no gradient reaches dd_A)
};

HeadScalars headScalars(const Mamba3Problem& p, const double* row, int h) {
    HeadScalars s{};
    s.delta = softplus(row[p.dtCol() + h] + p.dt_bias[h]);
    const double a = -heavyTail(row[p.aCol() + h]);
    s.clamped = !(a < -p.a_floor);
    s.A = s.clamped ? -p.a_floor : a;
    s.sig = sigmoid(row[p.trapCol() + h]);
    s.alpha = std::exp(s.A * s.delta);
    s.beta = s.alpha * s.delta * (1 - s.sig);
    s.gamma = s.sig * s.delta;
    return s;
}

/** 1/sqrt(mean(v²) + eps) over n values. */
double invRms(const double* v, int n) {
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += v[i] * v[i];
    return 1 / std::sqrt(ss / n + kEps);
}

/** B̂ (or Ĉ) of group g at one row: w ⊙ raw / rms(raw). */
Vec groupNorm(const Mamba3Problem& p, const double* row, int col, const Vec& w, int g) {
    const int N = p.d_state;
    const double* raw = row + col + g * N;
    const double rho = invRms(raw, N);
    Vec out(N);
    for (int n = 0; n < N; ++n) out[n] = w[n] * raw[n] * rho;
    return out;
}

/** Pairs (2a, 2a+1) rotated by θ[a] for a < nangles; the other dims copied. */
Vec rotate(const Vec& v, const double* theta, int nangles) {
    Vec out = v;
    for (int a = 0; a < nangles; ++a) {
        const double c = std::cos(theta[a]), s = std::sin(theta[a]);
        out[2 * a] = c * v[2 * a] - s * v[2 * a + 1];
        out[2 * a + 1] = s * v[2 * a] + c * v[2 * a + 1];
    }
    return out;
}

/** k_pre = B̂_g + b_bias[h] (or q_pre with Ĉ, c_bias). */
Vec biased(const Vec& normed, const Vec& bias, int h, int N) {
    Vec out(N);
    for (int n = 0; n < N; ++n) out[n] = normed[n] + bias[static_cast<int64_t>(h) * N + n];
    return out;
}

}  // namespace

namespace {

/** One head of one row through the steps: its state before step t for every t (kept only when asked). */
struct HeadTrace {
    Vec S, k, v, theta;  // [steps + 1][headdim·d_state], [steps + 1][d_state], [steps + 1][headdim], [steps + 1][nangles]
};

/**
 * Runs head h of row b over all steps: writes its y and out columns, its part of the final state and of the
 * checkpoints (chunk > 0) into res, and returns its per-step states when keep is set.
 */
HeadTrace runHead(const Mamba3Problem& p, int b, int h, int chunk, bool keep, Mamba3Result& res) {
    const int T = p.steps, P = p.headdim, N = p.d_state, NA = p.nangles, E = p.dInner();
    const int g = h / (p.nheads / p.ngroups), W = p.projWidth();
    const int64_t SS = p.stateSize();
    const int chunks = chunk > 0 ? (T + chunk - 1) / chunk : 0;
    const double* st0 = &p.state0[b * SS];
    Vec S(st0 + static_cast<int64_t>(h) * P * N, st0 + static_cast<int64_t>(h + 1) * P * N);
    Vec kPrev(st0 + p.kOffset() + static_cast<int64_t>(h) * N, st0 + p.kOffset() + static_cast<int64_t>(h + 1) * N);
    Vec vPrev(st0 + p.vOffset() + static_cast<int64_t>(h) * P, st0 + p.vOffset() + static_cast<int64_t>(h + 1) * P);
    Vec theta(st0 + p.angleOffset() + static_cast<int64_t>(h) * NA, st0 + p.angleOffset() + static_cast<int64_t>(h + 1) * NA);
    HeadTrace tr;
    if (keep) {
        tr.S.reserve(static_cast<size_t>(T + 1) * P * N);
        tr.k.reserve(static_cast<size_t>(T + 1) * N);
        tr.v.reserve(static_cast<size_t>(T + 1) * P);
        tr.theta.reserve(static_cast<size_t>(T + 1) * NA);
    }
    // Writes this head's state into a row state laid out like Mamba3ScanArgs.
    auto store = [&](double* row) {
        std::copy(S.begin(), S.end(), row + static_cast<int64_t>(h) * P * N);
        std::copy(kPrev.begin(), kPrev.end(), row + p.kOffset() + static_cast<int64_t>(h) * N);
        std::copy(vPrev.begin(), vPrev.end(), row + p.vOffset() + static_cast<int64_t>(h) * P);
        std::copy(theta.begin(), theta.end(), row + p.angleOffset() + static_cast<int64_t>(h) * NA);
    };
    for (int t = 0;; ++t) {
        if (keep) {
            tr.S.insert(tr.S.end(), S.begin(), S.end());
            tr.k.insert(tr.k.end(), kPrev.begin(), kPrev.end());
            tr.v.insert(tr.v.end(), vPrev.begin(), vPrev.end());
            tr.theta.insert(tr.theta.end(), theta.begin(), theta.end());
        }
        if (t == T) break;
        if (chunk > 0 && t % chunk == 0) store(&res.checkpoints[(static_cast<int64_t>(b) * chunks + t / chunk) * SS]);
        const int64_t r = static_cast<int64_t>(b) * T + t;
        const double* row = &p.proj[r * W];
        const HeadScalars s = headScalars(p, row, h);
        // θ ← wrap_2π(θ + π·tanh(angles)·Δ)
        for (int a = 0; a < NA; ++a) {
            const double th = theta[a] + kPi * std::tanh(row[p.angleCol() + a]) * s.delta;
            theta[a] = th - kTwoPi * std::floor(th / kTwoPi);
        }
        const Vec k = rotate(biased(groupNorm(p, row, p.bCol(), p.b_norm, g), p.b_bias, h, N), theta.data(), NA);
        const Vec q = rotate(biased(groupNorm(p, row, p.cCol(), p.c_norm, g), p.c_bias, h, N), theta.data(), NA);
        const double* x = row + p.xCol() + h * P;
        // S = α·S + β·v_prev ⊗ k_prev + γ·x ⊗ k
        for (int i = 0; i < P; ++i)
            for (int n = 0; n < N; ++n)
                S[i * N + n] = s.alpha * S[i * N + n] + s.beta * vPrev[i] * kPrev[n] + s.gamma * x[i] * k[n];
        kPrev = k;
        vPrev.assign(x, x + P);
        // y = S·q + D·x
        double* y = &res.y[r * E + h * P];
        for (int i = 0; i < P; ++i) {
            double acc = p.d_skip[h] * x[i];
            for (int n = 0; n < N; ++n) acc += S[i * N + n] * q[n];
            y[i] = acc;
        }
        // the gate: y ⊙ SiLU(z), or RMSNormGated over the head (norm before gate)
        const double* z = row + p.zCol() + h * P;
        double* out = &res.out[r * E + h * P];
        if (p.gate_norm.empty()) {
            for (int i = 0; i < P; ++i) out[i] = y[i] * silu(z[i]);
        } else {
            const double rho = invRms(y, P);
            for (int i = 0; i < P; ++i) out[i] = p.gate_norm[h * P + i] * y[i] * rho * silu(z[i]);
        }
    }
    store(&res.state[b * SS]);
    return tr;
}

Mamba3Result emptyResult(const Mamba3Problem& p, int chunk) {
    Mamba3Result res;
    res.out.assign(static_cast<size_t>(p.rows() * p.dInner()), 0.0);
    res.y = res.out;
    res.state.assign(static_cast<size_t>(p.batch * p.stateSize()), 0.0);
    if (chunk > 0) res.checkpoints.assign(static_cast<size_t>(p.batch) * ((p.steps + chunk - 1) / chunk) * p.stateSize(), 0.0);
    return res;
}

}  // namespace

Mamba3Result mamba3Scan(const Mamba3Problem& p, int chunk) {
    Mamba3Result res = emptyResult(p, chunk);
    for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.nheads; ++h) runHead(p, b, h, chunk, false, res);
    return res;
}

Mamba3Grads mamba3ScanBackward(const Mamba3Problem& p, const Vec& dout) {
    const int T = p.steps, H = p.nheads, P = p.headdim, N = p.d_state, NA = p.nangles, E = p.dInner();
    const int G = p.ngroups, headsPerGroup = H / G, W = p.projWidth();
    const int64_t R = p.rows();
    Mamba3Result fwd = emptyResult(p, 0);
    Mamba3Grads g;
    g.dproj.assign(static_cast<size_t>(R * W), 0.0);
    g.d_dt_bias.assign(H, 0.0);
    g.d_d_skip.assign(H, 0.0);
    g.d_b_bias.assign(static_cast<size_t>(H) * N, 0.0);
    g.d_c_bias = g.d_b_bias;
    g.d_b_norm.assign(N, 0.0);
    g.d_c_norm.assign(N, 0.0);
    if (!p.gate_norm.empty()) g.d_gate_norm.assign(static_cast<size_t>(E), 0.0);
    // ∂L/∂B̂, ∂L/∂Ĉ per row and group: summed over the group's heads, then through BCNorm at the end.
    Vec dBhat(static_cast<size_t>(R * G * N), 0.0), dChat(dBhat.size(), 0.0);

    for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < H; ++h) {
            const int grp = h / headsPerGroup;
            const HeadTrace tr = runHead(p, b, h, 0, true, fwd);
            Vec Gs(static_cast<size_t>(P) * N, 0.0);  // ∂L/∂S_t, carried backwards
            Vec kappa(N, 0.0);                         // ∂L/∂k_t through step t+1's β term
            Vec dxNext(P, 0.0);                        // ∂L/∂x_t through step t+1's β term
            Vec phi(NA, 0.0);                          // Σ_{s ≥ t} ∂L/∂θ_s
            for (int t = T - 1; t >= 0; --t) {
                const int64_t r = static_cast<int64_t>(b) * T + t;
                const double* row = &p.proj[r * W];
                double* drow = &g.dproj[r * W];
                const double* Sprev = &tr.S[static_cast<int64_t>(t) * P * N];
                const double* Scur = &tr.S[static_cast<int64_t>(t + 1) * P * N];
                const double* kPrev = &tr.k[static_cast<int64_t>(t) * N];
                const double* vPrev = &tr.v[static_cast<int64_t>(t) * P];
                const double* theta = &tr.theta[static_cast<int64_t>(t + 1) * NA];  // θ_t (this step's)
                const HeadScalars s = headScalars(p, row, h);
                const Vec kPre = biased(groupNorm(p, row, p.bCol(), p.b_norm, grp), p.b_bias, h, N);
                const Vec qPre = biased(groupNorm(p, row, p.cCol(), p.c_norm, grp), p.c_bias, h, N);
                const Vec k = rotate(kPre, theta, NA), q = rotate(qPre, theta, NA);
                const double* x = row + p.xCol() + h * P;
                const double* z = row + p.zCol() + h * P;
                const double* y = &fwd.y[r * E + h * P];
                const double* dg = &dout[r * E + h * P];

                // The gate.
                Vec dy(P);
                if (p.gate_norm.empty()) {
                    for (int i = 0; i < P; ++i) {
                        dy[i] = dg[i] * silu(z[i]);
                        drow[p.zCol() + h * P + i] = dg[i] * y[i] * dsilu(z[i]);
                    }
                } else {
                    const double* w = &p.gate_norm[h * P];
                    const double rho = invRms(y, P);
                    double mean = 0;  // mean(w ⊙ e ⊙ ŷ), e = dg ⊙ SiLU(z)
                    for (int i = 0; i < P; ++i) mean += w[i] * dg[i] * silu(z[i]) * rho * y[i];
                    mean /= P;
                    for (int i = 0; i < P; ++i) {
                        const double yhat = rho * y[i], e = dg[i] * silu(z[i]);
                        drow[p.zCol() + h * P + i] = dg[i] * yhat * w[i] * dsilu(z[i]);
                        g.d_gate_norm[h * P + i] += e * yhat;
                        dy[i] = rho * (w[i] * e - yhat * mean);
                    }
                }
                for (int i = 0; i < P; ++i) g.d_d_skip[h] += dy[i] * x[i];

                // The recurrence at step t.
                for (int i = 0; i < P; ++i)
                    for (int n = 0; n < N; ++n) Gs[i * N + n] += dy[i] * q[n];
                Vec dq(N, 0.0), dk = kappa, dx(P);
                for (int n = 0; n < N; ++n)
                    for (int i = 0; i < P; ++i) dq[n] += dy[i] * Scur[i * N + n];
                double dAlpha = 0, dBeta = 0, dGamma = 0;
                for (int i = 0; i < P; ++i) {
                    double gk = 0, gkPrev = 0;
                    for (int n = 0; n < N; ++n) {
                        gk += Gs[i * N + n] * k[n];
                        gkPrev += Gs[i * N + n] * kPrev[n];
                        dAlpha += Gs[i * N + n] * Sprev[i * N + n];
                    }
                    dx[i] = p.d_skip[h] * dy[i] + s.gamma * gk + dxNext[i];
                    dxNext[i] = s.beta * gkPrev;  // reaches x_{t−1} (v_prev); dropped at t = 0
                    dBeta += vPrev[i] * gkPrev;
                    dGamma += x[i] * gk;
                }
                for (int n = 0; n < N; ++n) {
                    double gx = 0, gv = 0;
                    for (int i = 0; i < P; ++i) {
                        gx += Gs[i * N + n] * x[i];
                        gv += Gs[i * N + n] * vPrev[i];
                    }
                    dk[n] += s.gamma * gx;
                    kappa[n] = s.beta * gv;  // reaches k_{t−1} (k_prev); dropped at t = 0
                }
                for (double& v : Gs) v *= s.alpha;
                for (int i = 0; i < P; ++i) drow[p.xCol() + h * P + i] = dx[i];

                // RoPE: back to k_pre, q_pre, and θ_t.
                Vec dkPre = dk, dqPre = dq;
                for (int a = 0; a < NA; ++a) {
                    const double c = std::cos(theta[a]), sn = std::sin(theta[a]);
                    dkPre[2 * a] = c * dk[2 * a] + sn * dk[2 * a + 1];
                    dkPre[2 * a + 1] = -sn * dk[2 * a] + c * dk[2 * a + 1];
                    dqPre[2 * a] = c * dq[2 * a] + sn * dq[2 * a + 1];
                    dqPre[2 * a + 1] = -sn * dq[2 * a] + c * dq[2 * a + 1];
                    const double dTheta = dk[2 * a] * (-sn * kPre[2 * a] - c * kPre[2 * a + 1]) +
                                          dk[2 * a + 1] * (c * kPre[2 * a] - sn * kPre[2 * a + 1]) +
                                          dq[2 * a] * (-sn * qPre[2 * a] - c * qPre[2 * a + 1]) +
                                          dq[2 * a + 1] * (c * qPre[2 * a] - sn * qPre[2 * a + 1]);
                    phi[a] += dTheta;
                }
                for (int n = 0; n < N; ++n) {
                    g.d_b_bias[static_cast<int64_t>(h) * N + n] += dkPre[n];
                    g.d_c_bias[static_cast<int64_t>(h) * N + n] += dqPre[n];
                    dBhat[(r * G + grp) * N + n] += dkPre[n];
                    dChat[(r * G + grp) * N + n] += dqPre[n];
                }

                // The angle inputs: θ_s for s ≥ t all contain this step's increment π·tanh(angles)·Δ.
                double dDelta = 0;
                for (int a = 0; a < NA; ++a) {
                    const double th = std::tanh(row[p.angleCol() + a]);
                    drow[p.angleCol() + a] += phi[a] * kPi * s.delta * (1 - th * th);
                    dDelta += phi[a] * kPi * th;
                }

                // Δ, A, σ.
                const double dAD = dAlpha * s.alpha + dBeta * s.beta;  // ∂L/∂(A·Δ)
                dDelta += dAD * s.A + dBeta * s.alpha * (1 - s.sig) + dGamma * s.sig;
                const double dSig = (dGamma - dBeta * s.alpha) * s.delta;
                const double dA = dAD * s.delta;
                const double ddt = dDelta * dsoftplus(row[p.dtCol() + h] + p.dt_bias[h]);
                drow[p.dtCol() + h] = ddt;
                drow[p.aCol() + h] = s.clamped ? 0.0 : -dA * dHeavyTail(row[p.aCol() + h]);
                drow[p.trapCol() + h] = dSig * s.sig * (1 - s.sig);
                g.d_dt_bias[h] += ddt;
            }
        }

    // BCNorm: per row and group, an RMSNorm over d_state with the shared weights.
    Vec rawB(static_cast<size_t>(R * G * N)), rawC(rawB.size());
    for (int64_t r = 0; r < R; ++r)
        for (int j = 0; j < G * N; ++j) {
            rawB[r * G * N + j] = p.proj[r * W + p.bCol() + j];
            rawC[r * G * N + j] = p.proj[r * W + p.cCol() + j];
        }
    Vec dB, dC;
    rmsnormBackward(rawB, R * G, N, p.b_norm, dBhat, kEps, 0.0, {}, dB, g.d_b_norm);
    rmsnormBackward(rawC, R * G, N, p.c_norm, dChat, kEps, 0.0, {}, dC, g.d_c_norm);
    for (int64_t r = 0; r < R; ++r)
        for (int j = 0; j < G * N; ++j) {
            g.dproj[r * W + p.bCol() + j] = dB[r * G * N + j];
            g.dproj[r * W + p.cCol() + j] = dC[r * G * N + j];
        }
    return g;
}

}  // namespace ref

// ---------------------------------------------------------------- self-checks

namespace {

using ref::Mamba3Problem;
using ref::Vec;

struct Shape {
    int batch, steps, nheads, headdim, d_state, ngroups, nangles;
    bool gateNorm;
    double a_floor;
};

Vec randomVec(Rng& rng, size_t n, double lo, double hi) {
    Vec v(n);
    for (auto& x : v) x = rng.uniform(lo, hi);
    return v;
}

/**
 * Inputs where every path matters: Δ large enough (≈0.2 .. 1.5) that the angles cross 2π within a few steps,
 * incoming θ just below 2π, nonzero incoming S, k, v; one dd_dt above softplus's threshold; dd_A on both
 * sides of 0 and (with a large a_floor) some heads on the floor.
 */
Mamba3Problem selfCheckProblem(const Shape& s, uint64_t seed) {
    Rng rng(seed);
    Mamba3Problem p;
    p.batch = s.batch, p.steps = s.steps, p.nheads = s.nheads, p.headdim = s.headdim, p.d_state = s.d_state;
    p.ngroups = s.ngroups, p.nangles = s.nangles, p.a_floor = s.a_floor;
    const int W = p.projWidth(), H = p.nheads, N = p.d_state;
    p.proj.resize(static_cast<size_t>(p.rows() * W));
    for (int64_t r = 0; r < p.rows(); ++r) {
        double* row = &p.proj[r * W];
        for (int j = 0; j < W; ++j) {
            double lo = -1, hi = 1;
            if (j < p.xCol()) lo = -3, hi = 3;                              // z
            else if (j >= p.aCol() && j < p.trapCol()) lo = -3, hi = 2;     // dd_A
            else if (j >= p.trapCol() && j < p.angleCol()) lo = -3, hi = 3; // trap
            else if (j >= p.angleCol()) lo = -2, hi = 2;                    // angles
            row[j] = rng.uniform(lo, hi);
        }
    }
    p.proj[p.dtCol()] = 25.0;  // row 0, head 0: above softplus's threshold
    p.dt_bias = randomVec(rng, H, -1.0, 0.5);
    p.b_bias = randomVec(rng, static_cast<size_t>(H) * N, 0.5, 1.5);
    p.c_bias = randomVec(rng, static_cast<size_t>(H) * N, 0.5, 1.5);
    p.b_norm = randomVec(rng, N, 0.5, 1.5);
    p.c_norm = randomVec(rng, N, 0.5, 1.5);
    p.d_skip = randomVec(rng, H, 0.5, 1.5);
    if (s.gateNorm) p.gate_norm = randomVec(rng, static_cast<size_t>(p.dInner()), 0.5, 1.5);
    p.state0 = randomVec(rng, static_cast<size_t>(p.batch * p.stateSize()), -1, 1);
    for (int b = 0; b < p.batch; ++b)
        for (int64_t i = p.angleOffset(); i < p.stateSize(); ++i) p.state0[b * p.stateSize() + i] = rng.uniform(5.9, 6.28);
    return p;
}

/** max |analytic − fd| / max |fd| over the listed entries. */
Compare compareSubset(const std::string& what, const Vec& analytic, const Vec& fd, const std::vector<int64_t>& idx, double tol) {
    double err = 0, mx = 0;
    for (int64_t i : idx) {
        err = std::max(err, std::fabs(analytic[i] - fd[i]));
        mx = std::max(mx, std::fabs(fd[i]));
    }
    return Compare{what, "nmax", mx > 0 ? err / mx : err, tol};
}

template <class Loss>
Vec centralDifference(Vec& x, Loss loss) {
    const double h = 1e-6;
    Vec d(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        const double saved = x[i];
        x[i] = saved + h;
        const double up = loss();
        x[i] = saved - h;
        const double down = loss();
        x[i] = saved;
        d[i] = (up - down) / (2 * h);
    }
    return d;
}

std::vector<int64_t> all(size_t n) {
    std::vector<int64_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<int64_t>(i);
    return v;
}

double dot(const Vec& a, const Vec& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

constexpr double kTolFd = 1e-6;

std::vector<Compare> checkBackward(const Shape& s, uint64_t seed) {
    Mamba3Problem p = selfCheckProblem(s, seed);
    Rng rng(seed + 100);
    const Vec dout = randomVec(rng, static_cast<size_t>(p.rows() * p.dInner()), -1, 1);
    const ref::Mamba3Grads g = ref::mamba3ScanBackward(p, dout);
    auto loss = [&] { return dot(ref::mamba3Scan(p).out, dout); };
    std::vector<Compare> out;
    // in_proj output, field by field.
    const Vec fdProj = centralDifference(p.proj, loss);
    const int W = p.projWidth();
    const struct { const char* name; int c0, c1; } fields[] = {
        {"dz", p.zCol(), p.xCol()},          {"dx", p.xCol(), p.bCol()},        {"dB", p.bCol(), p.cCol()},
        {"dC", p.cCol(), p.dtCol()},         {"ddd_dt", p.dtCol(), p.aCol()},   {"ddd_A", p.aCol(), p.trapCol()},
        {"dtrap", p.trapCol(), p.angleCol()}, {"dangles", p.angleCol(), W}};
    for (const auto& f : fields) {
        if (f.c0 == f.c1) continue;
        std::vector<int64_t> idx;
        for (int64_t r = 0; r < p.rows(); ++r)
            for (int j = f.c0; j < f.c1; ++j) idx.push_back(r * W + j);
        out.push_back(compareSubset(f.name, g.dproj, fdProj, idx, kTolFd));
    }
    auto param = [&](const char* name, Vec& x, const Vec& analytic) {
        out.push_back(compareSubset(name, analytic, centralDifference(x, loss), all(x.size()), kTolFd));
    };
    param("d_dt_bias", p.dt_bias, g.d_dt_bias);
    param("d_b_bias", p.b_bias, g.d_b_bias);
    param("d_c_bias", p.c_bias, g.d_c_bias);
    param("d_b_norm", p.b_norm, g.d_b_norm);
    param("d_c_norm", p.c_norm, g.d_c_norm);
    param("d_d_skip", p.d_skip, g.d_d_skip);
    if (s.gateNorm) param("d_gate_norm", p.gate_norm, g.d_gate_norm);
    return out;
}

/** The rows t0 ≤ t < t1 of every batch row as their own problem, starting from `state`. */
Mamba3Problem stepRange(const Mamba3Problem& p, int t0, int t1, const Vec& state) {
    Mamba3Problem q = p;
    const int W = p.projWidth();
    q.steps = t1 - t0;
    q.proj.clear();
    for (int b = 0; b < p.batch; ++b)
        q.proj.insert(q.proj.end(), p.proj.begin() + (static_cast<int64_t>(b) * p.steps + t0) * W,
                      p.proj.begin() + (static_cast<int64_t>(b) * p.steps + t1) * W);
    q.state0 = state;
    return q;
}

/** Calls over [0, T) cut at `cuts` (each carrying the state) against one call: out and the final state. */
std::vector<Compare> checkHandoff(const Shape& s, uint64_t seed, const std::vector<int>& cuts) {
    const Mamba3Problem p = selfCheckProblem(s, seed);
    const ref::Mamba3Result whole = ref::mamba3Scan(p);
    const int E = p.dInner();
    Vec state = p.state0, joined(whole.out.size());
    int t0 = 0;
    for (size_t c = 0; c <= cuts.size(); ++c) {
        const int t1 = c < cuts.size() ? cuts[c] : p.steps;
        const ref::Mamba3Result part = ref::mamba3Scan(stepRange(p, t0, t1, state));
        for (int b = 0; b < p.batch; ++b)
            for (int t = t0; t < t1; ++t)
                for (int j = 0; j < E; ++j)
                    joined[(static_cast<int64_t>(b) * p.steps + t) * E + j] =
                        part.out[(static_cast<int64_t>(b) * (t1 - t0) + (t - t0)) * E + j];
        state = part.state;
        t0 = t1;
    }
    const Vec& want = whole.state;
    auto cmp = [](const std::string& what, const Vec& got, const Vec& ref) {
        double err = 0, mx = 0;
        for (size_t i = 0; i < got.size(); ++i) {
            err = std::max(err, std::fabs(got[i] - ref[i]));
            mx = std::max(mx, std::fabs(ref[i]));
        }
        return Compare{what, "nmax", mx > 0 ? err / mx : err, 1e-12};
    };
    return {cmp("out", joined, whole.out), cmp("state", state, want)};
}

}  // namespace

std::vector<SelfCheck> mamba3SelfChecks() {
    // batch, steps, nheads, headdim, d_state, ngroups, nangles, gate norm, a_floor
    const Shape odd{2, 7, 4, 3, 6, 2, 1, true, 1e-4};         // ngroups 2, odd nangles, gate norm
    const Shape full{1, 6, 2, 2, 4, 1, 2, false, 1e-4};       // rope_fraction 1: nangles = d_state/2
    // headdim 1, d_state 2, A on the floor. (A gate norm over one value is ≈ sign(y): its gradient is ~eps/y², all
    // cancellation, which central differences cannot resolve — the gate norm is checked on the other shapes.)
    const Shape floorHit{1, 6, 3, 1, 2, 3, 1, false, 0.3};
    const Shape noRope{2, 4, 2, 2, 1, 1, 0, false, 1e-4};     // d_state 1: no angles
    const Shape wide{1, 9, 2, 4, 8, 2, 3, true, 1e-4};
    return {
        {"selfcheck.mamba3Backward", "B=2 T=7 H=4 P=3 N=6 G=2 A=1 gatenorm vs central differences", [=] { return checkBackward(odd, 21); }},
        {"selfcheck.mamba3Backward", "B=1 T=6 H=2 P=2 N=4 G=1 A=2 (rope 1) vs central differences", [=] { return checkBackward(full, 22); }},
        {"selfcheck.mamba3Backward", "B=1 T=6 H=3 P=1 N=2 G=3 A=1 a_floor=0.3 vs central differences",
         [=] { return checkBackward(floorHit, 23); }},
        {"selfcheck.mamba3Backward", "B=2 T=4 H=2 P=2 N=1 G=1 A=0 vs central differences", [=] { return checkBackward(noRope, 24); }},
        {"selfcheck.mamba3Backward", "B=1 T=9 H=2 P=4 N=8 G=2 A=3 gatenorm vs central differences", [=] { return checkBackward(wide, 25); }},
        {"selfcheck.mamba3Handoff", "B=2 T=7 H=4 P=3 N=6 G=2 A=1: 7 one-step calls == one call",
         [=] { return checkHandoff(odd, 26, {1, 2, 3, 4, 5, 6}); }},
        {"selfcheck.mamba3Handoff", "B=1 T=9 H=2 P=4 N=8 G=2 A=3: 4 + 5 == 9", [=] { return checkHandoff(wide, 27, {4}); }},
    };
}

}  // namespace optest
