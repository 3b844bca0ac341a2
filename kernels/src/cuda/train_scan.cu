// Backward of the selective scan (training). The forward with checkpoints (selective_scan.cu: the chunked scan whose
// chunk start states are the checkpoints, or the sequential CKPT variant for short sequences) and this file both
// advance the state with scanUpdate() (scan_step.cuh), so the states recomputed here are the forward's.
//
// Thread layout: S lanes of a warp share one (batch row b, channel d); lane l holds the NS states
// n = l·NS … l·NS+NS−1 in registers (NS = 4 up to d_state 128, 8 up to 256; S = the power of two
// ≥ d_state/NS, so S ≤ 32 and groups never straddle a warp). A block of kThreads threads covers
// kThreads/S channels of one batch row. Sums over a channel's states are xor-shuffles inside its S lanes.
//
// Per (b, d), chunks in reverse with the gradient carry G = ∂L/∂h (starting from ∂L/∂h_end with a state carry;
// what is left past step 0 is ∂L/∂h_start):
//  1. from the chunk's checkpoint, re-run its steps (SUB at a time, their loads issued first), storing the state every
//     SUB steps and every step's Δ (softplus once per step, not again in 2) in shared memory;
//  2. for each sub-chunk of SUB steps in reverse: re-run it from its stored state with the SUB+1 states
//     in registers (compile-time indices), then walk it backwards:
//       gn = G + dy·C (∂L/∂h_t);  dC_t += dy·h_t;  dB_t += gn·Δu;  Σ_n gn·B → du;
//       Σ_n (gn·Ā·h_{t−1}·A + gn·B·u) → dΔ;  dA += gn·Ā·h_{t−1}·Δ;  G ← gn·Ā.
// With d_state 16 (4 lanes per channel, SUB = 4) a channel's per-step work — the softplus of step 1, the gate's values and
// the du / ddt / dz stores of step 2 — is done by one lane per step (lane q takes step q of each SUB, dy and Δ handed
// round by shuffles) rather than by all four.
// dB_t, dC_t are sums over channels: per step, a fixed xor-shuffle tree over the warp's channels (for d_state 16 a
// reduce-scatter: each lane ends with one of the warp's 2N sums), then
// the block's warps in order through shared memory (one barrier per sub-chunk, for its SUB steps), give one
// partial per (channel block, row); a second kernel adds the channel blocks in order. dA_log and dD are sums over batch rows and groups: one partial per
// (b, group, d), added in that order by a third kernel (which also applies dA_log = dA·A).
//
// Groups (chunk-parallel backward): the chunks are cut into groups (o.per_group chunks each), and every group of every
// (b, d) runs as its own block, so long sequences at small batch fill the GPU. The carry is linear in itself:
// leaving a group leftwards, G_out = P·G_in + L with P = Π_t exp(Δ_t·A) over the group and L the carry of the
// group started from zero. So: (1) carryLocalKernel computes P and L of every group but the first (dy, C and Δ
// only — no states); (2) carryCombineKernel walks the groups right to left per (b, d, n), giving each group its
// incoming carry G_in; (3) the main kernel runs each group from its G_in. Groups are used only when the
// (row, channel block) blocks alone would leave half the GPU's block slots idle (small batches): the split, and so
// the last bits of a row's gradients, depend on the batch and the GPU, never on the run.
#include "lane_load.cuh"
#include "scan_step.cuh"
#include "train_kernels.h"

#include <algorithm>

