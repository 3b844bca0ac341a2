// A deliberately plain backend in f32 loops (host memory, one thread): `op_test --backend ref` runs the
// whole table on it. It exists to prove the harness — that the cases, layouts and tolerances are right for
// a straightforward f32 implementation of ops.h — independently of the real backends.
#include "ops/optimizer_control.h"
#include "op_test.h"
#include "core/errors.h"
#include "core/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <vector>

namespace optest {
namespace {

float sigm(float x) { return 1.f / (1.f + std::exp(-x)); }
float siluf(float x) { return x * sigm(x); }
float dsiluf(float x) {
    const float s = sigm(x);
    return s * (1.f + x * (1.f - s));
}
float softplusf(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }

uint16_t toBf16(float x) {
    uint32_t b = floatBits(x);
    if (std::isnan(x)) return static_cast<uint16_t>((b >> 16) | 0x40);
    b += 0x7FFFu + ((b >> 16) & 1u);  // round to nearest even on the dropped 16 bits
    return static_cast<uint16_t>(b >> 16);
}
float fromBf16(uint16_t h) {
    const uint32_t b = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}
uint16_t toF16(float x) {
    const _Float16 h = static_cast<_Float16>(x);  // the compiler's conversion rounds to nearest even
    uint16_t b;
    std::memcpy(&b, &h, 2);
    return b;
}
float fromF16(uint16_t b) {
    _Float16 h;
    std::memcpy(&h, &b, 2);
    return static_cast<float>(h);
}

class RefOps final : public Ops {
public:
    Capabilities capabilities() const override {
        Capabilities c;
        c.host = c.training = c.lowp_storage = true;
        return c;
    }
    float* alloc(int64_t n) override {
        auto* p = static_cast<float*>(std::calloc(static_cast<size_t>(std::max<int64_t>(n, 1)), sizeof(float)));
        if (!p) throw OutOfMemoryError("refops");
        return p;
    }
    void release(float* p) noexcept override { std::free(p); }
    void upload(float* dst, const float* host, int64_t n) override { copy(dst, host, n); }
    void download(float* host, const float* src, int64_t n) override { copy(host, src, n); }
    void copy(float* dst, const float* src, int64_t n) override { std::memmove(dst, src, static_cast<size_t>(n) * 4); }
    void zero(float* p, int64_t n) override { std::memset(p, 0, static_cast<size_t>(n) * 4); }

    static float weight(const Matrix& m, int64_t i) {
        if (m.dtype == DTYPE_BF16 || m.dtype == DTYPE_F16) {
            if (!m.lowp) return m.f32[i];
            const uint16_t b = static_cast<const uint16_t*>(m.lowp)[i];
            return m.dtype == DTYPE_BF16 ? fromBf16(b) : fromF16(b);
        }
        return m.f32[i];
    }

    void gemm(const Gemm& g) override {
        if (g.a16 && g.kind == GemmKind::Forward) return gemmWidened(g);
        // (no rounded operands here: Ops::linearBackward widens a16 / b16 before it calls gemm)
        if (g.a16 || g.b16 || g.keep16) throw std::invalid_argument("refops: rounded operands are not taken");
        const int out = g.w.out, in = g.w.in;
        switch (g.kind) {
            case GemmKind::Forward:
                for (int64_t r = 0; r < g.rows; ++r)
                    for (int o = 0; o < out; ++o) {
                        float s = g.bias ? g.bias[o] : 0.f;
                        for (int i = 0; i < in; ++i) s += g.a[r * g.lda + i] * weight(g.w, static_cast<int64_t>(o) * in + i);
                        float& y = g.c[r * g.ldc + o];
                        y = g.beta == 0.f ? s : g.beta * y + s;
                    }
                break;
            case GemmKind::BackwardData:
                if (!g.w.f32) throw std::invalid_argument("refops: BackwardData needs the f32 weight");
                for (int64_t r = 0; r < g.rows; ++r)
                    for (int i = 0; i < in; ++i) {
                        float s = 0.f;
                        for (int o = 0; o < out; ++o) s += g.a[r * g.lda + o] * g.w.f32[static_cast<int64_t>(o) * in + i];
                        float& dx = g.c[r * g.ldc + i];
                        dx = g.beta == 0.f ? s : g.beta * dx + s;
                    }
                break;
            case GemmKind::WeightGrad:
                for (int o = 0; o < out; ++o) {
                    for (int i = 0; i < in; ++i) {
                        float s = 0.f;
                        for (int64_t r = 0; r < g.rows; ++r) s += g.a[r * g.lda + o] * g.b[r * g.ldb + i];
                        g.c[static_cast<int64_t>(o) * in + i] += s;
                    }
                    if (g.dbias) {
                        float s = 0.f;
                        for (int64_t r = 0; r < g.rows; ++r) s += g.a[r * g.lda + o];
                        g.dbias[o] += s;
                    }
                }
                break;
        }
    }

