// The Mamba-3 SISO cases of the table (Ops::mamba3Scan, Ops::mamba3ScanBackward), registered from allCases():
// the forward at the chunk boundaries (T = 1, 63, 64, 65, 130 with chunk 64), B = 1 and 3, odd head shapes,
// ngroups > 1, rope fraction 0.5 and 1, the gate norm on and off, strided buffers with padding checks, incoming
// states whose angles sit next to 2π (or 0) so that they wrap; the state carried across calls; the checkpoints;
// the backward (every in_proj field and every parameter gradient) against the double reference
// (reference_mamba3.h); the official default head at decode, prefill and training sizes for timing.
#include "op_test.h"
#include "reference_mamba3.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>

namespace optest {
namespace {

using ref::Vec;

// ---- tolerances (nmax), about 10× what the CPU backend shows on these shapes ----
constexpr double kTolM3 = 5e-5;     // out, the final state, the checkpoints
// Long sequences: θ is accumulated and wrapped in f32 every step (the backends' shared numerics), so its
// error grows like a random walk (~4e-7 rad per step) plus 1.7e-7 rad per wrap (the f32 2π); k, q and the
// outputs inherit it. At T = 4096 that is ~2e-5 on k.
constexpr double kTolM3Long = 2e-4;  // T > 1024
constexpr double kTolM3Bwd = 2e-4;  // every in_proj field's gradient, the parameter gradients
// d_state 1: BCNorm over one value is ≈ sign(B), its gradient ∝ eps/(B² + eps) is nearly all cancellation, so
// f32 rounding shows up ~30× larger there. (For the same reason no case runs the gate norm with headdim 1.)
constexpr double kTolM3BwdOneState = 5e-4;

constexpr double kTwoPi = 6.283185307179586;

struct M3Shape {
    int B, T, H, P, N, G, NA;
    bool gateNorm = false;
    int chunk = 0;       // checkpoints every chunk steps (0: none)
    bool pad = false;    // ldproj, ldout, state_stride (and the backward's lddproj, lddout) wider than the data
    bool fresh = false;  // a zero incoming state (else random S, k, v and angles next to 2π or 0)
};

std::string format(const char* f, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, f);
    std::vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    return buf;
}

std::string shapeName(const M3Shape& s) {
    std::string n = format("B=%d T=%d H=%d P=%d N=%d G=%d A=%d", s.B, s.T, s.H, s.P, s.N, s.G, s.NA);
    if (s.gateNorm) n += " gatenorm";
    if (s.chunk > 0) n += format(" ckpt/%d", s.chunk);
    if (s.pad) n += " ld+";
    if (s.fresh) n += " zero state";
    return n;
}

/** Host inputs of one case (f32, strided like the backend's buffers) and the same problem in double. */
struct M3Setup {
    M3Shape shape;
    ref::Mamba3Problem prob;
    int64_t ldproj, ldout, stride;
    std::vector<float> proj;  // [R, ldproj], poison in the padding
    std::vector<float> dtBias, bBias, cBias, bNorm, cNorm, dSkip, gateNorm;
    std::vector<float> state;  // [B, stride], poison in the padding
};

M3Setup m3Setup(Rng& rng, const M3Shape& sh) {
    M3Setup m;
    m.shape = sh;
    ref::Mamba3Problem& p = m.prob;
    p.batch = sh.B, p.steps = sh.T, p.nheads = sh.H, p.headdim = sh.P, p.d_state = sh.N, p.ngroups = sh.G, p.nangles = sh.NA;
    p.a_floor = 1e-4;
    const int W = p.projWidth();
    const int64_t R = p.rows(), SS = p.stateSize();
    m.ldproj = W + (sh.pad ? 7 : 0);
    m.ldout = p.dInner() + (sh.pad ? 5 : 0);
    m.stride = SS + (sh.pad ? 3 : 0);
    m.proj.assign(static_cast<size_t>(R * m.ldproj), poisonValue());
    for (int64_t r = 0; r < R; ++r)
        for (int j = 0; j < W; ++j) {
            double lo = -1, hi = 1;                                             // x, B, C
            if (j < p.xCol()) lo = -3, hi = 3;                                  // z
            else if (j >= p.dtCol() && j < p.aCol()) lo = -0.5, hi = 0.5;      // dd_dt (around dt_bias)
            else if (j >= p.aCol() && j < p.trapCol()) lo = -2, hi = 2;        // dd_A: both sides of the heavy tail
            else if (j >= p.trapCol() && j < p.angleCol()) lo = -3, hi = 3;    // trap
            else if (j >= p.angleCol()) lo = -2, hi = 2;                       // angles
            float v = static_cast<float>(rng.uniform(lo, hi));
            if (v == 0.f) v = 1e-3f;
            m.proj[r * m.ldproj + j] = v;
        }
    m.dtBias.resize(sh.H);
    for (float& v : m.dtBias) v = dtBias(rng);
    m.bBias = uniform(rng, static_cast<int64_t>(sh.H) * sh.N, 0.5, 1.5);
    m.cBias = uniform(rng, static_cast<int64_t>(sh.H) * sh.N, 0.5, 1.5);
    m.bNorm = uniform(rng, sh.N, 0.5, 1.5);
    m.cNorm = uniform(rng, sh.N, 0.5, 1.5);
    m.dSkip = uniform(rng, sh.H, 0.5, 1.5);
    if (sh.gateNorm) m.gateNorm = uniform(rng, p.dInner(), 0.5, 1.5);
    m.state.assign(static_cast<size_t>(sh.B * m.stride), poisonValue());
    for (int b = 0; b < sh.B; ++b)
        for (int64_t i = 0; i < SS; ++i) {
            float v = 0.f;
            if (!sh.fresh) {
                if (i < p.angleOffset())
                    v = static_cast<float>(rng.uniform(-1, 1));
                else  // next to 2π (wraps up) or next to 0 (wraps down)
                    v = static_cast<float>(i % 2 ? rng.uniform(6.2, 6.283) : rng.uniform(0.0, 0.08));
            }
            m.state[b * m.stride + i] = v;
        }
    p.proj = dense(m.proj, R, m.ldproj, W);
    p.dt_bias = toDouble(m.dtBias);
    p.b_bias = toDouble(m.bBias);
    p.c_bias = toDouble(m.cBias);
    p.b_norm = toDouble(m.bNorm);
    p.c_norm = toDouble(m.cNorm);
    p.d_skip = toDouble(m.dSkip);
    p.gate_norm = toDouble(m.gateNorm);
    p.state0 = dense(m.state, sh.B, m.stride, SS);
    return m;
}

/** The scan arguments with the parameters uploaded; proj, state and out are the caller's. */
Mamba3ScanArgs m3Args(Arena& A, const M3Setup& m, const float* proj, float* state, float* out, int steps) {
    const M3Shape& s = m.shape;
    Mamba3ScanArgs a{};
    a.proj = proj;
    a.ldproj = m.ldproj;
    a.dt_bias = A.put(m.dtBias);
    a.b_bias = A.put(m.bBias);
    a.c_bias = A.put(m.cBias);
    a.b_norm = A.put(m.bNorm);
    a.c_norm = A.put(m.cNorm);
    a.d_skip = A.put(m.dSkip);
    a.gate_norm = s.gateNorm ? A.put(m.gateNorm) : nullptr;
    a.a_floor = static_cast<float>(m.prob.a_floor);
    a.state = state;
    a.state_stride = m.stride;
    a.out = out;
    a.ldout = m.ldout;
    a.batch = s.B, a.steps = steps, a.nheads = s.H, a.headdim = s.P, a.d_state = s.N, a.ngroups = s.G, a.nangles = s.NA;
    return a;
}

/**
 * Row states (dense [rows][SS]) compared piece by piece: S, k_prev, v_prev, θ. θ is compared on the circle
 * (the backend wraps at the f32 2π, the reference at the exact one: a value just below 2π may be just above 0).
 */
std::vector<Compare> compareStates(const std::string& what, std::vector<float> got, const Vec& want, const ref::Mamba3Problem& p,
                                   int64_t rows, double tol) {
    const int64_t SS = p.stateSize();
    const int64_t cuts[] = {0, p.kOffset(), p.vOffset(), p.angleOffset(), SS};
    const char* names[] = {".S", ".k", ".v", ".theta"};
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = p.angleOffset(); i < SS; ++i) {
            double d = got[r * SS + i] - want[r * SS + i];
            d -= kTwoPi * std::round(d / kTwoPi);
            got[r * SS + i] = static_cast<float>(want[r * SS + i] + d);
        }
    std::vector<Compare> c;
    for (int k = 0; k < 4; ++k) {
        if (cuts[k] == cuts[k + 1]) continue;
        std::vector<float> g;
        Vec w;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t i = cuts[k]; i < cuts[k + 1]; ++i) {
                g.push_back(got[r * SS + i]);
                w.push_back(want[r * SS + i]);
            }
        c.push_back(nmax(what + names[k], g, w, tol));
    }
    return c;
}

