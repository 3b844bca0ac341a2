// The Mamba-3 SISO scan on the CPU (the math: Mamba3ScanArgs in ops/ops.h, /work/shared/reference/mamba3-siso.md).
//
// Tasks are (batch row, head): a head's state S [headdim, d_state], k_prev, v_prev and θ are its own, so the
// forward of one task runs the recurrence step by step over all T steps in place in the caller's state, with
// the d_state loops in SIMD lanes. The backward task recomputes each chunk of steps from its checkpoint
// (keeping the per-step states) and walks it in reverse. What crosses heads — B̂/Ĉ (shared by a group's heads)
// and the angle inputs (shared by all heads) — is kept per (row, head) in scratch and summed over the heads
// in head order by a second pass; parameter gradients are kept per task and summed over rows in row order.
// So the results are bit-identical for any thread count.
//
// Numerics shared with the CUDA backend: f32 throughout; eps 1e-5 in BCNorm and the gate norm; softplus with
// threshold 20; the angle update θ ← θ + 3.14159265f·tanh(angle)·Δ, then θ − 6.28318531f·floor(θ / 6.28318531f),
// every step (the wrap has zero derivative).
#include "cpu_backend.h"

#include "core/errors.h"
#include "fast_math.h"
#include "thread_pool.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace mamba::cpu {
namespace {

constexpr float kPi = 3.14159265f;
constexpr float kTwoPi = 6.28318531f;
constexpr float kNormEps = 1e-5f;
constexpr int kMaxDState = 1024;
constexpr int kMaxHeaddim = 4096;

std::string str(int64_t v) { return std::to_string(v); }

void validateScan(const char* op, const Mamba3ScanArgs& s) {
    const std::string o(op);
    if (s.batch < 0 || s.steps < 0)
        fail(o + ": batch and steps must be >= 0 (got " + str(s.batch) + ", " + str(s.steps) + ")");
    if (s.nheads < 1 || s.headdim < 1 || s.headdim > kMaxHeaddim)
        fail(o + ": nheads = " + str(s.nheads) + " must be >= 1 and headdim = " + str(s.headdim) + " in [1, " +
             str(kMaxHeaddim) + "]");
    if (s.d_state < 1 || s.d_state > kMaxDState)
        fail(o + ": d_state = " + str(s.d_state) + " must be in [1, " + str(kMaxDState) + "]");
    if (s.ngroups < 1 || s.nheads % s.ngroups != 0)
        fail(o + ": ngroups = " + str(s.ngroups) + " must be >= 1 and divide nheads = " + str(s.nheads));
    if (s.nangles < 0 || 2 * s.nangles > s.d_state)
        fail(o + ": nangles = " + str(s.nangles) + " must be in [0, d_state / 2] (d_state = " + str(s.d_state) + ")");
    if (!(s.a_floor >= 0.f) || !std::isfinite(s.a_floor))
        fail(o + ": a_floor = " + std::to_string(s.a_floor) + " must be finite and >= 0");
    if (s.ldproj < s.projWidth())
        fail(o + ": ldproj = " + str(s.ldproj) + " is less than the in_proj width " + str(s.projWidth()));
    if (s.ldout < s.dInner()) fail(o + ": ldout = " + str(s.ldout) + " is less than nheads·headdim = " + str(s.dInner()));
    if (s.state && s.batch > 1 && s.state_stride < s.stateSize())
        fail(o + ": state_stride = " + str(s.state_stride) + " is less than the row state size " + str(s.stateSize()));
    if (!s.proj || !s.dt_bias || !s.b_bias || !s.c_bias || !s.b_norm || !s.c_norm || !s.d_skip)
        fail(o + ": proj, dt_bias, b_bias, c_bias, b_norm, c_norm and d_skip must all be given");
}

/** The per-(step, head) scalars. */
struct HeadScalars {
    float delta, A, sig, alpha, beta, gamma;
    bool clamped;  // A sits on the floor −a_floor: no gradient reaches dd_A
};

inline HeadScalars headScalars(const Mamba3ScanArgs& s, const float* row, int h) {
    HeadScalars v;
    v.delta = softplus(row[s.dtCol() + h] + s.dt_bias[h]);
    const float u = row[s.aCol() + h];
    const float a = -(u >= 0.f ? 1.f + u : 1.f / (1.f - u));  // −ht(dd_A)
    v.clamped = !(a < -s.a_floor);
    v.A = v.clamped ? -s.a_floor : a;
    v.sig = sigmoid(row[s.trapCol() + h]);
    v.alpha = fastExp(v.A * v.delta);
    v.beta = v.alpha * v.delta * (1.f - v.sig);
    v.gamma = v.sig * v.delta;
    return v;
}

inline float invRms(const float* v, int n) {
    float ss = 0.f;
#pragma omp simd reduction(+ : ss)
    for (int i = 0; i < n; ++i) ss += v[i] * v[i];
    return 1.f / std::sqrt(ss / static_cast<float>(n) + kNormEps);
}

/** pre = w ⊙ raw / rms(raw) + bias (BCNorm of one group, then the head's bias). */
inline void normBias(const float* raw, const float* w, const float* bias, int N, float* pre) {
    const float rho = invRms(raw, N);
#pragma omp simd
    for (int n = 0; n < N; ++n) pre[n] = w[n] * (raw[n] * rho) + bias[n];
}

/** out = pre with the pairs (2a, 2a+1), a < NA, rotated by the angle whose cosine and sine are cs[a], sn[a]. */
inline void rotate(const float* pre, const float* cs, const float* sn, int NA, int N, float* out) {
#pragma omp simd
    for (int a = 0; a < NA; ++a) {
        const float p0 = pre[2 * a], p1 = pre[2 * a + 1];
        out[2 * a] = cs[a] * p0 - sn[a] * p1;
        out[2 * a + 1] = sn[a] * p0 + cs[a] * p1;
    }
    for (int n = 2 * NA; n < N; ++n) out[n] = pre[n];
}

/**
 * Everything of one (step, head) that does not depend on S: the scalars; θ advanced in place; k and q (biased,
 * rotated) with their unrotated kPre/qPre; cos/sin of the new θ; tanh of the angle inputs (th).
 */
inline HeadScalars prepareStep(const Mamba3ScanArgs& s, const float* row, int h, float* theta, float* kPre, float* qPre,
                               float* k, float* q, float* cs, float* sn, float* th) {
    const int N = s.d_state, NA = s.nangles, g = h / (s.nheads / s.ngroups);
    const HeadScalars v = headScalars(s, row, h);
    const float* ang = row + s.angleCol();
    const float delta = v.delta;
#pragma omp simd
    for (int a = 0; a < NA; ++a) {
        const float t = fastTanh(ang[a]);
        th[a] = t;
        float x = theta[a] + kPi * t * delta;
        x = x - kTwoPi * __builtin_floorf(x / kTwoPi);
        theta[a] = x;
        fastSinCos(x, &sn[a], &cs[a]);
    }
    normBias(row + s.bCol() + g * N, s.b_norm, s.b_bias + static_cast<int64_t>(h) * N, N, kPre);
    normBias(row + s.cCol() + g * N, s.c_norm, s.c_bias + static_cast<int64_t>(h) * N, N, qPre);
    rotate(kPre, cs, sn, NA, N, k);
    rotate(qPre, cs, sn, NA, N, q);
    return v;
}

/**
 * Sums over d_state run in kLanes partial sums (lane l takes n ≡ l mod kLanes, the tail n ≥ N − N % kLanes goes
 * to lane 0), added pairwise at the end: a fixed order that GCC keeps in one vector register. (`omp simd
 * reduction` over a d_state of 128 spends as long on its per-row setup and spill as on the sum.)
 */
constexpr int kLanes = 8;
inline float sumLanes(const float* a) { return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])); }