    void rmsnorm(const RmsNormArgs& a) override {
        checkRmsNormOutputs(a);
        for (int64_t r = 0; r < a.rows; ++r) {
            const float* x = a.x + r * a.ldx;
            float ss = 0.f;
            for (int j = 0; j < a.d; ++j) ss += x[j] * x[j];
            const float rho = 1.f / std::sqrt(ss / a.d + a.eps);
            for (int j = 0; j < a.d; ++j) store(a.y, a.ldy, a.y16, r, j, a.w[j] * x[j] * rho);
        }
    }

    void embed(const Matrix& t, const int32_t* ids, int64_t rows, float* out) override {
        for (int64_t r = 0; r < rows; ++r)
            for (int j = 0; j < t.in; ++j) out[r * t.in + j] = weight(t, static_cast<int64_t>(ids[r]) * t.in + j);
    }

    void negExp(const float* a_log, float* a, int64_t n) override {
        for (int64_t i = 0; i < n; ++i) a[i] = -std::exp(a_log[i]);
    }

    void toLowPrecision(const float* src, void* dst, int64_t n, int dtype) override {
        auto* d = static_cast<uint16_t*>(dst);
        for (int64_t i = 0; i < n; ++i) d[i] = dtype == DTYPE_BF16 ? toBf16(src[i]) : toF16(src[i]);
    }
    void fromLowPrecision(const void* src, int dtype, float* dst, int64_t n) override {
        const auto* s = static_cast<const uint16_t*>(src);
        for (int64_t i = 0; i < n; ++i) dst[i] = dtype == DTYPE_BF16 ? fromBf16(s[i]) : fromF16(s[i]);
    }

    void convSilu(const ConvArgs& c) override {
        checkConvOutputs(c);
        const int K = c.width, H = K - 1;
        std::vector<float> next(static_cast<size_t>(std::max(H, 1)));
        for (int b = 0; b < c.batch; ++b)
            for (int d = 0; d < c.channels; ++d) {
                float* hist = c.history + b * c.history_stride + static_cast<int64_t>(d) * H;
                auto in = [&](int s) { return s >= 0 ? c.x[(static_cast<int64_t>(b) * c.steps + s) * c.ldx + d] : hist[H + s]; };
                for (int t = 0; t < c.steps; ++t) {
                    float acc = c.bias[d];
                    for (int k = 0; k < K; ++k) acc += c.w[static_cast<int64_t>(d) * K + k] * in(t - H + k);
                    const int64_t r = static_cast<int64_t>(b) * c.steps + t;
                    c.u[r * c.ldu + d] = siluf(acc);
                    if (c.u16.data) store(nullptr, 0, c.u16, r, d, c.u[r * c.ldu + d]);
                }
                for (int i = 0; i < H; ++i) next[i] = in(c.steps - H + i);
                for (int i = 0; i < H; ++i) hist[i] = next[i];
            }
    }

    void selectiveScan(const ScanArgs& s, const Gemm* dtProj, const ScanCheckpoints* ck) override {
        checkScanOutputs(s);
        if (dtProj) gemm(*dtProj);
        const int T = s.steps, C = s.channels, N = s.d_state;
        const int chunks = ck ? (T + ck->chunk - 1) / ck->chunk : 0;
        for (int b = 0; b < s.batch; ++b)
            for (int d = 0; d < C; ++d) {
                float* h = s.h + b * s.h_stride + static_cast<int64_t>(d) * N;
                for (int t = 0; t < T; ++t) {
                    if (ck && t % ck->chunk == 0)
                        std::copy(h, h + N, ck->data + ((static_cast<int64_t>(b) * chunks + t / ck->chunk) * C + d) * N);
                    const int64_t r = static_cast<int64_t>(b) * T + t;
                    const float delta = softplusf(s.dt[r * C + d] + (s.dt_bias ? s.dt_bias[d] : 0.f)), u = s.u[r * C + d];
                    float y = s.d_skip[d] * u;
                    for (int n = 0; n < N; ++n) {
                        h[n] = std::exp(delta * s.a[static_cast<int64_t>(d) * N + n]) * h[n] + delta * u * s.bc[r * s.ldbc + n];
                        y += h[n] * s.bc[r * s.ldbc + N + n];
                    }
                    store(s.out, C, s.out16, r, d, y * siluf(s.z[r * s.ldz + d]));
                }
            }
    }

