// One step of the Mamba-3 SISO recurrence, written once: the forward scan (mamba3_scan.cu) and the
// backward's recomputation from the checkpoints (mamba3_scan_backward.cu) both go through these
// functions, so the states the backward sees are the forward's bit for bit. Every rounding that could be
// contracted differently in two call sites is spelled out (__fmul_rn, fmaf, …).
//
// Thread layout (both kernels): one block per (row b, head h). L lanes (a power of two ≤ 32, so a group
// never straddles a warp) share the rows of one "row group"; lane l owns the states n = l + L·i (i < NS)
// — strided, so neighbouring lanes read neighbouring shared-memory words — and group g owns the rows
// p = g + G·j (j < RP), G = threads / L. S[p, n] for the owned (p, n) lives in registers.
#pragma once

#include "kernels.h"

namespace mamba::cuda::m3 {

constexpr float kPi = 3.14159265f;
constexpr float kTwoPi = 6.28318531f;
constexpr float kEps = 1e-5f;  // BCNorm and gate-norm epsilon (fixed, as in the official module)

using Layout = Mamba3Layout;

#ifdef __CUDACC__
__device__ __forceinline__ float sigmoidf(float x) { return 1.f / (1.f + expf(-x)); }
/** The official heavy tail: 1 + u for u ≥ 0, 1/(1 − u) below (continuous, positive). */
__device__ __forceinline__ float heavyTail(float u) { return u >= 0.f ? 1.f + u : 1.f / (1.f - u); }

/** Per (step, head) scalars of the discretisation. */
struct Coeffs {
    float delta, A, sig, alpha, beta, gamma;
};

__device__ __forceinline__ Coeffs coeffs(const Mamba3ScanArgs& s, const Mamba3Offsets& o, const float* row, int h) {
    Coeffs c;
    c.delta = softplusf(row[o.dt + h] + s.dt_bias[h]);
    c.A = fminf(-heavyTail(row[o.a + h]), -s.a_floor);
    c.sig = sigmoidf(row[o.trap + h]);
    c.alpha = expf(__fmul_rn(c.A, c.delta));
    c.beta = __fmul_rn(__fmul_rn(c.alpha, c.delta), 1.f - c.sig);
    c.gamma = __fmul_rn(c.sig, c.delta);
    return c;
}

/**
 * 1/sqrt(mean(v²) + eps) over N values, computed by one warp (lane sums in n order, then a xor tree: every
 * lane, and every warp that calls it on the same data, gets the same bits).
 */
__device__ __forceinline__ float rmsInv(const float* v, int N) {
    const int lane = threadIdx.x & 31;
    float ss = 0.f;
    for (int n = lane; n < N; n += 32) ss = fmaf(v[n], v[n], ss);
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    return 1.f / sqrtf(ss / static_cast<float>(N) + kEps);
}

/** B̂/Ĉ plus the head's bias: w·(raw·rs) + bias. */
__device__ __forceinline__ float normBias(float raw, float rs, float w, float bias) {
    return __fadd_rn(__fmul_rn(w, __fmul_rn(raw, rs)), bias);
}

/** θ ← wrap_2π(θ + π·tanh(ang)·Δ); the wrap is exact in the sense of the reference (floor of θ/2π). */
__device__ __forceinline__ float advanceAngle(float th, float ang, float delta) {
    th = __fadd_rn(th, __fmul_rn(__fmul_rn(kPi, tanhf(ang)), delta));
    return __fsub_rn(th, __fmul_rn(kTwoPi, floorf(__fdiv_rn(th, kTwoPi))));
}

/** (x0, x1) rotated by the angle whose cosine and sine are c, s. */
__device__ __forceinline__ void rotate(float c, float s, float x0, float x1, float& y0, float& y1) {
    y0 = __fsub_rn(__fmul_rn(c, x0), __fmul_rn(s, x1));
    y1 = __fadd_rn(__fmul_rn(s, x0), __fmul_rn(c, x1));
}

/** One state element: S ← α·S + (β·v_prev)·k_prev + (γ·x)·k, with bv = β·v_prev and gx = γ·x. */
__device__ __forceinline__ float stateUpdate(float S, float alpha, float bv, float kp, float gx, float k) {
    return fmaf(alpha, S, fmaf(bv, kp, __fmul_rn(gx, k)));
}

/** Σ over the L lanes of a row group (xor tree; every lane gets the same bits). All 32 lanes take part. */
__device__ __forceinline__ float groupSum(float v, int L) {
    for (int off = L >> 1; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

/** Σ over the whole warp (xor tree). */
__device__ __forceinline__ float warpSum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

/** What one pair (n0 = 2m, n1 = 2m + 1) of a step produced: the biased inputs, the rotation, k and q. */
struct PairStep {
    float kp0, kp1, qp0, qp1;  // before rotation (biased)
    float c, s;                // cos θ, sin θ (1, 0 past the rotated pairs)
    float k0, k1, q0, q1;      // rotated
};

/**
 * Builds pair m of the step's k and q (n1 may be ≥ N for odd N: its values are then 0) and advances the
 * pair's angle θ (held by the caller) when m < nangles.
 */
__device__ __forceinline__ PairStep buildPair(const Mamba3ScanArgs& s, const float* Braw, const float* Craw, float rsB,
                                              float rsC, int h, int m, float delta, const float* angles, float& theta) {
    const int N = s.d_state, n0 = 2 * m, n1 = 2 * m + 1;
    const float* bb = s.b_bias + static_cast<int64_t>(h) * N;
    const float* cb = s.c_bias + static_cast<int64_t>(h) * N;
    PairStep p;
    p.kp0 = normBias(Braw[n0], rsB, s.b_norm[n0], bb[n0]);
    p.qp0 = normBias(Craw[n0], rsC, s.c_norm[n0], cb[n0]);
    p.kp1 = n1 < N ? normBias(Braw[n1], rsB, s.b_norm[n1], bb[n1]) : 0.f;
    p.qp1 = n1 < N ? normBias(Craw[n1], rsC, s.c_norm[n1], cb[n1]) : 0.f;
    if (m < s.nangles) {
        theta = advanceAngle(theta, angles[m], delta);
        p.c = cosf(theta);
        p.s = sinf(theta);
        rotate(p.c, p.s, p.kp0, p.kp1, p.k0, p.k1);
        rotate(p.c, p.s, p.qp0, p.qp1, p.q0, p.q1);
    } else {
        p.c = 1.f;
        p.s = 0.f;
        p.k0 = p.kp0;
        p.k1 = p.kp1;
        p.q0 = p.qp0;
        p.q1 = p.qp1;
    }
    return p;
}
#endif

}  // namespace mamba::cuda::m3