Prepared m3Start(Ops& ops) {
    Prepared p;
    p.arena = std::make_shared<Arena>(ops);
    return p;
}

// ================================================================ forward

Prepared m3ForwardCase(Ops& ops, uint64_t seed, const M3Shape& sh) {
    Rng rng(seed);
    Prepared p = m3Start(ops);
    Arena* A = p.arena.get();
    const M3Setup m = m3Setup(rng, sh);
    const ref::Mamba3Problem& pr = m.prob;
    const int64_t R = pr.rows(), SS = pr.stateSize(), E = pr.dInner();
    const int chunks = sh.chunk > 0 ? (sh.T + sh.chunk - 1) / sh.chunk : 0;
    float* dstate = A->put(m.state);
    float* dout = A->poisoned(R * m.ldout);
    float* dck = sh.chunk > 0 ? A->poisoned(static_cast<int64_t>(sh.B) * chunks * SS) : nullptr;
    const Mamba3ScanArgs a = m3Args(*A, m, A->put(m.proj), dstate, dout, sh.T);
    const ScanCheckpoints ck{dck, sh.chunk};
    p.call = [&ops, a, ck] { ops.mamba3Scan(a, ck.chunk > 0 ? &ck : nullptr); };
    const ref::Mamba3Result want = ref::mamba3Scan(pr, sh.chunk);
    const int64_t ldout = m.ldout, stride = m.stride, B = sh.B, nck = B * chunks;
    const double tol = sh.T > 1024 ? kTolM3Long : kTolM3;
    p.check = [=] {
        const std::vector<float> go = A->get(dout, R * ldout), gs = A->get(dstate, B * stride);
        std::vector<Compare> c{nmax("out", strip(go, R, ldout, E), want.out, tol), padding("out", go, R, ldout, E)};
        for (const Compare& x : compareStates("state", strip(gs, B, stride, SS), want.state, pr, B, tol)) c.push_back(x);
        c.push_back(padding("state", gs, B, stride, SS));
        if (dck)
            for (const Compare& x : compareStates("ckpt", A->get(dck, nck * SS), want.checkpoints, pr, nck, tol)) c.push_back(x);
        return c;
    };
    p.outputs = [=] {
        std::vector<std::vector<float>> o{A->get(dout, R * ldout), A->get(dstate, B * stride)};
        if (dck) o.push_back(A->get(dck, nck * SS));
        return o;
    };
    // in_proj rows and the output read/written once; the state read and written (and checkpointed).
    p.bytes = 4.0 * (R * (pr.projWidth() + E) + (2.0 + chunks) * B * SS);
    p.flops = 6.0 * R * E * sh.N;
    return p;
}