    void rmsnormBackward(const RmsNormBackwardArgs& a) override {
        for (int64_t r = 0; r < a.rows; ++r) {
            const float* x = a.x + r * a.ldx;
            const float* dy = a.dy + r * a.lddy;
            float ss = 0.f;
            for (int j = 0; j < a.d; ++j) ss += x[j] * x[j];
            const float rho = 1.f / std::sqrt(ss / a.d + a.eps);
            float m = 0.f;
            for (int j = 0; j < a.d; ++j) m += a.w[j] * dy[j] * x[j] * rho;
            m /= a.d;
            for (int j = 0; j < a.d; ++j) {
                float& dx = a.dx[r * a.lddx + j];
                const float v = rho * (a.w[j] * dy[j] - x[j] * rho * m);
                dx = a.beta == 0.f ? v : a.beta * dx + v;
                a.dw[j] += dy[j] * x[j] * rho;
            }
        }
    }

    /** Element (r, d) of an output that may come rounded (Rounded16). */
    static void store(float* f32, int64_t ld, const Rounded16& r16, int64_t r, int d, float v) {
        if (f32) f32[r * ld + d] = v;
        else static_cast<uint16_t*>(r16.data)[r * r16.ld + d] = r16.dtype == DTYPE_BF16 ? toBf16(v) : toF16(v);
    }

    void convSiluBackward(const ConvBackwardArgs& c) override {
        checkConvBackwardOutputs(c);
        const int K = c.width, H = K - 1, T = c.steps;
        std::vector<float> dc(static_cast<size_t>(T));
        for (int b = 0; b < c.batch; ++b)
            for (int d = 0; d < c.channels; ++d) {
                const float* hist = c.history + b * c.history_stride + static_cast<int64_t>(d) * H;
                auto in = [&](int s) { return s >= 0 ? c.x[(static_cast<int64_t>(b) * T + s) * c.ldx + d] : hist[H + s]; };
                const float* w = c.w + static_cast<int64_t>(d) * K;
                for (int t = 0; t < T; ++t) {
                    float acc = c.bias[d];
                    for (int k = 0; k < K; ++k) acc += w[k] * in(t - H + k);
                    dc[t] = c.du[(static_cast<int64_t>(b) * T + t) * c.ldu + d] * dsiluf(acc);
                    c.dbias[d] += dc[t];
                    for (int k = 0; k < K; ++k) c.dw[static_cast<int64_t>(d) * K + k] += dc[t] * in(t - H + k);
                }
                // inputs s < 0 are the starting history; the end history holds the inputs s ≥ T − H
                for (int s = c.dhistory ? -H : 0; s < T; ++s) {
                    float acc = 0.f;
                    for (int k = 0; k < K; ++k)
                        if (s + H - k >= 0 && s + H - k < T) acc += w[k] * dc[s + H - k];
                    if (c.dhistory_end && s >= T - H)
                        acc += c.dhistory_end[b * c.dhistory_stride + static_cast<int64_t>(d) * H + s - (T - H)];
                    if (s >= 0)
                        store(c.dx, c.lddx, c.dx16, static_cast<int64_t>(b) * T + s, d, acc);
                    else
                        c.dhistory[b * c.dhistory_stride + static_cast<int64_t>(d) * H + H + s] = acc;
                }
            }
    }