/**
 * The recurrence of one head at one step: Sout = α·Sin + β·v_prev ⊗ k_prev + γ·x ⊗ k (Sout may be Sin), and
 * y = Sout·q + D·x. bk, gk are N floats of workspace.
 */
inline void stateStep(int P, int N, const HeadScalars& v, const float* Sin, float* Sout, const float* kPrev,
                      const float* vPrev, const float* x, const float* k, const float* q, float D, float* bk, float* gk,
                      float* y) {
#pragma omp simd
    for (int n = 0; n < N; ++n) {
        bk[n] = v.beta * kPrev[n];
        gk[n] = v.gamma * k[n];
    }
    const int NV = N - N % kLanes;
    const float alpha = v.alpha;
    for (int p = 0; p < P; ++p) {
        const float* si = Sin + static_cast<int64_t>(p) * N;
        float* so = Sout + static_cast<int64_t>(p) * N;
        const float vp = vPrev[p], xp = x[p];
        float acc[kLanes] = {};
        for (int n = 0; n < NV; n += kLanes)
            for (int l = 0; l < kLanes; ++l) {
                const float e = alpha * si[n + l] + vp * bk[n + l] + xp * gk[n + l];
                so[n + l] = e;
                acc[l] += e * q[n + l];
            }
        for (int n = NV; n < N; ++n) {
            const float e = alpha * si[n] + vp * bk[n] + xp * gk[n];
            so[n] = e;
            acc[0] += e * q[n];
        }
        y[p] = sumLanes(acc) + D * xp;
    }
}