/** The sequence as several calls cut at `cuts`, the state carried between them, against one reference call. */
Prepared m3SplitCase(Ops& ops, uint64_t seed, const M3Shape& sh, const std::vector<int>& cuts) {
    Rng rng(seed);
    Prepared p = m3Start(ops);
    Arena* A = p.arena.get();
    const M3Setup m = m3Setup(rng, sh);
    const ref::Mamba3Problem& pr = m.prob;
    const int64_t SS = pr.stateSize(), E = pr.dInner();
    float* dstate = A->put(m.state);
    std::vector<Mamba3ScanArgs> calls;
    std::vector<std::pair<int, int>> ranges;
    std::vector<float*> outs;
    int t0 = 0;
    for (size_t c = 0; c <= cuts.size(); ++c) {
        const int t1 = c < cuts.size() ? cuts[c] : sh.T;
        std::vector<float> part;
        for (int b = 0; b < sh.B; ++b)
            part.insert(part.end(), m.proj.begin() + (static_cast<int64_t>(b) * sh.T + t0) * m.ldproj,
                        m.proj.begin() + (static_cast<int64_t>(b) * sh.T + t1) * m.ldproj);
        float* out = A->poisoned(static_cast<int64_t>(sh.B) * (t1 - t0) * m.ldout);
        calls.push_back(m3Args(*A, m, A->put(part), dstate, out, t1 - t0));
        ranges.emplace_back(t0, t1);
        outs.push_back(out);
        t0 = t1;
    }
    p.call = [&ops, calls] {
        for (const Mamba3ScanArgs& a : calls) ops.mamba3Scan(a, nullptr);
    };
    const ref::Mamba3Result want = ref::mamba3Scan(pr);
    const int64_t ldout = m.ldout, stride = m.stride;
    const int B = sh.B, T = sh.T;
    p.check = [=] {
        std::vector<float> joined(static_cast<size_t>(static_cast<int64_t>(B) * T * E));
        for (size_t c = 0; c < outs.size(); ++c) {
            const int a0 = ranges[c].first, a1 = ranges[c].second;
            const std::vector<float> g = A->get(outs[c], static_cast<int64_t>(B) * (a1 - a0) * ldout);
            for (int b = 0; b < B; ++b)
                for (int t = a0; t < a1; ++t)
                    std::copy_n(&g[(static_cast<int64_t>(b) * (a1 - a0) + t - a0) * ldout], E,
                                &joined[(static_cast<int64_t>(b) * T + t) * E]);
        }
        std::vector<Compare> c{nmax("out", joined, want.out, kTolM3)};
        for (const Compare& x : compareStates("state", strip(A->get(dstate, B * stride), B, stride, SS), want.state, pr, B, kTolM3))
            c.push_back(x);
        return c;
    };
    return p;
}