    // ---- Mamba-3 SISO: the whole row state advanced one step at a time (M3Step), all heads in order ----
    struct M3Head {
        float delta, A, sig, alpha, beta, gamma;
        bool clamped;
    };
    static M3Head m3Head(const Mamba3ScanArgs& s, const float* row, int h) {
        M3Head v;
        v.delta = softplusf(row[s.dtCol() + h] + s.dt_bias[h]);
        const float u = row[s.aCol() + h];
        const float a = -(u >= 0.f ? 1.f + u : 1.f / (1.f - u));
        v.clamped = !(a < -s.a_floor);
        v.A = v.clamped ? -s.a_floor : a;
        v.sig = sigm(row[s.trapCol() + h]);
        v.alpha = std::exp(v.A * v.delta);
        v.beta = v.alpha * v.delta * (1.f - v.sig);
        v.gamma = v.sig * v.delta;
        return v;
    }
    /** k_pre or q_pre of head h: BCNorm of its group plus the head's bias. */
    static std::vector<float> m3Pre(const Mamba3ScanArgs& s, const float* row, int col, const float* w, const float* bias, int h) {
        const int N = s.d_state;
        const float* raw = row + col + (h / (s.nheads / s.ngroups)) * N;
        float ss = 0.f;
        for (int n = 0; n < N; ++n) ss += raw[n] * raw[n];
        const float rho = 1.f / std::sqrt(ss / N + 1e-5f);
        std::vector<float> v(N);
        for (int n = 0; n < N; ++n) v[n] = w[n] * raw[n] * rho + bias[static_cast<int64_t>(h) * N + n];
        return v;
    }
    static std::vector<float> m3Rotate(const std::vector<float>& v, const float* theta, int NA) {
        std::vector<float> o = v;
        for (int a = 0; a < NA; ++a) {
            const float c = std::cos(theta[a]), sn = std::sin(theta[a]);
            o[2 * a] = c * v[2 * a] - sn * v[2 * a + 1];
            o[2 * a + 1] = sn * v[2 * a] + c * v[2 * a + 1];
        }
        return o;
    }
    /** One step of every head of one row: st advanced in place, y (before the gate) and out written. */
    static void m3Step(const Mamba3ScanArgs& s, const float* row, float* st, float* y, float* out) {
        const int P = s.headdim, N = s.d_state, NA = s.nangles;
        for (int h = 0; h < s.nheads; ++h) {
            const M3Head v = m3Head(s, row, h);
            float* S = st + static_cast<int64_t>(h) * P * N;
            float* kp = st + s.kOffset() + static_cast<int64_t>(h) * N;
            float* vp = st + s.vOffset() + static_cast<int64_t>(h) * P;
            float* th = st + s.angleOffset() + static_cast<int64_t>(h) * NA;
            for (int a = 0; a < NA; ++a) {
                float x = th[a] + 3.14159265f * std::tanh(row[s.angleCol() + a]) * v.delta;
                th[a] = x - 6.28318531f * std::floor(x / 6.28318531f);
            }
            const std::vector<float> k = m3Rotate(m3Pre(s, row, s.bCol(), s.b_norm, s.b_bias, h), th, NA);
            const std::vector<float> q = m3Rotate(m3Pre(s, row, s.cCol(), s.c_norm, s.c_bias, h), th, NA);
            const float* x = row + s.xCol() + h * P;
            for (int i = 0; i < P; ++i) {
                float acc = s.d_skip[h] * x[i];
                for (int n = 0; n < N; ++n) {
                    float& e = S[static_cast<int64_t>(i) * N + n];
                    e = v.alpha * e + v.beta * vp[i] * kp[n] + v.gamma * x[i] * k[n];
                    acc += e * q[n];
                }
                y[h * P + i] = acc;
            }
            std::copy(k.begin(), k.end(), kp);
            std::copy(x, x + P, vp);
            const float* z = row + s.zCol() + h * P;
            float rho = 1.f;
            if (s.gate_norm) {
                float ss = 0.f;
                for (int i = 0; i < P; ++i) ss += y[h * P + i] * y[h * P + i];
                rho = 1.f / std::sqrt(ss / P + 1e-5f);
            }
            for (int i = 0; i < P; ++i)
                out[h * P + i] = (s.gate_norm ? s.gate_norm[h * P + i] * rho : 1.f) * y[h * P + i] * siluf(z[i]);
        }
    }

    void mamba3Scan(const Mamba3ScanArgs& s, const ScanCheckpoints* ck) override {
        const int T = s.steps;
        const int64_t SS = s.stateSize();
        const int chunks = ck ? (T + ck->chunk - 1) / ck->chunk : 0;
        std::vector<float> y(static_cast<size_t>(s.dInner()));
        for (int b = 0; b < s.batch; ++b) {
            float* st = s.state + b * s.state_stride;
            for (int t = 0; t < T; ++t) {
                if (ck && t % ck->chunk == 0) std::copy(st, st + SS, ck->data + (static_cast<int64_t>(b) * chunks + t / ck->chunk) * SS);
                const int64_t r = static_cast<int64_t>(b) * T + t;
                m3Step(s, s.proj + r * s.ldproj, st, y.data(), s.out + r * s.ldout);
            }
        }
    }

