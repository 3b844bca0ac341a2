// Mamba-3 SISO scan, forward, in the chunked (matmul) form for long sequences (the math:
// /work/shared/reference/mamba3-siso.md §3 "Chunked / whole-sequence form"; the contract: ops.h above
// Mamba3ScanArgs). The step kernel (mamba3_scan.cu) stays the path for decode and short calls.
//
// The sequence is cut into chunks of kMamba3Chunk steps. Every chunk is treated as a call of its own that
// starts from the true state (S, k_prev, v_prev, θ) before its first step: the pending trapezoid term of
// the incoming K/V state is folded in first, S̃ = S + Δ₀(1−σ₀)·v_prev ⊗ k_prev, and then with
// c_t = Σ_{r≤t} A_r·Δ_r (inside the chunk) and scale_s = γ_s + Δ_{s+1}(1−σ_{s+1}) (s < t):
//   y_t = e^{c_t}·S̃ q_t + Σ_{s<t} e^{c_t−c_s} scale_s (q_t·k_s) x_s + γ_t (q_t·k_t) x_t + D·x_t
//   S_end = e^{c_last}·S̃ + Σ_s e^{c_last−c_s} w_s x_s ⊗ k_s,   w_s = scale_s (s < last), γ_last (s = last).
//
// Angles: inside a chunk the rotation angle of step t is θ_c + φ_t, where θ_c is the angle before the chunk
// and φ_t the chunk's own chain (wrapped every step, from 0). q_t·k_s does not depend on θ_c, so the chunk
// works with q, k rotated by φ only (its "local frame"); a state pair (S[p,2a], S[p,2a+1]) moves between the
// frames by the rotation by θ_c. Mathematically θ_c + φ_t is the wrapped angle of the step kernel; in f32 the
// two differ by rounding only (the chunk start angles are chained as θ_{c+1} = wrap(θ_c + φ_last)).
//
// Three launches (no atomics, every sum in a fixed order: the result does not change from run to run):
//  1. states:  one block per (row, head, chunk): the chunk's scalars, angle chain, k (local frame) and x in
//     shared memory, then the chunk's own state Σ_s e^{c_last−c_s} w_s x_s ⊗ k_s (a 64-deep product) and its
//     summary (c_last, Δ₀(1−σ₀), φ_last, the last k) to the workspace.
//  2. pass:    one thread per (row, head, p, pair of n) walks the chunks in order: fold, record the
//     checkpoint (the true state before the chunk), store S̃ in the chunk's local frame over the chunk's own
//     state, S ← e^{c_last}·S̃ + rot(θ_c)·own, k_prev ← rot(θ_c)·k_last, v_prev ← x_last, θ ← wrap(θ + φ_last);
//     the final S goes to the state, the final k and θ to the workspace.
//  3. outputs: one block per (row, head, chunk): the same preparation (q too), G = Q·Kᵀ masked and weighted,
//     y = e^{c_t}·(S̃_local·q_t) + G·X + D·x, then the gate (plain SiLU or the per-head gate norm); the block
//     of the last chunk writes the final k, v and θ to the state.
// The products are plain f32 FMA from shared memory (4×4 outputs per thread, 16-byte loads).
#include "cuda_backend.h"
#include "mamba3_step.cuh"

#include <algorithm>
#include <string>