// ================================================================ backward

Prepared m3BackwardCase(Ops& ops, uint64_t seed, const M3Shape& sh) {
    Rng rng(seed);
    Prepared p = m3Start(ops);
    Arena* A = p.arena.get();
    const M3Setup m = m3Setup(rng, sh);
    const ref::Mamba3Problem& pr = m.prob;
    const int64_t R = pr.rows(), E = pr.dInner(), W = pr.projWidth();
    const int H = sh.H, N = sh.N;
    const int64_t lddout = E + (sh.pad ? 3 : 0), lddproj = W + (sh.pad ? 5 : 0);
    const double tol = sh.N == 1 ? kTolM3BwdOneState : kTolM3Bwd;
    // The checkpoints a forward would have written (from the reference, rounded to f32).
    const ref::Mamba3Result fwd = ref::mamba3Scan(pr, sh.chunk);
    const std::vector<float> ckf(fwd.checkpoints.begin(), fwd.checkpoints.end());
    std::vector<float> doutv(static_cast<size_t>(R * lddout), poisonValue());
    for (int64_t r = 0; r < R; ++r)
        for (int64_t j = 0; j < E; ++j) doutv[r * lddout + j] = static_cast<float>(rng.uniform(-1, 1));
    // Parameter gradients start nonzero: the op adds.
    const std::vector<float> g0dt = uniform(rng, H, -0.5, 0.5), g0bb = uniform(rng, static_cast<int64_t>(H) * N, -0.5, 0.5),
                             g0cb = uniform(rng, static_cast<int64_t>(H) * N, -0.5, 0.5), g0bn = uniform(rng, N, -0.5, 0.5),
                             g0cn = uniform(rng, N, -0.5, 0.5), g0d = uniform(rng, H, -0.5, 0.5),
                             g0gn = sh.gateNorm ? uniform(rng, E, -0.5, 0.5) : std::vector<float>{};

    Mamba3ScanBackwardArgs a{};
    a.fwd = m3Args(*A, m, A->put(m.proj), nullptr, nullptr, sh.T);
    a.checkpoints = A->put(ckf);
    a.chunk = sh.chunk;
    a.dout = A->put(doutv);
    a.lddout = lddout;
    float* ddproj = A->poisoned(R * lddproj);
    a.dproj = ddproj;
    a.lddproj = lddproj;
    float *gdt = A->put(g0dt), *gbb = A->put(g0bb), *gcb = A->put(g0cb), *gbn = A->put(g0bn), *gcn = A->put(g0cn), *gd = A->put(g0d);
    float* ggn = sh.gateNorm ? A->put(g0gn) : nullptr;
    a.d_dt_bias = gdt, a.d_b_bias = gbb, a.d_c_bias = gcb, a.d_b_norm = gbn, a.d_c_norm = gcn, a.d_d_skip = gd, a.d_gate_norm = ggn;
    p.call = [&ops, a] { ops.mamba3ScanBackward(a); };

    const ref::Mamba3Grads g = ref::mamba3ScanBackward(pr, dense(doutv, R, lddout, E));
    auto plus = [](const std::vector<float>& g0, const Vec& d) {
        Vec v = toDouble(g0);
        for (size_t i = 0; i < v.size(); ++i) v[i] += d[i];
        return v;
    };
    const Vec wdt = plus(g0dt, g.d_dt_bias), wbb = plus(g0bb, g.d_b_bias), wcb = plus(g0cb, g.d_c_bias), wbn = plus(g0bn, g.d_b_norm),
              wcn = plus(g0cn, g.d_c_norm), wd = plus(g0d, g.d_d_skip), wgn = sh.gateNorm ? plus(g0gn, g.d_gate_norm) : Vec{};
    const struct Field { const char* name; int c0, c1; } fields[] = {
        {"dz", pr.zCol(), pr.xCol()},       {"dx", pr.xCol(), pr.bCol()},          {"dB", pr.bCol(), pr.cCol()},
        {"dC", pr.cCol(), pr.dtCol()},      {"ddd_dt", pr.dtCol(), pr.aCol()},     {"ddd_A", pr.aCol(), pr.trapCol()},
        {"dtrap", pr.trapCol(), pr.angleCol()}, {"dangles", pr.angleCol(), static_cast<int>(W)}};
    const bool gateNorm = sh.gateNorm;
    p.check = [=] {
        const std::vector<float> gp = A->get(ddproj, R * lddproj);
        std::vector<Compare> c;
        for (const Field& f : fields) {
            if (f.c0 == f.c1) continue;
            std::vector<float> got;
            Vec want;
            for (int64_t r = 0; r < R; ++r)
                for (int j = f.c0; j < f.c1; ++j) {
                    got.push_back(gp[r * lddproj + j]);
                    want.push_back(g.dproj[r * W + j]);
                }
            c.push_back(nmax(f.name, got, want, tol));
        }
        c.push_back(padding("dproj", gp, R, lddproj, W));
        c.push_back(nmax("d_dt_bias", A->get(gdt, H), wdt, tol));
        c.push_back(nmax("d_b_bias", A->get(gbb, static_cast<int64_t>(H) * N), wbb, tol));
        c.push_back(nmax("d_c_bias", A->get(gcb, static_cast<int64_t>(H) * N), wcb, tol));
        c.push_back(nmax("d_b_norm", A->get(gbn, N), wbn, tol));
        c.push_back(nmax("d_c_norm", A->get(gcn, N), wcn, tol));
        c.push_back(nmax("d_d_skip", A->get(gd, H), wd, tol));
        if (gateNorm) c.push_back(nmax("d_gate_norm", A->get(ggn, E), wgn, tol));
        return c;
    };
    p.outputs = [=] {
        std::vector<std::vector<float>> o{A->get(ddproj, R * lddproj), A->get(gdt, H), A->get(gbb, static_cast<int64_t>(H) * N),
                                          A->get(gcb, static_cast<int64_t>(H) * N), A->get(gbn, N), A->get(gcn, N), A->get(gd, H)};
        if (gateNorm) o.push_back(A->get(ggn, E));
        return o;
    };
    p.bytes = 4.0 * R * (2.0 * W + 2.0 * E);
    p.flops = 22.0 * R * E * N;  // the recompute (6) and the reverse pass (16) per state element and step
    return p;
}