namespace mamba::cuda::train {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
// Blocks per SM the backward kernel is compiled for. NS = 4 (d_state ≤ 128): 4 blocks = 128 registers, which the
// phase-1 loads of SUB steps at once need without spilling (H200, 130m B 8 × T 1,024: 1,594 µs; 5 blocks at 96
// registers spilled and took 1,868 µs; without the phase-1 batching 1,642 µs at 96 and 1,769 µs at 128).
template <int NS>
constexpr int kBackwardMinBlocks = NS == 4 ? 4 : 2;

// 1/y correctly rounded is one MUFU reciprocal plus a fix-up; the same bits as the IEEE division 1.f / y.
__device__ __forceinline__ float sigmoidf(float x) { return __frcp_rn(1.f + expf(-x)); }

/** softplus'(x) = σ(x), with softplusf's cut-off (softplus(x) = x above 20). */
__device__ __forceinline__ float softplusGrad(float x) { return x > 20.f ? 1.f : sigmoidf(x); }

/**
 * The gate out = y·SiLU(z) backwards, given dout: dy = dout·SiLU(z), and g = SiLU'(z), so that dz = dout·y·g.
 * Every kernel that needs them computes them here (the same bits).
 */
struct GateGrad {
    float dy, g;
};
__device__ __forceinline__ GateGrad gateGrad(float dout, float z) {
    const float sz = sigmoidf(z);
    return {dout * (z * sz), sz * (1.f + z * (1.f - sz))};
}

/** Σ over the S lanes that share a channel (S a power of two ≤ 32; all 32 lanes take part). */
__device__ __forceinline__ float groupSum(float v, int S) {
    for (int off = S / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

/**
 * One level of a reduce-scatter: lanes `off` apart swap halves of v[0, 2H) and add, so each keeps H sums
 * (the lower lane the first half, the upper lane the second) in v[0, H).
 */
template <int H>
__device__ __forceinline__ void foldHalf(float* v, int off, int wl) {
    const bool upper = (wl & off) != 0;
#pragma unroll
    for (int k = 0; k < H; ++k) {
        const float send = upper ? v[k] : v[k + H];
        const float keep = upper ? v[k + H] : v[k];
        v[k] = keep + __shfl_xor_sync(0xffffffffu, send, off);
    }
}

struct Layout {
    int S, per_block, ch_blocks;
};

/** Where this thread sits: batch row, group, channel (clamped for idle lanes), lane, whether its channel exists. */
struct Place {
    int b, grp, chb, d, lane, n0;
    bool active;
};

/** Blocks are numbered ((b·groups) + group)·ch_blocks + channel block. */
__device__ __forceinline__ Place place(const Layout& L, int channels, int NS, int groups) {
    Place p;
    p.chb = static_cast<int>(blockIdx.x % L.ch_blocks);
    const int rest = static_cast<int>(blockIdx.x / L.ch_blocks);
    p.grp = rest % groups;
    p.b = rest / groups;
    const int d_raw = p.chb * L.per_block + static_cast<int>(threadIdx.x) / L.S;
    p.active = d_raw < channels;
    p.d = p.active ? d_raw : channels - 1;  // idle lanes still join the shuffles and barriers
    p.lane = static_cast<int>(threadIdx.x) % L.S;
    p.n0 = p.lane * NS;
    return p;
}

struct BackwardOut {
    float* pbc;  // [ch_blocks][R][2N]: dB_t then dC_t per channel block
    float* pda;  // [B][groups][E][N]: Σ_t G·Δ·Ā·h_{t−1} per row and group (times A later)
    float* pdd;  // [B][groups][E]: Σ_t dy·u per row and group
    int chunks;
    int groups, per_group;  // chunks per group (the last group may hold fewer)
    float* carry_l;  // [B][groups][E][N]: a group's leftward carry from zero (groups > 1)
    float* carry_p;  // [B][groups][E][N]: Π exp(Δ·A) over a group
    float* carry_in; // [B][groups][E][N]: the carry entering a group from its right
};

__device__ __forceinline__ int64_t groupIndex(const BackwardOut& o, int b, int grp, int E, int d, int N) {
    return ((static_cast<int64_t>(b) * o.groups + grp) * E + d) * N;
}

/**
 * Phase 1: P and L of each group but the first (see the header). S_FIXED = U = 4 (d_state 16): lane q of a channel
 * computes the Δ and dy of step q of every U and hands them round by shuffles, as the main kernel does.
 */
template <int NS, int S_FIXED>
__global__ void __launch_bounds__(kThreads) carryLocalKernel(ScanBackwardArgs s, Layout L, BackwardOut o) {
    pdlWait();
    pdlLaunchDependents();
    const int N = s.d_state, E = s.channels, T = s.steps, K = s.chunk;
    const Place p = place(L, E, NS, o.groups);
    if (p.grp == 0) return;
    float a2[NS], G[NS], P[NS];
#pragma unroll
    for (int i = 0; i < NS; ++i) {
        a2[i] = p.n0 + i < N ? s.a[static_cast<int64_t>(p.d) * N + p.n0 + i] * kLog2e : 0.f;
        G[i] = 0.f;
        P[i] = 1.f;
    }
    const int ta = p.grp * o.per_group * K, tb = min(T, ta + o.per_group * K);
    const int64_t row0 = static_cast<int64_t>(p.b) * T;
    // backwards in blocks of 4 steps, each block's loads issued before its dependent updates
    constexpr int U = 4;
    constexpr bool kShared = S_FIXED == U;  // the channel's lanes share the per-step work
    static_assert(S_FIXED == 0 || kShared, "carryLocalKernel: lanes per channel 0 (any) or U");
    const int lane0 = static_cast<int>(threadIdx.x % 32) & ~(U - 1);  // the channel's first lane in the warp
    for (int t1 = tb; t1 > ta; t1 -= U) {
        const int cnt = min(U, t1 - ta);
        float dtv[U], zv[U], ov[U], cv[U][NS];
        float my_delta = 0.f, my_dy = 0.f;
        if constexpr (kShared) {
            if (p.lane < cnt) {
                const int64_t r = row0 + t1 - 1 - p.lane;
                my_delta = softplusf(s.dt[r * E + p.d]);
                my_dy = gateGrad(s.dout[r * E + p.d], s.z[r * s.ldz + p.d]).dy;
            }
        }
#pragma unroll
        for (int q = 0; q < U; ++q) {
            if (q < cnt) {
                const int64_t r = row0 + t1 - 1 - q;
                if constexpr (!kShared) {
                    dtv[q] = s.dt[r * E + p.d];
                    zv[q] = s.z[r * s.ldz + p.d];
                    ov[q] = s.dout[r * E + p.d];
                }
#pragma unroll
                for (int i = 0; i < NS; ++i) cv[q][i] = p.n0 + i < N ? s.bc[r * s.ldbc + N + p.n0 + i] : 0.f;
            }
        }
#pragma unroll
        for (int q = 0; q < U; ++q) {
            if (q < cnt) {
                float delta, dy;
                if constexpr (kShared) {
                    delta = __shfl_sync(0xffffffffu, my_delta, lane0 | q);
                    dy = __shfl_sync(0xffffffffu, my_dy, lane0 | q);
                } else {
                    delta = softplusf(dtv[q]);
                    dy = gateGrad(ov[q], zv[q]).dy;
                }
#pragma unroll
                for (int i = 0; i < NS; ++i) {
                    if (p.n0 + i < N) {
                        const float e = scanDecay(delta, a2[i]);
                        G[i] = (G[i] + dy * cv[q][i]) * e;
                        P[i] *= e;
                    }
                }
            }
        }
    }
    if (!p.active) return;
    const int64_t at = groupIndex(o, p.b, p.grp, E, p.d, N) + p.n0;
#pragma unroll
    for (int i = 0; i < NS; ++i) {
        if (p.n0 + i < N) {
            o.carry_l[at + i] = G[i];
            o.carry_p[at + i] = P[i];
        }
    }
}

/** Phase 2: one thread per (b, d, n) walks the groups right to left, handing each its incoming carry. */
__global__ void carryCombineKernel(ScanBackwardArgs s, BackwardOut o) {
    pdlWait();
    pdlLaunchDependents();
    const int N = s.d_state, E = s.channels;
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= static_cast<int64_t>(s.batch) * E * N) return;
    const auto [b, d, n] = stateIndex(i, N, E);
    float G = s.dh_end ? s.dh_end[b * s.dh_stride + static_cast<int64_t>(d) * N + n] : 0.f;
    for (int grp = o.groups - 1; grp >= 0; --grp) {
        const int64_t at = groupIndex(o, b, grp, E, d, N) + n;
        o.carry_in[at] = G;
        if (grp > 0) G = fmaf(o.carry_p[at], G, o.carry_l[at]);
    }
}

// S_FIXED > 0: the lanes per channel known at compile time, every lane's NS states real (N == NS·S_FIXED):
// shuffle trees unrolled, no per-state bounds checks. S_FIXED = 0: any d_state (the layout's S at run time).
// VEC: a lane's B_t and C_t values are read as one 16-byte load each (bc and ldbc 16-byte aligned, S_FIXED > 0).
template <int NS, int SUB, int S_FIXED, bool VEC>
__global__ void __launch_bounds__(kThreads, kBackwardMinBlocks<NS>)
    scanBackwardKernel(ScanBackwardArgs s, Layout L, BackwardOut o) {
    extern __shared__ float smem[];
    pdlWait();
    pdlLaunchDependents();
    const int N = s.d_state, E = s.channels, T = s.steps, K = s.chunk;
    const int64_t R = static_cast<int64_t>(s.batch) * T;
    const Place p = place(L, E, NS, o.groups);
    const int tid = threadIdx.x, warp = tid / 32, wl = tid % 32;
    const int nsub_max = (K + SUB - 1) / SUB;
    float* sub = smem;                                        // [nsub_max][NS][kThreads]
    float* red = smem + static_cast<int64_t>(nsub_max) * NS * kThreads;  // [2][SUB][kWarps][2N]
    float* dcache = red + 2 * SUB * kWarps * 2 * N;  // [K][per_block]: Δ of the chunk's steps (phase 1 → phase 2)
    constexpr bool kFull = S_FIXED > 0;
    static_assert(!kFull || (NS == 4 && S_FIXED == 4), "the reduce-scatter below is written for 8 channels × 8 sums per warp");
    static_assert(!kFull || SUB == S_FIXED, "kFull: lane q of a channel takes step q of each SUB steps");
    const int S = S_FIXED > 0 ? S_FIXED : L.S;
    const int ch_local = tid / S;
    const int lane0 = wl & ~(S - 1);  // the channel's first lane in the warp (S is a power of two)

    float a2[NS], A[NS], G[NS], gA[NS];
#pragma unroll
    for (int i = 0; i < NS; ++i) {
        const bool on = (kFull || p.n0 + i < N);
        A[i] = on ? s.a[static_cast<int64_t>(p.d) * N + p.n0 + i] : 0.f;
        a2[i] = A[i] * kLog2e;
        // the carry starts from ∂L/∂h_end when the state is carried on (nothing reads h past the end otherwise),
        // or from the group's incoming carry (phase 2)
        if (o.groups > 1) G[i] = on ? o.carry_in[groupIndex(o, p.b, p.grp, E, p.d, N) + p.n0 + i] : 0.f;
        else G[i] = on && s.dh_end ? s.dh_end[p.b * s.dh_stride + static_cast<int64_t>(p.d) * N + p.n0 + i] : 0.f;
        gA[i] = 0.f;
    }
    float gD = 0.f;
    const float dskip = s.d_skip[p.d];
    const float* ck = s.checkpoints + static_cast<int64_t>(p.b) * o.chunks * E * N + static_cast<int64_t>(p.d) * N;
    const int64_t row0 = static_cast<int64_t>(p.b) * T;
    int parity = 0;

    const int c_first = p.grp * o.per_group, c_end = min(o.chunks, c_first + o.per_group);
    for (int c = c_end - 1; c >= c_first; --c) {
        const int ta = c * K, tb = min(T, ta + K);
        // 1. the chunk's states from its checkpoint; every SUB-th one kept in shared memory
        {
            float h[NS];
#pragma unroll
            for (int i = 0; i < NS; ++i) h[i] = (kFull || p.n0 + i < N) ? ck[static_cast<int64_t>(c) * E * N + p.n0 + i] : 0.f;
            // SUB steps at a time, all their loads issued before the dependent state updates; pointers advanced by
            // SUB rows (64-bit index products once per chunk)
            const float* dtp = s.dt + (row0 + ta) * E + p.d;
            const float* up = s.u + (row0 + ta) * E + p.d;
            const float* bp = s.bc + (row0 + ta) * s.ldbc + p.n0;
            const int ldbc = static_cast<int>(s.ldbc);
            for (int t0 = ta; t0 < tb; t0 += SUB, dtp += SUB * E, up += SUB * E, bp += SUB * ldbc) {
                const int cnt = min(SUB, tb - t0);
                float* dst = sub + static_cast<int64_t>((t0 - ta) / SUB) * NS * kThreads + tid;
#pragma unroll
                for (int i = 0; i < NS; ++i) dst[i * kThreads] = h[i];
                float dtv[SUB], uv[SUB], bv[SUB][NS];
                // kFull: lane q of the channel takes step q's softplus (S = SUB lanes) and hands it round
                float my_delta = 0.f;
                if constexpr (kFull) {
                    if (p.lane < cnt) {
                        my_delta = softplusf(dtp[p.lane * E]);
                        dcache[(t0 - ta + p.lane) * L.per_block + ch_local] = my_delta;
                    }
                }
#pragma unroll
                for (int q = 0; q < SUB; ++q) {
                    if (q < cnt) {
                        if constexpr (!kFull) dtv[q] = dtp[q * E];
                        uv[q] = up[q * E];
                        loadFloats<NS, VEC>(bp + q * ldbc, bv[q], N - p.n0);
                    }
                }
#pragma unroll
                for (int q = 0; q < SUB; ++q) {
                    if (q < cnt) {
                        float delta;
                        if constexpr (kFull) {
                            delta = __shfl_sync(0xffffffffu, my_delta, lane0 | q);
                        } else {
                            delta = softplusf(dtv[q]);
                            if (p.lane == 0) dcache[(t0 - ta + q) * L.per_block + ch_local] = delta;
                        }
                        const float du = delta * uv[q];
#pragma unroll
                        for (int i = 0; i < NS; ++i)
                            if (kFull || p.n0 + i < N) h[i] = scanUpdate(h[i], a2[i], delta, du, bv[q][i]);
                    }
                }
            }
        }
        __syncwarp();  // a channel's lanes share a warp: lane 0's Δ are visible to the others from here
        // 2. sub-chunks in reverse
        const int nsub = (tb - ta + SUB - 1) / SUB;
        for (int j = nsub - 1; j >= 0; --j) {
            const int s0 = ta + j * SUB, cnt = min(SUB, tb - s0);
            float hs[SUB + 1][NS], dl[SUB], uu[SUB];  // states, Δ, u
            // the sub-chunk's rows: step q of a [R, ld] array is base[q·ld] (32-bit offsets from 64-bit bases)
            const int64_t rs = row0 + s0;
            const float* dtp = s.dt + rs * E + p.d;
            const float* up = s.u + rs * E + p.d;
            const float* doutp = s.dout + rs * E + p.d;
            const float* zp = s.z + rs * s.ldz + p.d;
            const float* bp = s.bc + rs * s.ldbc + p.n0;
            const int ldbc = static_cast<int>(s.ldbc), ldz = static_cast<int>(s.ldz);
            {
                const float* src = sub + static_cast<int64_t>(j) * NS * kThreads + tid;
#pragma unroll
                for (int i = 0; i < NS; ++i) hs[0][i] = src[i * kThreads];
            }
#pragma unroll
            for (int q = 0; q < SUB; ++q) {
                if (q < cnt) {
                    dl[q] = dcache[(s0 - ta + q) * L.per_block + ch_local];
                    uu[q] = up[q * E];
                    const float du = dl[q] * uu[q];
                    float bv[NS];
                    loadFloats<NS, VEC>(bp + q * ldbc, bv, N - p.n0);
#pragma unroll
                    for (int i = 0; i < NS; ++i)
                        hs[q + 1][i] = (kFull || p.n0 + i < N) ? scanUpdate(hs[q][i], a2[i], dl[q], du, bv[i]) : 0.f;
                }
            }
            // kFull: lane q of the channel loads step q's gate inputs and computes its gate values once; dy is handed
            // round by a shuffle, and each lane keeps what its step stores (written after the walk, lane q row q)
            float my_dout = 0.f, my_z = 0.f, my_dtr = 0.f, my_dy = 0.f, my_g = 0.f;
            float my_yv = 0.f, my_du = 0.f, my_sd = 0.f;
            if constexpr (kFull) {
                if (p.lane < cnt) {
                    my_dout = doutp[p.lane * E];
                    my_z = zp[p.lane * ldz];
                    my_dtr = dtp[p.lane * E];
                }
                const GateGrad gg = gateGrad(my_dout, my_z);
                my_dy = gg.dy;
                my_g = gg.g;
            }
#pragma unroll
            for (int q = SUB - 1; q >= 0; --q) {
                if (q >= cnt) continue;
                const float delta = dl[q], u = uu[q];
                float bv[NS], cv[NS];
                loadFloats<NS, VEC>(bp + q * ldbc, bv, N - p.n0);
                loadFloats<NS, VEC>(bp + q * ldbc + N, cv, N - p.n0);
                // y = Σ_n h·C + D·u, then the gate
                float yacc = 0.f;
#pragma unroll
                for (int i = 0; i < NS; ++i)
                    if ((kFull || p.n0 + i < N)) yacc = fmaf(hs[q + 1][i], cv[i], yacc);
                yacc = groupSum(yacc, S);
                const float yv = dskip * u + yacc;
                float dy, dz = 0.f, dtr = 0.f;
                if constexpr (kFull) {
                    dy = __shfl_sync(0xffffffffu, my_dy, lane0 | q);
                    if (p.lane == q) my_yv = yv;
                } else {
                    const float dout = doutp[q * E];
                    const GateGrad gg = gateGrad(dout, zp[q * ldz]);
                    dtr = dtp[q * E];
                    dy = gg.dy;
                    dz = dout * yv * gg.g;
                }
                gD += dy * u;
                const float du = delta * u;
                float vB[NS], vC[NS];
                float sGB = 0.f, sDelta = 0.f;
#pragma unroll
                for (int i = 0; i < NS; ++i) {
                    vB[i] = 0.f;
                    vC[i] = 0.f;
                    if ((kFull || p.n0 + i < N)) {
                        const float bn = bv[i], cn = cv[i];
                        const float gn = G[i] + dy * cn;  // ∂L/∂h_t
                        vC[i] = dy * hs[q + 1][i];
                        vB[i] = gn * du;
                        sGB += gn * bn;
                        const float e = scanDecay(delta, a2[i]);
                        const float gah = gn * e * hs[q][i];
                        sDelta += gah * A[i] + gn * bn * u;
                        gA[i] += gah * delta;
                        G[i] = gn * e;  // carried to h_{t−1}
                    }
                }
                sGB = groupSum(sGB, S);
                sDelta = groupSum(sDelta, S);
                if constexpr (kFull) {
                    const float du_out = dskip * dy + delta * sGB;
                    if (p.lane == q) {
                        my_du = du_out;
                        my_sd = sDelta;
                    }
                } else if (p.active && p.lane == 0) {
                    const int64_t r = rs + q;
                    s.du[r * E + p.d] = dskip * dy + delta * sGB;
                    s.ddt[r * E + p.d] = sDelta * softplusGrad(dtr);
                    s.dz[r * s.lddz + p.d] = dz;
                }
                // dB_t, dC_t: this block's channels, in a fixed order
                if (!p.active) {
#pragma unroll
                    for (int i = 0; i < NS; ++i) vB[i] = vC[i] = 0.f;
                }
                float* rb = red + ((parity * SUB + q) * kWarps + warp) * 2 * N;
                if constexpr (kFull) {
                    // reduce-scatter over the warp's channels: the same pairwise tree as the butterfly below
                    // (same operands, so the same bits), with 2·NS − 1 shuffles instead of 2·NS per level
                    float v[2 * NS];
#pragma unroll
                    for (int i = 0; i < NS; ++i) {
                        v[i] = vB[i];
                        v[NS + i] = vC[i];
                    }
                    foldHalf<NS>(v, S, wl);
                    foldHalf<NS / 2>(v, 2 * S, wl);
                    foldHalf<NS / 4>(v, 4 * S, wl);
                    const int j = ((wl & S) ? NS : 0) + ((wl & (2 * S)) ? NS / 2 : 0) + ((wl & (4 * S)) ? NS / 4 : 0);
                    rb[(j < NS ? 0 : N) + p.n0 + j % NS] = v[0];
                } else {
#pragma unroll
                    for (int i = 0; i < NS; ++i) {
                        for (int off = S; off < 32; off <<= 1) {
                            vB[i] += __shfl_xor_sync(0xffffffffu, vB[i], off);
                            vC[i] += __shfl_xor_sync(0xffffffffu, vC[i], off);
                        }
                    }
                    if (wl < S) {  // the warp's first channel holds the warp's sums
#pragma unroll
                        for (int i = 0; i < NS; ++i) {
                            if (p.n0 + i < N) {
                                rb[p.n0 + i] = vB[i];
                                rb[N + p.n0 + i] = vC[i];
                            }
                        }
                    }
                }
            }
            if constexpr (kFull) {
                if (p.active && p.lane < cnt) {  // lane q: step q's du, dΔ (times softplus'), dz
                    const int64_t r = rs + p.lane;
                    s.du[r * E + p.d] = my_du;
                    s.ddt[r * E + p.d] = my_sd * softplusGrad(my_dtr);
                    s.dz[r * s.lddz + p.d] = my_dout * my_yv * my_g;
                }
            }
            // the sub-chunk's steps: the block's warps added in order (double-buffered: one barrier per sub-chunk)
            __syncthreads();
            for (int k = tid; k < cnt * 2 * N; k += kThreads) {
                const int q = k / (2 * N), e = k % (2 * N);
                const float* rq = red + (parity * SUB + q) * kWarps * 2 * N + e;
                float v = rq[0];
                for (int w = 1; w < kWarps; ++w) v += rq[w * 2 * N];
                o.pbc[(static_cast<int64_t>(p.chb) * R + row0 + s0 + q) * 2 * N + e] = v;
            }
            parity ^= 1;
        }
    }
    if (!p.active) return;
    if (s.dh_start && p.grp == 0) {  // past step 0 the carry is ∂L/∂(the starting h)
#pragma unroll
        for (int i = 0; i < NS; ++i)
            if ((kFull || p.n0 + i < N)) s.dh_start[p.b * s.dh_stride + static_cast<int64_t>(p.d) * N + p.n0 + i] = G[i];
    }
    float* pa = o.pda + groupIndex(o, p.b, p.grp, E, p.d, N);
#pragma unroll
    for (int i = 0; i < NS; ++i)
        if ((kFull || p.n0 + i < N)) pa[p.n0 + i] = gA[i];
    if (p.lane == 0) o.pdd[(static_cast<int64_t>(p.b) * o.groups + p.grp) * E + p.d] = gD;
}

// dbc[r, k] = Σ_blocks pbc[block, r, k], channel blocks in order (overwrites dB_t, dC_t).
__global__ void scanDbcKernel(const float* pbc, int64_t R, int N2, int blocks, float* dbc, int64_t lddbc) {
    pdlWait();
    pdlLaunchDependents();
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= R * N2) return;
    const int64_t r = i / N2;
    const int k = static_cast<int>(i % N2);
    float v = pbc[i];
    for (int blk = 1; blk < blocks; ++blk) v += pbc[static_cast<int64_t>(blk) * R * N2 + i];
    dbc[r * lddbc + k] = v;
}

// da_log[d, n] += A[d, n]·Σ_j pda[j, d, n]; dd_skip[d] += Σ_j pdd[j, d]; j = (row, group) in order.
__global__ void scanParamKernel(const float* pda, const float* pdd, const float* a, int batch, int E, int N,
                                float* da_log, float* dd_skip) {
    pdlWait();
    pdlLaunchDependents();
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    const int64_t EN = static_cast<int64_t>(E) * N;
    if (i < EN) {
        float acc = 0.f;
        for (int b = 0; b < batch; ++b) acc += pda[b * EN + i];
        da_log[i] += acc * a[i];
    } else if (i < EN + E) {
        const int64_t d = i - EN;
        float acc = 0.f;
        for (int b = 0; b < batch; ++b) acc += pdd[static_cast<int64_t>(b) * E + d];
        dd_skip[d] += acc;
    }
}

int statesPerLane(int N) { return N <= 128 ? 4 : 8; }

/** Shared memory of the backward kernel: the sub-chunk states of one chunk, the double-buffered sums, the Δ cache. */
size_t backwardSmem(int chunk, int ns, int sub, int N, int per_block) {
    const size_t nsub_max = static_cast<size_t>((chunk + sub - 1) / sub);
    return (nsub_max * ns * kThreads + 2 * static_cast<size_t>(sub) * kWarps * 2 * N +
            static_cast<size_t>(chunk) * per_block) *
           sizeof(float);
}

Layout layoutFor(int N, int batch, int channels) {
    Layout L;
    const int ns = statesPerLane(N);
    const int need = (N + ns - 1) / ns;
    L.S = 1;
    while (L.S < need) L.S *= 2;
    L.per_block = kThreads / L.S;
    L.ch_blocks = (channels + L.per_block - 1) / L.per_block;
    return L;
}

void checkShape(int N, const char* what) {
    if (N < 1 || N > 256)
        throw std::invalid_argument(std::string(what) + ": d_state " + std::to_string(N) + " is outside [1, 256]");
}

}  // namespace