/**
 * One row p of a head's state in the reverse pass: G_p += dy_p·q (then G_p ← α·G_p for the step before), and the
 * contractions dq += dy_p·S_t[p], dkx += G_p·x_p, dkv += G_p·v_prev[p], gkt = G_p·k, gkp = G_p·k_prev,
 * da = G_p·S_{t−1}[p].
 */
inline void reverseRow(int N, float* __restrict G, const float* __restrict sc, const float* __restrict sp,
                       const float* __restrict q, const float* __restrict k, const float* __restrict kPrev, float dy, float x,
                       float vp, float alpha, float* __restrict dq, float* __restrict dkx, float* __restrict dkv, float* gkt,
                       float* gkp, float* da) {
    float a1 = 0.f, a2 = 0.f, a3 = 0.f;
#pragma omp simd reduction(+ : a1, a2, a3)
    for (int i = 0; i < N; ++i) {
        const float gn = G[i] + dy * q[i];
        dq[i] += dy * sc[i];
        a1 += gn * k[i];
        a2 += gn * kPrev[i];
        a3 += gn * sp[i];
        dkx[i] += gn * x;
        dkv[i] += gn * vp;
        G[i] = gn * alpha;
    }
    *gkt = a1;
    *gkp = a2;
    *da = a3;
}

/** out = y ⊙ SiLU(z), or with gate norm w: w ⊙ y / rms(y) ⊙ SiLU(z) (over the head). */
inline void gate(int P, const float* y, const float* z, const float* w, float* out) {
    if (!w) {
#pragma omp simd
        for (int p = 0; p < P; ++p) out[p] = y[p] * silu(z[p]);
    } else {
        const float rho = invRms(y, P);
#pragma omp simd
        for (int p = 0; p < P; ++p) out[p] = w[p] * (y[p] * rho) * silu(z[p]);
    }
}

/** Rounds a workspace length up to whole cache lines, so carved pieces start aligned. */
inline int64_t lines(int64_t n) { return (n + 15) / 16 * 16; }

/** The forward of one (row b, head h) over all steps, in place in the row's state. */
void forwardTask(const Mamba3ScanArgs& s, const ScanCheckpoints* ck, int b, int h) {
    const int T = s.steps, P = s.headdim, N = s.d_state, NA = s.nangles;
    float* st = s.state + b * s.state_stride;
    float* S = st + static_cast<int64_t>(h) * P * N;
    float* kPrev = st + s.kOffset() + static_cast<int64_t>(h) * N;
    float* vPrev = st + s.vOffset() + static_cast<int64_t>(h) * P;
    float* theta = st + s.angleOffset() + static_cast<int64_t>(h) * NA;
    const int64_t nN = lines(N), nA = lines(NA), nP = lines(P);
    float* w = workerScratch(0, 6 * nN + 3 * nA + nP);
    float *kPre = w, *qPre = w + nN, *k = w + 2 * nN, *q = w + 3 * nN, *bk = w + 4 * nN, *gk = w + 5 * nN;
    float *cs = w + 6 * nN, *sn = cs + nA, *th = sn + nA, *y = th + nA;
    const float D = s.d_skip[h];
    const float* gw = s.gate_norm ? s.gate_norm + static_cast<int64_t>(h) * P : nullptr;
    float* ckRow = nullptr;
    const int64_t SS = s.stateSize();
    if (ck) ckRow = ck->data + static_cast<int64_t>(b) * ((T + ck->chunk - 1) / ck->chunk) * SS;
    for (int t = 0; t < T; ++t) {
        if (ckRow && t % ck->chunk == 0) {
            float* dst = ckRow + static_cast<int64_t>(t / ck->chunk) * SS;
            std::memcpy(dst + static_cast<int64_t>(h) * P * N, S, sizeof(float) * P * N);
            std::memcpy(dst + s.kOffset() + static_cast<int64_t>(h) * N, kPrev, sizeof(float) * N);
            std::memcpy(dst + s.vOffset() + static_cast<int64_t>(h) * P, vPrev, sizeof(float) * P);
            if (NA) std::memcpy(dst + s.angleOffset() + static_cast<int64_t>(h) * NA, theta, sizeof(float) * NA);
        }
        const int64_t r = static_cast<int64_t>(b) * T + t;
        const float* row = s.proj + r * s.ldproj;
        const float* x = row + s.xCol() + h * P;
        const HeadScalars v = prepareStep(s, row, h, theta, kPre, qPre, k, q, cs, sn, th);
        stateStep(P, N, v, S, S, kPrev, vPrev, x, k, q, D, bk, gk, y);
        std::memcpy(kPrev, k, sizeof(float) * N);
        std::memcpy(vPrev, x, sizeof(float) * P);
        gate(P, y, row + s.zCol() + h * P, gw, s.out + r * s.ldout + h * P);
    }
}

