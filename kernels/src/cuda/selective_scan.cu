// Selective scan: Δ = softplus(dt (+ dt_bias)) → Ā = exp(Δ·A), h ← Ā·h + Δ·B·u → y = Σ_n h·C + D·u → y·SiLU(z).
//
// Thread layout: S lanes of a warp share one (row, channel); lane l owns the NS states n = l·NS … l·NS+NS-1
// in registers, S = d_state/NS rounded up to a power of two. Two layouts:
//  - narrow (NS = 4, or 16 above d_state 128): decode and short scans. For d_state 16 four lanes share a
//    channel, so there are 4× more threads (latency hiding when B·channels is small) and each warp's
//    state loads are contiguous;
//  - wide (NS = 16, or 4 for d_state ≤ 4): long scans (T ≥ 32, chunked; never with shape_independent, since
//    its y sums a channel's states in another order than decode's). One lane per channel for
//    d_state 16: softplus, dt/u/z loads and the y reduction happen once per channel instead of per lane,
//    which halves the instructions per state update — the chunked scan's bottleneck.
// exp is exp2 of Δ·A·log2(e) (A pre-scaled once per thread); y is reduced across the S lanes by shuffles.
//
// Sequential: each group walks t = 0 … T-1 with h in registers; h is read from and written back to the
// state. Ideal for decode (T = 1) and whenever B·channels·S threads already fill the GPU. When they do not and the
// walk is long (a prefill of one or two rows: DETERMINISTIC, which may not chunk, and at d_state 16 the other modes
// too, where it beats the chunked scan), scanWalkStaged walks from tiles of steps staged in shared memory — the same
// arithmetic.
//
// Chunked (T ≥ kScanChunkedMinSteps and the sequential grid would leave the GPU mostly idle): T is split
// into C chunks so that about two GPU-fulls of threads run. Because the recurrence is linear,
//   h_end(chunk) = exp(A·ΣΔ) · h_start(chunk) + h_local(chunk)   (h_local: the chunk scanned from zero),
// so: (1) every chunk is scanned from zero in parallel, keeping h_local and ΣΔ; (2) one thread per
// (row, channel, state) walks the C chunks, turning h_local into each chunk's start state and writing
// the final state; (3) every chunk is scanned again from its start state, writing the outputs.
//
// Checkpoints (the training forward): the state before steps 0, chunk, 2·chunk, … ([batch][ceil(T/chunk)]
// [channels, d_state]) is kept for the backward (train_scan.cu), which recomputes the states in between with
// the same scanUpdate() (scan_step.cuh). From kScanChunkedMinSteps steps the chunked scan runs with chunks of
// exactly the checkpoint length, its h_local / start-state workspace being the checkpoint buffer itself: phase 2
// leaves each chunk's start state there, and phase 3 scans from it — the states the backward recomputes. Shorter
// scans store the checkpoints from the sequential scan (CKPT variant).
//
// Fused Δ projection (Ops::selectiveScan with dtProj, decode): the scan computes dt = b + W_dt·δ itself
// (one dot product of dt_rank per channel, split over the S lanes) and writes it to dt as the product
// would have — one kernel launch less per layer.
#include "kernels.h"
#include "cp_async.cuh"
#include "lowp.cuh"
#include "lane_load.cuh"
#include "scan_step.cuh"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace mamba::cuda {
namespace {

constexpr int kThreads = 128;

enum Mode { kWhole = 0, kChunkLocal = 1, kChunkOutput = 2 };

struct ScanKernelArgs {
    ScanArgs s;
    int lanes;       // S
    int chunk;       // steps per chunk (T for kWhole)
    int chunks;      // C (1 for kWhole)
    int mode;
    float* ws_h;     // [B, C, channels, d_state]: h_local, then start states
    float* ws_sum;   // [B, C, channels]: ΣΔ over each chunk
    DtProjection dt; // used by the FUSE variant only
    float* ckpt;     // CKPT variant: [B, ck_chunks, channels, d_state]
    int ck_chunk, ck_chunks;
    int walk_steps;  // scanWalkStaged: steps per tile (set by its launcher)
};

/** Σ_k W[d, k]·x[k] over this lane's share of k (16-byte chunks, chunk c to lane c mod S when VEC). */
template <typename W, bool VEC>
__device__ __forceinline__ float dotShare(const W* __restrict__ w, const float* __restrict__ x, int R, int lane, int S) {
    float acc = 0.f;
    if constexpr (VEC) {
        constexpr int V = kChunkElems<W>;
        for (int k = lane * V; k < R; k += S * V) {
            float wf[V];
            unpack16<W>(*reinterpret_cast<const int4*>(w + k), wf);
#pragma unroll
            for (int v = 0; v < V; v += 4) {
                const float4 xv = *reinterpret_cast<const float4*>(x + k + v);
                acc = fmaf(wf[v], xv.x, acc);
                acc = fmaf(wf[v + 1], xv.y, acc);
                acc = fmaf(wf[v + 2], xv.z, acc);
                acc = fmaf(wf[v + 3], xv.w, acc);
            }
        }
    } else {
        for (int k = lane; k < R; k += S) acc = fmaf(toFloat(w[k]), x[k], acc);
    }
    return acc;
}

__device__ __forceinline__ float projectDt(const DtProjection& p, int64_t r, int d, int lane, int S) {
    const float* x = p.x + r * p.ldx;
    const int64_t row = static_cast<int64_t>(d) * p.rank;
    float acc;
    if (p.wdtype == DTYPE_BF16)
        acc = p.vec ? dotShare<__nv_bfloat16, true>(static_cast<const __nv_bfloat16*>(p.w) + row, x, p.rank, lane, S)
                    : dotShare<__nv_bfloat16, false>(static_cast<const __nv_bfloat16*>(p.w) + row, x, p.rank, lane, S);
    else if (p.wdtype == DTYPE_F16)
        acc = p.vec ? dotShare<__half, true>(static_cast<const __half*>(p.w) + row, x, p.rank, lane, S)
                    : dotShare<__half, false>(static_cast<const __half*>(p.w) + row, x, p.rank, lane, S);
    else
        acc = p.vec ? dotShare<float, true>(static_cast<const float*>(p.w) + row, x, p.rank, lane, S)
                    : dotShare<float, false>(static_cast<const float*>(p.w) + row, x, p.rank, lane, S);
    for (int off = S / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    return acc + (p.bias ? p.bias[d] : 0.f);
}

/**
 * One step of the lane's NS states, h ← exp(Δ·A)·h + Δu·B, and y_t = Σ_n h_n·C_t[n]: the lane's share in state order,
 * summed over the S lanes of the channel by shuffles. Both walks of scanKernel step through it (the same bits).
 */
template <int NS>
__device__ __forceinline__ float stepOutput(float (&h)[NS], const float (&a2)[NS], float delta, float du,
                                            const float (&bv)[NS], const float (&cv)[NS], int n0, int N, int S) {
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < NS; ++i) {
        if (n0 + i < N) {
            h[i] = scanUpdate(h[i], a2[i], delta, du, bv[i]);
            acc = fmaf(h[i], cv[i], acc);
        }
    }
    for (int off = S / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    return acc;
}

/** The gated output out[r, d]: f32, or rounded (ScanArgs::out16). */
__device__ __forceinline__ void storeOut(const ScanArgs& s, int64_t r, int d, float v) {
    if (s.out) s.out[r * s.channels + d] = v;
    else storeRounded(s.out16, r, d, v);
}

template <int NS, bool FUSE, bool CKPT, bool VEC>
__global__ void __launch_bounds__(kThreads) scanKernel(ScanKernelArgs k) {
    const ScanArgs& s = k.s;
    const int S = k.lanes;
    const int per_block = kThreads / S;
    const int64_t ch_blocks = (s.channels + per_block - 1) / per_block;
    const int64_t bid = blockIdx.x;
    const int chb = static_cast<int>(bid % ch_blocks);
    const int64_t rest = bid / ch_blocks;
    const int c = static_cast<int>(rest % k.chunks);
    const int b = static_cast<int>(rest / k.chunks);
    const int d_raw = chb * per_block + static_cast<int>(threadIdx.x) / S;
    const bool active = d_raw < s.channels;
    const int d = active ? d_raw : s.channels - 1;  // idle lanes still join the shuffles
    const int lane = threadIdx.x % S;
    const int N = s.d_state, E = s.channels;
    const int n0 = lane * NS;

    float a2[NS], h[NS];
#pragma unroll
    for (int i = 0; i < NS; ++i) a2[i] = n0 + i < N ? s.a[static_cast<int64_t>(d) * N + n0 + i] * kLog2e : 0.f;
    pdlWait();
    pdlLaunchDependents();

    float* hsrc;
    const int64_t ws_row = (static_cast<int64_t>(b) * k.chunks + c) * E + d;  // (b, c, d) in the workspace
    if (k.mode == kWhole) hsrc = s.h + b * s.h_stride + static_cast<int64_t>(d) * N;
    else hsrc = k.ws_h + ws_row * N;
#pragma unroll
    for (int i = 0; i < NS; ++i) h[i] = (k.mode != kChunkLocal && n0 + i < N) ? hsrc[n0 + i] : 0.f;

    const float dskip = s.d_skip[d];
    const float dt_bias = dtBias(s, d);
    const int t0 = c * k.chunk;
    const int t1 = min(s.steps, t0 + k.chunk);
    const int64_t r0 = static_cast<int64_t>(b) * s.steps;
    float dsum = 0.f;
    // CKPT (kWhole only): the state before steps 0, ck_chunk, 2·ck_chunk, … goes to the checkpoints.
    float* ck = nullptr;
    int ck_left = 0;  // steps until the next checkpoint
    if constexpr (CKPT) ck = k.ckpt + static_cast<int64_t>(b) * k.ck_chunks * E * N + static_cast<int64_t>(d) * N;
    // The next step's per-channel inputs are loaded one step ahead (they do not depend on h).
    float dt_next = 0.f, u_next = 0.f, z_next = 0.f;
    if (t0 < t1) {
        if (!FUSE) dt_next = s.dt[(r0 + t0) * E + d];
        u_next = s.u[(r0 + t0) * E + d];
        if (k.mode != kChunkLocal) z_next = s.z[(r0 + t0) * s.ldz + d];
    }
    for (int t = t0; t < t1; ++t) {
        const int64_t r = r0 + t;
        float dt_raw = dt_next;
        const float u = u_next, z = z_next;
        if (t + 1 < t1) {
            if (!FUSE) dt_next = s.dt[(r + 1) * E + d];
            u_next = s.u[(r + 1) * E + d];
            if (k.mode != kChunkLocal) z_next = s.z[(r + 1) * s.ldz + d];
        }
        if constexpr (CKPT) {
            if (ck_left == 0) {
                if (active)
#pragma unroll
                    for (int i = 0; i < NS; ++i)
                        if (n0 + i < N) ck[n0 + i] = h[i];
                ck += static_cast<int64_t>(E) * N;
                ck_left = k.ck_chunk;
            }
            --ck_left;
        }
        if constexpr (FUSE) {
            dt_raw = projectDt(k.dt, r, d, lane, S);
            if (active && lane == 0) k.dt.out[r * E + d] = dt_raw;  // what the separate product would have written
        }
        const float delta = softplusf(dt_raw + dt_bias);
        const float du = delta * u;
        const float* Bt = s.bc + r * s.ldbc;
        float bv[NS];
        loadFloats<NS, VEC>(Bt + n0, bv, N - n0);
        if (k.mode == kChunkLocal) {
            dsum += delta;
#pragma unroll
            for (int i = 0; i < NS; ++i)
                if (n0 + i < N) h[i] = scanUpdate(h[i], a2[i], delta, du, bv[i]);
            continue;
        }
        float cv[NS];
        loadFloats<NS, VEC>(Bt + N + n0, cv, N - n0);
        const float acc = stepOutput(h, a2, delta, du, bv, cv, n0, N, S);
        if (active && lane == 0) storeOut(s, r, d, (acc + dskip * u) * siluf(z));
    }
    if (!active || k.mode == kChunkOutput) return;
#pragma unroll
    for (int i = 0; i < NS; ++i)
        if (n0 + i < N) hsrc[n0 + i] = h[i];
    if (k.mode == kChunkLocal && lane == 0) k.ws_sum[ws_row] = dsum;
}

constexpr int kWalkStages = 3;               // tiles of steps in flight: the one walked and two loading
constexpr int kWalkStageFloats = 4096;       // one tile: 16 KB, so the three fit the default 48 KB

/**
 * Steps per tile of the staged walk: a step's record is dt, u, z of the block's channels, then B and C. Rounded down to
 * a multiple of the walk's unroll G where the tile holds one: every tile and checkpoint edge then falls on a group edge
 * (checkpoints every 16 steps), so the walk never takes single steps: 25-step tiles against 16-step checkpoints made
 * 12% of the steps single ones, each with a whole group's loop and checkpoint overhead.
 */
inline int walkTileSteps(int per_block, int N, int G, int floats = kWalkStageFloats) {
    int l = floats / (3 * per_block + 2 * N);
    l = l < 1 ? 1 : l > 64 ? 64 : l;
    return l >= G ? l - l % G : l;
}

/**
 * The whole-sequence walk of the narrow layout when few threads walk many steps (a one-row prefill: B·channels·4
 * lanes, under two GPU-fulls). Two roles per block: WALKERS threads hold the states and do little more than the
 * recurrence, reading every step from shared memory; COPIERS threads (launchWalkS: three per walker at d_state 16,
 * where one per walker made the walkers wait) copy tiles of L steps'
 * inputs — dt, u and z of the block's channels and the row's B and C, which all its channels share — by cp.async
 * kWalkStages tiles ahead, compute softplus(dt) and SiLU(z) once per (step, channel), and store the outputs a tile
 * at a time, coalesced. The arithmetic is scanKernel's, step by step (stepOutput, the same bits as decode). S (lanes
 * per channel) is a template argument so that the lane sums unroll and steps of the walk interleave.
 */
template <int S, bool FULL, int WALKERS, int COPIERS, int G>
__global__ void __launch_bounds__(WALKERS + COPIERS) scanWalkStaged(ScanKernelArgs k) {
    constexpr int NS = 4, per_block = WALKERS / S;
    static_assert(per_block >= 1, "a channel's lanes in one block");
    extern __shared__ float stage[];
    const ScanArgs& s = k.s;
    const int E = s.channels;
    const int N = FULL ? S * NS : s.d_state;  // FULL: every lane holds NS states, so no guards survive compilation
    const int ch_blocks = (E + per_block - 1) / per_block;
    const int b = static_cast<int>(blockIdx.x / ch_blocks);
    const int d0 = static_cast<int>(blockIdx.x % ch_blocks) * per_block;
    const bool walker = threadIdx.x < WALKERS;  // the first warps walk; the others copy, prepare and store
    const int tid = walker ? static_cast<int>(threadIdx.x) : static_cast<int>(threadIdx.x) - WALKERS;
    const int local = (tid % WALKERS) / S;  // (copiers: any channel of the block, never used)
    const bool active = d0 + local < E;
    const int d = active ? d0 + local : E - 1;  // idle lanes still join the shuffles
    const int lane = tid % S, n0 = lane * NS;
    const int W = 3 * per_block + 2 * N;        // floats of one step's record
    const int L = k.walk_steps;
    const int tiles = (s.steps + L - 1) / L;
    const int64_t r0 = static_cast<int64_t>(b) * s.steps;

    float a2[NS], h[NS];
#pragma unroll
    for (int i = 0; i < NS; ++i) a2[i] = n0 + i < N ? s.a[static_cast<int64_t>(d) * N + n0 + i] * kLog2e : 0.f;
    const float dskip = s.d_skip[d];
    pdlWait();
    pdlLaunchDependents();
    float* hp = s.h + b * s.h_stride + static_cast<int64_t>(d) * N;
    if (walker)
#pragma unroll
        for (int i = 0; i < NS; ++i) h[i] = n0 + i < N ? hp[n0 + i] : 0.f;
    // the training forward: the state before steps 0, ck_chunk, 2·ck_chunk, … (the walkers write it at those steps)
    float* const ck =
        k.ckpt ? k.ckpt + static_cast<int64_t>(b) * k.ck_chunks * E * N + static_cast<int64_t>(d) * N : nullptr;

    // A copier copies the same columns of every step's record (column w = tid + c·COPIERS): where the column's
    // value of step r lives is src + r·stride, worked out once here; channels past E read as 0.
    // ⌈W / COPIERS⌉ columns per copier: N ≤ 4·S, so W ≤ 3·per_block + 8·S
    constexpr int kCols = (3 * per_block + 8 * S + COPIERS - 1) / COPIERS;
    const float* colSrc[kCols];
    int64_t colStride[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
        const int w = tid + c * COPIERS;
        colSrc[c] = nullptr;
        colStride[c] = 0;
        if (w < 3 * per_block) {
            const int which = w / per_block, ch = d0 + w - which * per_block;
            if (ch < E) {
                colSrc[c] = (which == 0 ? s.dt : which == 1 ? s.u : s.z) + r0 * (which == 2 ? s.ldz : E) + ch;
                colStride[c] = which == 2 ? s.ldz : E;
            }
        } else if (w < W) {
            colSrc[c] = s.bc + r0 * s.ldbc + (w - 3 * per_block);
            colStride[c] = s.ldbc;
        }
    }
    auto buffer = [&](int t) { return stage + (t % kWalkStages) * L * W; };
    auto stepsOf = [&](int t) { return min(L, s.steps - t * L); };
    auto copiersSync = [] { asm volatile("bar.sync 1, %0;\n" ::"n"(COPIERS)); };
    // Tile t of the steps into its stage buffer (one cp.async group per tile, empty past the last tile).
    auto load = [&](int t) {
        if (t < tiles) {
            float* dst = buffer(t);
            const int steps = stepsOf(t);
#pragma unroll
            for (int c = 0; c < kCols; ++c) {
                const int w = tid + c * COPIERS;
                if (w >= W) break;
                if (!colSrc[c]) {
                    for (int j = 0; j < steps; ++j) dst[j * W + w] = 0.f;
                    continue;
                }
                const float* src = colSrc[c] + static_cast<int64_t>(t) * L * colStride[c];
#pragma unroll 4
                for (int j = 0; j < steps; ++j) cpAsync4(dst + j * W + w, src + j * colStride[c]);
            }
        }
        cpAsyncCommit();
    };
    // What does not depend on h, once per (step, channel) — not once per lane inside the walk: dt becomes
    // Δ = softplus(dt), z becomes SiLU(z). Waits for the tile's copies first (they are the oldest group in flight).
    auto prepare = [&](int t) {
        cpAsyncWait<kWalkStages - 2>();
        copiersSync();  // every copier's part of tile t is in
        float* tile = buffer(t);
#pragma unroll 4
        for (int e = tid; e < stepsOf(t) * per_block; e += COPIERS) {
            const int c = e % per_block;
            float* rec = tile + (e / per_block) * W + c;
            rec[0] = softplusf(rec[0] + (d0 + c < E ? dtBias(s, d0 + c) : 0.f));
            rec[2 * per_block] = siluf(rec[2 * per_block]);
        }
    };
    // The tile's outputs (left by the walk in Δ's slots), coalesced.
    auto store = [&](int t) {
        const float* tile = buffer(t);
        for (int e = tid; e < stepsOf(t) * per_block; e += COPIERS) {
            const int j = e / per_block, c = e % per_block;
            if (d0 + c < E) storeOut(s, r0 + static_cast<int64_t>(t) * L + j, d0 + c, tile[j * W + c]);
        }
    };
    // G steps at a time: every load of the group, then the G updates, then the G outputs (over Δ's slot, by every
    // lane of the channel: the same value) — loads ahead of stores, so the steps' work can interleave.
    auto walk = [&](float* tile, int j0, auto group) {
        constexpr int n = decltype(group)::value;
        float delta[n], u[n], gate[n], bv[n][NS], cv[n][NS], y[n];
#pragma unroll
        for (int g = 0; g < n; ++g) {
            const float* rec = tile + (j0 + g) * W;
            delta[g] = rec[local];
            u[g] = rec[per_block + local];
            gate[g] = rec[2 * per_block + local];
#pragma unroll
            for (int i = 0; i < NS; ++i) {
                bv[g][i] = n0 + i < N ? rec[3 * per_block + n0 + i] : 0.f;
                cv[g][i] = n0 + i < N ? rec[3 * per_block + N + n0 + i] : 0.f;
            }
        }
#pragma unroll
        for (int g = 0; g < n; ++g) {
            const float acc = stepOutput(h, a2, delta[g], delta[g] * u[g], bv[g], cv[g], n0, N, S);
            y[g] = (acc + dskip * u[g]) * gate[g];
        }
#pragma unroll
        for (int g = 0; g < n; ++g) tile[(j0 + g) * W + local] = y[g];
    };

    // The pipeline: while the walkers walk tile t, the copiers store tile t − 1's outputs, start tile t + 2's copies
    // into that buffer and prepare tile t + 1; one block barrier per tile hands both sides on.
    if (!walker) {
        load(0);
        load(1);
        prepare(0);
    }
    __syncthreads();
    // The checkpoints: steps walked since the last one, and where the next one goes (counters, not a division per
    // group of steps: the integer % and / were a sizeable share of the walkers' instructions).
    int ck_into = 0;
    float* ck_at = ck;
    for (int t = 0; t < tiles; ++t) {
        if (walker) {
            float* tile = buffer(t);
            const int steps = stepsOf(t);
            for (int j0 = 0; j0 < steps;) {
                int room = steps - j0;  // steps before the tile's end or the next checkpoint
                if (ck) {
                    if (ck_into == 0) {
                        if (active)
#pragma unroll
                            for (int i = 0; i < NS; ++i)
                                if (n0 + i < N) ck_at[n0 + i] = h[i];
                        ck_at += static_cast<int64_t>(E) * N;
                    }
                    room = min(room, k.ck_chunk - ck_into);
                }
                const int n = room >= G ? G : 1;
                if (n == G) walk(tile, j0, std::integral_constant<int, G>{});
                else walk(tile, j0, std::integral_constant<int, 1>{});
                j0 += n;
                if (ck && (ck_into += n) == k.ck_chunk) ck_into = 0;
            }
        } else {
            if (t > 0) store(t - 1);
            copiersSync();  // every copier is done reading the buffer that tile t + 2 overwrites
            load(t + 2);
            if (t + 1 < tiles) prepare(t + 1);
        }
        __syncthreads();
    }
    if (!walker) {
        store(tiles - 1);
        return;
    }
    if (!active) return;
#pragma unroll
    for (int i = 0; i < NS; ++i)
        if (n0 + i < N) hp[n0 + i] = h[i];
}

// Phase 2: one thread per (row, channel, state) walks the chunks in order, eight chunks' loads at a time.
__global__ void scanCombineKernel(ScanKernelArgs k) {
    pdlWait();
    pdlLaunchDependents();
    const ScanArgs& s = k.s;
    const int N = s.d_state, E = s.channels;
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= static_cast<int64_t>(s.batch) * E * N) return;
    const auto [b, d, n] = stateIndex(i, N, E);
    float* hp = s.h + b * s.h_stride + static_cast<int64_t>(d) * N + n;
    const float a2 = s.a[static_cast<int64_t>(d) * N + n] * kLog2e;
    float H = *hp;
    constexpr int kBatch = 8;
    for (int c0 = 0; c0 < k.chunks; c0 += kBatch) {
        float local[kBatch], sum[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            if (c0 + j < k.chunks) {
                const int64_t row = (static_cast<int64_t>(b) * k.chunks + c0 + j) * E + d;
                local[j] = k.ws_h[row * N + n];
                sum[j] = k.ws_sum[row];
            }
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            if (c0 + j < k.chunks) {
                const int64_t row = (static_cast<int64_t>(b) * k.chunks + c0 + j) * E + d;
                k.ws_h[row * N + n] = H;  // start state of chunk c0 + j
                H = scanDecay(sum[j], a2) * H + local[j];
            }
        }
    }
    *hp = H;
}

void lanesFor(int N, bool wide, int* ns, int* lanes) {
    *ns = wide ? (N <= 4 ? 4 : 16) : (N <= 128 ? 4 : 16);
    const int need = (N + *ns - 1) / *ns;
    int S = 1;
    while (S < need) S *= 2;
    *lanes = S;
}

enum class Variant { Plain, FusedDt, Checkpoints };

constexpr int kWalkMinSteps = 16;               // the staged walk from this many steps
constexpr int kWalkOverChunkedMinSteps = 1024;  // planScan: the walk instead of the chunked scan (fast modes)

/**
 * Whether a whole-sequence scan in the narrow layout (S lanes per channel) runs as the staged walk: long enough, and
 * too few of scanKernel's blocks to fill the GPU twice. launchNs decides by it, and planScan, which hands the fast
 * modes' long prefills to the walk, asks it the same question.
 */
bool walkRuns(const Exec& ex, int64_t batch, int channels, int lanes, int steps) {
    const int per_block = kThreads / lanes;
    const int64_t blocks = batch * ((channels + per_block - 1) / per_block);
    return steps >= kWalkMinSteps && blocks < 2 * static_cast<int64_t>(ex.sms);
}

// The training forward's walk: two warps of walkers (16 channels) and two of copiers per block, tiles of 2,048
// floats (24 steps at d_state 16: 25 fit, rounded down to the unroll), the walk unrolled by 4 steps (by 8 it needs 128
// registers, by 4 80). H100, op_test --big --time, µs, this config / the chunked scan: B 8 × T 2,048 × 1,536 channels
// 470 / 864, B 8 × T 256 69 / 147; one row of T 2,048 (96 blocks) 249 / 153, so few blocks keep the chunked scan. The
// others tried, at B 8 × T 2,048: walkers × copiers × tile floats 32 × 96 × 4,096 550 (unrolled by 8) / 782 (by 4),
// 32 × 32 × 2,048 593 / 618, 64 × 64 × 2,048 630 (by 8).
constexpr int kTrainWalkers = 64, kTrainCopiers = 64, kTrainWalkTileFloats = 2048, kTrainWalkUnroll = 4;

/**
 * Whether the training forward (checkpoints kept) runs as the staged walk: four lanes of four states per channel
 * (d_state 13 … 16, every Mamba-1 checkpoint), at least kWalkMinSteps steps, and enough blocks to fill the GPU
 * twice. The walk's states, outputs and checkpoints are scanKernel's step by step, so this choice changes no bits —
 * only which kernel computes them.
 */
bool trainingWalks(const Exec& ex, int64_t batch, int channels, int ns, int lanes, int steps) {
    if (ns != 4 || lanes != 4 || steps < kWalkMinSteps) return false;
    const int per_block = kTrainWalkers / lanes;
    const int64_t blocks = batch * ((channels + per_block - 1) / per_block);
    return blocks >= 2 * static_cast<int64_t>(ex.sms);
}

template <int S, int WALKERS, int COPIERS = WALKERS, int G = 8>
void launchWalkSW(const char* name, const Exec& ex, ScanKernelArgs k, int floats = kWalkStageFloats) {
    constexpr int per_block = WALKERS / S;
    const int N = k.s.d_state;
    k.walk_steps = walkTileSteps(per_block, N, G, floats);
    const size_t smem = sizeof(float) * kWalkStages * k.walk_steps * (3 * per_block + 2 * N);
    const dim3 grid(static_cast<unsigned>(k.s.batch * ((k.s.channels + per_block - 1) / per_block)));
    const dim3 walkers_and_copiers(WALKERS + COPIERS);
    if (N == 4 * S) launch(name, ex, scanWalkStaged<S, true, WALKERS, COPIERS, G>, grid, walkers_and_copiers, smem, k);
    else launch(name, ex, scanWalkStaged<S, false, WALKERS, COPIERS, G>, grid, walkers_and_copiers, smem, k);
}

template <int S>
void launchWalkS(const char* name, const Exec& ex, const ScanKernelArgs& k) {
    // d_state 16 (four lanes per channel, every Mamba-1 checkpoint): one warp of walkers (8 channels) and three of
    // copiers per block. The copiers' share — cp.async of every input, softplus and SiLU once per (step, channel),
    // the stores — took longer than the walk with one copier per walker: the walkers waited at the tile barrier
    // (H200, 370m row, T 4,096, µs: walkers × copiers 128 × 128 373, 64 × 64 333, 32 × 32 353, 32 × 64 253,
    // 64 × 128 228, 64 × 192 229, 32 × 96 223; benchmarks.md).
    if constexpr (S == 4) {
        if (k.ckpt) launchWalkSW<S, kTrainWalkers, kTrainCopiers, kTrainWalkUnroll>(name, ex, k, kTrainWalkTileFloats);
        else launchWalkSW<S, 32, 96>(name, ex, k);
    } else launchWalkSW<S, 128>(name, ex, k);
}

void launchWalk(const char* name, const Exec& ex, const ScanKernelArgs& k) {
    switch (k.lanes) {
        case 1: launchWalkS<1>(name, ex, k); break;
        case 2: launchWalkS<2>(name, ex, k); break;
        case 4: launchWalkS<4>(name, ex, k); break;
        case 8: launchWalkS<8>(name, ex, k); break;
        case 16: launchWalkS<16>(name, ex, k); break;
        case 32: launchWalkS<32>(name, ex, k); break;
        default: throw std::logic_error("selectiveScan: the staged walk takes 1 … 32 lanes per channel");
    }
}

template <int NS, bool VEC>
void launchNs(const char* name, const Exec& ex, const ScanKernelArgs& k, Variant v, dim3 grid, dim3 block) {
    switch (v) {
        case Variant::Plain:
            // A whole-sequence walk in the narrow layout that leaves most of the GPU idle (one warp per SM
            // partition) is bound by each step's latency: the staged walk. H200, the one-row DETERMINISTIC prefill
            // of the 370m shape (op case "det prefill", T = 4,096): this loop 3.50 ms, eight steps' loads grouped in
            // registers 2.06 ms, the staged walk 0.37 ms, with three copiers per walker 0.22 ms (benchmarks.md has
            // every design tried on the way).
            if constexpr (NS == 4) {
                if (k.mode == kWhole && walkRuns(ex, k.s.batch, k.s.channels, k.lanes, k.s.steps)) {
                    launchWalk(name, ex, k);
                    break;
                }
            }
            launch(name, ex, scanKernel<NS, false, false, VEC>, grid, block, 0, k);
            break;
        case Variant::FusedDt: launch(name, ex, scanKernel<NS, true, false, VEC>, grid, block, 0, k); break;
        case Variant::Checkpoints:
            if constexpr (NS == 4) {
                if (k.mode == kWhole && trainingWalks(ex, k.s.batch, k.s.channels, NS, k.lanes, k.s.steps)) {
                    launchWalk(name, ex, k);
                    break;
                }
            }
            launch(name, ex, scanKernel<NS, false, true, VEC>, grid, block, 0, k);
            break;
    }
}

void launchScan(const Exec& ex, const ScanKernelArgs& k, int ns, Variant v) {
    const int per_block = kThreads / k.lanes;
    const int64_t blocks = static_cast<int64_t>((k.s.channels + per_block - 1) / per_block) * k.chunks * k.s.batch;
    if (blocks > 0x7fffffff) throw std::invalid_argument("selectiveScan: too many rows × channels for one launch");
    const char* name = k.mode == kWhole ? (v == Variant::Checkpoints ? "selectiveScan (checkpoints)" : "selectiveScan")
                       : k.mode == kChunkLocal ? "selectiveScan chunk states"
                                               : "selectiveScan chunk outputs";
    const dim3 grid(static_cast<unsigned>(blocks)), block(kThreads);
    // 16-byte B/C loads when every lane's states exist and the rows are 16-byte aligned (a model's x_proj output)
    const int N = k.s.d_state;
    const bool vec = N == ns * k.lanes && aligned16(k.s.bc) && k.s.ldbc % 4 == 0 && N % 4 == 0;
    if (ns == 4) vec ? launchNs<4, true>(name, ex, k, v, grid, block) : launchNs<4, false>(name, ex, k, v, grid, block);
    else vec ? launchNs<16, true>(name, ex, k, v, grid, block) : launchNs<16, false>(name, ex, k, v, grid, block);
}

/** The three phases of the chunked scan over k.ws_h / k.ws_sum (k.chunk, k.chunks set). */
void runChunked(const Exec& ex, ScanKernelArgs k, int ns) {
    k.mode = kChunkLocal;
    launchScan(ex, k, ns, Variant::Plain);
    const int64_t n = static_cast<int64_t>(k.s.batch) * k.s.channels * k.s.d_state;
    launch("selectiveScan combine", ex, scanCombineKernel, dim3(blocksFor(n, 256)), dim3(256), 0, k);
    k.mode = kChunkOutput;
    launchScan(ex, k, ns, Variant::Plain);
}

}  // namespace

