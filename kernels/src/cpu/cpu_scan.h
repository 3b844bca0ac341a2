// The Mamba-1 selective-scan recurrence, written once:
//
//     Ā = exp(Δ·A),   h_t = Ā ⊙ h_{t-1} + (Δ·u_t) B_t,   y_t = h_t·C_t + D·u_t
//
// ssmStep advances the state of one block of ≤ kChannelBlock channels by one time step, for the state held
// in one of two layouts; ssmReadout forms y from it. selectiveScan (inference and training forward) and
// selectiveScanBackward's recomputation of the states between checkpoints are all built on these two.
//
// The two layouts run the same arithmetic per state element (so they give the same h bits); they differ in
// which index sits in the SIMD lanes, and so in the order of y's sum over the state:
//   ChannelMajor  h[j·N + n], the ScanArgs layout itself: updated in place, no transposes — the latency
//                 path (a decode step is one time step, where a transpose would cost as much as the scan).
//                 y_j = (Σ_n h·C as one SIMD reduction) + D·u.
//   Lanes         h[n·kChannelBlock + j]: channels in the SIMD lanes, every sum over channels vectorised —
//                 the layout the backward needs, so the training forward uses it too and the backward's
//                 recomputation follows the very same code. y_j = D·u + Σ_n h·C, n in order.
// selectiveScan picks ChannelMajor without checkpoints (inference) and Lanes with them (training): each path
// gives exactly the bits it gave before the ops-layer restructure.
#pragma once

#include "cpu_backend.h"
#include "fast_math.h"

namespace mamba::cpu {

enum class StateLayout { ChannelMajor, Lanes };

/** Ā for one element. */
inline float ssmDecay(float delta, float a) { return fastExp(delta * a); }
/** h' for one element: Ā·h + (Δ·u)·B. */
inline float ssmUpdate(float decay, float h, float du, float b) { return decay * h + du * b; }

/**
 * One time step for channels j < nd of a block: h ← Ā ⊙ hprev + du ⊗ B (du[j] = Δ_j·u_j), with Ā stored
 * into abar when not null (Lanes only). FixedN > 0 compiles the state loops for that d_state.
 * ChannelMajor: a and h are the block's rows of A and of the state ([nd][n]), h is updated in place
 *               (hprev must equal h).
 * Lanes:        a, hprev, h, abar are [n][kChannelBlock] slabs; hprev and h are distinct.
 */
template <int FixedN, StateLayout L>
inline void ssmStep(int n, int nd, const float* delta, const float* du, const float* a, const float* Bt,
                    const float* hprev, float* h, float* abar) {
    const int N = FixedN > 0 ? FixedN : n;
    if constexpr (L == StateLayout::ChannelMajor) {
        (void)hprev;
        (void)abar;
        for (int j = 0; j < nd; ++j) {
            float* hj = h + static_cast<int64_t>(j) * N;
            const float* aj = a + static_cast<int64_t>(j) * N;
            const float dj = delta[j], duj = du[j];
#pragma omp simd
            for (int k = 0; k < N; ++k) hj[k] = ssmUpdate(ssmDecay(dj, aj[k]), hj[k], duj, Bt[k]);
        }
    } else {
        for (int k = 0; k < N; ++k) {
            const float bk = Bt[k];
            const float* ak = a + k * kChannelBlock;
            const float* hp = hprev + k * kChannelBlock;
            float* hk = h + k * kChannelBlock;
            if (abar) {
                float* e = abar + k * kChannelBlock;
#pragma omp simd
                for (int j = 0; j < nd; ++j) {
                    e[j] = ssmDecay(delta[j], ak[j]);
                    hk[j] = ssmUpdate(e[j], hp[j], du[j], bk);
                }
            } else {
#pragma omp simd
                for (int j = 0; j < nd; ++j) hk[j] = ssmUpdate(ssmDecay(delta[j], ak[j]), hp[j], du[j], bk);
            }
        }
    }
}

/** y[j] = h_j·C + D_j·u_j for j < nd (d_skip and u point at the block's first channel); order: see above. */
template <int FixedN, StateLayout L>
inline void ssmReadout(int n, int nd, const float* h, const float* Ct, const float* u, const float* d_skip, float* y) {
    const int N = FixedN > 0 ? FixedN : n;
    if constexpr (L == StateLayout::ChannelMajor) {
        for (int j = 0; j < nd; ++j) {
            const float* hj = h + static_cast<int64_t>(j) * N;
            float acc = 0.f;
#pragma omp simd reduction(+ : acc)
            for (int k = 0; k < N; ++k) acc += hj[k] * Ct[k];
            y[j] = acc;
        }
#pragma omp simd
        for (int j = 0; j < nd; ++j) y[j] = y[j] + d_skip[j] * u[j];
    } else {
#pragma omp simd
        for (int j = 0; j < nd; ++j) y[j] = d_skip[j] * u[j];
        for (int k = 0; k < N; ++k) {
            const float ck = Ct[k];
            const float* hk = h + k * kChannelBlock;
#pragma omp simd
            for (int j = 0; j < nd; ++j) y[j] += hk[j] * ck;
        }
    }
}

/** A block's [nd, N] channel-major rows (stride N) into an [N][kChannelBlock] slab, and back. */
inline void toLanes(const float* src, int N, int nd, float* dst) {
    for (int j = 0; j < nd; ++j)
        for (int k = 0; k < N; ++k) dst[k * kChannelBlock + j] = src[static_cast<int64_t>(j) * N + k];
}
inline void fromLanes(const float* src, int N, int nd, float* dst) {
    for (int j = 0; j < nd; ++j)
        for (int k = 0; k < N; ++k) dst[static_cast<int64_t>(j) * N + k] = src[k * kChannelBlock + j];
}

}  // namespace mamba::cpu
