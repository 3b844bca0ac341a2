// The selective-scan recurrence, written once. Every kernel that advances an SSM state — the sequential
// and chunked inference scans, the training forward (the sequential scan with checkpoints) and the
// backward's recomputation from the checkpoints — goes through scanUpdate(), so the recomputed states
// are the forward's states bit for bit.
//
//   h_t = exp(Δ·A)·h_{t−1} + (Δ·u)·B_t,  with exp(Δ·A) computed as 2^(Δ·a2) (scanDecay), a2 = A·log2(e),
//   rounded as fma(exp(Δ·A), h_{t−1}, round(Δu·B_t)).
#pragma once

namespace mamba::cuda {

constexpr float kLog2e = 1.4426950408889634f;

/**
 * The decay exp(Δ·A) of one state, a2 = A·log2(e): one MUFU.EX2. exp2f would add three instructions around it to
 * return a subnormal decay (below 2^-126) instead of 0; the results differ only there, and since every kernel decays
 * through this function, the recomputed states still equal the forward's bit for bit.
 */
__device__ __forceinline__ float scanDecay(float delta, float a2) {
    float e;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(delta * a2));
    return e;
}

/**
 * One state's step: h ← exp(Δ·A)·h + Δu·b, as fma(exp(Δ·A), h, round(Δu·b)). The fma is explicit so that
 * every kernel rounds the same way whatever the compiler's contraction heuristics see around the call.
 */
__device__ __forceinline__ float scanUpdate(float h, float a2, float delta, float du, float b) {
    return fmaf(scanDecay(delta, a2), h, __fmul_rn(du, b));
}

/**
 * Channel d's dt bias (ScanArgs / ScanBackwardArgs::dt_bias: Δ = softplus(dt + dt_bias)), or 0 without one: dt + 0 is
 * dt for softplus and softplus', so a scan without a bias keeps its bits.
 */
template <class Args>
__device__ __forceinline__ float dtBias(const Args& s, int d) {
    return s.dt_bias ? s.dt_bias[d] : 0.f;
}

/** Row, channel and state of a flat index over [batch][channels][d_state] (one thread per state element). */
struct StateIndex {
    int b, d, n;
};
__device__ __forceinline__ StateIndex stateIndex(int64_t i, int N, int E) {
    StateIndex x;
    x.n = static_cast<int>(i % N);
    x.d = static_cast<int>((i / N) % E);
    x.b = static_cast<int>(i / (static_cast<int64_t>(N) * E));
    return x;
}

}  // namespace mamba::cuda