ScanPlan planScan(const Exec& ex, const ScanArgs& s, ScanAlgo algo, int chunk_override, int checkpoint_chunk) {
    ScanPlan p;
    // Every scan of DETERMINISTIC inference, and short or forced-sequential training forwards: sequential in the
    // narrow layout of decode, whatever the batch and length (the wide layout sums y over a channel's states in
    // another order).
    int walk_ns, walk_lanes;
    lanesFor(s.d_state, false, &walk_ns, &walk_lanes);
    const bool ck_chunked = checkpoint_chunk > 0 && algo != ScanAlgo::Sequential && s.steps >= kScanChunkedMinSteps &&
                            s.steps > checkpoint_chunk &&
                            !(algo == ScanAlgo::Auto &&
                              trainingWalks(ex, s.batch, s.channels, walk_ns, walk_lanes, s.steps));
    if (s.shape_independent || (checkpoint_chunk > 0 && !ck_chunked)) {
        p.chunk = s.steps;
        lanesFor(s.d_state, false, &p.ns, &p.lanes);
        return p;
    }
    if (ck_chunked) {  // the training forward: chunks of the checkpoint length; only ΣΔ needs a workspace
        p.chunked = true;
        lanesFor(s.d_state, true, &p.ns, &p.lanes);
        p.chunk = checkpoint_chunk;
        p.chunks = (s.steps + checkpoint_chunk - 1) / checkpoint_chunk;
        p.workspace_floats = static_cast<int64_t>(s.batch) * p.chunks * s.channels;
        return p;
    }
    // A long prefill of few rows at d_state 16 (four lanes per channel): where the narrow layout's blocks would not
    // fill the GPU twice (launchNs takes the staged walk then), the walk beats the chunked scan, and its outputs
    // equal T decode steps'. H200, µs, walk / chunked: 370m row T 4,096 219 / 287, 2.8b row 483 / 573, 370m
    // B 4 × T 1,024 150 / 281. Measured from 1,024 steps only, so shorter prefills keep the chunked scan.
    if (algo == ScanAlgo::Auto && checkpoint_chunk == 0 && s.steps >= kWalkOverChunkedMinSteps && walk_ns == 4 &&
        walk_lanes == 4 && walkRuns(ex, s.batch, s.channels, walk_lanes, s.steps)) {
        p.chunk = s.steps;
        p.ns = walk_ns;
        p.lanes = walk_lanes;
        return p;
    }
    int ns, S;
    lanesFor(s.d_state, true, &ns, &S);
    const int64_t seq_threads = static_cast<int64_t>(s.batch) * s.channels * S;
    const int64_t fill = static_cast<int64_t>(ex.sms) * 2048;  // resident threads of the whole GPU
    p.chunked = algo == ScanAlgo::Chunked ||
                (algo == ScanAlgo::Auto && s.steps >= kScanChunkedMinSteps && seq_threads < fill);
    if (!p.chunked || s.steps < 2) {
        p.chunked = false;
        p.chunk = s.steps;
        lanesFor(s.d_state, s.steps >= 32, &p.ns, &p.lanes);
        return p;
    }
    p.ns = ns;
    p.lanes = S;
    int L;
    if (chunk_override > 0) {
        L = chunk_override;
    } else {
        // About two GPU-fulls of threads, chunks of at least 32 steps (16 below 256 steps).
        const int min_len = s.steps < 256 ? 16 : 32;
        const int64_t want = std::max<int64_t>(2, (2 * fill + seq_threads - 1) / seq_threads);
        const int64_t most = std::max<int64_t>(1, (s.steps + min_len - 1) / min_len);
        const int64_t C = std::min(want, most);
        L = static_cast<int>((s.steps + C - 1) / C);
    }
    p.chunk = L;
    p.chunks = (s.steps + L - 1) / L;
    if (p.chunks < 2) {  // one chunk is just the sequential scan
        p.chunked = false;
        p.chunk = s.steps;
        p.chunks = 1;
        lanesFor(s.d_state, s.steps >= 32, &p.ns, &p.lanes);
        return p;
    }
    p.workspace_floats = static_cast<int64_t>(s.batch) * p.chunks * s.channels * (static_cast<int64_t>(s.d_state) + 1);
    return p;
}