namespace mamba::cuda {
namespace {

constexpr int kQ = kMamba3Chunk;  // steps per chunk (64: the product tiles below assume it)
constexpr int kThreads = 256;     // 16 × 16 threads, 4 × 4 outputs each: one 64 × 64 tile
constexpr int kLdS = kQ + 4;      // row stride of step-indexed rows (≡ 4 mod 32: no bank conflicts)
constexpr int kScal = 8 * kQ;     // per-step scalars: γ, Δ(1−σ), c, weight, 1/rms of B and C, the gate norm's ρ

static_assert(kQ == 64, "the product tiles assume 64-step chunks");

struct Geom {
    int N, P, NA, C;  // d_state, headdim, angles, chunks
    int ldn;          // row stride of n-indexed rows [t][n] (≡ 4 mod 32)
    int n4;           // N rounded up to 4 (the product depth over n)
    int nr, pr;       // N and P rounded up to 64 (rows of the transposed tiles)
    int meta;         // summary floats per chunk: c_last, Δ₀(1−σ₀), φ_last [NA], k_last [N]
    int64_t tail;     // offset of the final k, θ per (row, head) in the workspace
    int64_t metaAt;   // offset of the summaries
};

struct Ckpt {
    float* data;  // null: none
    int chunks;
};

/** acc[i][j] += Σ_k A[(ty + 16i)·lda + k]·B[(tx + 16j)·ldb + k] over k < K (K a multiple of 4, rows 16-byte aligned). */
__device__ __forceinline__ void mmNT(float (&acc)[4][4], const float* A, int lda, const float* B, int ldb, int K, int ty, int tx) {
#pragma unroll 2
    for (int k = 0; k < K; k += 4) {
        float4 a[4], b[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = *reinterpret_cast<const float4*>(A + (ty + 16 * i) * lda + k);
#pragma unroll
        for (int j = 0; j < 4; ++j) b[j] = *reinterpret_cast<const float4*>(B + (tx + 16 * j) * ldb + k);
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                acc[i][j] = fmaf(a[i].x, b[j].x, acc[i][j]);
                acc[i][j] = fmaf(a[i].y, b[j].y, acc[i][j]);
                acc[i][j] = fmaf(a[i].z, b[j].z, acc[i][j]);
                acc[i][j] = fmaf(a[i].w, b[j].w, acc[i][j]);
            }
    }
}

__device__ __forceinline__ void zeroAcc(float (&acc)[4][4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
}

__device__ __forceinline__ void zeroSmem(float* p, int n) {
    for (int i = threadIdx.x; i < n; i += kThreads) p[i] = 0.f;
}

/** Shared scalar arrays of a chunk (kScal floats). */
struct Scal {
    float *gam, *bf, *cum, *w, *rs, *red;
    __device__ explicit Scal(float* sc) : gam(sc), bf(sc + kQ), cum(sc + 2 * kQ), w(sc + 3 * kQ), rs(sc + 4 * kQ), red(sc + 6 * kQ) {}
};

/**
 * Prepares chunk c (steps [c·64, c·64 + len)) of (row b, head h) in shared memory, whose buffers the caller
 * has zeroed: the scalars (γ, Δ(1−σ), c_t the inclusive sum of A·Δ), the local angle chain φ (in th, [64][NA]),
 * k and (when Q) q rotated by φ — K[i·ldn + n] or, with kTrans, K[n·kLdS + i] — and x transposed, Xt[p·kLdS + i].
 * Ends with a barrier.
 */
__device__ void prepChunk(const Mamba3ScanArgs& s, const Mamba3Offsets& o, const Geom& g, int b, int h, int c, int len,
                          float* Q, float* K, bool kTrans, float* Xt, const Scal& sc, float* th) {
    const int N = g.N, P = g.P, NA = g.NA, pairs = (N + 1) / 2;
    const int grp = h / (s.nheads / s.ngroups);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int64_t r0 = static_cast<int64_t>(b) * s.steps + static_cast<int64_t>(c) * kQ;
    const int64_t hP = static_cast<int64_t>(h) * P;
    for (int i = warp; i < len; i += kThreads / 32) {
        const float* row = s.proj + (r0 + i) * s.ldproj;
        const float rsB = m3::rmsInv(row + o.b + static_cast<int64_t>(grp) * N, N);
        const float rsC = m3::rmsInv(row + o.c + static_cast<int64_t>(grp) * N, N);
        if (lane == 0) {
            const m3::Coeffs cf = m3::coeffs(s, o, row, h);
            sc.gam[i] = cf.gamma;
            sc.bf[i] = __fmul_rn(cf.delta, 1.f - cf.sig);
            sc.cum[i] = __fmul_rn(cf.A, cf.delta);
            sc.rs[2 * i] = rsB;
            sc.rs[2 * i + 1] = rsC;
        }
    }
    for (int idx = tid; idx < len * P; idx += kThreads) {
        const int i = idx / P, p = idx - i * P;
        Xt[p * kLdS + i] = s.proj[(r0 + i) * s.ldproj + o.x + hP + p];
    }
    for (int idx = tid; idx < len * NA; idx += kThreads) {
        const int i = idx / NA, m = idx - i * NA;
        const float* row = s.proj + (r0 + i) * s.ldproj;
        th[idx] = m3::angleStep(row[o.angle + m], softplusf(row[o.dt + h] + s.dt_bias[h]));
    }
    __syncthreads();
    for (int m = tid; m < NA; m += kThreads) {  // the local chains, one thread per angle
        float phi = 0.f;
        for (int i = 0; i < len; ++i) {
            phi = m3::advanceAngle(phi, th[i * NA + m]);
            th[i * NA + m] = phi;
        }
    }
    if (tid == kThreads - 1) {  // c_t (NA ≤ 128 < kThreads − 1: not one of the angle threads)
        float acc = 0.f;
        for (int i = 0; i < len; ++i) {
            acc = __fadd_rn(acc, sc.cum[i]);
            sc.cum[i] = acc;
        }
    }
    __syncthreads();
    for (int idx = tid; idx < len * pairs; idx += kThreads) {
        const int i = idx / pairs, m = idx - i * pairs;
        const float* row = s.proj + (r0 + i) * s.ldproj;
        const m3::PairStep ps = m3::buildPair(s, row + o.b + static_cast<int64_t>(grp) * N, row + o.c + static_cast<int64_t>(grp) * N,
                                              sc.rs[2 * i], sc.rs[2 * i + 1], h, m, m < NA ? th[i * NA + m] : 0.f);
        const int n0 = 2 * m, n1 = 2 * m + 1;
        if (kTrans) {
            K[n0 * kLdS + i] = ps.k0;
            if (n1 < N) K[n1 * kLdS + i] = ps.k1;
        } else {
            K[i * g.ldn + n0] = ps.k0;
            if (n1 < N) K[i * g.ldn + n1] = ps.k1;
        }
        if (Q) {
            Q[i * g.ldn + n0] = ps.q0;
            if (n1 < N) Q[i * g.ldn + n1] = ps.q1;
        }
    }
    __syncthreads();
}

__global__ void __launch_bounds__(kThreads) m3ChunkStatesKernel(Mamba3ScanArgs s, Mamba3Offsets o, Geom g, float* ws) {
    extern __shared__ float4 sm4[];
    float* sm = reinterpret_cast<float*>(sm4);
    const int C = g.C, H = s.nheads, N = g.N, P = g.P, NA = g.NA;
    const int c = static_cast<int>(blockIdx.x % C);
    const int bh = static_cast<int>(blockIdx.x / C), h = bh % H, b = bh / H;
    const int len = min(kQ, s.steps - c * kQ);
    float* Kt = sm;                     // [nr][kLdS]
    float* Xt = Kt + g.nr * kLdS;       // [pr][kLdS]
    float* scp = Xt + g.pr * kLdS;      // kScal
    float* th = scp + kScal;            // [64][NA]
    const Scal sc(scp);
    pdlWait();
    pdlLaunchDependents();
    zeroSmem(sm, (g.nr + g.pr) * kLdS);
    __syncthreads();
    prepChunk(s, o, g, b, h, c, len, nullptr, Kt, true, Xt, sc, th);
    const int tid = threadIdx.x;
    if (tid < len) {
        const float wgt = tid < len - 1 ? __fadd_rn(sc.gam[tid], sc.bf[tid + 1]) : sc.gam[tid];
        sc.w[tid] = __fmul_rn(expf(__fsub_rn(sc.cum[len - 1], sc.cum[tid])), wgt);
    }
    __syncthreads();
    for (int idx = tid; idx < P * len; idx += kThreads) {
        const int p = idx / len, i = idx - p * len;
        Xt[p * kLdS + i] = __fmul_rn(Xt[p * kLdS + i], sc.w[i]);
    }
    // the chunk's summary
    float* meta = ws + g.metaAt + static_cast<int64_t>(blockIdx.x) * g.meta;
    if (tid == 0) {
        meta[0] = sc.cum[len - 1];
        meta[1] = sc.bf[0];
    }
    for (int m = tid; m < NA; m += kThreads) meta[2 + m] = th[(len - 1) * NA + m];
    for (int n = tid; n < N; n += kThreads) meta[2 + NA + n] = Kt[n * kLdS + len - 1];
    __syncthreads();
    // own state [P][N] = Xw · Ktᵀ over the chunk's steps
    float* own = ws + static_cast<int64_t>(blockIdx.x) * P * N;
    const int ty = tid >> 4, tx = tid & 15;
    for (int pt = 0; pt < g.pr; pt += 64)
        for (int nt = 0; nt < g.nr; nt += 64) {
            float acc[4][4];
            zeroAcc(acc);
            mmNT(acc, Xt + pt * kLdS, kLdS, Kt + nt * kLdS, kLdS, kQ, ty, tx);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int p = pt + ty + 16 * i;
                if (p >= P) continue;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int n = nt + tx + 16 * j;
                    if (n < N) own[static_cast<int64_t>(p) * N + n] = acc[i][j];
                }
            }
        }
}

constexpr int kPassBatch = 4;  // chunks whose inputs a pass thread loads before using them

__global__ void __launch_bounds__(kThreads) m3ChunkPassKernel(Mamba3ScanArgs s, Mamba3Offsets o, Geom g, float* ws, Ckpt ck) {
    const int N = g.N, P = g.P, NA = g.NA, C = g.C, H = s.nheads, pairs = (N + 1) / 2;
    const int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    pdlWait();
    pdlLaunchDependents();
    if (idx >= static_cast<int64_t>(s.batch) * H * P * pairs) return;
    const int m = static_cast<int>(idx % pairs);
    const int64_t rest = idx / pairs;
    const int p = static_cast<int>(rest % P);
    const int bh = static_cast<int>(rest / P), h = bh % H, b = bh / H;
    const int n0 = 2 * m, n1 = 2 * m + 1;
    const bool has1 = n1 < N, rot = m < NA;
    const int64_t hP = static_cast<int64_t>(h) * P;
    float* st = s.state + b * s.state_stride;
    float* Srow = st + (hP + p) * N;
    float S0 = Srow[n0], S1 = has1 ? Srow[n1] : 0.f;
    float kp0 = st[o.k + static_cast<int64_t>(h) * N + n0];
    float kp1 = has1 ? st[o.k + static_cast<int64_t>(h) * N + n1] : 0.f;
    float vp = st[o.v + hP + p];
    float th = rot ? st[o.theta + static_cast<int64_t>(h) * NA + m] : 0.f;
    const float* metaBase = ws + g.metaAt + static_cast<int64_t>(bh) * C * g.meta;
    float* ownBase = ws + static_cast<int64_t>(bh) * C * P * N + static_cast<int64_t>(p) * N;
    const int64_t rowBase = static_cast<int64_t>(b) * s.steps;
    for (int c0 = 0; c0 < C; c0 += kPassBatch) {
        float L0[kPassBatch], L1[kPassBatch], cl[kPassBatch], b0[kPassBatch], ph[kPassBatch], kl0[kPassBatch],
            kl1[kPassBatch], xl[kPassBatch];
#pragma unroll
        for (int j = 0; j < kPassBatch; ++j) {
            const int c = c0 + j;
            if (c >= C) break;
            const float* meta = metaBase + static_cast<int64_t>(c) * g.meta;
            const float* own = ownBase + static_cast<int64_t>(c) * P * N;
            L0[j] = own[n0];
            L1[j] = has1 ? own[n1] : 0.f;
            cl[j] = meta[0];
            b0[j] = meta[1];
            ph[j] = rot ? meta[2 + m] : 0.f;
            kl0[j] = meta[2 + NA + n0];
            kl1[j] = has1 ? meta[2 + NA + n1] : 0.f;
            const int len = min(kQ, s.steps - c * kQ);
            xl[j] = s.proj[(rowBase + static_cast<int64_t>(c) * kQ + len - 1) * s.ldproj + o.x + hP + p];
        }
#pragma unroll
        for (int j = 0; j < kPassBatch; ++j) {
            const int c = c0 + j;
            if (c >= C) break;
            float cs = 1.f, sn = 0.f;
            if (rot) {
                cs = cosf(th);
                sn = sinf(th);
            }
            if (ck.data) {  // the true state before the chunk's first step
                float* cp = ck.data + (static_cast<int64_t>(b) * ck.chunks + c) * o.state;
                cp[(hP + p) * N + n0] = S0;
                if (has1) cp[(hP + p) * N + n1] = S1;
                if (p == 0) {
                    cp[o.k + static_cast<int64_t>(h) * N + n0] = kp0;
                    if (has1) cp[o.k + static_cast<int64_t>(h) * N + n1] = kp1;
                    if (rot) cp[o.theta + static_cast<int64_t>(h) * NA + m] = th;
                }
                if (m == 0) cp[o.v + hP + p] = vp;
            }
            const float bv = __fmul_rn(b0[j], vp);
            const float T0 = fmaf(bv, kp0, S0), T1 = fmaf(bv, kp1, S1);  // S̃ (global frame)
            float* own = ownBase + static_cast<int64_t>(c) * P * N;
            own[n0] = fmaf(cs, T0, __fmul_rn(sn, T1));  // S̃ in the chunk's frame: rotated by −θ_c
            if (has1) own[n1] = fmaf(cs, T1, -__fmul_rn(sn, T0));
            float G0, G1;
            m3::rotate(cs, sn, L0[j], L1[j], G0, G1);
            const float e = expf(cl[j]);
            S0 = fmaf(e, T0, G0);
            S1 = fmaf(e, T1, G1);
            m3::rotate(cs, sn, kl0[j], kl1[j], kp0, kp1);
            vp = xl[j];
            if (rot) th = m3::advanceAngle(th, ph[j]);
        }
    }
    Srow[n0] = S0;
    if (has1) Srow[n1] = S1;
    if (p == 0) {
        float* tail = ws + g.tail + static_cast<int64_t>(bh) * (N + NA);
        tail[n0] = kp0;
        if (has1) tail[n1] = kp1;
        if (rot) tail[N + m] = th;
    }
}

__global__ void __launch_bounds__(kThreads, 2) m3ChunkOutputKernel(Mamba3ScanArgs s, Mamba3Offsets o, Geom g, const float* ws) {
    extern __shared__ float4 sm4[];
    float* sm = reinterpret_cast<float*>(sm4);
    const int C = g.C, H = s.nheads, N = g.N, P = g.P, NA = g.NA, ldn = g.ldn;
    const int c = static_cast<int>(blockIdx.x % C);
    const int bh = static_cast<int>(blockIdx.x / C), h = bh % H, b = bh / H;
    const int len = min(kQ, s.steps - c * kQ);
    float* Q = sm;                                // [64][ldn]
    float* K = Q + kQ * ldn;                      // [64][ldn]: k, then a tile of S̃ rows
    float* Xt = K + kQ * ldn;                     // [pr][kLdS]
    float* M = Xt + g.pr * kLdS;                  // [64][kLdS] (the angle chains before it)
    float* scp = M + kQ * max(kLdS, NA);          // kScal
    const bool yInM = g.pr == 64;
    float* Y = yInM ? M : scp + kScal;            // [64][ldy]
    const int ldy = yInM ? kLdS : g.pr + 4;
    const Scal sc(scp);
    pdlWait();
    pdlLaunchDependents();
    zeroSmem(sm, 2 * kQ * ldn + g.pr * kLdS);
    __syncthreads();
    prepChunk(s, o, g, b, h, c, len, Q, K, false, Xt, sc, M);
    const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15, warp = tid >> 5, lane = tid & 31;
    // G = Q·Kᵀ, masked and weighted: M[t][s] = (q_t·k_s)·(e^{c_t−c_s}·scale_s for s < t, γ_t for s = t)
    {
        float acc[4][4];
        zeroAcc(acc);
        mmNT(acc, Q, ldn, K, ldn, g.n4, ty, tx);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int t = ty + 16 * i;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int u = tx + 16 * j;
                float w = 0.f;
                if (t < len) {
                    if (u < t) w = __fmul_rn(expf(__fsub_rn(sc.cum[t], sc.cum[u])), __fadd_rn(sc.gam[u], sc.bf[u + 1]));
                    else if (u == t) w = sc.gam[t];
                }
                M[t * kLdS + u] = __fmul_rn(acc[i][j], w);
            }
        }
    }
    if (tid < kQ) sc.w[tid] = tid < len ? expf(sc.cum[tid]) : 0.f;
    const float* own = ws + static_cast<int64_t>(blockIdx.x) * P * N;  // S̃ in the chunk's frame (the pass)
    const float dskip = s.d_skip[h];
    for (int pt = 0; pt < g.pr; pt += 64) {
        __syncthreads();  // K (or the previous S̃ tile) has been read
        for (int idx = tid; idx < 64 * N; idx += kThreads) {
            const int r = idx / N, n = idx - r * N, p = pt + r;
            K[r * ldn + n] = p < P ? own[static_cast<int64_t>(p) * N + n] : 0.f;
        }
        __syncthreads();
        float acc[4][4];
        zeroAcc(acc);
        mmNT(acc, Q, ldn, K, ldn, g.n4, ty, tx);  // S̃·q_t
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float e = sc.w[ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[i][j] = __fmul_rn(acc[i][j], e);
        }
        mmNT(acc, M, kLdS, Xt + pt * kLdS, kLdS, kQ, ty, tx);  // + the chunk's own terms
        if (yInM) __syncthreads();  // every thread is done reading M
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int t = ty + 16 * i;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int p = pt + tx + 16 * j;
                if (p < P) Y[t * ldy + p] = fmaf(dskip, Xt[p * kLdS + t], acc[i][j]);
            }
        }
    }
    __syncthreads();
    const int64_t r0 = static_cast<int64_t>(b) * s.steps + static_cast<int64_t>(c) * kQ;
    const int64_t hP = static_cast<int64_t>(h) * P;
    if (s.gate_norm) {  // ρ_t = 1/sqrt(mean_p y² + eps), a warp per step
        for (int t = warp; t < len; t += kThreads / 32) {
            float yy = 0.f;
            for (int p = lane; p < P; p += 32) yy = fmaf(Y[t * ldy + p], Y[t * ldy + p], yy);
            yy = m3::warpSum(yy);
            if (lane == 0) sc.red[t] = 1.f / sqrtf(yy / static_cast<float>(P) + m3::kEps);
        }
        __syncthreads();
    }
    for (int idx = tid; idx < len * P; idx += kThreads) {
        const int t = idx / P, p = idx - t * P;
        const float y = Y[t * ldy + p];
        const float z = s.proj[(r0 + t) * s.ldproj + o.z + hP + p];
        float* out = s.out + (r0 + t) * s.ldout + hP + p;
        if (s.gate_norm) *out = __fmul_rn(s.gate_norm[hP + p], __fmul_rn(y, sc.red[t])) * siluf(z);
        else *out = y * siluf(z);
    }
    if (c == C - 1) {  // the final k, v, θ (S was written by the pass)
        float* st = s.state + b * s.state_stride;
        const float* tail = ws + g.tail + static_cast<int64_t>(bh) * (N + NA);
        for (int n = tid; n < N; n += kThreads) st[o.k + static_cast<int64_t>(h) * N + n] = tail[n];
        for (int m = tid; m < NA; m += kThreads) st[o.theta + static_cast<int64_t>(h) * NA + m] = tail[N + m];
        for (int p = tid; p < P; p += kThreads) st[o.v + hP + p] = Xt[p * kLdS + len - 1];
    }
}

