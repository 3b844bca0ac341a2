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
#include "train_kernels.h"

#include <algorithm>
#include <string>

namespace mamba::cuda {
namespace {

constexpr int kQ = kMamba3Chunk;  // steps per chunk (64: the product tiles below assume it)
constexpr int kThreads = 256;     // 16 × 16 threads, 4 × 4 outputs each: one 64 × 64 tile
// The backward's dy and grads kernels: 32 × 16 threads, 2 × 4 outputs each. Their shared memory (148 / 194 KB)
// allows one block per SM, so the threads of that block are all the warps an SM has to hide latency: 512 instead of
// 256 made them 18% faster on the H200 (docs/benchmarks.md).
constexpr int kBwdThreads = 512;
constexpr int kLdS = kQ + 4;      // row stride of step-indexed rows (≡ 4 mod 32: no bank conflicts)
constexpr int kScal = 8 * kQ;     // per-step scalars: γ, Δ(1−σ), c, weight, 1/rms of B and C, the gate norm's ρ

static_assert(kQ == 64, "the product tiles assume 64-step chunks");

/**
 * (x0, x1) rotated by −θ (cosine c, sine s) into a chunk's frame — the fused form both passes use for the chunk-local
 * states and their gradients, so the forward and the backward round alike.
 */
__device__ __forceinline__ void toChunkFrame(float c, float s, float x0, float x1, float& y0, float& y1) {
    y0 = fmaf(c, x0, __fmul_rn(s, x1));
    y1 = fmaf(c, x1, -__fmul_rn(s, x0));
}

/**
 * One chunk boundary of the state recurrence (the forward's S̃ and the backward's dS alike): X is stored in the
 * chunk's frame at own[n0], own[n1] (n1 only when has1), and the carry across the boundary is Y = e·X + rot_θ(A).
 * Y may alias X.
 */
__device__ __forceinline__ void handOver(float* own, int n0, int n1, bool has1, float c, float s, float e, float x0,
                                         float x1, float a0, float a1, float& y0, float& y1) {
    float f0, f1;
    toChunkFrame(c, s, x0, x1, f0, f1);
    own[n0] = f0;
    if (has1) own[n1] = f1;
    float r0, r1;
    m3::rotate(c, s, a0, a1, r0, r1);
    y0 = fmaf(e, x0, r0);
    y1 = fmaf(e, x1, r1);
}

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

/**
 * acc[i][j] += Σ_k A[(ty + S·i)·lda + k]·B[(tx + 16j)·ldb + k] over k < K (K a multiple of 4, rows 16-byte aligned),
 * S = 64 / RI: a 64 × 64 tile over 16 × (64 / RI) threads (RI = 4 for 256 threads, 2 for 512).
 */
template <int RI>
__device__ __forceinline__ void mmNT(float (&acc)[RI][4], const float* A, int lda, const float* B, int ldb, int K, int ty, int tx) {
    constexpr int S = 64 / RI;
#pragma unroll 2
    for (int k = 0; k < K; k += 4) {
        float4 a[RI], b[4];
#pragma unroll
        for (int i = 0; i < RI; ++i) a[i] = *reinterpret_cast<const float4*>(A + (ty + S * i) * lda + k);
#pragma unroll
        for (int j = 0; j < 4; ++j) b[j] = *reinterpret_cast<const float4*>(B + (tx + 16 * j) * ldb + k);
#pragma unroll
        for (int i = 0; i < RI; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                acc[i][j] = fmaf(a[i].x, b[j].x, acc[i][j]);
                acc[i][j] = fmaf(a[i].y, b[j].y, acc[i][j]);
                acc[i][j] = fmaf(a[i].z, b[j].z, acc[i][j]);
                acc[i][j] = fmaf(a[i].w, b[j].w, acc[i][j]);
            }
    }
}

template <int RI>
__device__ __forceinline__ void zeroAcc(float (&acc)[RI][4]) {
#pragma unroll
    for (int i = 0; i < RI; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
}

template <int NT = kThreads>
__device__ __forceinline__ void zeroSmem(float* p, int n) {
    for (int i = threadIdx.x; i < n; i += NT) p[i] = 0.f;
}

/** Shared scalar arrays of a chunk (kScal floats). */
struct Scal {
    float *gam, *bf, *cum, *w, *rs, *red;
    __device__ explicit Scal(float* sc) : gam(sc), bf(sc + kQ), cum(sc + 2 * kQ), w(sc + 3 * kQ), rs(sc + 4 * kQ), red(sc + 6 * kQ) {}
};

/**
 * Prepares chunk c (steps [c·64, c·64 + len)) of (row b, head h) in shared memory, whose buffers the caller
 * has zeroed: the scalars (γ, Δ(1−σ), c_t the inclusive sum of A·Δ), the local angle chain φ (in th, [64][NA]),
 * k and (when Q) q rotated by φ — K[i·ldn + n] or, with kTrans, K[n·kLdS + i] — and x, Xt[p·xp + i·xi] (by default
 * transposed: xp = kLdS, xi = 1).
 * Ends with a barrier.
 */
template <int NT = kThreads>
__device__ void prepChunk(const Mamba3ScanArgs& s, const Mamba3Offsets& o, const Geom& g, int b, int h, int c, int len,
                          float* Q, float* K, bool kTrans, float* Xt, const Scal& sc, float* th, int xp = kLdS, int xi = 1) {
    const int N = g.N, P = g.P, NA = g.NA, pairs = (N + 1) / 2;
    const int grp = h / (s.nheads / s.ngroups);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int64_t r0 = static_cast<int64_t>(b) * s.steps + static_cast<int64_t>(c) * kQ;
    const int64_t hP = static_cast<int64_t>(h) * P;
    for (int i = warp; i < len; i += NT / 32) {
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
    for (int idx = tid; idx < len * P; idx += NT) {
        const int i = idx / P, p = idx - i * P;
        Xt[p * xp + i * xi] = s.proj[(r0 + i) * s.ldproj + o.x + hP + p];
    }
    for (int idx = tid; idx < len * NA; idx += NT) {
        const int i = idx / NA, m = idx - i * NA;
        const float* row = s.proj + (r0 + i) * s.ldproj;
        th[idx] = m3::angleStep(row[o.angle + m], softplusf(row[o.dt + h] + s.dt_bias[h]));
    }
    __syncthreads();
    for (int m = tid; m < NA; m += NT) {  // the local chains, one thread per angle
        float phi = 0.f;
        for (int i = 0; i < len; ++i) {
            phi = m3::advanceAngle(phi, th[i * NA + m]);
            th[i * NA + m] = phi;
        }
    }
    if (tid == NT - 1) {  // c_t (NA ≤ 128 < NT − 1: not one of the angle threads)
        float acc = 0.f;
        for (int i = 0; i < len; ++i) {
            acc = __fadd_rn(acc, sc.cum[i]);
            sc.cum[i] = acc;
        }
    }
    __syncthreads();
    for (int idx = tid; idx < len * pairs; idx += NT) {
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
            // S̃ in the chunk's frame, then the state entering the next chunk: e^{c}·S̃ + rot_θ(the chunk's own part)
            handOver(ownBase + static_cast<int64_t>(c) * P * N, n0, n1, has1, cs, sn, expf(cl[j]), T0, T1, L0[j], L1[j],
                     S0, S1);
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


// ================================================================ backward (training)
// The chunked form of mamba3ScanBackward (the math: mamba3-siso.md §4 and its chunked equivalents). Every
// chunk works in its local angle frame (as the forward's), from its checkpoint (the true state before it);
// with S̃ the folded chunk-start state (local frame), e_t = e^{c_t}, Mw[t,s] = e_t/e_s·scale_s (s < t), γ_t
// (s = t), and the chunk's last step L weighted by coef_s = e^{c_L−c_s}·scale_s, where scale_L = γ_L + the next
// chunk's Δ₀(1−σ₀) (its fold term belongs to this chunk's x_L ⊗ k_L):
//   y_t = e_t·S̃ q_t + Σ_{s≤t} Mw[t,s] (q_t·k_s) x_s + D x_t,   S_end = e_L·S̃ + Σ_s coef_s x_s ⊗ k_s.
// Five launches:
//  1. dy:    per chunk, y recomputed (as the forward's output kernel), the gate's backward (dz, dy; per-chunk
//            partials of Σ dy·x and of the gate-norm weight), the per-step scalar e_t·dy_t·(S̃ q_t) and the
//            chunk's own gradient O = Σ_t e_t·dy_t ⊗ q_t.
//  2. pass:  per (row, head, p, pair of n), chunks from last to first: dS_end of the chunk (stored in its local
//            frame over O), then G ← e_L·G + rot(θ_c)·O; the last G (the gradient of the folded start state) kept.
//  3. grads: per chunk, the masked products for dq, dk, dx, the decay and scale gradients (dΔ without its angle
//            term and without the fold of its first step, d dd_A, dtrap), the RoPE backward in the local frame
//            (dk, dq before the rotation; dθ summed backwards inside the chunk, the chunk's total apart), and the
//            gradient of the next chunk's fold coefficient (for chunk 0 of its incoming state's).
//  4. carry: per (row, head, angle), the angle totals of the later chunks.
//  5. rows:  per row, the fold and angle terms into d dd_dt and dtrap, and dangles.
// Then (in mamba3_scan_backward.cu) the BCNorm backward and the parameter column sums. No atomics.
namespace {

struct BGeom {
    Geom g;        // g.ldn = nr + 4 here
    int ldp;       // row stride of p-indexed rows (pr + 4)
    int64_t bhc;   // chunks in all: batch·heads·C
    // workspace offsets (floats)
    int64_t dS0, dy, y0, cl, fb, tot, pd, pw, end;
};

BGeom bgeomOf(const Mamba3ScanArgs& s) {
    BGeom bg;
    bg.g = geomOf(s);
    bg.g.ldn = bg.g.nr + 4;
    bg.ldp = bg.g.pr + 4;
    const int64_t BH = static_cast<int64_t>(s.batch) * s.nheads;
    bg.bhc = BH * bg.g.C;
    const int64_t PN = static_cast<int64_t>(bg.g.P) * bg.g.N;
    bg.dS0 = bg.bhc * PN;
    bg.dy = bg.dS0 + BH * PN;
    bg.y0 = bg.dy + bg.bhc * kQ * bg.g.P;
    bg.cl = bg.y0 + bg.bhc * kQ;
    bg.fb = bg.cl + bg.bhc;
    bg.tot = bg.fb + bg.bhc;
    bg.pd = bg.tot + bg.bhc * bg.g.NA;
    bg.pw = bg.pd + bg.bhc;
    bg.end = bg.pw + bg.bhc * bg.g.P;
    return bg;
}

/** acc[i][j] += Σ_k A[(ty + S·i)·ar + k·ak]·B[(tx + 16j)·br + k·bk] over k < K (scalar loads, any strides; S as mmNT's). */
template <int RI>
__device__ __forceinline__ void mmG(float (&acc)[RI][4], const float* A, int ar, int ak, const float* B, int br, int bk, int K,
                                    int ty, int tx) {
    constexpr int S = 64 / RI;
#pragma unroll 4
    for (int k = 0; k < K; ++k) {
        float a[RI], b[4];
#pragma unroll
        for (int i = 0; i < RI; ++i) a[i] = A[(ty + S * i) * ar + k * ak];
#pragma unroll
        for (int j = 0; j < 4; ++j) b[j] = B[(tx + 16 * j) * br + k * bk];
#pragma unroll
        for (int i = 0; i < RI; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
}

/** Σ over the block (warps in order through red[NT / 32]); every thread gets the same bits. Contains barriers. */
template <int NT>
__device__ __forceinline__ float blockSum(float v, float* red) {
    v = m3::warpSum(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = 0.f;
    for (int u = 0; u < NT / 32; ++u) t += red[u];
    __syncthreads();
    return t;
}

/**
 * Pair m of row p of the folded chunk-start state in the chunk's local frame, from the checkpoint ck (the row's
 * state before the chunk): S̃ = S + bf0·v_prev ⊗ k_prev, rotated by −θ_c (cosines and sines in cth, sth).
 */
__device__ __forceinline__ void foldedPair(const float* ck, const Mamba3Offsets& o, int h, int p, int m, int N, int P, int NA,
                                           float bf0, const float* cth, const float* sth, float& L0, float& L1) {
    const int n0 = 2 * m, n1 = 2 * m + 1;
    const bool has1 = n1 < N;
    const int64_t hP = static_cast<int64_t>(h) * P;
    const float* Srow = ck + (hP + p) * N;
    const float S0 = Srow[n0], S1 = has1 ? Srow[n1] : 0.f;
    const float kp0 = ck[o.k + static_cast<int64_t>(h) * N + n0];
    const float kp1 = has1 ? ck[o.k + static_cast<int64_t>(h) * N + n1] : 0.f;
    const float bv = __fmul_rn(bf0, ck[o.v + hP + p]);
    const float T0 = fmaf(bv, kp0, S0), T1 = fmaf(bv, kp1, S1);
    if (m < NA) {
        const float cs = cth[m], sn = sth[m];
        toChunkFrame(cs, sn, T0, T1, L0, L1);
    } else {
        L0 = T0;
        L1 = T1;
    }
}

__global__ void __launch_bounds__(kBwdThreads, 1) m3BwdDyKernel(Mamba3ScanBackwardArgs a, Mamba3Offsets o, BGeom bg, float* ws) {
    constexpr int NT = kBwdThreads;
    constexpr int kTy = NT / 16, kRI = 64 / kTy;  // thread rows of a 64 × 64 tile, rows per thread
    extern __shared__ float4 sm4[];
    float* sm = reinterpret_cast<float*>(sm4);
    const Mamba3ScanArgs& s = a.fwd;
    const Geom& g = bg.g;
    const int C = g.C, H = s.nheads, N = g.N, P = g.P, NA = g.NA, ldn = g.ldn, ldp = bg.ldp;
    const int c = static_cast<int>(blockIdx.x % C);
    const int bh = static_cast<int>(blockIdx.x / C), h = bh % H, b = bh / H;
    const int len = min(kQ, s.steps - c * kQ);
    float* Q = sm;                    // [64][ldn]
    float* K = Q + kQ * ldn;          // [64][ldn]: k, then S̃ (local frame)
    float* X = K + kQ * ldn;          // [64][ldp]
    float* M = X + kQ * ldp;          // [64][kLdS]
    float* Y = M + kQ * kLdS;         // [64][ldp]: y, then dy, then e_t·dy
    float* YS = Y + kQ * ldp;         // [64][ldp]: e_t·S̃ q_t
    float* scp = YS + kQ * ldp;       // kScal
    float* th = scp + kScal;          // [64][NA]
    float* cth = th + kQ * NA;        // [NA]
    float* sth = cth + NA;            // [NA]
    float* red = sth + NA;            // [NT / 32]
    const Scal sc(scp);
    pdlWait();
    pdlLaunchDependents();
    zeroSmem<NT>(sm, 2 * kQ * ldn + 2 * kQ * ldp + kQ * kLdS + kQ * ldp);
    const float* ck = a.checkpoints + (static_cast<int64_t>(b) * C + c) * o.state;
    for (int m = threadIdx.x; m < NA; m += NT) {
        const float t0 = ck[o.theta + static_cast<int64_t>(h) * NA + m];
        cth[m] = cosf(t0);
        sth[m] = sinf(t0);
    }
    __syncthreads();
    prepChunk<NT>(s, o, g, b, h, c, len, Q, K, false, X, sc, th, 1, ldp);
    const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15, warp = tid >> 5, lane = tid & 31;
    {
        float acc[kRI][4];
        zeroAcc(acc);
        mmNT(acc, Q, ldn, K, ldn, g.n4, ty, tx);
#pragma unroll
        for (int i = 0; i < kRI; ++i) {
            const int t = ty + kTy * i;
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
    __syncthreads();  // K has been read
    const int pairs = (N + 1) / 2;
    for (int idx = tid; idx < kQ * pairs; idx += NT) {
        const int p = idx / pairs, m = idx - p * pairs;
        float L0 = 0.f, L1 = 0.f;
        if (p < P) foldedPair(ck, o, h, p, m, N, P, NA, sc.bf[0], cth, sth, L0, L1);
        K[p * ldn + 2 * m] = L0;
        if (2 * m + 1 < N) K[p * ldn + 2 * m + 1] = L1;
    }
    __syncthreads();
    const float dskip = s.d_skip[h];
    {
        float acc[kRI][4];
        zeroAcc(acc);
        mmNT(acc, Q, ldn, K, ldn, g.n4, ty, tx);  // S̃·q_t
#pragma unroll
        for (int i = 0; i < kRI; ++i) {
            const int t = ty + kTy * i;
            const float e = sc.w[t];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                acc[i][j] = __fmul_rn(acc[i][j], e);
                YS[t * ldp + tx + 16 * j] = acc[i][j];
            }
        }
        mmG(acc, M, kLdS, 1, X, 1, ldp, len, ty, tx);
#pragma unroll
        for (int i = 0; i < kRI; ++i) {
            const int t = ty + kTy * i;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int p = tx + 16 * j;
                Y[t * ldp + p] = p < P ? fmaf(dskip, X[t * ldp + p], acc[i][j]) : 0.f;
            }
        }
    }
    __syncthreads();
    const int64_t r0 = static_cast<int64_t>(b) * s.steps + static_cast<int64_t>(c) * kQ;
    const int64_t hP = static_cast<int64_t>(h) * P;
    if (s.gate_norm) {  // ρ_t and Σ_p w·e·y, a warp per step
        for (int t = warp; t < len; t += NT / 32) {
            float yy = 0.f, wey = 0.f;
            for (int p = lane; p < P; p += 32) {
                const float y = Y[t * ldp + p];
                const float z = s.proj[(r0 + t) * s.ldproj + o.z + hP + p];
                yy = fmaf(y, y, yy);
                wey = fmaf(s.gate_norm[hP + p] * (a.dout[(r0 + t) * a.lddout + hP + p] * siluf(z)), y, wey);
            }
            yy = m3::warpSum(yy);
            wey = m3::warpSum(wey);
            if (lane == 0) {
                sc.red[2 * t] = 1.f / sqrtf(yy / static_cast<float>(P) + m3::kEps);
                sc.red[2 * t + 1] = wey;
            }
        }
        __syncthreads();
    }
    // The gate's backward, one (t, p) element per thread and pass (all threads: a walk over t per p left 3/4 of
    // the block waiting at the next barrier). The inputs of kGateBatch elements are loaded before any store.
    const int64_t blk = blockIdx.x;
    float pdacc = 0.f;
    float* pwTerm = M;  // [64][kLdS]: eg·ŷ per (t, p) for the gate-norm weight's sum over t (M is free by now)
    constexpr int kGateBatch = 4;
    for (int base = tid; base < len * P; base += NT * kGateBatch) {
        float zv[kGateBatch], dv[kGateBatch];
#pragma unroll
        for (int u = 0; u < kGateBatch; ++u) {
            const int idx = base + u * NT;
            if (idx >= len * P) break;
            const int t = idx / P, p = idx - t * P;
            zv[u] = s.proj[(r0 + t) * s.ldproj + o.z + hP + p];
            dv[u] = a.dout[(r0 + t) * a.lddout + hP + p];
        }
#pragma unroll
        for (int u = 0; u < kGateBatch; ++u) {
            const int idx = base + u * NT;
            if (idx >= len * P) break;
            const int t = idx / P, p = idx - t * P;
            const float z = zv[u], dout = dv[u];
            const float y = Y[t * ldp + p];
            const float sz = m3::sigmoidf(z), silu = z * sz, dsilu = sz * (1.f + z * (1.f - sz));
            float dy, dz;
            if (!s.gate_norm) {
                dy = dout * silu;
                dz = dout * y * dsilu;
            } else {
                const float rho = sc.red[2 * t], mean = rho * (sc.red[2 * t + 1] / static_cast<float>(P));
                const float wg = s.gate_norm[hP + p], yh = y * rho, eg = dout * silu;
                dz = dout * yh * wg * dsilu;
                pwTerm[t * kLdS + p] = eg * yh;
                dy = rho * (wg * eg - yh * mean);
            }
            a.dproj[(r0 + t) * a.lddproj + o.z + hP + p] = dz;
            Y[t * ldp + p] = dy;
            ws[bg.dy + (blk * kQ + t) * P + p] = dy;
            pdacc = fmaf(dy, X[t * ldp + p], pdacc);
        }
    }
    if (s.gate_norm) {  // Σ_t eg·ŷ per p, in step order
        __syncthreads();
        for (int p = tid; p < P; p += NT) {
            float pw = 0.f;
            for (int t = 0; t < len; ++t) pw += pwTerm[t * kLdS + p];
            ws[bg.pw + blk * P + p] = pw;
        }
    }
    pdacc = blockSum<NT>(pdacc, red);
    if (tid == 0) {
        ws[bg.pd + blk] = pdacc;
        ws[bg.cl + blk] = sc.cum[len - 1];
    }
    for (int t = warp; t < kQ; t += NT / 32) {  // e_t·dy_t·(S̃ q_t)
        float v = 0.f;
        for (int p = lane; p < P; p += 32) v = fmaf(Y[t * ldp + p], YS[t * ldp + p], v);
        v = m3::warpSum(v);
        if (lane == 0) ws[bg.y0 + blk * kQ + t] = t < len ? v : 0.f;
    }
    __syncthreads();
    for (int idx = tid; idx < kQ * P; idx += NT) {
        const int t = idx / P, p = idx - t * P;
        Y[t * ldp + p] = __fmul_rn(Y[t * ldp + p], sc.w[t]);
    }
    __syncthreads();
    // O[p][n] = Σ_t e_t·dy_t[p]·q_t[n]
    float* own = ws + blk * P * N;
    for (int pt = 0; pt < g.pr; pt += 64)
        for (int nt = 0; nt < g.nr; nt += 64) {
            float acc[kRI][4];
            zeroAcc(acc);
            mmG(acc, Y + pt, 1, ldp, Q + nt, 1, ldn, len, ty, tx);
#pragma unroll
            for (int i = 0; i < kRI; ++i) {
                const int p = pt + ty + kTy * i;
                if (p >= P) continue;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int n = nt + tx + 16 * j;
                    if (n < N) own[static_cast<int64_t>(p) * N + n] = acc[i][j];
                }
            }
        }
}

__global__ void __launch_bounds__(kThreads) m3BwdPassKernel(Mamba3ScanBackwardArgs a, Mamba3Offsets o, BGeom bg, float* ws) {
    const Mamba3ScanArgs& s = a.fwd;
    const Geom& g = bg.g;
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
    float G0 = 0.f, G1 = 0.f;
    // The inputs of kPassBatch chunks are loaded before their updates (the loop's stores could alias them, so the
    // compiler would otherwise wait for each chunk's loads in turn); the arithmetic is the same, chunk by chunk.
    for (int c0 = C - 1; c0 >= 0; c0 -= kPassBatch) {
        float O0[kPassBatch], O1[kPassBatch], t0[kPassBatch], cl[kPassBatch];
#pragma unroll
        for (int j = 0; j < kPassBatch; ++j) {
            const int c = c0 - j;
            if (c < 0) break;
            const int64_t blk = static_cast<int64_t>(bh) * C + c;
            const float* own = ws + blk * P * N + static_cast<int64_t>(p) * N;
            O0[j] = own[n0];
            O1[j] = has1 ? own[n1] : 0.f;
            t0[j] = rot ? a.checkpoints[(static_cast<int64_t>(b) * C + c) * o.state + o.theta + static_cast<int64_t>(h) * NA + m] : 0.f;
            cl[j] = ws[bg.cl + blk];
        }
#pragma unroll
        for (int j = 0; j < kPassBatch; ++j) {
            const int c = c0 - j;
            if (c < 0) break;
            const int64_t blk = static_cast<int64_t>(bh) * C + c;
            float* own = ws + blk * P * N + static_cast<int64_t>(p) * N;
            float cs = 1.f, sn = 0.f;
            if (rot) {
                cs = cosf(t0[j]);
                sn = sinf(t0[j]);
            }
            // dS_end in the chunk's frame, then the gradient leaving the chunk leftwards
            handOver(own, n0, n1, has1, cs, sn, expf(cl[j]), G0, G1, O0[j], O1[j], G0, G1);
        }
    }
    float* d0 = ws + bg.dS0 + (static_cast<int64_t>(bh) * P + p) * N;
    d0[n0] = G0;
    if (has1) d0[n1] = G1;
}

/** RoPE backward of one pair in the local frame (angle φ): the gradients before the rotation and dφ. */
__device__ __forceinline__ float ropeBack(float cs, float sn, float d0, float d1, float x0, float x1, float& g0, float& g1) {
    g0 = cs * d0 + sn * d1;
    g1 = cs * d1 - sn * d0;
    return d0 * (-sn * x0 - cs * x1) + d1 * (cs * x0 - sn * x1);
}

__global__ void __launch_bounds__(kBwdThreads, 1) m3BwdGradKernel(Mamba3ScanBackwardArgs a, Mamba3Offsets o, BGeom bg, float* ws,
                                                                   float* dk, float* dq, float* phi) {
    constexpr int NT = kBwdThreads;
    constexpr int kTy = NT / 16, kRI = 64 / kTy;  // thread rows of a 64 × 64 tile, rows per thread
    extern __shared__ float4 sm4[];
    float* sm = reinterpret_cast<float*>(sm4);
    const Mamba3ScanArgs& s = a.fwd;
    const Geom& g = bg.g;
    const int C = g.C, H = s.nheads, N = g.N, P = g.P, NA = g.NA, ldn = g.ldn, ldp = bg.ldp;
    const int c = static_cast<int>(blockIdx.x % C);
    const int bh = static_cast<int>(blockIdx.x / C), h = bh % H, b = bh / H;
    const int len = min(kQ, s.steps - c * kQ), L = len - 1;
    const int grp = h / (s.nheads / s.ngroups);
    float* Q = sm;                    // [64][ldn]
    float* K = Q + kQ * ldn;          // [64][ldn]
    float* R = K + kQ * ldn;          // [64][ldn]: S̃, dq, dS_end, dk
    float* X = R + kQ * ldn;          // [64][ldp]
    float* DY = X + kQ * ldp;         // [64][ldp]
    float* A1 = DY + kQ * ldp;        // [64][kLdS]: Mw·(dy_t·x_s)
    float* A2 = A1 + kQ * kLdS;       // [64][kLdS]: Mw·(q_t·k_s)
    float* scp = A2 + kQ * kLdS;      // kScal
    float* th = scp + kScal;          // [64][NA]: φ
    float* dth = th + kQ * NA;        // [64][NA]: dφ per step
    float* aux = dth + kQ * NA;       // gradAuxFloats(NT)
    float* coef = aux, *rowP = aux + 64, *colE = aux + 128, *F = aux + 192, *qkd = aux + 256, *dxd = aux + 320, *dc = aux + 384;
    float* colpart = aux + 448;       // [NT / 32][64]
    float* cth = colpart + NT * 2;    // [NA ≤ 64]
    float* sth = cth + 64;            // [NA]
    float* red = sth + 64;            // [NT / 32 ≤ 64]
    const Scal sc(scp);
    pdlWait();
    pdlLaunchDependents();
    zeroSmem<NT>(sm, 3 * kQ * ldn + 2 * kQ * ldp);
    const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15, warp = tid >> 5, lane = tid & 31;
    const float* ck = a.checkpoints + (static_cast<int64_t>(b) * C + c) * o.state;
    for (int m = tid; m < NA; m += NT) {
        const float t0 = ck[o.theta + static_cast<int64_t>(h) * NA + m];
        cth[m] = cosf(t0);
        sth[m] = sinf(t0);
    }
    __syncthreads();
    prepChunk<NT>(s, o, g, b, h, c, len, Q, K, false, X, sc, th, 1, ldp);
    const int64_t blk = blockIdx.x;
    const int64_t r0 = static_cast<int64_t>(b) * s.steps + static_cast<int64_t>(c) * kQ;
    const int64_t hP = static_cast<int64_t>(h) * P;
    for (int idx = tid; idx < len * P; idx += NT) {
        const int t = idx / P, p = idx - t * P;
        DY[t * ldp + p] = ws[bg.dy + (blk * kQ + t) * P + p];
    }
    float bfn = 0.f;  // the next chunk's fold coefficient Δ₀(1−σ₀)
    if (c + 1 < C) {
        const m3::Coeffs cf = m3::coeffs(s, o, s.proj + (r0 + len) * s.ldproj, h);
        bfn = __fmul_rn(cf.delta, 1.f - cf.sig);
    }
    if (tid < kQ) {
        const int t = tid;
        float cf = 0.f;
        if (t < L) cf = __fmul_rn(expf(__fsub_rn(sc.cum[L], sc.cum[t])), __fadd_rn(sc.gam[t], sc.bf[t + 1]));
        else if (t == L) cf = __fadd_rn(sc.gam[L], bfn);
        coef[t] = cf;
        sc.w[t] = t < len ? expf(sc.cum[t]) : 0.f;
        qkd[t] = 0.f;
        dxd[t] = 0.f;
    }
    __syncthreads();
    // QK and DX, the masked weights, the decay statistics
    {
        float qk[kRI][4], dx[kRI][4];
        zeroAcc(qk);
        zeroAcc(dx);
        mmNT(qk, Q, ldn, K, ldn, g.n4, ty, tx);
        mmNT(dx, DY, ldp, X, ldp, (P + 3) / 4 * 4, ty, tx);
        float cpart[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int i = 0; i < kRI; ++i) {
            const int t = ty + kTy * i;
            float rp = 0.f;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int u = tx + 16 * j;
                float mw = 0.f;
                if (t < len) {
                    if (u < t) {
                        const float ex = expf(__fsub_rn(sc.cum[t], sc.cum[u]));
                        mw = __fmul_rn(ex, __fadd_rn(sc.gam[u], sc.bf[u + 1]));
                        const float pr = __fmul_rn(qk[i][j], dx[i][j]);
                        rp = fmaf(mw, pr, rp);
                        cpart[j] = fmaf(ex, pr, cpart[j]);
                    } else if (u == t) {
                        mw = sc.gam[t];
                        qkd[t] = qk[i][j];
                        dxd[t] = dx[i][j];
                    }
                }
                A1[t * kLdS + u] = __fmul_rn(mw, dx[i][j]);
                A2[t * kLdS + u] = __fmul_rn(mw, qk[i][j]);
            }
            for (int off = 8; off > 0; off >>= 1) rp += __shfl_xor_sync(0xffffffffu, rp, off);
            if (tx == 0) rowP[t] = rp;
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            cpart[j] += __shfl_xor_sync(0xffffffffu, cpart[j], 16);
            if (lane < 16) colpart[warp * 64 + tx + 16 * j] = cpart[j];
        }
    }
    // S̃ (local frame) into R
    const int pairs = (N + 1) / 2;
    for (int idx = tid; idx < P * pairs; idx += NT) {
        const int p = idx / pairs, m = idx - p * pairs;
        float L0, L1;
        foldedPair(ck, o, h, p, m, N, P, NA, sc.bf[0], cth, sth, L0, L1);
        R[p * ldn + 2 * m] = L0;
        if (2 * m + 1 < N) R[p * ldn + 2 * m + 1] = L1;
    }
    __syncthreads();
    if (tid < kQ) {
        float v = 0.f;
        for (int u = 0; u < NT / 32; ++u) v += colpart[u * 64 + tid];
        colE[tid] = v;
    }
    // dq_t = e_t·S̃ᵀ dy_t + Σ_s A1[t,s]·k_s (local frame), both n tiles in registers
    {
        float acc[2][kRI][4];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
            zeroAcc(acc[nt]);
            if (nt * 64 >= g.nr) continue;
            mmG(acc[nt], DY, ldp, 1, R + nt * 64, 1, ldn, P, ty, tx);
#pragma unroll
            for (int i = 0; i < kRI; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[nt][i][j] = __fmul_rn(acc[nt][i][j], sc.w[ty + kTy * i]);
            mmG(acc[nt], A1, kLdS, 1, K + nt * 64, 1, ldn, len, ty, tx);
        }
        __syncthreads();  // R (S̃) has been read
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
            if (nt * 64 >= g.nr) continue;
#pragma unroll
            for (int i = 0; i < kRI; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) R[(ty + kTy * i) * ldn + nt * 64 + tx + 16 * j] = acc[nt][i][j];
        }
    }
    __syncthreads();
    // RoPE backward of dq: dq before the rotation, dφ (first part)
    for (int idx = tid; idx < len * pairs; idx += NT) {
        const int t = idx / pairs, m = idx - t * pairs, n0 = 2 * m, n1 = 2 * m + 1;
        const bool two = n1 < N;
        const float* row = s.proj + (r0 + t) * s.ldproj;
        const float* craw = row + o.c + static_cast<int64_t>(grp) * N;
        const float* cb = s.c_bias + static_cast<int64_t>(h) * N;
        const float d0 = R[t * ldn + n0], d1 = two ? R[t * ldn + n1] : 0.f;
        float* out = dq + ((r0 + t) * H + h) * N;
        float g0 = d0, g1 = d1;
        if (m < NA) {
            const float x0 = m3::normBias(craw[n0], sc.rs[2 * t + 1], s.c_norm[n0], cb[n0]);
            const float x1 = m3::normBias(craw[n1], sc.rs[2 * t + 1], s.c_norm[n1], cb[n1]);
            const float ph = th[t * NA + m];
            dth[t * NA + m] = ropeBack(cosf(ph), sinf(ph), d0, d1, x0, x1, g0, g1);
        }
        out[n0] = g0;
        if (two) out[n1] = g1;
    }
    __syncthreads();
    // dS_end (local frame) into R; ⟨dS_end, S̃⟩
    float e0 = 0.f;
    {
        const float* dse = ws + blk * P * N;
        for (int idx = tid; idx < P * pairs; idx += NT) {
            const int p = idx / pairs, m = idx - p * pairs, n0 = 2 * m, n1 = 2 * m + 1;
            float L0, L1;
            foldedPair(ck, o, h, p, m, N, P, NA, sc.bf[0], cth, sth, L0, L1);
            const float d0 = dse[static_cast<int64_t>(p) * N + n0], d1 = n1 < N ? dse[static_cast<int64_t>(p) * N + n1] : 0.f;
            e0 = fmaf(d0, L0, fmaf(d1, L1, e0));
            R[p * ldn + n0] = d0;
            if (n1 < N) R[p * ldn + n1] = d1;
        }
        for (int idx = tid; idx < (kQ - P) * ldn; idx += NT) R[P * ldn + idx] = 0.f;
    }
    e0 = blockSum<NT>(e0, red);  // (its barriers also publish R)
    // dx_s = D·dy_s + Σ_t A2[t,s]·dy_t + coef_s·(dS_end k_s); F_s = x_sᵀ dS_end k_s
    {
        float acc[kRI][4];
        zeroAcc(acc);
        mmNT(acc, K, ldn, R, ldn, g.n4, ty, tx);
#pragma unroll
        for (int i = 0; i < kRI; ++i) {
            const int sr = ty + kTy * i;
            float f = 0.f;
#pragma unroll
            for (int j = 0; j < 4; ++j) f = fmaf(X[sr * ldp + tx + 16 * j], acc[i][j], f);
            for (int off = 8; off > 0; off >>= 1) f += __shfl_xor_sync(0xffffffffu, f, off);
            if (tx == 0) F[sr] = f;
            const float cf = coef[sr];
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[i][j] = __fmul_rn(acc[i][j], cf);
        }
        mmG(acc, A2, 1, kLdS, DY, 1, ldp, len, ty, tx);
        const float dskip = s.d_skip[h];
#pragma unroll
        for (int i = 0; i < kRI; ++i) {
            const int sr = ty + kTy * i;
            if (sr >= len) continue;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int p = tx + 16 * j;
                if (p < P) a.dproj[(r0 + sr) * a.lddproj + o.x + hP + p] = fmaf(dskip, DY[sr * ldp + p], acc[i][j]);
            }
        }
    }
    // dk_s = Σ_t A1[t,s]·q_t + coef_s·(dS_endᵀ x_s)
    {
        float acc[2][kRI][4];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
            zeroAcc(acc[nt]);
            if (nt * 64 >= g.nr) continue;
            mmG(acc[nt], X, ldp, 1, R + nt * 64, 1, ldn, P, ty, tx);
#pragma unroll
            for (int i = 0; i < kRI; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[nt][i][j] = __fmul_rn(acc[nt][i][j], coef[ty + kTy * i]);
            mmG(acc[nt], A1, 1, kLdS, Q + nt * 64, 1, ldn, len, ty, tx);
        }
        __syncthreads();  // R (dS_end) has been read
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
            if (nt * 64 >= g.nr) continue;
#pragma unroll
            for (int i = 0; i < kRI; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) R[(ty + kTy * i) * ldn + nt * 64 + tx + 16 * j] = acc[nt][i][j];
        }
    }
    __syncthreads();
    for (int idx = tid; idx < len * pairs; idx += NT) {
        const int t = idx / pairs, m = idx - t * pairs, n0 = 2 * m, n1 = 2 * m + 1;
        const bool two = n1 < N;
        const float* row = s.proj + (r0 + t) * s.ldproj;
        const float* braw = row + o.b + static_cast<int64_t>(grp) * N;
        const float* bb = s.b_bias + static_cast<int64_t>(h) * N;
        const float d0 = R[t * ldn + n0], d1 = two ? R[t * ldn + n1] : 0.f;
        float* out = dk + ((r0 + t) * H + h) * N;
        float g0 = d0, g1 = d1;
        if (m < NA) {
            const float x0 = m3::normBias(braw[n0], sc.rs[2 * t], s.b_norm[n0], bb[n0]);
            const float x1 = m3::normBias(braw[n1], sc.rs[2 * t], s.b_norm[n1], bb[n1]);
            const float ph = th[t * NA + m];
            dth[t * NA + m] += ropeBack(cosf(ph), sinf(ph), d0, d1, x0, x1, g0, g1);
        }
        out[n0] = g0;
        if (two) out[n1] = g1;
    }
    // chunk 0: the gradient of its fold coefficient, v_inᵀ dS̃₀ k_in (global frame)
    if (c == 0) {
        float v = 0.f;
        const float* d0 = ws + bg.dS0 + static_cast<int64_t>(bh) * P * N;
        for (int idx = tid; idx < P * N; idx += NT) {
            const int p = idx / N, n = idx - p * N;
            v = fmaf(ck[o.v + hP + p] * ck[o.k + static_cast<int64_t>(h) * N + n], d0[idx], v);
        }
        v = blockSum<NT>(v, red);
        if (tid == 0) ws[bg.fb + blk] = v;
    }
    __syncthreads();
    // the per-step scalars
    const float eL = sc.w[L];
    if (tid < len) {
        const int t = tid;
        float v = ws[bg.y0 + blk * kQ + t] + rowP[t] - __fmul_rn(coef[t], F[t]);
        if (t < L) v -= __fmul_rn(__fadd_rn(sc.gam[t], sc.bf[t + 1]), colE[t]);
        if (t == L) {
            float sf = 0.f;
            for (int u = 0; u < len; ++u) sf = fmaf(coef[u], F[u], sf);
            v += eL * e0 + sf;
        }
        dc[t] = v;
    }
    __syncthreads();
    if (tid == 0) {
        float acc = 0.f;
        for (int t = L; t >= 0; --t) {
            acc += dc[t];
            dc[t] = acc;
        }
    }
    if (tid == 32 && c + 1 < C) ws[bg.fb + blk + 1] = F[L];
    __syncthreads();
    if (tid < len) {
        const int t = tid;
        auto dscale = [&](int u) { return colE[u] + __fmul_rn(expf(__fsub_rn(sc.cum[L], sc.cum[u])), F[u]); };
        const float dg = qkd[t] * dxd[t] + (t < L ? dscale(t) : F[L]);
        const float dbf = t >= 1 ? dscale(t - 1) : 0.f;
        const float* row = s.proj + (r0 + t) * s.ldproj;
        const m3::Coeffs cf = m3::coeffs(s, o, row, h);
        const float da = dc[t];
        const float ddelta = da * cf.A + dg * cf.sig + dbf * (1.f - cf.sig);
        const float dsig = (dg - dbf) * cf.delta;
        const float u = row[o.a + h];
        const bool floored = -m3::heavyTail(u) > -s.a_floor;
        const float dht = u >= 0.f ? 1.f : 1.f / ((1.f - u) * (1.f - u));
        float* dr = a.dproj + (r0 + t) * a.lddproj;
        dr[o.dt + h] = ddelta;
        dr[o.a + h] = floored ? 0.f : -(da * cf.delta) * dht;
        dr[o.trap + h] = dsig * (cf.sig * (1.f - cf.sig));
    }
    // the angle gradient summed backwards inside the chunk; the chunk's total apart
    for (int m = tid; m < NA; m += NT) {
        float acc = 0.f;
        for (int t = L; t >= 0; --t) {
            acc += dth[t * NA + m];
            phi[((r0 + t) * H + h) * NA + m] = acc;
        }
        ws[bg.tot + blk * NA + m] = acc;
    }
}

__global__ void m3BwdCarryKernel(BGeom bg, float* ws, int64_t n) {
    const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    pdlWait();
    pdlLaunchDependents();
    if (idx >= n) return;
    const int NA = bg.g.NA, C = bg.g.C;
    const int64_t bh = idx / NA;
    const int m = static_cast<int>(idx % NA);
    float acc = 0.f;
    for (int c = C - 1; c >= 0; --c) {
        float* t = ws + bg.tot + (bh * C + c) * NA + m;
        const float v = *t;
        *t = acc;  // the angle gradient of the chunks after c
        acc += v;
    }
}

__global__ void m3BwdRowKernel(Mamba3ScanBackwardArgs a, Mamba3Offsets o, BGeom bg, const float* ws, float* phi) {
    pdlWait();
    pdlLaunchDependents();
    const Mamba3ScanArgs& s = a.fwd;
    const int H = s.nheads, NA = s.nangles, C = bg.g.C;
    const int64_t r = blockIdx.x;
    const int b = static_cast<int>(r / s.steps), t = static_cast<int>(r % s.steps), c = t / kQ;
    const float* row = s.proj + r * s.ldproj;
    float* dr = a.dproj + r * a.lddproj;
    float* ph = phi + r * H * NA;
    for (int h = threadIdx.x; h < H; h += blockDim.x) {
        const int64_t blk = (static_cast<int64_t>(b) * H + h) * C + c;
        const float* suf = ws + bg.tot + blk * NA;
        float term = 0.f;
        for (int m = 0; m < NA; ++m) {
            const float f = ph[h * NA + m] + suf[m];
            ph[h * NA + m] = f;
            term = fmaf(f, m3::kPi * tanhf(row[o.angle + m]), term);
        }
        float dd = dr[o.dt + h];
        if (t % kQ == 0) {  // the fold of the chunk's incoming K/V term: Δ₀(1−σ₀)
            const float fb = ws[bg.fb + blk];
            const m3::Coeffs cf = m3::coeffs(s, o, row, h);
            dd += fb * (1.f - cf.sig);
            dr[o.trap + h] += -(fb * cf.delta) * (cf.sig * (1.f - cf.sig));
        }
        const float u = row[o.dt + h] + s.dt_bias[h];
        dr[o.dt + h] = (dd + term) * (u > 20.f ? 1.f : m3::sigmoidf(u));
    }
    __syncthreads();
    for (int m = threadIdx.x; m < NA; m += blockDim.x) {
        float acc = 0.f;
        for (int h = 0; h < H; ++h) acc = fmaf(ph[h * NA + m], softplusf(row[o.dt + h] + s.dt_bias[h]), acc);
        const float th = tanhf(row[o.angle + m]);
        dr[o.angle + m] = acc * m3::kPi * (1.f - th * th);
    }
}

/** acc[h·w + q] += Σ_b Σ_c part[((b·H + h)·C + c)·w + q] (rows, then chunks, in order). */
__global__ void m3BwdParamKernel(const float* part, int batch, int H, int C, int w, float* acc) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    pdlWait();
    pdlLaunchDependents();
    if (j >= H * w) return;
    const int h = j / w, q = j - h * w;
    float v = 0.f;
    for (int b = 0; b < batch; ++b)
        for (int c = 0; c < C; ++c) v += part[((static_cast<int64_t>(b) * H + h) * C + c) * w + q];
    acc[j] += v;
}

size_t bwdDySmem(const BGeom& bg, int nt) {
    return sizeof(float) * (2 * static_cast<size_t>(kQ) * bg.g.ldn + 3 * static_cast<size_t>(kQ) * bg.ldp + kQ * kLdS + kScal +
                            static_cast<size_t>(kQ) * bg.g.NA + 2 * bg.g.NA + nt / 32);
}

/** The grads kernel's small arrays: 7 of 64 floats, the column partials [nt / 32][64], cos, sin and red of 64. */
size_t gradAuxFloats(int nt) { return static_cast<size_t>(7 + nt / 32 + 3) * 64; }

size_t bwdGradSmem(const BGeom& bg, int nt) {
    return sizeof(float) * (3 * static_cast<size_t>(kQ) * bg.g.ldn + 2 * static_cast<size_t>(kQ) * bg.ldp + 2 * kQ * kLdS + kScal +
                            2 * static_cast<size_t>(kQ) * bg.g.NA + gradAuxFloats(nt));
}

}  // namespace

namespace train {

bool mamba3ChunkedBackwardUsable(const Exec& ex, const Mamba3ScanBackwardArgs& a) {
    const Mamba3ScanArgs& s = a.fwd;
    if (a.chunk != kQ || s.steps < kMamba3ChunkedMinSteps || s.batch < 1) return false;
    if (s.headdim > 64 || s.d_state > 128 || s.nangles > 64) return false;
    const BGeom bg = bgeomOf(s);
    const size_t most = static_cast<size_t>(ex.smem_optin > 48 * 1024 ? ex.smem_optin : 48 * 1024);
    if (bwdDySmem(bg, kBwdThreads) > most || bwdGradSmem(bg, kBwdThreads) > most) return false;
    const int64_t threads = static_cast<int64_t>(s.batch) * s.nheads * bg.g.P * ((bg.g.N + 1) / 2);
    return bg.bhc <= 0x7fffffff && (threads + kThreads - 1) / kThreads <= 0x7fffffff &&
           static_cast<int64_t>(s.batch) * s.steps <= 0x7fffffff;
}

void mamba3ChunkedBackward(const Exec& ex, const Mamba3ScanBackwardArgs& a, const Scratch& scratch, float* dk, float* dq) {
    const Mamba3ScanArgs& s = a.fwd;
    const BGeom bg = bgeomOf(s);
    const Mamba3Offsets o = Mamba3Offsets::of(s);
    const int64_t R = static_cast<int64_t>(s.batch) * s.steps;
    float* ws = scratch.get(0, bg.end);
    float* phi = scratch.get(2, std::max<int64_t>(1, R * s.nheads * s.nangles));
    const size_t ys = bwdDySmem(bg, kBwdThreads), gs = bwdGradSmem(bg, kBwdThreads);
    optIn(m3BwdDyKernel, ex, ys, "cudaFuncSetAttribute (mamba3 backward dy)");
    optIn(m3BwdGradKernel, ex, gs, "cudaFuncSetAttribute (mamba3 backward grads)");
    const dim3 blocks(static_cast<unsigned>(bg.bhc));
    launch("mamba3ScanBackward chunk dy", ex, m3BwdDyKernel, blocks, dim3(kBwdThreads), ys, a, o, bg, ws);
    const int64_t threads = static_cast<int64_t>(s.batch) * s.nheads * bg.g.P * ((bg.g.N + 1) / 2);
    launch("mamba3ScanBackward chunk pass", ex, m3BwdPassKernel, dim3(static_cast<unsigned>((threads + kThreads - 1) / kThreads)),
           dim3(kThreads), 0, a, o, bg, ws);
    launch("mamba3ScanBackward chunk grads", ex, m3BwdGradKernel, blocks, dim3(kBwdThreads), gs, a, o, bg, ws, dk, dq, phi);
    const int64_t na = static_cast<int64_t>(s.batch) * s.nheads * bg.g.NA;
    if (na > 0)
        launch("mamba3ScanBackward chunk angle carry", ex, m3BwdCarryKernel, dim3(static_cast<unsigned>((na + 255) / 256)), dim3(256),
               0, bg, ws, na);
    launch("mamba3ScanBackward chunk rows", ex, m3BwdRowKernel, dim3(static_cast<unsigned>(R)), dim3(128), 0, a, o, bg,
           static_cast<const float*>(ws), phi);
    const int H = s.nheads, P = s.headdim;
    if (a.d_d_skip)
        launch("mamba3ScanBackward chunk dD", ex, m3BwdParamKernel, dim3((H + 127) / 128), dim3(128), 0,
               static_cast<const float*>(ws + bg.pd), s.batch, H, bg.g.C, 1, a.d_d_skip);
    if (a.d_gate_norm && s.gate_norm)
        launch("mamba3ScanBackward chunk dgate_norm", ex, m3BwdParamKernel, dim3((H * P + 127) / 128), dim3(128), 0,
               static_cast<const float*>(ws + bg.pw), s.batch, H, bg.g.C, P, a.d_gate_norm);
}

}  // namespace train
}  // namespace mamba::cuda