bool dtProjectionFusable(const ScanArgs& s, const ScanPlan& plan) {
    return !plan.chunked && static_cast<int64_t>(s.batch) * s.steps <= kGemvMaxRows;
}

void selectiveScan(const Exec& ex, const ScanArgs& s, const ScanPlan& plan, float* ws, const DtProjection* dt,
                   const ScanCheckpoints* ck) {
    if (s.batch <= 0 || s.steps <= 0 || s.channels <= 0) return;
    if (s.d_state < 1 || s.d_state > 256)
        throw std::invalid_argument("selectiveScan: d_state " + std::to_string(s.d_state) + " is outside [1, 256]");
    const int ns = plan.ns, S = plan.lanes;
    ScanKernelArgs k{s, S, s.steps, 1, kWhole, nullptr, nullptr, DtProjection{}, nullptr, 0, 0, 0};
    if (dt) {
        if (plan.chunked || ck)
            throw std::logic_error("selectiveScan: the fused Δ projection needs the plain sequential scan");
        k.dt = *dt;
        const int V = (dt->wdtype == DTYPE_BF16 || dt->wdtype == DTYPE_F16) ? 8 : 4;
        k.dt.vec = dt->rank % V == 0 && aligned16(dt->w) && aligned16(dt->x) && dt->ldx % 4 == 0;
        k.s.dt = dt->out;
        launchScan(ex, k, ns, Variant::FusedDt);
        return;
    }
    if (ck) {
        if (ck->chunk < 1)
            throw std::invalid_argument("selectiveScan: checkpoint chunk " + std::to_string(ck->chunk) + " < 1");
        if (!ck->data) throw std::invalid_argument("selectiveScan: null checkpoint buffer");
    }
    if (ck && plan.chunked) {  // the chunk start states are the checkpoints (see the header)
        if (plan.chunk != ck->chunk) throw std::logic_error("selectiveScan: a plan for another checkpoint length");
        k.chunk = plan.chunk;
        k.chunks = plan.chunks;
        k.ws_h = ck->data;
        k.ws_sum = ws;
        runChunked(ex, k, ns);
        return;
    }
    if (ck) {
        k.ckpt = ck->data;
        k.ck_chunk = ck->chunk;
        k.ck_chunks = (s.steps + ck->chunk - 1) / ck->chunk;
        launchScan(ex, k, ns, Variant::Checkpoints);
        return;
    }
    if (!plan.chunked) {
        launchScan(ex, k, ns, Variant::Plain);
        return;
    }
    k.chunk = plan.chunk;
    k.chunks = plan.chunks;
    k.ws_h = ws;
    k.ws_sum = ws + static_cast<int64_t>(s.batch) * plan.chunks * s.channels * s.d_state;
    runChunked(ex, k, ns);
}

}  // namespace mamba::cuda