/** Where a backward task leaves what must be summed across tasks or heads (scratch of the calling thread). */
struct BackwardParts {
    float* dkq;    // [R][nheads][2·d_state]: ∂L/∂k_pre then ∂L/∂q_pre of every (row, head)
    float* dang;   // [R][nheads][nangles]: the angle inputs' gradient through each head
    float* ptask;  // [batch·nheads][2 + 2·d_state + headdim]: d_dt_bias, d_D, d_b_bias, d_c_bias, d_gate_norm
    int64_t taskStride;
};

/** The backward of one (row b, head h): chunks in reverse, each recomputed from its checkpoint. */
void backwardTask(const Mamba3ScanBackwardArgs& a, const BackwardParts& out, int b, int h) {
    const Mamba3ScanArgs& s = a.fwd;
    const int T = s.steps, P = s.headdim, N = s.d_state, NA = s.nangles, H = s.nheads, K = a.chunk;
    const int chunks = (T + K - 1) / K;
    const int64_t SS = s.stateSize(), PN = static_cast<int64_t>(P) * N;
    const int64_t nN = lines(N), nA = lines(NA), nP = lines(P);
    const int KS = std::min(K, T);  // steps per chunk actually held

    // Workspace: the states S_{ta−1} … S_{tb−1}, then per step k (with k_prev in front), q, k_pre, q_pre, cos, sin,
    // tanh, y and the scalars; then the carries and per-step temporaries.
    float* hs = workerScratch(1, (KS + 1) * PN);
    const int64_t perStep = 3 * nN + 3 * nA + nP;  // q, k_pre, q_pre, cos, sin, tanh, y
    float* w = workerScratch(2, (KS + 1) * nN + KS * perStep + 8 * nN + 4 * nP + 2 * nA);
    float* kAll = w;  // [KS + 1][nN]: kAll[0] = k_prev of the chunk's first step
    float* qAll = kAll + (KS + 1) * nN;
    float* kPreAll = qAll + KS * nN;
    float* qPreAll = kPreAll + KS * nN;
    float* csAll = qPreAll + KS * nN;
    float* snAll = csAll + KS * nA;
    float* thAll = snAll + KS * nA;
    float* yAll = thAll + KS * nA;
    float* tmp = yAll + KS * nP;
    float *bk = tmp, *gk = tmp + nN, *kappa = tmp + 2 * nN, *dq = tmp + 3 * nN, *dkx = tmp + 4 * nN, *dkv = tmp + 5 * nN;
    float* dk = tmp + 6 * nN;
    float *dxNext = tmp + 8 * nN, *dy = dxNext + nP, *dxv = dy + nP, *v0 = dxv + nP;
    float *phi = v0 + nP, *theta = phi + nA;
    thread_local std::vector<HeadScalars> scalBuf;
    if (static_cast<int>(scalBuf.size()) < KS) scalBuf.resize(static_cast<size_t>(KS));
    HeadScalars* scal = scalBuf.data();
    float* Gs = workerScratch(3, PN);

    const float D = s.d_skip[h];
    const float* gw = s.gate_norm ? s.gate_norm + static_cast<int64_t>(h) * P : nullptr;
    float* pt = out.ptask + (static_cast<int64_t>(b) * H + h) * out.taskStride;
    float& dDtBias = pt[0];
    float& dD = pt[1];
    float* dbb = pt + 2;
    float* dcb = dbb + N;
    float* dgn = dcb + N;
    std::fill(pt, pt + out.taskStride, 0.f);
    std::fill(Gs, Gs + PN, 0.f);
    std::fill(kappa, kappa + N, 0.f);
    std::fill(dxNext, dxNext + P, 0.f);
    std::fill(phi, phi + NA, 0.f);
    if (a.dstate_end) {  // the state carried on: its gradient seeds the reverse carries (k_end = k_{T−1}, v_end = x_{T−1})
        const float* e = a.dstate_end + b * a.dstate_stride;
        std::memcpy(Gs, e + static_cast<int64_t>(h) * PN, sizeof(float) * PN);
        std::memcpy(kappa, e + s.kOffset() + static_cast<int64_t>(h) * N, sizeof(float) * N);
        std::memcpy(dxNext, e + s.vOffset() + static_cast<int64_t>(h) * P, sizeof(float) * P);
        if (NA) std::memcpy(phi, e + s.angleOffset() + static_cast<int64_t>(h) * NA, sizeof(float) * NA);
    }
    const float* ckRow = a.checkpoints + static_cast<int64_t>(b) * chunks * SS;

    for (int c = chunks - 1; c >= 0; --c) {
        const int ta = c * K, tb = std::min(T, ta + K);
        // The chunk's forward from its checkpoint (the forward's own step functions).
        const float* ck = ckRow + static_cast<int64_t>(c) * SS;
        std::memcpy(hs, ck + static_cast<int64_t>(h) * PN, sizeof(float) * PN);
        std::memcpy(kAll, ck + s.kOffset() + static_cast<int64_t>(h) * N, sizeof(float) * N);
        std::memcpy(v0, ck + s.vOffset() + static_cast<int64_t>(h) * P, sizeof(float) * P);
        if (NA) std::memcpy(theta, ck + s.angleOffset() + static_cast<int64_t>(h) * NA, sizeof(float) * NA);
        for (int t = ta; t < tb; ++t) {
            const int i = t - ta;
            const float* row = s.proj + (static_cast<int64_t>(b) * T + t) * s.ldproj;
            const float* vPrev = i == 0 ? v0 : row - s.ldproj + s.xCol() + h * P;
            float* k = kAll + (i + 1) * nN;
            scal[i] = prepareStep(s, row, h, theta, kPreAll + i * nN, qPreAll + i * nN, k, qAll + i * nN, csAll + i * nA,
                                  snAll + i * nA, thAll + i * nA);
            stateStep(P, N, scal[i], hs + i * PN, hs + (i + 1) * PN, kAll + i * nN, vPrev, row + s.xCol() + h * P, k,
                      qAll + i * nN, D, bk, gk, yAll + i * nP);
        }
        // Reverse time.
        for (int t = tb - 1; t >= ta; --t) {
            const int i = t - ta;
            const int64_t r = static_cast<int64_t>(b) * T + t;
            const float* row = s.proj + r * s.ldproj;
            float* drow = a.dproj + r * a.lddproj;
            const float* x = row + s.xCol() + h * P;
            const float* z = row + s.zCol() + h * P;
            const float* dg = a.dout + r * a.lddout + h * P;
            const float* y = yAll + i * nP;
            const float* vPrev = i == 0 ? v0 : row - s.ldproj + s.xCol() + h * P;
            const float* k = kAll + (i + 1) * nN;
            const float* kPrev = kAll + i * nN;
            const float* q = qAll + i * nN;
            const float* Scur = hs + (i + 1) * PN;
            const float* Sprev = hs + i * PN;
            const HeadScalars& v = scal[i];
            float* dz = drow + s.zCol() + h * P;

            // The gate.
            if (!gw) {
#pragma omp simd
                for (int p = 0; p < P; ++p) {
                    const float zp = z[p], sg = sigmoid(zp);
                    dy[p] = dg[p] * (zp * sg);
                    dz[p] = dg[p] * y[p] * (sg * (1.f + zp * (1.f - sg)));
                }
            } else {
                const float rho = invRms(y, P);
                float m = 0.f;
#pragma omp simd reduction(+ : m)
                for (int p = 0; p < P; ++p) m += gw[p] * (dg[p] * silu(z[p])) * (rho * y[p]);
                m /= static_cast<float>(P);
#pragma omp simd
                for (int p = 0; p < P; ++p) {
                    const float zp = z[p], sg = sigmoid(zp), yhat = rho * y[p], e = dg[p] * (zp * sg);
                    dz[p] = dg[p] * yhat * gw[p] * (sg * (1.f + zp * (1.f - sg)));
                    dgn[p] += e * yhat;
                    dy[p] = rho * (gw[p] * e - yhat * m);
                }
            }
            {
                float acc = 0.f;
#pragma omp simd reduction(+ : acc)
                for (int p = 0; p < P; ++p) acc += dy[p] * x[p];
                dD += acc;
            }

            // The recurrence: G (∂L/∂S_t) gains dy ⊗ q; one pass over the head's state gives every contraction.
            std::fill(dq, dq + N, 0.f);
            std::fill(dkx, dkx + N, 0.f);
            std::fill(dkv, dkv + N, 0.f);
            float dAlpha = 0.f, dBeta = 0.f, dGamma = 0.f;
            for (int p = 0; p < P; ++p) {
                float gkt, gkp, da;
                reverseRow(N, Gs + static_cast<int64_t>(p) * N, Scur + static_cast<int64_t>(p) * N,
                           Sprev + static_cast<int64_t>(p) * N, q, k, kPrev, dy[p], x[p], vPrev[p], v.alpha, dq, dkx, dkv,
                           &gkt, &gkp, &da);
                dxv[p] = D * dy[p] + v.gamma * gkt + dxNext[p];
                dxNext[p] = v.beta * gkp;  // reaches x_{t−1} as v_prev (at t = 0: the starting v_prev)
                dBeta += vPrev[p] * gkp;
                dGamma += x[p] * gkt;
                dAlpha += da;
            }
            std::memcpy(drow + s.xCol() + h * P, dxv, sizeof(float) * P);
#pragma omp simd
            for (int n = 0; n < N; ++n) {
                dk[n] = kappa[n] + v.gamma * dkx[n];
                kappa[n] = v.beta * dkv[n];  // reaches k_{t−1} as k_prev (at t = 0: the starting k_prev)
            }

            // RoPE back to k_pre, q_pre and θ_t; φ = Σ_{s ≥ t} ∂L/∂θ_s.
            float* dkq = out.dkq + (r * H + h) * 2 * N;
            float* dqPre = dkq + N;
            const float* kp = kPreAll + i * nN;
            const float* qp = qPreAll + i * nN;
            const float* cs = csAll + i * nA;
            const float* sn = snAll + i * nA;
            for (int an = 0; an < NA; ++an) {
                const float c0 = cs[an], s0 = sn[an];
                const float k0 = dk[2 * an], k1 = dk[2 * an + 1], q0 = dq[2 * an], q1 = dq[2 * an + 1];
                dkq[2 * an] = c0 * k0 + s0 * k1;
                dkq[2 * an + 1] = -s0 * k0 + c0 * k1;
                dqPre[2 * an] = c0 * q0 + s0 * q1;
                dqPre[2 * an + 1] = -s0 * q0 + c0 * q1;
                phi[an] += k0 * (-s0 * kp[2 * an] - c0 * kp[2 * an + 1]) + k1 * (c0 * kp[2 * an] - s0 * kp[2 * an + 1]) +
                           q0 * (-s0 * qp[2 * an] - c0 * qp[2 * an + 1]) + q1 * (c0 * qp[2 * an] - s0 * qp[2 * an + 1]);
            }
            for (int n = 2 * NA; n < N; ++n) {
                dkq[n] = dk[n];
                dqPre[n] = dq[n];
            }
#pragma omp simd
            for (int n = 0; n < N; ++n) {
                dbb[n] += dkq[n];
                dcb[n] += dqPre[n];
            }

            // The angle inputs (summed over heads later) and Δ's share.
            float dDelta = 0.f;
            const float* th = thAll + i * nA;
            float* dang = out.dang + (r * H + h) * NA;
            for (int an = 0; an < NA; ++an) {
                dang[an] = phi[an] * kPi * v.delta * (1.f - th[an] * th[an]);
                dDelta += phi[an] * kPi * th[an];
            }

            // Δ, A, σ.
            const float dAD = dAlpha * v.alpha + dBeta * v.beta;  // ∂L/∂(A·Δ)
            dDelta += dAD * v.A + dBeta * v.alpha * (1.f - v.sig) + dGamma * v.sig;
            const float dSig = (dGamma - dBeta * v.alpha) * v.delta;
            const float xdt = row[s.dtCol() + h] + s.dt_bias[h];
            const float ddt = dDelta * (xdt > 20.f ? 1.f : sigmoid(xdt));
            const float u = row[s.aCol() + h];
            const float dht = u >= 0.f ? 1.f : 1.f / ((1.f - u) * (1.f - u));
            drow[s.dtCol() + h] = ddt;
            drow[s.aCol() + h] = v.clamped ? 0.f : -(dAD * v.delta) * dht;
            drow[s.trapCol() + h] = dSig * (v.sig * (1.f - v.sig));
            dDtBias += ddt;
        }
    }
    if (a.dstate) {  // past step 0 the carries are the starting state's gradient: S, k_prev, v_prev, θ (θ_t = θ_start + …)
        float* d = a.dstate + b * a.dstate_stride;
        std::memcpy(d + static_cast<int64_t>(h) * PN, Gs, sizeof(float) * PN);
        std::memcpy(d + s.kOffset() + static_cast<int64_t>(h) * N, kappa, sizeof(float) * N);
        std::memcpy(d + s.vOffset() + static_cast<int64_t>(h) * P, dxNext, sizeof(float) * P);
        if (NA) std::memcpy(d + s.angleOffset() + static_cast<int64_t>(h) * NA, phi, sizeof(float) * NA);
    }
}