/**
 * State carry: the backward with ∂L/∂(end state) given (dstate_end) and ∂L/∂(start state) asked for (dstate), from a
 * random start state (angles next to the wrap). Reference: central differences (h = 1e-6) of the double forward's
 * L = Σ dout ⊙ out + Σ dEnd ⊙ state_end over the start state, every in_proj field and every per-head parameter.
 */
Prepared m3BackwardCarryCase(Ops& ops, uint64_t seed, const M3Shape& sh) {
    Rng rng(seed);
    Prepared p = m3Start(ops);
    Arena* A = p.arena.get();
    const M3Setup m = m3Setup(rng, sh);
    const int64_t R = m.prob.rows(), E = m.prob.dInner(), W = m.prob.projWidth(), SS = m.prob.stateSize();
    const int H = sh.H, N = sh.N, B = sh.B;
    const ref::Mamba3Result fwd = ref::mamba3Scan(m.prob, sh.chunk);
    const std::vector<float> ckf(fwd.checkpoints.begin(), fwd.checkpoints.end());
    const std::vector<float> doutv = uniform(rng, R * E, -1, 1);
    std::vector<float> dend(static_cast<size_t>(B * m.stride), poisonValue());
    for (int b = 0; b < B; ++b)
        for (int64_t i = 0; i < SS; ++i) dend[b * m.stride + i] = static_cast<float>(rng.uniform(-1, 1));
    const std::vector<float> g0dt = uniform(rng, H, -0.5, 0.5), g0bb = uniform(rng, static_cast<int64_t>(H) * N, -0.5, 0.5),
                             g0cb = uniform(rng, static_cast<int64_t>(H) * N, -0.5, 0.5), g0bn = uniform(rng, N, -0.5, 0.5),
                             g0cn = uniform(rng, N, -0.5, 0.5), g0d = uniform(rng, H, -0.5, 0.5),
                             g0gn = sh.gateNorm ? uniform(rng, E, -0.5, 0.5) : std::vector<float>{};
    Mamba3ScanBackwardArgs a{};
    a.fwd = m3Args(*A, m, A->put(m.proj), nullptr, nullptr, sh.T);
    a.checkpoints = A->put(ckf);
    a.chunk = sh.chunk;
    a.dout = A->put(doutv);
    a.lddout = E;
    float* ddproj = A->poisoned(R * W);
    a.dproj = ddproj;
    a.lddproj = W;
    float *gdt = A->put(g0dt), *gbb = A->put(g0bb), *gcb = A->put(g0cb), *gbn = A->put(g0bn), *gcn = A->put(g0cn), *gd = A->put(g0d);
    float* ggn = sh.gateNorm ? A->put(g0gn) : nullptr;
    a.d_dt_bias = gdt, a.d_b_bias = gbb, a.d_c_bias = gcb, a.d_b_norm = gbn, a.d_c_norm = gcn, a.d_d_skip = gd, a.d_gate_norm = ggn;
    float* dstart = A->poisoned(B * m.stride);
    a.dstate_end = A->put(dend);
    a.dstate = dstart;
    a.dstate_stride = m.stride;
    p.call = [&ops, a] { ops.mamba3ScanBackward(a); };

    ref::Mamba3Problem pr = m.prob;
    const Vec doutD = toDouble(doutv), dendD = dense(dend, B, m.stride, SS);
    auto loss = [&pr, &doutD, &dendD] {
        const ref::Mamba3Result r = ref::mamba3Scan(pr);
        double l = 0;
        for (size_t i = 0; i < r.out.size(); ++i) l += r.out[i] * doutD[i];
        for (size_t i = 0; i < r.state.size(); ++i) l += r.state[i] * dendD[i];
        return l;
    };
    auto cd = [&loss](Vec& v) { return centralDifferences(v, loss); };
    auto plus = [](const std::vector<float>& g0, const Vec& d) {
        Vec v = toDouble(g0);
        for (size_t i = 0; i < v.size(); ++i) v[i] += d[i];
        return v;
    };
    const Vec wState = cd(pr.state0), wProj = cd(pr.proj);
    const Vec wdt = plus(g0dt, cd(pr.dt_bias)), wbb = plus(g0bb, cd(pr.b_bias)), wcb = plus(g0cb, cd(pr.c_bias)),
              wbn = plus(g0bn, cd(pr.b_norm)), wcn = plus(g0cn, cd(pr.c_norm)), wd = plus(g0d, cd(pr.d_skip)),
              wgn = sh.gateNorm ? plus(g0gn, cd(pr.gate_norm)) : Vec{};
    const int64_t stride = m.stride;
    const bool gateNorm = sh.gateNorm;
    const double tol = sh.N == 1 ? kTolM3BwdOneState : kTolM3Bwd;
    p.check = [=] {
        const std::vector<float> gs = A->get(dstart, B * stride);
        std::vector<Compare> c{nmax("dstate", strip(gs, B, stride, SS), wState, tol), padding("dstate", gs, B, stride, SS),
                               nmax("dproj", A->get(ddproj, R * W), wProj, tol),
                               nmax("d_dt_bias", A->get(gdt, H), wdt, tol),
                               nmax("d_b_bias", A->get(gbb, static_cast<int64_t>(H) * N), wbb, tol),
                               nmax("d_c_bias", A->get(gcb, static_cast<int64_t>(H) * N), wcb, tol),
                               nmax("d_b_norm", A->get(gbn, N), wbn, tol),
                               nmax("d_c_norm", A->get(gcn, N), wcn, tol),
                               nmax("d_d_skip", A->get(gd, H), wd, tol)};
        if (gateNorm) c.push_back(nmax("d_gate_norm", A->get(ggn, E), wgn, tol));
        return c;
    };
    p.outputs = [=] { return std::vector<std::vector<float>>{A->get(dstart, B * stride), A->get(ddproj, R * W)}; };
    p.bytes = 4.0 * R * (2.0 * W + 2.0 * E);
    return p;
}

}  // namespace