    /** Recomputes every state of a row from its first checkpoint, then runs §4 backwards per head. */
    void mamba3ScanBackward(const Mamba3ScanBackwardArgs& a) override {
        const Mamba3ScanArgs& s = a.fwd;
        const int T = s.steps, H = s.nheads, P = s.headdim, N = s.d_state, NA = s.nangles, E = s.dInner();
        const int G = s.ngroups, hpg = H / G;
        const int64_t SS = s.stateSize(), R = static_cast<int64_t>(s.batch) * T;
        const int chunks = (T + a.chunk - 1) / a.chunk;
        for (int64_t r = 0; r < R; ++r) std::fill(a.dproj + r * a.lddproj, a.dproj + r * a.lddproj + s.projWidth(), 0.f);
        std::vector<float> dBhat(static_cast<size_t>(R * G * N), 0.f), dChat(dBhat.size(), 0.f);
        std::vector<float> states(static_cast<size_t>((T + 1) * SS)), ys(static_cast<size_t>(T * E)), outs(static_cast<size_t>(E));
        for (int b = 0; b < s.batch; ++b) {
            const float* ck0 = a.checkpoints + static_cast<int64_t>(b) * chunks * SS;
            std::copy(ck0, ck0 + SS, states.begin());
            for (int t = 0; t < T; ++t) {
                std::copy(states.begin() + t * SS, states.begin() + (t + 1) * SS, states.begin() + (t + 1) * SS);
                m3Step(s, s.proj + (static_cast<int64_t>(b) * T + t) * s.ldproj, &states[(t + 1) * SS], &ys[t * E], outs.data());
            }
            for (int h = 0; h < H; ++h) {
                std::vector<float> Gs(static_cast<size_t>(P) * N, 0.f), kappa(N, 0.f), dxNext(P, 0.f), phi(NA, 0.f);
                if (a.dstate_end) {  // the carries start from the end state's gradient
                    const float* e = a.dstate_end + b * a.dstate_stride;
                    std::copy_n(e + static_cast<int64_t>(h) * P * N, P * N, Gs.begin());
                    std::copy_n(e + s.kOffset() + static_cast<int64_t>(h) * N, N, kappa.begin());
                    std::copy_n(e + s.vOffset() + static_cast<int64_t>(h) * P, P, dxNext.begin());
                    std::copy_n(e + s.angleOffset() + static_cast<int64_t>(h) * NA, NA, phi.begin());
                }
                for (int t = T - 1; t >= 0; --t) {
                    const int64_t r = static_cast<int64_t>(b) * T + t;
                    const float* row = s.proj + r * s.ldproj;
                    float* drow = a.dproj + r * a.lddproj;
                    const float* before = &states[t * SS];
                    const float* after = before + SS;
                    const float* Sp = before + static_cast<int64_t>(h) * P * N;
                    const float* Sc = after + static_cast<int64_t>(h) * P * N;
                    const float* kPrev = before + s.kOffset() + static_cast<int64_t>(h) * N;
                    const float* vPrev = before + s.vOffset() + static_cast<int64_t>(h) * P;
                    const float* th = after + s.angleOffset() + static_cast<int64_t>(h) * NA;
                    const M3Head v = m3Head(s, row, h);
                    const std::vector<float> kPre = m3Pre(s, row, s.bCol(), s.b_norm, s.b_bias, h);
                    const std::vector<float> qPre = m3Pre(s, row, s.cCol(), s.c_norm, s.c_bias, h);
                    const std::vector<float> k = m3Rotate(kPre, th, NA), q = m3Rotate(qPre, th, NA);
                    const float* x = row + s.xCol() + h * P;
                    const float* z = row + s.zCol() + h * P;
                    const float* y = &ys[t * E + h * P];
                    const float* dg = a.dout + r * a.lddout + h * P;
                    std::vector<float> dy(P);
                    if (!s.gate_norm) {
                        for (int i = 0; i < P; ++i) {
                            dy[i] = dg[i] * siluf(z[i]);
                            drow[s.zCol() + h * P + i] = dg[i] * y[i] * dsiluf(z[i]);
                        }
                    } else {
                        const float* w = s.gate_norm + h * P;
                        float ss = 0.f;
                        for (int i = 0; i < P; ++i) ss += y[i] * y[i];
                        const float rho = 1.f / std::sqrt(ss / P + 1e-5f);
                        float m = 0.f;
                        for (int i = 0; i < P; ++i) m += w[i] * dg[i] * siluf(z[i]) * rho * y[i];
                        m /= P;
                        for (int i = 0; i < P; ++i) {
                            const float yh = rho * y[i], e = dg[i] * siluf(z[i]);
                            drow[s.zCol() + h * P + i] = dg[i] * yh * w[i] * dsiluf(z[i]);
                            a.d_gate_norm[h * P + i] += e * yh;
                            dy[i] = rho * (w[i] * e - yh * m);
                        }
                    }
                    for (int i = 0; i < P; ++i) a.d_d_skip[h] += dy[i] * x[i];
                    for (int i = 0; i < P; ++i)
                        for (int n = 0; n < N; ++n) Gs[i * N + n] += dy[i] * q[n];
                    std::vector<float> dq(N, 0.f), dk = kappa;
                    float dAl = 0.f, dBe = 0.f, dGa = 0.f;
                    for (int i = 0; i < P; ++i) {
                        float gk = 0.f, gkp = 0.f;
                        for (int n = 0; n < N; ++n) {
                            dq[n] += dy[i] * Sc[i * N + n];
                            gk += Gs[i * N + n] * k[n];
                            gkp += Gs[i * N + n] * kPrev[n];
                            dAl += Gs[i * N + n] * Sp[i * N + n];
                        }
                        drow[s.xCol() + h * P + i] = s.d_skip[h] * dy[i] + v.gamma * gk + dxNext[i];
                        dxNext[i] = v.beta * gkp;
                        dBe += vPrev[i] * gkp;
                        dGa += x[i] * gk;
                    }
                    for (int n = 0; n < N; ++n) {
                        float gx = 0.f, gv = 0.f;
                        for (int i = 0; i < P; ++i) {
                            gx += Gs[i * N + n] * x[i];
                            gv += Gs[i * N + n] * vPrev[i];
                        }
                        dk[n] += v.gamma * gx;
                        kappa[n] = v.beta * gv;
                    }
                    for (float& e : Gs) e *= v.alpha;
                    std::vector<float> dkp = dk, dqp = dq;
                    for (int an = 0; an < NA; ++an) {
                        const float c = std::cos(th[an]), sn = std::sin(th[an]);
                        dkp[2 * an] = c * dk[2 * an] + sn * dk[2 * an + 1];
                        dkp[2 * an + 1] = -sn * dk[2 * an] + c * dk[2 * an + 1];
                        dqp[2 * an] = c * dq[2 * an] + sn * dq[2 * an + 1];
                        dqp[2 * an + 1] = -sn * dq[2 * an] + c * dq[2 * an + 1];
                        phi[an] += dk[2 * an] * (-sn * kPre[2 * an] - c * kPre[2 * an + 1]) + dk[2 * an + 1] * (c * kPre[2 * an] - sn * kPre[2 * an + 1]) +
                                   dq[2 * an] * (-sn * qPre[2 * an] - c * qPre[2 * an + 1]) + dq[2 * an + 1] * (c * qPre[2 * an] - sn * qPre[2 * an + 1]);
                    }
                    const int g = h / hpg;
                    for (int n = 0; n < N; ++n) {
                        a.d_b_bias[static_cast<int64_t>(h) * N + n] += dkp[n];
                        a.d_c_bias[static_cast<int64_t>(h) * N + n] += dqp[n];
                        dBhat[(r * G + g) * N + n] += dkp[n];
                        dChat[(r * G + g) * N + n] += dqp[n];
                    }
                    float dDelta = 0.f;
                    for (int an = 0; an < NA; ++an) {
                        const float tt = std::tanh(row[s.angleCol() + an]);
                        drow[s.angleCol() + an] += phi[an] * 3.14159265f * v.delta * (1.f - tt * tt);
                        dDelta += phi[an] * 3.14159265f * tt;
                    }
                    const float dAD = dAl * v.alpha + dBe * v.beta;
                    dDelta += dAD * v.A + dBe * v.alpha * (1.f - v.sig) + dGa * v.sig;
                    const float xdt = row[s.dtCol() + h] + s.dt_bias[h];
                    const float ddt = dDelta * (xdt > 20.f ? 1.f : sigm(xdt));
                    const float u = row[s.aCol() + h];
                    drow[s.dtCol() + h] = ddt;
                    drow[s.aCol() + h] = v.clamped ? 0.f : -dAD * v.delta * (u >= 0.f ? 1.f : 1.f / ((1.f - u) * (1.f - u)));
                    drow[s.trapCol() + h] = (dGa - dBe * v.alpha) * v.delta * v.sig * (1.f - v.sig);
                    a.d_dt_bias[h] += ddt;
                }
                if (a.dstate) {  // past step 0 the carries are the starting state's gradient
                    float* d = a.dstate + b * a.dstate_stride;
                    std::copy(Gs.begin(), Gs.end(), d + static_cast<int64_t>(h) * P * N);
                    std::copy(kappa.begin(), kappa.end(), d + s.kOffset() + static_cast<int64_t>(h) * N);
                    std::copy(dxNext.begin(), dxNext.end(), d + s.vOffset() + static_cast<int64_t>(h) * P);
                    std::copy(phi.begin(), phi.end(), d + s.angleOffset() + static_cast<int64_t>(h) * NA);
                }
            }
        }
        // BCNorm: rmsnormBackward per (row, group), with the shared weights.
        for (int64_t r = 0; r < R; ++r)
            for (int g = 0; g < G; ++g) {
                const float* row = s.proj + r * s.ldproj;
                float* drow = a.dproj + r * a.lddproj;
                for (int which = 0; which < 2; ++which) {
                    const int col = (which ? s.cCol() : s.bCol()) + g * N;
                    const float* w = which ? s.c_norm : s.b_norm;
                    const float* dh = &(which ? dChat : dBhat)[(r * G + g) * N];
                    RmsNormBackwardArgs rb{row + col, N, w, dh, N, 1, N, 1e-5f, drow + col, N, 0.f, which ? a.d_c_norm : a.d_b_norm};
                    rmsnormBackward(rb);
                }
            }
    }

