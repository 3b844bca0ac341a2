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
// what is left past step 0 is ∂L/∂h_start). Each step of the walk back is
//       gn = G + dy·C (∂L/∂h_t);  dC_t += dy·h_t;  dB_t += gn·Δu;  Σ_n gn·B → du;
//       Σ_n (gn·Ā·h_{t−1}·A + gn·B·u) → dΔ;  dA += gn·Ā·h_{t−1}·Δ;  G ← gn·Ā      (stepBack)
// Two kernels walk it:
//  - scanBackward16Kernel, d_state 16, chunks of ≤ 16 steps and ddt / dz of one type (every Mamba-1 tape; see its
//    comment): a chunk's states re-run once into shared memory and read back by the walk, its inputs staged by
//    cp.async a chunk ahead; dB_t / dC_t halved over each warp's channels by shuffles, then the warps through a small
//    shared table;
//  - scanBackwardKernel, any other shape: states re-run twice (every SUB-th kept, then each sub-chunk's in registers);
//    dB_t / dC_t by xor-shuffle trees over the warp's channels, then the warps in order through shared memory.
// dB_t, dC_t are sums over channels: one partial per (channel block, row), the channel blocks added in order by a
// second kernel. dA_log and dD are sums over batch rows and groups: one partial per (b, group, d), added in that
// order by a third kernel (which also applies dA_log = dA·A).
//
// Groups (chunk-parallel backward): the chunks are cut into groups (o.per_group chunks each), and every group of every
// (b, d) runs as its own block, so long sequences at small batch fill the GPU. The carry is linear in itself:
// leaving a group leftwards, G_out = P·G_in + L with P = Π_t exp(Δ_t·A) over the group and L the carry of the
// group started from zero. So: (1) carryLocalKernel computes P and L of every group but the first (dy, C and Δ
// only — no states); (2) carryCombineKernel walks the groups right to left per (b, d, n), giving each group its
// incoming carry G_in; (3) the main kernel runs each group from its G_in. Groups are used only when the
// (row, channel block) blocks alone would leave half the GPU's block slots idle (small batches): the split, and so
// the last bits of a row's gradients, depend on the batch and the GPU, never on the run.
#include "cp_async.cuh"
#include "lane_load.cuh"
#include "lowp.cuh"
#include "scan_step.cuh"
#include "train_kernels.h"

#include <algorithm>
#include <type_traits>