// ================================================================ the cases

namespace {

int anglesFor(int N, double fraction) {
    int s = static_cast<int>(N * fraction);
    if (s % 2) --s;
    return s / 2;
}

/** The head shapes the small cases run: [H, P, N, G, A, gate norm]. */
struct HeadCfg {
    int H, P, N, G, NA;
    bool gateNorm;
};
const HeadCfg kHeadsA{4, 16, 32, 2, anglesFor(32, 0.5), false};  // ngroups 2, rope 0.5
const HeadCfg kHeadsB{3, 5, 6, 1, anglesFor(6, 1.0), true};      // odd headdim, rope 1 with odd nangles, gate norm
const HeadCfg kHeadsC{2, 1, 2, 2, 1, false};                     // headdim 1, d_state 2, one group per head
const HeadCfg kHeadsD{2, 3, 1, 1, 0, false};                     // d_state 1: no angles
const HeadCfg kHeadsE{2, 64, 128, 1, 32, true};                  // the official head (headdim 64, d_state 128)

M3Shape shapeOf(const HeadCfg& h, int B, int T, int chunk, bool pad, bool fresh = false) {
    M3Shape s{B, T, h.H, h.P, h.N, h.G, h.NA};
    s.gateNorm = h.gateNorm;
    s.chunk = chunk;
    s.pad = pad;
    s.fresh = fresh;
    return s;
}

/** The official default at d_model 1024: nheads 32, headdim 64, d_state 128, 32 angles, one group. */
M3Shape officialShape(int B, int T, int chunk) {
    M3Shape s{B, T, 32, 64, 128, 1, 32};
    s.chunk = chunk;
    return s;
}

}  // namespace