    void selectiveScanBackward(const ScanBackwardArgs& s) override {
        checkScanBackwardOutputs(s);
        const int T = s.steps, C = s.channels, N = s.d_state, K = s.chunk;
        const int chunks = (T + K - 1) / K;
        const int64_t R = static_cast<int64_t>(s.batch) * T;
        for (int64_t r = 0; r < R; ++r) std::fill(s.dbc + r * s.lddbc, s.dbc + r * s.lddbc + 2 * N, 0.f);
        std::vector<float> hs(static_cast<size_t>(K + 1) * N), G(static_cast<size_t>(N));
        for (int b = 0; b < s.batch; ++b)
            for (int d = 0; d < C; ++d) {
                std::fill(G.begin(), G.end(), 0.f);
                if (s.dh_end) std::copy_n(s.dh_end + b * s.dh_stride + static_cast<int64_t>(d) * N, N, G.begin());
                const float* A = s.a + static_cast<int64_t>(d) * N;
                const float bias = s.dt_bias ? s.dt_bias[d] : 0.f;
                for (int c = chunks - 1; c >= 0; --c) {
                    const int ta = c * K, tb = std::min(T, ta + K);
                    const float* h0 = s.checkpoints + ((static_cast<int64_t>(b) * chunks + c) * C + d) * N;
                    std::copy(h0, h0 + N, hs.begin());
                    for (int t = ta; t < tb; ++t) {
                        const int64_t r = static_cast<int64_t>(b) * T + t;
                        const float delta = softplusf(s.dt[r * C + d] + bias), u = s.u[r * C + d];
                        for (int n = 0; n < N; ++n)
                            hs[(t - ta + 1) * N + n] = std::exp(delta * A[n]) * hs[(t - ta) * N + n] + delta * u * s.bc[r * s.ldbc + n];
                    }
                    for (int t = tb - 1; t >= ta; --t) {
                        const int64_t r = static_cast<int64_t>(b) * T + t;
                        const float dtv = s.dt[r * C + d] + bias, delta = softplusf(dtv), u = s.u[r * C + d], z = s.z[r * s.ldz + d];
                        const float* Bt = s.bc + r * s.ldbc;
                        const float* Ct = Bt + N;
                        float y = s.d_skip[d] * u;
                        for (int n = 0; n < N; ++n) y += hs[(t - ta + 1) * N + n] * Ct[n];
                        const float dout = s.dout[r * C + d], dy = dout * siluf(z);
                        store(s.dz, s.lddz, s.dz16, r, d, dout * y * dsiluf(z));
                        s.dd_skip[d] += dy * u;
                        float du = s.d_skip[d] * dy, ddelta = 0.f;
                        for (int n = 0; n < N; ++n) {
                            const float abar = std::exp(delta * A[n]), hp = hs[(t - ta) * N + n], hc = hs[(t - ta + 1) * N + n];
                            G[n] += dy * Ct[n];
                            s.dbc[r * s.lddbc + N + n] += dy * hc;
                            s.dbc[r * s.lddbc + n] += G[n] * delta * u;
                            du += delta * G[n] * Bt[n];
                            ddelta += G[n] * (A[n] * abar * hp + Bt[n] * u);
                            s.da_log[static_cast<int64_t>(d) * N + n] += G[n] * delta * abar * hp * A[n];
                            G[n] *= abar;
                        }
                        s.du[r * C + d] = du;
                        const float ddt = ddelta * (dtv > 20.f ? 1.f : sigm(dtv));
                        store(s.ddt, C, s.ddt16, r, d, ddt);
                        if (s.ddt_bias) s.ddt_bias[d] += ddt;
                    }
                }
                if (s.dh_start) std::copy_n(G.begin(), N, s.dh_start + b * s.dh_stride + static_cast<int64_t>(d) * N);
            }
    }