int roundUp(int v, int m) { return (v + m - 1) / m * m; }

Geom geomOf(const Mamba3ScanArgs& s) {
    Geom g;
    g.N = s.d_state;
    g.P = s.headdim;
    g.NA = s.nangles;
    g.C = (s.steps + kQ - 1) / kQ;
    g.ldn = roundUp(g.N, 32) + 4;
    g.n4 = roundUp(g.N, 4);
    g.nr = roundUp(g.N, 64);
    g.pr = roundUp(g.P, 64);
    g.meta = 2 + g.NA + g.N;
    const int64_t chunks = static_cast<int64_t>(s.batch) * s.nheads * g.C;
    g.metaAt = chunks * g.P * g.N;
    g.tail = g.metaAt + chunks * g.meta;
    return g;
}

size_t statesSmem(const Geom& g) {
    return sizeof(float) * (static_cast<size_t>(g.nr + g.pr) * kLdS + kScal + static_cast<size_t>(kQ) * g.NA);
}

size_t outputSmem(const Geom& g) {
    const size_t y = g.pr == 64 ? 0 : static_cast<size_t>(kQ) * (g.pr + 4);
    return sizeof(float) * (2 * static_cast<size_t>(kQ) * g.ldn + static_cast<size_t>(g.pr) * kLdS +
                            static_cast<size_t>(kQ) * std::max(kLdS, g.NA) + kScal + y);
}