std::vector<Case> mamba3Cases() {
    std::vector<Case> t;
    auto fwd = [&t](const M3Shape& s, bool big = false, const std::string& note = "") {
        t.push_back(Case{"mamba3Scan", shapeName(s) + note, DTYPE_F32, "-", s.chunk > 0 ? NEED_TRAINING : NEED_NONE, big,
                         [s](Ops& o, uint64_t seed) { return m3ForwardCase(o, seed, s); }});
    };
    auto bwd = [&t](const M3Shape& s, bool big = false) {
        t.push_back(Case{"mamba3ScanBackward", shapeName(s), DTYPE_F32, "-", NEED_TRAINING, big,
                         [s](Ops& o, uint64_t seed) { return m3BackwardCase(o, seed, s); }});
    };
    auto split = [&t](const M3Shape& s, const std::vector<int>& cuts, const std::string& how) {
        t.push_back(Case{"mamba3Scan.split", shapeName(s) + " as " + how + " state carried", DTYPE_F32, "-", NEED_NONE, false,
                         [s, cuts](Ops& o, uint64_t seed) { return m3SplitCase(o, seed, s, cuts); }});
    };
    const int Ts[] = {1, 63, 64, 65, 130};
    for (const HeadCfg& h : {kHeadsA, kHeadsB})
        for (int T : Ts)
            for (int B : {1, 3}) fwd(shapeOf(h, B, T, 0, B == 3));
    for (const HeadCfg& h : {kHeadsA, kHeadsB})
        for (int T : Ts) fwd(shapeOf(h, 3, T, 64, true));
    for (const HeadCfg& h : {kHeadsC, kHeadsD, kHeadsE})
        for (int T : {1, 65}) {
            fwd(shapeOf(h, 3, T, 0, true));
            fwd(shapeOf(h, 3, T, 64, false));
        }
    fwd(shapeOf(kHeadsA, 3, 64, 16, false, true));
    // Long enough for several chunks of the CUDA chunked form (kMamba3Chunk = 64), state carried in and out.
    fwd(shapeOf(kHeadsA, 3, 256, 0, false));
    fwd(shapeOf(kHeadsB, 2, 1000, 64, true));
    fwd(shapeOf(kHeadsE, 2, 1000, 64, true));
    for (const HeadCfg& h : {kHeadsA, kHeadsB}) {
        split(shapeOf(h, 3, 130, 0, true), {65}, "65+65");
        split(shapeOf(h, 3, 65, 0, false), {1}, "1+64");
        split(shapeOf(h, 2, 7, 0, true), {1, 2, 3, 4, 5, 6}, "7 single steps");
    }
    split(shapeOf(kHeadsA, 2, 1000, 0, true), {300, 301}, "300+1+699");
    split(shapeOf(kHeadsE, 1, 1000, 0, false), {130}, "130+870");
    for (const HeadCfg& h : {kHeadsA, kHeadsB})
        for (int T : Ts)
            for (int B : {1, 3}) bwd(shapeOf(h, B, T, 64, B == 3));
    for (const HeadCfg& h : {kHeadsC, kHeadsD, kHeadsE}) bwd(shapeOf(h, 3, 65, 64, true));
    bwd(shapeOf(kHeadsB, 2, 7, 4, false));
    bwd(shapeOf(kHeadsA, 2, 64, 16, false, true));
    // Several chunks of the CUDA chunked backward (kMamba3Chunk = 64), the last one partial.
    bwd(shapeOf(kHeadsA, 2, 256, 64, false));
    bwd(shapeOf(kHeadsB, 2, 1000, 64, true));
    bwd(shapeOf(kHeadsE, 2, 1000, 64, true));
    // State carry (dstate_end in, dstate out), against central differences; the T 33 ckpt/64 shape is one the CUDA
    // chunked backward would take without a carry.
    auto carry = [&t](const M3Shape& s) {
        t.push_back(Case{"mamba3ScanBackward.carry", shapeName(s) + " dstate_end+dstate", DTYPE_F32, "-", NEED_TRAINING, false,
                         [s](Ops& o, uint64_t seed) { return m3BackwardCarryCase(o, seed, s); }});
    };
    carry(shapeOf(kHeadsB, 2, 12, 4, true));
    carry(shapeOf(kHeadsC, 2, 9, 4, false));
    carry(shapeOf(kHeadsA, 1, 5, 4, false));
    carry(shapeOf(kHeadsB, 1, 33, 64, false));

    // The official default (d_model 1024) for timing: decode, prefill, the training forward and backward.
    fwd(officialShape(1, 1, 0), true, " (decode)");
    fwd(officialShape(64, 1, 0), true, " (decode)");
    fwd(officialShape(1, 4096, 0), true, " (prefill)");
    fwd(officialShape(8, 256, 64), true, " (training)");
    bwd(officialShape(8, 256, 64), true);
    {  // a 768-wide model (24 heads of the official shape) at the official training length
        M3Shape s = officialShape(8, 2048, 64);
        s.H = 24;
        bwd(s, true);
    }
    return t;
}

std::vector<Case> mamba3TrainingCases() {
    // Several (row, head) tasks and chunks, so 1, 2 and 3 threads split them differently.
    const M3Shape f = shapeOf(kHeadsA, 3, 130, 64, true);
    const M3Shape b1 = shapeOf(kHeadsA, 3, 130, 64, true);
    const M3Shape b2 = shapeOf(kHeadsB, 3, 65, 16, false);
    return {
        Case{"mamba3Scan", shapeName(f), DTYPE_F32, "repro", NEED_TRAINING, false, [f](Ops& o, uint64_t s) { return m3ForwardCase(o, s, f); }},
        Case{"mamba3ScanBackward", shapeName(b1), DTYPE_F32, "repro", NEED_TRAINING, false,
             [b1](Ops& o, uint64_t s) { return m3BackwardCase(o, s, b1); }},
        Case{"mamba3ScanBackward", shapeName(b2), DTYPE_F32, "repro", NEED_TRAINING, false,
             [b2](Ops& o, uint64_t s) { return m3BackwardCase(o, s, b2); }},
    };
}

}  // namespace optest