    void scale(float* x, int64_t n, float s) override {
        for (int64_t i = 0; i < n; ++i) x[i] *= s;
    }
    void sumInto(const float* x, int64_t n, bool squares, double* out) override {
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += squares ? static_cast<double>(x[i]) * x[i] : x[i];
        *out = s;
    }
    void optimizerControl(const OptimizerControlArgs& a) override {
        decideOptimizerStep(a);
    }
    void adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWFactors* f, bool decayed) override {
        if (f->skip != 0.f) return;
        for (int64_t i = 0; i < n; ++i) {
            const float gi = g[i] * f->grad_scale;
            p[i] *= f->decay[decayed ? 0 : 1];
            m[i] = f->beta1 * m[i] + f->c1 * gi;
            v[i] = f->beta2 * v[i] + f->c2 * gi * gi;
            p[i] -= f->step * m[i] / (std::sqrt(v[i]) * f->inv_sqrt_bc2 + f->eps);
        }
    }
    void mse(const float* y, const float* t, int64_t n, float scale, float* dy, double* out) override {
        double s = 0;
        for (int64_t i = 0; i < n; ++i) {
            const float e = y[i] - t[i];
            dy[i] = scale * 2.f * e;
            s += static_cast<double>(e) * e;
        }
        *out = s;
    }
    void crossEntropy(const CrossEntropyArgs& a) override {
        for (int64_t r = 0; r < a.rows; ++r) {
            const float* l = a.logits + r * a.vocab;
            // dlogits16: the f32 gradient rounded to nearest even, each row written after it is read
            std::vector<float> row16(a.dlogits16 ? static_cast<size_t>(a.vocab) : 0);
            float* dl = a.dlogits ? a.dlogits + r * a.vocab : a.dlogits16 ? row16.data() : nullptr;
            const int target = a.targets[r];
            if (target == a.ignore_index) {
                a.loss[r] = a.correct[r] = 0.f;
                if (dl) std::fill(dl, dl + a.vocab, 0.f);
            } else {
                crossEntropyRow(a, l, target, r, dl);
            }
            if (a.dlogits16) {
                uint16_t* d16 = static_cast<uint16_t*>(a.dlogits16) + r * a.ld16;
                for (int k = 0; k < a.vocab; ++k) d16[k] = a.dtype16 == DTYPE_BF16 ? toBf16(dl[k]) : toF16(dl[k]);
            }
        }
    }
    static void crossEntropyRow(const CrossEntropyArgs& a, const float* l, int target, int64_t r, float* dl) {
        int best = 0;
        for (int k = 1; k < a.vocab; ++k)
            if (l[k] > l[best]) best = k;
        const float mx = l[best];
        float sum = 0.f;
        for (int k = 0; k < a.vocab; ++k) sum += std::exp(l[k] - mx);
        a.loss[r] = std::log(sum) + mx - l[target];
        a.correct[r] = best == target ? 1.f : 0.f;
        if (dl) {
            for (int k = 0; k < a.vocab; ++k) dl[k] = a.scale * std::exp(l[k] - mx) / sum;
            dl[target] -= a.scale;
        }
    }
    void embedBackward(const EmbedBackwardArgs& a) override {
        for (int64_t r = 0; r < a.rows; ++r)
            for (int j = 0; j < a.d; ++j) a.dtable[static_cast<int64_t>(a.ids[r]) * a.d + j] += a.dx[r * a.ldx + j];
    }
    void sampleTokens(const SampleArgs& a) override {
        const auto* prm = static_cast<const sampling::RowParams*>(a.params);
        for (int b = 0; b < a.batch; ++b)
            a.out[b] = referenceSampleRow(a.logits + b * a.ld, a.vocab, prm[b], a.rng[b], a.seen + b * a.seen_words,
                                          a.err_index[b]);
    }
};

}  // namespace

std::shared_ptr<Ops> referenceBackend() { return std::make_shared<RefOps>(); }

}  // namespace optest