template <typename Kernel>
void optIn(Kernel kernel, const Exec& ex, size_t smem, const char* what) {
    if (smem > 48 * 1024) check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, ex.smem_optin), what);
}

}  // namespace

int64_t mamba3ChunkedWorkspace(const Mamba3ScanArgs& s) {
    const Geom g = geomOf(s);
    return g.tail + static_cast<int64_t>(s.batch) * s.nheads * (g.N + g.NA);
}

bool mamba3ChunkedUsable(const Exec& ex, const Mamba3ScanArgs& s, const ScanCheckpoints* ck) {
    if (s.steps < kMamba3ChunkedMinSteps || s.batch < 1) return false;
    if (ck && ck->chunk != kQ) return false;  // the checkpoints fall on other steps: the step kernel records them
    const Geom g = geomOf(s);
    const size_t most = static_cast<size_t>(ex.smem_optin > 48 * 1024 ? ex.smem_optin : 48 * 1024);
    if (statesSmem(g) > most || outputSmem(g) > most) return false;
    const int64_t blocks = static_cast<int64_t>(s.batch) * s.nheads * g.C;
    const int64_t threads = static_cast<int64_t>(s.batch) * s.nheads * g.P * ((g.N + 1) / 2);
    return blocks <= 0x7fffffff && (threads + kThreads - 1) / kThreads <= 0x7fffffff;
}