namespace mamba::cuda::train {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
// Blocks per SM the general backward kernel is compiled for. NS = 4 (d_state ≤ 128): 4 blocks = 128 registers, which the
// phase-1 loads of SUB steps at once need (H200, when this kernel still served d_state 16, 130m B 8 × T 1,024: 1,594 µs;
// 5 blocks at 96 registers spilled and took 1,868 µs; without the phase-1 batching 1,642 µs at 96 and 1,769 µs at
// 128). Since the stepBack / finishBlock split (2026-12-03) nvcc spills 36 bytes of it at 128 registers; it runs for
// d_state other than 16 only.
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

constexpr int kFullChannels = kThreads / 4;  // channels per block with d_state 16 (4 lanes per channel)


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
    float* pdb;  // [B][groups][E]: Σ_t ddt per row and group (dt's bias gradient)
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
    const float dtb = dtBias(s, p.d);
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
                my_delta = softplusf(s.dt[r * E + p.d] + dtb);
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
                    delta = softplusf(dtv[q] + dtb);
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

/** Where a block's chunks start and end: its group's chunks, in reverse. */
__device__ __forceinline__ int firstChunk(const BackwardOut& o, const Place& p) { return p.grp * o.per_group; }
__device__ __forceinline__ int endChunk(const BackwardOut& o, const Place& p) {
    return min(o.chunks, (p.grp + 1) * o.per_group);
}

/** The carry G entering a block's last chunk: the group's incoming carry, ∂L/∂h_end, or 0. */
__device__ __forceinline__ float startCarry(const ScanBackwardArgs& s, const BackwardOut& o, const Place& p, int n) {
    if (o.groups > 1) return o.carry_in[groupIndex(o, p.b, p.grp, s.channels, p.d, s.d_state) + n];
    return s.dh_end ? s.dh_end[p.b * s.dh_stride + static_cast<int64_t>(p.d) * s.d_state + n] : 0.f;
}

/**
 * One step of the walk back for a lane's NS states (the first `valid` of them real): with gn = G + dy·C = ∂L/∂h_t,
 * vC = dy·h_t and vB = gn·Δu are the lane's dC_t / dB_t terms, sGB = Σ gn·B and sGA = Σ gn·Ā·h_{t−1}·A its shares of
 * du and dΔ — dΔ = Σ_n (gn·Ā·h_{t−1}·A + gn·B·u) is formed after the lane sums as ΣsGA + u·ΣsGB, one product per
 * channel instead of two per state; dA += gn·Ā·h_{t−1}·Δ and G ← gn·Ā. Both backward kernels step through it.
 */
template <int NS, bool ALL>
__device__ __forceinline__ void stepBack(float (&G)[NS], float (&gA)[NS], const float (&A)[NS], const float (&a2)[NS],
                                         const float (&h)[NS], const float (&h_prev)[NS], const float (&bv)[NS],
                                         const float (&cv)[NS], float delta, float u, float dy, int valid,
                                         float (&vB)[NS], float (&vC)[NS], float& sGB, float& sGA) {
    const float du = delta * u;
    sGB = 0.f;
    sGA = 0.f;
#pragma unroll
    for (int i = 0; i < NS; ++i) {
        vB[i] = 0.f;
        vC[i] = 0.f;
        if (ALL || i < valid) {
            const float gn = fmaf(dy, cv[i], G[i]);  // ∂L/∂h_t
            vC[i] = dy * h[i];
            vB[i] = gn * du;
            sGB = fmaf(gn, bv[i], sGB);
            const float ge = gn * scanDecay(delta, a2[i]);  // carried to h_{t−1}
            const float gah = ge * h_prev[i];
            sGA = fmaf(gah, A[i], sGA);
            gA[i] = fmaf(gah, delta, gA[i]);
            G[i] = ge;
        }
    }
}

/** A gradient element into its f32 output, or rounded into its 2-byte one (Rounded16). */
__device__ __forceinline__ void storeGrad(float* f32, int64_t ld, const Rounded16& r16, int64_t r, int d, float v) {
    if (f32) f32[r * ld + d] = v;
    else storeRounded(r16, r, d, v);
}

/** The same with the output's type known at compile time (GradT: float, or the Rounded16's 2-byte type). */
template <typename GradT>
__device__ __forceinline__ void storeGrad(float* f32, int64_t ld, const Rounded16& r16, int64_t r, int d, float v) {
    if constexpr (std::is_same_v<GradT, float>) f32[r * ld + d] = v;
    else static_cast<GradT*>(r16.data)[r * r16.ld + d] = toStorage<GradT>(v);
}

/**
 * What a block leaves behind: ∂L/∂h_start (first group), the dA, dD and dt-bias partials of its (row, group). gDb is
 * each lane's share of Σ_t ddt: summed over the channel's S lanes here (every lane takes part in the shuffles).
 */
template <int NS, bool ALL>
__device__ __forceinline__ void finishBlock(const ScanBackwardArgs& s, const BackwardOut& o, const Place& p,
                                            const float (&G)[NS], const float (&gA)[NS], float gD, float gDb, int S) {
    gDb = groupSum(gDb, S);
    if (!p.active) return;
    const int N = s.d_state;
    if (s.dh_start && p.grp == 0) {  // past step 0 the carry is ∂L/∂(the starting h)
#pragma unroll
        for (int i = 0; i < NS; ++i)
            if (ALL || p.n0 + i < N) s.dh_start[p.b * s.dh_stride + static_cast<int64_t>(p.d) * N + p.n0 + i] = G[i];
    }
    float* pa = o.pda + groupIndex(o, p.b, p.grp, s.channels, p.d, N);
#pragma unroll
    for (int i = 0; i < NS; ++i)
        if (ALL || p.n0 + i < N) pa[p.n0 + i] = gA[i];
    if (p.lane == 0) {
        const int64_t at = (static_cast<int64_t>(p.b) * o.groups + p.grp) * s.channels + p.d;
        o.pdd[at] = gD;
        o.pdb[at] = gDb;
    }
}

// ---- any d_state: the general kernel ----
//
// Per chunk: (1) from the checkpoint, re-run its steps (SUB at a time, loads first), keeping every SUB-th state and
// every step's Δ in shared memory; (2) for each sub-chunk of SUB steps in reverse, re-run it from its stored state
// with the SUB+1 states in registers, then walk it back. dB_t / dC_t: per step a fixed xor-shuffle tree over the
// warp's channels, then the block's warps in order through shared memory (double-buffered: one barrier per sub-chunk).
template <int NS, int SUB>
__global__ void __launch_bounds__(kThreads, kBackwardMinBlocks<NS>)
    scanBackwardKernel(ScanBackwardArgs s, Layout L, BackwardOut o) {
    extern __shared__ float smem[];
    pdlWait();
    pdlLaunchDependents();
    const int N = s.d_state, E = s.channels, T = s.steps, K = s.chunk;
    const int64_t R = static_cast<int64_t>(s.batch) * T;
    const Place p = place(L, E, NS, o.groups);
    const int tid = threadIdx.x, warp = tid / 32, wl = tid % 32;
    const int S = L.S;
    const int ch_local = tid / S;
    const int nsub_max = (K + SUB - 1) / SUB;
    float* sub = smem;                                                   // [nsub_max][NS][kThreads]
    float* red = smem + static_cast<int64_t>(nsub_max) * NS * kThreads;  // [2][SUB][kWarps][2N]
    float* dcache = red + 2 * SUB * kWarps * 2 * N;  // [K][per_block]: Δ of the chunk's steps (phase 1 → phase 2)

    float a2[NS], A[NS], G[NS], gA[NS];
#pragma unroll
    for (int i = 0; i < NS; ++i) {
        const bool on = p.n0 + i < N;
        A[i] = on ? s.a[static_cast<int64_t>(p.d) * N + p.n0 + i] : 0.f;
        a2[i] = A[i] * kLog2e;
        G[i] = on ? startCarry(s, o, p, p.n0 + i) : 0.f;
        gA[i] = 0.f;
    }
    float gD = 0.f, gDb = 0.f;  // gDb: Σ_t ddt (lane 0 computes ddt)
    const float dskip = s.d_skip[p.d], dtb = dtBias(s, p.d);
    const float* ck = s.checkpoints + static_cast<int64_t>(p.b) * o.chunks * E * N + static_cast<int64_t>(p.d) * N;
    const int64_t row0 = static_cast<int64_t>(p.b) * T;
    int parity = 0;

    for (int c = endChunk(o, p) - 1; c >= firstChunk(o, p); --c) {
        const int ta = c * K, tb = min(T, ta + K);
        // 1. the chunk's states from its checkpoint; every SUB-th one kept in shared memory
        {
            float h[NS];
#pragma unroll
            for (int i = 0; i < NS; ++i) h[i] = p.n0 + i < N ? ck[static_cast<int64_t>(c) * E * N + p.n0 + i] : 0.f;
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
#pragma unroll
                for (int q = 0; q < SUB; ++q) {
                    if (q < cnt) {
                        dtv[q] = dtp[q * E];
                        uv[q] = up[q * E];
                        loadFloats<NS, false>(bp + q * ldbc, bv[q], N - p.n0);
                    }
                }
#pragma unroll
                for (int q = 0; q < SUB; ++q) {
                    if (q < cnt) {
                        const float delta = softplusf(dtv[q] + dtb);
                        if (p.lane == 0) dcache[(t0 - ta + q) * L.per_block + ch_local] = delta;
                        const float du = delta * uv[q];
#pragma unroll
                        for (int i = 0; i < NS; ++i)
                            if (p.n0 + i < N) h[i] = scanUpdate(h[i], a2[i], delta, du, bv[q][i]);
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
                    loadFloats<NS, false>(bp + q * ldbc, bv, N - p.n0);
#pragma unroll
                    for (int i = 0; i < NS; ++i)
                        hs[q + 1][i] = p.n0 + i < N ? scanUpdate(hs[q][i], a2[i], dl[q], du, bv[i]) : 0.f;
                }
            }
#pragma unroll
            for (int q = SUB - 1; q >= 0; --q) {
                if (q >= cnt) continue;
                const float delta = dl[q], u = uu[q];
                float bv[NS], cv[NS];
                loadFloats<NS, false>(bp + q * ldbc, bv, N - p.n0);
                loadFloats<NS, false>(bp + q * ldbc + N, cv, N - p.n0);
                // y = Σ_n h·C + D·u, then the gate
                float yacc = 0.f;
#pragma unroll
                for (int i = 0; i < NS; ++i)
                    if (p.n0 + i < N) yacc = fmaf(hs[q + 1][i], cv[i], yacc);
                yacc = groupSum(yacc, S);
                const float yv = dskip * u + yacc;
                const float dout = doutp[q * E];
                const GateGrad gg = gateGrad(dout, zp[q * ldz]);
                const float dtr = dtp[q * E];
                const float dy = gg.dy, dz = dout * yv * gg.g;
                gD += dy * u;
                float vB[NS], vC[NS], sGB, sGA;
                stepBack<NS, false>(G, gA, A, a2, hs[q + 1], hs[q], bv, cv, delta, u, dy, N - p.n0, vB, vC, sGB, sGA);
                sGB = groupSum(sGB, S);
                const float sDelta = fmaf(u, sGB, groupSum(sGA, S));
                if (p.active && p.lane == 0) {
                    const int64_t r = rs + q;
                    const float ddt = sDelta * softplusGrad(dtr + dtb);
                    gDb += ddt;
                    s.du[r * E + p.d] = dskip * dy + delta * sGB;
                    storeGrad(s.ddt, E, s.ddt16, r, p.d, ddt);
                    storeGrad(s.dz, s.lddz, s.dz16, r, p.d, dz);
                }
                // dB_t, dC_t: this block's channels, in a fixed order
                if (!p.active) {
#pragma unroll
                    for (int i = 0; i < NS; ++i) vB[i] = vC[i] = 0.f;
                }
                float* rb = red + ((parity * SUB + q) * kWarps + warp) * 2 * N;
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
    finishBlock<NS, false>(s, o, p, G, gA, gD, gDb, S);
}

// ---- d_state 16 (every Mamba-1 checkpoint): the tuned kernel ----
//
// 4 lanes × 4 states per channel, 32 channels per block, chunks of at most kPiece steps (Mamba-1's training tape keeps
// a checkpoint every 16: arch/mamba1). Per chunk, in reverse:
//  1. re-run it from its checkpoint, keeping EVERY state (and each step's Δ) in shared memory;
//  2. walk it back, reading them — each state is recomputed once.
// The chunk's inputs (dt, u, dout, z of the block's channels and the row's B_t / C_t) are staged in shared memory by
// cp.async while the chunk before it is walked (two stages, one chunk ahead). Read where they are used, these loads left
// ≈ 4.5 KB in flight per SM — a few hundred bytes per warp, one HBM round trip per 4 steps — far below what keeps the
// memory busy; staged, every block has its next chunk's 10 KB in flight while it computes.
// A channel's per-step scalar work (the softplus, the gate's values, the du / ddt / dz stores) is done by one of its
// lanes per step: lane q takes step q of every 4, handing Δ, u and dy round by shuffles or shared memory.
// The walk takes 4 steps (a quad) at a time: first the chain G ← (G + dy·C)·Ā through them, keeping what each step
// leaves for sums; then those sums, four steps side by side. du's, dΔ's and y's sums over a channel's lanes: quadSums
// (lane q gets step q's; 9 shuffles a quad where three groupSums a step took 24). Against each step reducing its own
// sums in a row it measured the same (H100, B 8 × T 2,048: 1,043 vs 1,028 µs, on two machines): under ncu the kernel
// is issue-bound (64–67% of the issue slots, 2.7 warps per scheduler), so latency hidden is not time saved — fewer
// instructions are.
// dB_t, dC_t: a step's 4 + 4 terms per lane are halved over the warp's 8 channels (halveOverChannels: 7 shuffles, each
// lane left with one of the 32 sums), written to a table [4 steps][4 warps][2N] (two of them, alternating by quad, so
// one barrier per quad suffices); then thread k adds its value over the 4 warps in order. (A table of every lane's
// terms, [4 steps][32 channels][2N], summed down its columns, costs 16 shared-memory wavefronts per warp-step against 9
// here, and 72 KB against 58 — yet ran as fast: H100, B 8 × T 2,048, 1,032 vs 1,028 µs, so the shared-memory pipe is not what bounds this kernel.
// Nor are the warps per SM: 4 blocks per SM (56 KB, the state before a chunk kept in registers) took 1,050 µs.)
// Summing dB_t / dC_t after the walk instead — two passes over the chunk's states (and gn) in shared memory, thread
// (step, state quad, parity) adding its channels in order — cut the instructions by 25% (664M → 495M) and lost
// (H100: 1,031 vs 981 µs): the halving's work is independent of the G chain and fills the issue slots beside it; without
// it the walk waits on latency (ae5a363, reverted).
constexpr int kPiece = 16;  // the longest chunk this kernel walks; longer ones go to the general kernel
constexpr int kQuad = 4;    // steps per table fill = lanes per channel (lane q takes step q)
constexpr int kBackward16MinBlocks = 3;

/** One chunk's inputs in shared memory: dt, u, dout, z as [kPiece][32 channels], then the row's [kPiece][B_t | C_t]. */
struct Stage16 {
    static constexpr int kChannelFloats = kPiece * kFullChannels;
    static constexpr int kFloats = 4 * kChannelFloats + kPiece * 32;
    float* base;
    __device__ float* dt() const { return base; }
    __device__ float* u() const { return base + kChannelFloats; }
    __device__ float* dout() const { return base + 2 * kChannelFloats; }
    __device__ float* z() const { return base + 3 * kChannelFloats; }
    __device__ float* bc() const { return base + 4 * kChannelFloats; }
};

/**
 * Floats of the d_state-16 kernel's shared memory: the chunk's states, the Δ cache, the dB/dC table's two halves and
 * two stages (60 KB: 3 blocks per SM).
 */
constexpr int64_t backward16SmemFloats() {
    return (kPiece + 1) * 4 * kThreads + kPiece * kFullChannels + 2 * kQuad * kWarps * 32 + 2 * Stage16::kFloats;
}

/**
 * A lane's dB_t (vB, states 4l … 4l+3 of its quad lane l) and dC_t (vC) terms summed over the warp's 8 channels by
 * recursive halving: at each level the lane keeps half of its values, sends the other half to the lane of the
 * partner channel (xor 4, 8, 16) and adds what comes back (a + b = b + a: both partners hold the same sum). Left in
 * each lane: value e = 16·(lane bit 2) + 4·l + 2·(bit 3) + (bit 4) of 2N = 32 (dB for e < 16), the channels added as
 * ((c0 + c1) + (c2 + c3)) + ((c4 + c5) + (c6 + c7)). Returns the sum; *e gets its index.
 */
__device__ __forceinline__ float halveOverChannels(const float (&vB)[4], const float (&vC)[4], int lane, int* e) {
    const bool b2 = lane & 4, b3 = lane & 8, b4 = lane & 16;
    float v4[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // keep C (bit 2 set) or B, send the other
        const float keep = b2 ? vC[i] : vB[i], send = b2 ? vB[i] : vC[i];
        v4[i] = keep + __shfl_xor_sync(0xffffffffu, send, 4);
    }
    float v2[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {  // keep states 2, 3 (bit 3 set) or 0, 1
        const float keep = b3 ? v4[2 + i] : v4[i], send = b3 ? v4[i] : v4[2 + i];
        v2[i] = keep + __shfl_xor_sync(0xffffffffu, send, 8);
    }
    const float keep = b4 ? v2[1] : v2[0], send = b4 ? v2[0] : v2[1];
    *e = (b2 ? 16 : 0) + (lane & 3) * 4 + (b3 ? 2 : 0) + (b4 ? 1 : 0);
    return keep + __shfl_xor_sync(0xffffffffu, send, 16);
}

/**
 * The three per-step sums of a quad of steps over a channel's 4 lanes, handed out by recursive halving: lane l ends
 * with step l's (out = Σ_lanes v[l][·]). At xor 2 a lane keeps steps 2·(bit 1) and 2·(bit 1) + 1 and sends the other
 * two; at xor 1 it keeps step l. The lanes are added as (l0 + l2) + (l1 + l3), groupSum's order: the same bits as
 * three groupSums per step, in 9 shuffles for the quad instead of 24.
 */
__device__ __forceinline__ void quadSums(const float (&v)[kQuad][3], int lane, float (&out)[3]) {
    const bool hi = lane & 2, odd = lane & 1;
    float w[2][3];
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int k = 0; k < 3; ++k) {
            const float keep = hi ? v[2 + j][k] : v[j][k], send = hi ? v[j][k] : v[2 + j][k];
            w[j][k] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
        }
#pragma unroll
    for (int k = 0; k < 3; ++k) {
        const float keep = odd ? w[1][k] : w[0][k], send = odd ? w[0][k] : w[1][k];
        out[k] = keep + __shfl_xor_sync(0xffffffffu, send, 1);
    }
}

/**
 * Issues the copies of steps [r0, r0 + len) into a stage: thread (step = tid / 8, part = tid % 8) copies channels
 * d0 + 4·part … + 3 of each channel array and floats 4·part … + 3 of the row's B_t | C_t. VEC: every row start is
 * 16-byte aligned (16-byte copies, channels past E zero-filled); else one 4-byte copy per float, zeros stored past E.
 */
template <bool VEC>
__device__ __forceinline__ void stageChunk16(const Stage16& st, const ScanBackwardArgs& s, int64_t r0, int len, int d0) {
    const int tid = threadIdx.x, step = tid / 8, part = tid % 8;
    if (step >= len) return;
    const int64_t r = r0 + step;
    const int c0 = d0 + part * 4, valid = max(0, min(4, s.channels - c0));
    const int at = step * kFullChannels + part * 4;
    const float* src[4] = {s.dt + r * s.channels + c0, s.u + r * s.channels + c0, s.dout + r * s.channels + c0,
                           s.z + r * s.ldz + c0};
    float* dst[4] = {st.dt() + at, st.u() + at, st.dout() + at, st.z() + at};
    const float* bc = s.bc + r * s.ldbc + part * 4;
    float* bcd = st.bc() + step * 32 + part * 4;
    if constexpr (VEC) {
#pragma unroll
        for (int a = 0; a < 4; ++a) cpAsync16(smemAddr(dst[a]), valid > 0 ? src[a] : s.dt, valid * 4);
        cpAsync16(smemAddr(bcd), bc, 16);
    } else {
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                if (k < valid) cpAsync4(dst[a] + k, src[a] + k);
                else dst[a][k] = 0.f;
            }
#pragma unroll
        for (int k = 0; k < 4; ++k) cpAsync4(bcd + k, bc + k);
    }
}

template <bool VEC, typename GradT>
__global__ void __launch_bounds__(kThreads, kBackward16MinBlocks)
    scanBackward16Kernel(ScanBackwardArgs s, Layout L, BackwardOut o) {
    constexpr int NS = 4, N = 16, C = kFullChannels;
    extern __shared__ float4 smem4[];
    pdlWait();
    pdlLaunchDependents();
    const int E = s.channels, T = s.steps, K = s.chunk;
    const int64_t R = static_cast<int64_t>(s.batch) * T;
    const Place p = place(L, E, NS, o.groups);
    const int tid = threadIdx.x;
    const int ch = tid / kQuad;                                          // the channel within the block
    const int lane0 = (tid % 32) & ~(kQuad - 1);                         // its first lane in the warp
    const int lane = tid % kQuad, n0 = lane * NS;  // p.lane, p.n0 known to the compiler (4 lanes per channel)
    const int d0 = p.chb * C;                                            // the block's first channel
    float4* hist = smem4;                                                // [kPiece + 1][kThreads]: the chunk's states
    float* dcache = reinterpret_cast<float*>(hist + (kPiece + 1) * kThreads);  // [kPiece][C]: Δ
    float* table = dcache + kPiece * C;                                  // 2 × [kQuad][kWarps][2N]: dB_t / dC_t per warp
    float* const stage0 = table + 2 * kQuad * kWarps * 2 * N;          // two Stage16s: chunk c in stage c % 2
    auto stageOf = [&](int c) { return Stage16{stage0 + (c & 1) * Stage16::kFloats}; };

    float a2[NS], A[NS], G[NS], gA[NS];
#pragma unroll
    for (int i = 0; i < NS; ++i) {
        A[i] = s.a[static_cast<int64_t>(p.d) * N + n0 + i];
        a2[i] = A[i] * kLog2e;
        G[i] = startCarry(s, o, p, n0 + i);
        gA[i] = 0.f;
    }
    float gD = 0.f, gDb = 0.f;  // gDb: this lane's steps' Σ ddt (lane q takes step q of every kQuad)
    const float dskip = s.d_skip[p.d], dtb = dtBias(s, p.d);
    const float* ck = s.checkpoints + static_cast<int64_t>(p.b) * o.chunks * E * N + static_cast<int64_t>(p.d) * N;
    const int64_t row0 = static_cast<int64_t>(p.b) * T;
    // the checkpoint of chunk c (no alignment asked of the checkpoints), loaded a chunk ahead like the stages
    auto checkpoint = [&](int c) {
        const float* ckc = ck + static_cast<int64_t>(c) * E * N + n0;
        return make_float4(ckc[0], ckc[1], ckc[2], ckc[3]);
    };
    auto stageFor = [&](int c) {
        const int ta = c * K;
        stageChunk16<VEC>(stageOf(c), s, row0 + ta, min(K, T - ta), d0);
    };

    const int c_first = firstChunk(o, p), c_last = endChunk(o, p) - 1;
    stageFor(c_last);
    cpAsyncCommit();
    float4 ck_next = checkpoint(c_last);
    int quads = 0;  // quads walked: the table half the next one fills
    for (int c = c_last; c >= c_first; --c) {
        const int ta = c * K, len = min(K, T - ta);
        const float4 ck4 = ck_next;
        if (c > c_first) {  // the next chunk's inputs fly while this one is walked
            stageFor(c - 1);
            ck_next = checkpoint(c - 1);
        }
        cpAsyncCommit();
        cpAsyncWait<1>();
        __syncthreads();
        const Stage16 st = stageOf(c);

        // 1. re-run the chunk from its checkpoint: loads of 4 steps first, then lane q's softplus of step q (and u)
        // handed round; hist[j + 1] = the state after step ta + j
        float h[NS] = {ck4.x, ck4.y, ck4.z, ck4.w};
        hist[tid] = ck4;
        // full: a whole quad (every quad of a 16-step chunk), so no step count survives compilation
        auto rerunQuad = [&](int g0, auto full) {
            const int cnt = decltype(full)::value ? kQuad : min(kQuad, len - g0);
            float my_delta = 0.f, my_u = 0.f;
            if (lane < cnt) {
                my_delta = softplusf(st.dt()[(g0 + lane) * C + ch] + dtb);
                my_u = st.u()[(g0 + lane) * C + ch];
                dcache[(g0 + lane) * C + ch] = my_delta;
            }
#pragma unroll
            for (int q = 0; q < kQuad; ++q) {
                if (q < cnt) {
                    const float delta = __shfl_sync(0xffffffffu, my_delta, lane0 | q);
                    const float du = delta * __shfl_sync(0xffffffffu, my_u, lane0 | q);
                    const float4 b4 = *reinterpret_cast<const float4*>(st.bc() + (g0 + q) * 32 + n0);
                    const float bv[NS] = {b4.x, b4.y, b4.z, b4.w};
#pragma unroll
                    for (int i = 0; i < NS; ++i) h[i] = scanUpdate(h[i], a2[i], delta, du, bv[i]);
                    hist[(g0 + q + 1) * kThreads + tid] = make_float4(h[0], h[1], h[2], h[3]);
                }
            }
        };
        for (int g0 = 0; g0 < len; g0 += kQuad) {
            if (g0 + kQuad <= len) rerunQuad(g0, std::true_type{});
            else rerunQuad(g0, std::false_type{});
        }
        __syncwarp();  // a channel's Δ cache and states are written by its own lanes, all in one warp

        // 2. the walk back
        float hn[NS];  // h_t of the step being walked: the state after it
        {
            const float4 v = hist[len * kThreads + tid];
            hn[0] = v.x, hn[1] = v.y, hn[2] = v.z, hn[3] = v.w;
        }
        auto walkQuad = [&](int g0, auto full) {
            const int cnt = decltype(full)::value ? kQuad : min(kQuad, len - g0);
            const int64_t rg = row0 + ta + g0;
            // lane q: step q's gate inputs and values, once per channel; dy handed round by a shuffle
            float my_dout = 0.f, my_z = 0.f, my_dtr = 0.f;
            if (lane < cnt) {
                my_dout = st.dout()[(g0 + lane) * C + ch];
                my_z = st.z()[(g0 + lane) * C + ch];
                my_dtr = st.dt()[(g0 + lane) * C + ch] + dtb;
            }
            const GateGrad gg = gateGrad(my_dout, my_z);
            // (a) the G chain through the quad's steps. What the steps leave for sums over lanes and channels is
            // kept, not reduced here: the reductions of four steps then run side by side in (b), off the chain.
            float part[kQuad][3];  // this lane's shares of step q's y − D·u, Σ_n gn·B and Σ_n gn·Ā·h_{t−1}·A
            float vB[kQuad][NS], vC[kQuad][NS];
#pragma unroll
            for (int q = kQuad - 1; q >= 0; --q) {
                part[q][0] = part[q][1] = part[q][2] = 0.f;
#pragma unroll
                for (int i = 0; i < NS; ++i) vB[q][i] = vC[q][i] = 0.f;
                if (q >= cnt) continue;
                const int t = g0 + q;  // within the chunk
                const float delta = dcache[t * C + ch], u = st.u()[t * C + ch];
                float hp[NS], bv[NS], cv[NS];
                {
                    const float4 v = hist[t * kThreads + tid];  // h_{t−1}
                    hp[0] = v.x, hp[1] = v.y, hp[2] = v.z, hp[3] = v.w;
                    const float4 b4 = *reinterpret_cast<const float4*>(st.bc() + t * 32 + n0);
                    const float4 c4 = *reinterpret_cast<const float4*>(st.bc() + t * 32 + N + n0);
                    bv[0] = b4.x, bv[1] = b4.y, bv[2] = b4.z, bv[3] = b4.w;
                    cv[0] = c4.x, cv[1] = c4.y, cv[2] = c4.z, cv[3] = c4.w;
                }
                float yacc = 0.f;  // this lane's share of y = Σ_n h·C (+ D·u)
#pragma unroll
                for (int i = 0; i < NS; ++i) yacc = fmaf(hn[i], cv[i], yacc);
                const float dy = __shfl_sync(0xffffffffu, gg.dy, lane0 | q);
                gD += dy * u;
                stepBack<NS, true>(G, gA, A, a2, hn, hp, bv, cv, delta, u, dy, NS, vB[q], vC[q], part[q][1], part[q][2]);
                part[q][0] = yacc;
#pragma unroll
                for (int i = 0; i < NS; ++i) hn[i] = hp[i];
            }
            // (b) lane q of each channel gets step q's three sums over the channel's lanes; every step's dB_t / dC_t
            // terms are halved over the warp's channels into this quad's table. (A lane past the last channel adds
            // zeros: its stage columns are zero-filled, so its dy and u, and with them its vB and vC, are 0.)
            float mine[3];
            quadSums(part, lane, mine);
            float* const tq = table + (quads & 1) * kQuad * kWarps * 2 * N;
#pragma unroll
            for (int q = 0; q < kQuad; ++q) {
                int e;
                const float v = halveOverChannels(vB[q], vC[q], tid % 32, &e);
                tq[(q * kWarps + tid / 32) * 2 * N + e] = v;
            }
            if (p.active && lane < cnt) {  // lane q: step q's du, dΔ (times softplus'), dz
                const int t = g0 + lane;
                const float delta = dcache[t * C + ch], u = st.u()[t * C + ch];
                const int64_t r = rg + lane;
                const float ddt = fmaf(u, mine[1], mine[2]) * softplusGrad(my_dtr);
                gDb += ddt;
                s.du[r * E + p.d] = dskip * gg.dy + delta * mine[1];
                storeGrad<GradT>(s.ddt, E, s.ddt16, r, p.d, ddt);
                storeGrad<GradT>(s.dz, s.lddz, s.dz16, r, p.d, my_dout * (dskip * u + mine[0]) * gg.g);
            }
            // thread k: step k / 2N, value k % 2N over the block's warps in order. One barrier per quad: the table
            // alternates between two halves, and every read of the chunk's stage, states and Δ comes before it.
            __syncthreads();
            if (tid < cnt * 2 * N) {
                const int q = tid / (2 * N), e = tid % (2 * N);
                const float* col = tq + q * kWarps * 2 * N + e;
                o.pbc[(static_cast<int64_t>(p.chb) * R + rg + q) * 2 * N + e] =
                    (col[0] + col[2 * N]) + (col[4 * N] + col[6 * N]);
                static_assert(kWarps == 4, "the sum over the warps is written out for 4");
            }
        };
        for (int g0 = (len - 1) / kQuad * kQuad; g0 >= 0; g0 -= kQuad, ++quads) {
            if (g0 + kQuad <= len) walkQuad(g0, std::true_type{});
            else walkQuad(g0, std::false_type{});
        }
    }
    finishBlock<NS, true>(s, o, p, G, gA, gD, gDb, kQuad);
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

// da_log[d, n] += A[d, n]·Σ_j pda[j, d, n]; dd_skip[d] += Σ_j pdd[j, d]; ddt_bias[d] += Σ_j pdb[j, d] (when not
// null); j = (row, group) in order.
__global__ void scanParamKernel(const float* pda, const float* pdd, const float* pdb, const float* a, int batch, int E,
                                int N, float* da_log, float* dd_skip, float* ddt_bias) {
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
        float acc = 0.f, bias = 0.f;
        for (int b = 0; b < batch; ++b) {
            acc += pdd[static_cast<int64_t>(b) * E + d];
            bias += pdb[static_cast<int64_t>(b) * E + d];
        }
        dd_skip[d] += acc;
        if (ddt_bias) ddt_bias[d] += bias;
    }
}

int statesPerLane(int N) { return N <= 128 ? 4 : 8; }

/** Shared memory of the general backward kernel: the sub-chunk states of one chunk, the warps' sums, the Δ cache. */
size_t backwardSmem(int chunk, int ns, int sub, int N, int per_block) {
    const size_t nsub_max = static_cast<size_t>((chunk + sub - 1) / sub);
    return (nsub_max * ns * kThreads + 2 * static_cast<size_t>(sub) * kWarps * 2 * N +
            static_cast<size_t>(chunk) * per_block) *
           sizeof(float);
}

/** The d_state-16 kernel for the type its ddt and dz are written in (f32, or both rounded to one 2-byte type). */
template <bool VEC>
auto backward16Kernel(const ScanBackwardArgs& s) {
    if (s.ddt) return scanBackward16Kernel<VEC, float>;
    return s.ddt16.dtype == DTYPE_BF16 ? scanBackward16Kernel<VEC, __nv_bfloat16> : scanBackward16Kernel<VEC, __half>;
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
    // d_state 16 with chunks of ≤ kPiece steps (every Mamba-1 tape): the tuned kernel, staged by 16-byte copies when
    // every row it stages starts 16-byte aligned
    const bool vec = aligned16(s.bc) && s.ldbc % 4 == 0 && aligned16(s.dt) && aligned16(s.u) && aligned16(s.dout) &&
                     aligned16(s.z) && E % 4 == 0 && s.ldz % 4 == 0;
    // (its ddt and dz are one type, known at compile time: both f32 or both rounded alike, as a model writes them;
    // any other mix goes to the general kernel)
    const bool f32_grads = s.ddt && s.dz, r16_grads = !s.ddt && !s.dz && s.ddt16.dtype == s.dz16.dtype;
    const bool d16 = N == 16 && s.chunk <= kPiece && (f32_grads || r16_grads);
    const auto kernel = d16      ? (vec ? backward16Kernel<true>(s) : backward16Kernel<false>(s))
                        : narrow ? scanBackwardKernel<4, 4>
                                 : scanBackwardKernel<8, 4>;
    const size_t smem = d16 ? static_cast<size_t>(backward16SmemFloats()) * sizeof(float)
                            : backwardSmem(s.chunk, narrow ? 4 : 8, 4, N, L.per_block);
    const int optin = ex.smem_optin;
    if (smem > static_cast<size_t>(optin))
        throw std::invalid_argument("selectiveScanBackward: chunk " + std::to_string(s.chunk) + " with d_state " +
                                    std::to_string(N) + " needs " + std::to_string(smem) +
                                    " bytes of shared memory per block; the device has " + std::to_string(optin));
    // The opt-in is an attribute of the kernel in the device context that every backend on the device
    // shares: it is always set to the device's maximum, so a concurrent setter can never lower it below
    // what a launch on another thread needs.
    if (smem > 48 * 1024) {
        check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin),
              "cudaFuncSetAttribute (scan backward)");
        // all of the SM's shared memory as such: the d_state-16 kernel's 72 KB fit 3 blocks only so
        check(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared),
              "cudaFuncSetAttribute (scan backward carveout)");
    }

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
    o.pdd = scratch.get(2, 2 * parts * E);
    o.pdb = o.pdd + parts * E;
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
           static_cast<const float*>(o.pda), static_cast<const float*>(o.pdd), static_cast<const float*>(o.pdb), s.a,
           static_cast<int>(parts), E, N, s.da_log, s.dd_skip, s.ddt_bias);
}

}  // namespace mamba::cuda::train