/** BCNorm's backward for one group at one row: dRaw (written) and dw's share (added to pdw). */
inline void bcNormBackward(const float* raw, const float* w, const float* dhat, int N, float* dRaw, float* pdw) {
    const float rho = invRms(raw, N);
    float m = 0.f;
#pragma omp simd reduction(+ : m)
    for (int n = 0; n < N; ++n) m += w[n] * dhat[n] * (rho * raw[n]);
    m /= static_cast<float>(N);
#pragma omp simd
    for (int n = 0; n < N; ++n) {
        const float bh = rho * raw[n];
        dRaw[n] = rho * (w[n] * dhat[n] - bh * m);
        pdw[n] += dhat[n] * bh;
    }
}

}  // namespace

void CpuBackend::mamba3Scan(const Mamba3ScanArgs& s, const ScanCheckpoints* checkpoints) {
    validateScan("mamba3Scan", s);
    if (checkpoints && (checkpoints->chunk < 1 || checkpoints->data == nullptr))
        fail("mamba3Scan: checkpoints need data and chunk >= 1 (chunk = " + str(checkpoints ? checkpoints->chunk : 0) + ")");
    if (s.batch == 0 || s.steps == 0) return;
    if (!s.state || !s.out) fail("mamba3Scan: state and out must be given");
    const int64_t tasks = static_cast<int64_t>(s.batch) * s.nheads;
    const int64_t work = static_cast<int64_t>(s.batch) * s.steps * s.dInner() * s.d_state;
    parallelFor(tasks, work > kMinParallelWork ? 1 : 1 << 30, [&](int64_t t0, int64_t t1) {
        for (int64_t task = t0; task < t1; ++task)
            forwardTask(s, checkpoints, static_cast<int>(task / s.nheads), static_cast<int>(task % s.nheads));
    });
}