void mamba3ScanChunked(const Exec& ex, const Mamba3ScanArgs& s, const ScanCheckpoints* ck, float* ws) {
    const Geom g = geomOf(s);
    const Mamba3Offsets o = Mamba3Offsets::of(s);
    const int64_t blocks = static_cast<int64_t>(s.batch) * s.nheads * g.C;
    const size_t ss = statesSmem(g), os = outputSmem(g);
    optIn(m3ChunkStatesKernel, ex, ss, "cudaFuncSetAttribute (mamba3 chunk states)");
    optIn(m3ChunkOutputKernel, ex, os, "cudaFuncSetAttribute (mamba3 chunk outputs)");
    launch("mamba3Scan chunk states", ex, m3ChunkStatesKernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), ss, s, o, g, ws);
    const int64_t threads = static_cast<int64_t>(s.batch) * s.nheads * g.P * ((g.N + 1) / 2);
    const Ckpt c{ck ? ck->data : nullptr, g.C};
    launch(ck ? "mamba3Scan chunk pass (checkpoints)" : "mamba3Scan chunk pass", ex, m3ChunkPassKernel,
           dim3(static_cast<unsigned>((threads + kThreads - 1) / kThreads)), dim3(kThreads), 0, s, o, g, ws, c);
    launch("mamba3Scan chunk outputs", ex, m3ChunkOutputKernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), os, s, o, g,
           static_cast<const float*>(ws));
}

}  // namespace mamba::cuda