void selectiveScanBackward(const Exec& ex, const ScanBackwardArgs& s, const Scratch& scratch) {
    if (s.batch <= 0 || s.steps <= 0 || s.channels <= 0) return;
    checkShape(s.d_state, "selectiveScanBackward");
    if (s.chunk < 1) throw std::invalid_argument("selectiveScanBackward: chunk " + std::to_string(s.chunk) + " < 1");
    // the kernel steps through a sub-chunk's rows with 32-bit offsets (SUB · stride)
    if (s.channels > (1 << 28) || s.ldbc > (1 << 28) || s.ldz > (1 << 28))
        throw std::invalid_argument("selectiveScanBackward: row strides past 2^28 floats are not supported");
    const int N = s.d_state, E = s.channels;
    const Layout L = layoutFor(N, s.batch, E);
    const int64_t R = static_cast<int64_t>(s.batch) * s.steps;
    const bool narrow = statesPerLane(N) == 4;
    // d_state 16 (every Mamba-1 checkpoint): 4 lanes of 4 states, the compile-time layout, 16-byte B/C loads
    // when the rows allow them
    const bool vec = reinterpret_cast<uintptr_t>(s.bc) % 16 == 0 && s.ldbc % 4 == 0;
    const auto kernel = narrow && N == 16 ? (vec ? scanBackwardKernel<4, 4, 4, true> : scanBackwardKernel<4, 4, 4, false>)
                        : narrow          ? scanBackwardKernel<4, 4, 0, false>
                                          : scanBackwardKernel<8, 4, 0, false>;
    const size_t smem = backwardSmem(s.chunk, narrow ? 4 : 8, 4, N, L.per_block);
    const int optin = ex.smem_optin;
    if (smem > static_cast<size_t>(optin))
        throw std::invalid_argument("selectiveScanBackward: chunk " + std::to_string(s.chunk) + " with d_state " +
                                    std::to_string(N) + " needs " + std::to_string(smem) +
                                    " bytes of shared memory per block; the device has " + std::to_string(optin));
    // The opt-in is an attribute of the kernel in the device context that every backend on the device
    // shares: it is always set to the device's maximum, so a concurrent setter can never lower it below
    // what a launch on another thread needs.
    if (smem > 48 * 1024)
        check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin),
              "cudaFuncSetAttribute (scan backward)");

    BackwardOut o;
    o.chunks = (s.steps + s.chunk - 1) / s.chunk;
    // Groups of chunks when the (row, channel block) blocks fill less than half the GPU's block slots: about two
    // slots' worth of blocks. From half on, one group is as fast as any split and needs no carries (H200, 130m
    // B 8 × T 2,048 = 73% of the slots: 1 group 3.00 ms, 2 / 3 / 4 / 8 groups 3.52 / 3.34 / 2.95 / 2.96 ms).
    int per_sm = 0;
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem),
          "cudaOccupancyMaxActiveBlocksPerMultiprocessor (scan backward)");
    const int64_t base_blocks = static_cast<int64_t>(L.ch_blocks) * s.batch;
    const int64_t slots = static_cast<int64_t>(std::max(per_sm, 1)) * ex.sms;
    const int64_t want = 2 * base_blocks >= slots ? 1 : (2 * slots + base_blocks - 1) / base_blocks;
    o.groups = static_cast<int>(std::min<int64_t>(o.chunks, want));
    o.per_group = (o.chunks + o.groups - 1) / o.groups;
    o.groups = (o.chunks + o.per_group - 1) / o.per_group;
    const int64_t parts = static_cast<int64_t>(s.batch) * o.groups;  // (row, group) pairs
    o.pbc = scratch.get(0, static_cast<int64_t>(L.ch_blocks) * R * 2 * N);
    o.pda = scratch.get(1, parts * E * N);
    o.pdd = scratch.get(2, parts * E);
    o.carry_l = o.carry_p = o.carry_in = nullptr;
    if (o.groups > 1) {
        float* carry = scratch.get(3, 3 * parts * E * N);
        o.carry_l = carry;
        o.carry_p = carry + parts * E * N;
        o.carry_in = carry + 2 * parts * E * N;
    }
    const int64_t blocks = static_cast<int64_t>(L.ch_blocks) * parts;
    if (blocks > 0x7fffffff) throw std::invalid_argument("selectiveScanBackward: too many rows");
    const dim3 grid(static_cast<unsigned>(blocks)), block(kThreads);
    if (o.groups > 1) {
        const auto carries = narrow && N == 16 ? carryLocalKernel<4, 4> : narrow ? carryLocalKernel<4, 0> : carryLocalKernel<8, 0>;
        launch("selectiveScan backward group carries", ex, carries, grid, block, 0, s, L, o);
        const int64_t n_states = static_cast<int64_t>(s.batch) * E * N;
        launch("selectiveScan backward carry combine", ex, carryCombineKernel, dim3(blocksFor(n_states, 256)), dim3(256),
               0, s, o);
    }
    launch("selectiveScan backward", ex, kernel, grid, block, smem, s, L, o);
    const int64_t n_bc = R * 2 * N;
    launch("selectiveScan backward dB dC", ex, scanDbcKernel, dim3(blocksFor(n_bc, 256)), dim3(256), 0,
           static_cast<const float*>(o.pbc), R, 2 * N, L.ch_blocks, s.dbc, s.lddbc);
    const int64_t n_p = static_cast<int64_t>(E) * N + E;
    launch("selectiveScan backward dA dD", ex, scanParamKernel, dim3(blocksFor(n_p, 128)), dim3(128), 0,
           static_cast<const float*>(o.pda), static_cast<const float*>(o.pdd), s.a, static_cast<int>(parts), E, N,
           s.da_log, s.dd_skip);
}

}  // namespace mamba::cuda::train
