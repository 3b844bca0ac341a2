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

/** The angle increment of one step, π·tanh(ang)·Δ (rounded as the reference: (π·tanh)·Δ). */
__device__ __forceinline__ float angleStep(float ang, float delta) { return __fmul_rn(__fmul_rn(kPi, tanhf(ang)), delta); }

/** θ ← wrap_2π(θ + inc): floor(θ/2π) whole turns removed (the wrap has zero derivative). */
__device__ __forceinline__ float advanceAngle(float th, float inc) {
    th = __fadd_rn(th, inc);
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

/** Builds pair m of a step's k and q (n1 may be ≥ N for odd N: its values are then 0); θ is the step's angle. */
__device__ __forceinline__ PairStep buildPair(const Mamba3ScanArgs& s, const float* Braw, const float* Craw, float rsB,
                                              float rsC, int h, int m, float theta) {
    const int N = s.d_state, n0 = 2 * m, n1 = 2 * m + 1;
    const float* bb = s.b_bias + static_cast<int64_t>(h) * N;
    const float* cb = s.c_bias + static_cast<int64_t>(h) * N;
    PairStep p;
    p.kp0 = normBias(Braw[n0], rsB, s.b_norm[n0], bb[n0]);
    p.qp0 = normBias(Craw[n0], rsC, s.c_norm[n0], cb[n0]);
    p.kp1 = n1 < N ? normBias(Braw[n1], rsB, s.b_norm[n1], bb[n1]) : 0.f;
    p.qp1 = n1 < N ? normBias(Craw[n1], rsC, s.c_norm[n1], cb[n1]) : 0.f;
    if (m < s.nangles) {
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

// ---- tiles: the state-independent work of TS consecutive steps, done by the whole block at once ----
// Everything but S (the scalars, the BCNorm scales, θ, k and q) is independent of the state, so a block
// prepares a tile of steps together — every warp busy with the trigonometry instead of one thread per
// pair and step — and then runs the tile's recurrence from shared memory without a barrier per step.

constexpr int kCoef = 7;  // per step: Δ, α, β, γ, A, σ, dd_A

/** A tile's shared-memory buffers (xzw = 2: x, z; 3: x, z, dout). */
struct Tile {
    float* coef;  // [TS][kCoef]
    float* rs;    // [TS][2]: BCNorm 1/rms of B and C
    float* th;    // [TS][NA]: the angle increment, then θ after the step
    float* kq;    // [TS][2N]: k then q (rotated)
    float* xz;    // [TS][xzw·P]
    float* y;     // [TS][P]: y before the gate (gate norm, backward)
    float* red;   // [TS][2]: per-step sums over the head (gate norm)
};

__host__ __device__ inline int64_t tileFloats(int TS, int N, int NA, int P, int xzw) {
    return static_cast<int64_t>(TS) * (kCoef + 2 + NA + 2 * N + (xzw + 1) * P + 2);
}

__device__ inline Tile carveTile(float* base, int TS, int N, int NA, int P, int xzw) {
    Tile t;
    t.coef = base;
    t.rs = t.coef + TS * kCoef;
    t.th = t.rs + TS * 2;
    t.kq = t.th + TS * NA;
    t.xz = t.kq + TS * 2 * N;
    t.y = t.xz + TS * xzw * P;
    t.red = t.y + TS * P;
    return t;
}

/**
 * Prepares steps [t, t + cnt) of one (row, head): rows r0 … r0 + cnt − 1 of proj. theta [NA] holds the angles
 * before the tile (entry m read by thread m mod threads only). With dout, its rows go to xz after x and z; with
 * ext, each step's k, q before and after the rotation and cos/sin θ are also written there (ext + i·ext_stride:
 * k_pre [N], q_pre [N], k [N], q [N], cos [NA], sin [NA]). Ends with a barrier; the caller must have passed one
 * since the tile's buffers were last read.
 */
__device__ inline void prepareTile(const Mamba3ScanArgs& s, const Mamba3Offsets& o, const Tile& tl, int64_t r0, int cnt,
                                   int h, int grp, const float* theta, int threads, int xzw, const float* dout,
                                   int64_t lddout, float* ext, int64_t ext_stride) {
    const int N = s.d_state, P = s.headdim, NA = s.nangles, pairs = (N + 1) / 2;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, W = threads >> 5;
    const int64_t hP = static_cast<int64_t>(h) * P;
    // 1. per step: the scalars and the BCNorm scales (a warp each); x, z (, dout); the angle increments
    for (int i = warp; i < cnt; i += W) {
        const float* row = s.proj + (r0 + i) * s.ldproj;
        const float rsB = rmsInv(row + o.b + static_cast<int64_t>(grp) * N, N);
        const float rsC = rmsInv(row + o.c + static_cast<int64_t>(grp) * N, N);
        if (lane == 0) {
            const Coeffs c = coeffs(s, o, row, h);
            float* cf = tl.coef + i * kCoef;
            cf[0] = c.delta;
            cf[1] = c.alpha;
            cf[2] = c.beta;
            cf[3] = c.gamma;
            cf[4] = c.A;
            cf[5] = c.sig;
            cf[6] = row[o.a + h];
            tl.rs[2 * i] = rsB;
            tl.rs[2 * i + 1] = rsC;
        }
    }
    for (int idx = tid; idx < cnt * P; idx += threads) {
        const int i = idx / P, p = idx - i * P;
        const float* row = s.proj + (r0 + i) * s.ldproj;
        float* xz = tl.xz + i * xzw * P;
        xz[p] = row[o.x + hP + p];
        xz[P + p] = row[o.z + hP + p];
        if (dout) xz[2 * P + p] = dout[(r0 + i) * lddout + hP + p];
    }
    for (int idx = tid; idx < cnt * NA; idx += threads) {
        const int i = idx / NA, m = idx - i * NA;
        const float* row = s.proj + (r0 + i) * s.ldproj;
        tl.th[idx] = angleStep(row[o.angle + m], softplusf(row[o.dt + h] + s.dt_bias[h]));
    }
    __syncthreads();
    // 2. the angle chains, one thread per angle
    for (int m = tid; m < NA; m += threads) {
        float th = theta[m];
        for (int i = 0; i < cnt; ++i) {
            th = advanceAngle(th, tl.th[i * NA + m]);
            tl.th[i * NA + m] = th;
        }
    }
    __syncthreads();
    // 3. k and q of every step of the tile
    for (int idx = tid; idx < cnt * pairs; idx += threads) {
        const int i = idx / pairs, m = idx - i * pairs;
        const float* row = s.proj + (r0 + i) * s.ldproj;
        const PairStep ps = buildPair(s, row + o.b + static_cast<int64_t>(grp) * N, row + o.c + static_cast<int64_t>(grp) * N,
                                      tl.rs[2 * i], tl.rs[2 * i + 1], h, m, m < NA ? tl.th[i * NA + m] : 0.f);
        const int n0 = 2 * m, n1 = 2 * m + 1;
        float* kq = tl.kq + i * 2 * N;
        kq[n0] = ps.k0;
        kq[N + n0] = ps.q0;
        if (n1 < N) {
            kq[n1] = ps.k1;
            kq[N + n1] = ps.q1;
        }
        if (ext) {
            float* e = ext + i * ext_stride;
            e[n0] = ps.kp0;
            e[N + n0] = ps.qp0;
            e[2 * N + n0] = ps.k0;
            e[3 * N + n0] = ps.q0;
            if (n1 < N) {
                e[n1] = ps.kp1;
                e[N + n1] = ps.qp1;
                e[2 * N + n1] = ps.k1;
                e[3 * N + n1] = ps.q1;
            }
            if (m < NA) {
                e[4 * N + m] = ps.c;
                e[4 * N + NA + m] = ps.s;
            }
        }
    }
    __syncthreads();
}
#endif

}  // namespace mamba::cuda::m3