void CpuBackend::mamba3ScanBackward(const Mamba3ScanBackwardArgs& a) {
    const Mamba3ScanArgs& s = a.fwd;
    validateScan("mamba3ScanBackward", s);
    if (a.chunk < 1) fail("mamba3ScanBackward: chunk = " + str(a.chunk) + " must be >= 1");
    if (a.lddout < s.dInner())
        fail("mamba3ScanBackward: lddout = " + str(a.lddout) + " is less than nheads·headdim = " + str(s.dInner()));
    if (a.lddproj < s.projWidth())
        fail("mamba3ScanBackward: lddproj = " + str(a.lddproj) + " is less than the in_proj width " + str(s.projWidth()));
    if (!a.d_dt_bias || !a.d_b_bias || !a.d_c_bias || !a.d_b_norm || !a.d_c_norm || !a.d_d_skip)
        fail("mamba3ScanBackward: the gradients d_dt_bias, d_b_bias, d_c_bias, d_b_norm, d_c_norm and d_d_skip must be given");
    if (s.gate_norm && !a.d_gate_norm) fail("mamba3ScanBackward: d_gate_norm must be given with gate_norm");
    if (s.batch == 0 || s.steps == 0) return;
    if (!a.checkpoints || !a.dout || !a.dproj) fail("mamba3ScanBackward: checkpoints, dout and dproj must be given");

    const int B = s.batch, T = s.steps, H = s.nheads, P = s.headdim, N = s.d_state, NA = s.nangles;
    const int G = s.ngroups, headsPerGroup = H / G;
    const int64_t R = static_cast<int64_t>(B) * T;
    BackwardParts parts;
    parts.taskStride = 2 + 2 * N + P;
    parts.dkq = scratch(0, R * H * 2 * N);
    parts.dang = scratch(1, std::max<int64_t>(1, R * H * NA));
    parts.ptask = scratch(2, static_cast<int64_t>(B) * H * parts.taskStride);
    float* prow = scratch(3, R * 2 * N);  // per row: its share of d_b_norm, d_c_norm

    const int64_t work = R * s.dInner() * N;
    parallelFor(static_cast<int64_t>(B) * H, work > kMinParallelWork ? 1 : 1 << 30, [&](int64_t t0, int64_t t1) {
        for (int64_t task = t0; task < t1; ++task)
            backwardTask(a, parts, static_cast<int>(task / H), static_cast<int>(task % H));
    });

    // Per row: B̂/Ĉ gradients summed over each group's heads in head order, then BCNorm; the angle inputs
    // summed over all heads in head order.
    parallelFor(R, std::max<int64_t>(1, kMinParallelWork / (static_cast<int64_t>(H) * 2 * N)), [&](int64_t r0, int64_t r1) {
        float* dhat = workerScratch(0, 2 * lines(N));
        float* dchat = dhat + lines(N);
        for (int64_t r = r0; r < r1; ++r) {
            const float* row = s.proj + r * s.ldproj;
            float* drow = a.dproj + r * a.lddproj;
            float* pb = prow + r * 2 * N;
            std::fill(pb, pb + 2 * N, 0.f);
            for (int g = 0; g < G; ++g) {
                const float* first = parts.dkq + (r * H + g * headsPerGroup) * 2 * N;
                std::memcpy(dhat, first, sizeof(float) * N);
                std::memcpy(dchat, first + N, sizeof(float) * N);
                for (int h = 1; h < headsPerGroup; ++h) {
                    const float* d = first + static_cast<int64_t>(h) * 2 * N;
#pragma omp simd
                    for (int n = 0; n < N; ++n) {
                        dhat[n] += d[n];
                        dchat[n] += d[N + n];
                    }
                }
                bcNormBackward(row + s.bCol() + g * N, s.b_norm, dhat, N, drow + s.bCol() + g * N, pb);
                bcNormBackward(row + s.cCol() + g * N, s.c_norm, dchat, N, drow + s.cCol() + g * N, pb + N);
            }
            if (NA) {
                float* dang = drow + s.angleCol();
                const float* d0 = parts.dang + r * H * NA;
                std::memcpy(dang, d0, sizeof(float) * NA);
                for (int h = 1; h < H; ++h)
                    for (int an = 0; an < NA; ++an) dang[an] += d0[static_cast<int64_t>(h) * NA + an];
            }
        }
    });

    // Parameters: rows (and tasks) summed in order.
    for (int n = 0; n < 2 * N; ++n) {
        float acc = 0.f;
        for (int64_t r = 0; r < R; ++r) acc += prow[r * 2 * N + n];
        (n < N ? a.d_b_norm[n] : a.d_c_norm[n - N]) += acc;
    }
    for (int h = 0; h < H; ++h) {
        const int64_t stride = parts.taskStride;
        float dtb = 0.f, dd = 0.f;
        for (int b = 0; b < B; ++b) {
            const float* pt = parts.ptask + (static_cast<int64_t>(b) * H + h) * stride;
            dtb += pt[0];
            dd += pt[1];
        }
        a.d_dt_bias[h] += dtb;
        a.d_d_skip[h] += dd;
        for (int j = 0; j < 2 * N + (s.gate_norm ? P : 0); ++j) {
            float acc = 0.f;
            for (int b = 0; b < B; ++b) acc += parts.ptask[(static_cast<int64_t>(b) * H + h) * stride + 2 + j];
            if (j < N)
                a.d_b_bias[static_cast<int64_t>(h) * N + j] += acc;
            else if (j < 2 * N)
                a.d_c_bias[static_cast<int64_t>(h) * N + j - N] += acc;
            else
                a.d_gate_norm[static_cast<int64_t>(h) * P + j - 2 * N] += acc;
        }
    }
}

}  // namespace mamba::cpu
