// The deterministic tensor-core tier: y = beta·y + x·Wᵀ (+ bias) for bf16/f16 weights, batch-invariant by
// construction (gemm_tc.h states the numeric contract).
//
// Why it is batch-invariant: each output element is accumulated by one chain of mma.m16n8k16 instructions in
// ascending k, one 16-wide chunk per instruction, in one f32 register, from +0 — or, for a deep weight on Hopper, by
// a fixed number of such chains over fixed parts of k (tierSplit, a rule of the weight's shape), added in part order.
// Nothing else ever adds into a chain: no atomics, no split that depends on M. The tile shape only decides
// which warp owns the chain and how far ahead the operands are staged, so tiles can be chosen from M (small tiles
// stream the weights for decode, big ones reuse them for prefill) without changing a bit. The op cases
// `invariant.gemm.forward` (B = 1 … 4096) and `tiles.gemm.tensor` (every tile on one product) check exactly this.
//
// The chain tile (one-row decode of the 130m/370m-sized products, and DETERMINISTIC's fused rmsnorm + in_proj + conv
// step) has a warp per chain and its weights in registers: its own section below. The other kernels here are the
// classic Ampere pipeline (they run on sm_80 and sm_90):
//  - W tiles stream through S shared-memory stages with cp.async (16-byte chunks, zero-filled past the edges);
//  - x is f32 in memory: each thread loads its chunk of the NEXT tile into registers before computing the current
//    one, and rounds it to W's type into shared memory afterwards, so no separate packing kernel runs;
//  - rows of a tile are XOR-swizzled in 16-byte chunks, so ldmatrix reads are free of bank conflicts;
//  - the first weight stages are requested before pdlWait(): weights never depend on the previous kernel.
#include "gemm_tc.h"
#include "gemm_tc_parts.cuh"

#include "../kernels.h"
#include "conv_epilogue.cuh"
#include "../cp_async.cuh"
#include "../lane_load.cuh"
#include "../lowp.cuh"
#include "../rmsnorm_row.cuh"
#include "mamba/mamba.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace mamba::cuda {
namespace {
using namespace tc;

// The split of deep products on Hopper (tierSplit): a weight with more inputs than outputs (x_proj, out_proj) has
// few, long chains — on the few-rows tile a chain of K/16 dependent wgmma steps sets the time of a decode product,
// not the bytes — so its chains are cut into 2, 4 or 8 parts of at most kNarrowPart (≤ kSplitMaxOut outputs) or
// kDeepPart elements of k, rounded up to whole 64-wide k tiles; never for fewer than kMinSplitIn inputs.
// The prefill tile must cut the same way (same bits), and there every part costs. H200, 2.8b out_proj [2560, 5120],
// µs at M = 16 / 4096: 1 part (the unsplit kernel) 21.5 / 217, 2 parts 14.5 / 202, 4 parts 11.2 / 279,
// 8 parts 14.9 / 403 (cuBLAS 9.7 / 169). kDeepPart = 2560 takes the decode gain that prefill does not pay for;
// docs/benchmarks.md has the rest.
constexpr int kNarrowPart = 640, kDeepPart = 2560;
constexpr int kSplitMaxOut = 256, kMinSplitIn = 1024, kMaxParts = 8;

/** The cut of this weight's chains on this device: a function of the weight's shape and the device alone. */
KSplit tierSplit(const Exec& ex, int out, int in) {
    KSplit s;
    const int target = out <= kSplitMaxOut ? kNarrowPart : kDeepPart;
    if (ex.cc != 90 || in <= out || in < kMinSplitIn) return s;
    int parts = 1;
    while (parts < kMaxParts && (in + parts - 1) / parts > target) parts *= 2;
    if (parts == 1) return s;
    s.part = ((in + parts - 1) / parts + 63) / 64 * 64;
    s.parts = (in + s.part - 1) / s.part;
    return s;
}

/** Four 8×8 matrices of 16-bit values from shared memory, in mma fragment order. */
__device__ __forceinline__ void ldmatrix4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/** d += a·b for one 16×8 tile over 16 k, f32 accumulation: THE step of every output's chain. */
template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                        uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- the kernels ----
//
// Two families share the per-element chain (gemm_tc.h):
//  - decode (one row of a wide product, x 16-byte aligned): x stays f32 in shared memory — cp.async copies it like
//    the weights, only the rows that exist (the kernel takes up to 16) — and is rounded to T while the mma fragments
//    are built, which saves the packing launch;
//  - packed (everything else): x was rounded to T by rowsToLowp into a workspace; both operands stream through
//    cp.async and ldmatrix, 64- or 128-row tiles.
// Both round x with the same round-to-nearest-even conversion, so they feed the tensor cores the same values.

/**
 * A warp's ldmatrix addressing for fragments of 16 rows starting at row0 of a [rows][BK] tile: the row part (with
 * the lane's row) once, the swizzled chunk per 16-wide k chunk kk. `hi` selects the second 8 columns (A: lanes 16–31;
 * B: lanes 8–15 and 24–31).
 */
template <int BK>
struct FragmentAddress {
    uint32_t row;  // byte offset of the lane's row
    int sw;        // the lane's chunk bits: hi ^ (row & 7)
    __device__ FragmentAddress(int row0, int lane_row, int hi)
        : row(static_cast<uint32_t>((row0 + lane_row) * BK * 2)), sw(hi ^ ((row0 + lane_row) & 7)) {}
    __device__ __forceinline__ uint32_t at(int kk) const { return row + (static_cast<uint32_t>((2 * kk) ^ sw) << 4); }
};

/** acc[i][2j…2j+1] += a[i] · (the two 8-column halves of group j): the chain step of every element. */
template <typename T, int MT, int NT>
__device__ __forceinline__ void multiply(float (&acc)[MT][2 * NT][4], const uint32_t (&af)[MT][4],
                                         const uint32_t (&bf)[NT][4]) {
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            mma16816<T>(acc[i][2 * j], af[i], bf[j][0], bf[j][1]);
            mma16816<T>(acc[i][2 * j + 1], af[i], bf[j][2], bf[j][3]);
        }
}

/** y = acc (+ bias) (+ beta·y); fragment element e of tile (i, j): row lane/4 (+8 for e ≥ 2), column 2·(lane%4) + e%2. */
template <int MT, int NT>
__device__ __forceinline__ void storeOutputs(const TcArgs& a, const float (&acc)[MT][2 * NT][4], int64_t row0,
                                             int col0, int lane) {
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < 2 * NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int64_t m = row0 + i * 16 + (lane >> 2) + (e >> 1) * 8;
                const int n = col0 + j * 8 + (lane & 3) * 2 + (e & 1);
                if (m < a.rows && n < a.out) finishElement(a, m, n, acc[i][j][e]);
            }
}

// -- the decode family: 16 rows, WN warps side by side over the columns, f32 x in shared memory --

constexpr int kDecodeBK = 128, kDecodeStages = 8;
constexpr int kXPad = 8;  // floats of padding per staged x row: conflict-free 8-byte fragment reads

template <int WN>
struct DecodeTile {
    static constexpr int kThreads = 32 * WN, BN = 16 * WN, BK = kDecodeBK, S = kDecodeStages;
    static constexpr int kXLd = BK + kXPad;
    /** Bytes of one stage when `xrows` rows of x exist: the weight tile first, then the x rows. */
    static __host__ __device__ constexpr int stageBytes(int xrows) { return BN * BK * 2 + xrows * kXLd * 4; }
};

template <typename T, int WN>
__global__ void __launch_bounds__(32 * WN) decodeTierKernel(TcArgs a) {
    using L = DecodeTile<WN>;
    constexpr int BK = L::BK, S = L::S, KK = BK / 16;
    extern __shared__ __align__(16) unsigned char tc_smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int xrows = static_cast<int>(a.rows);  // ≤ 16
    const uint32_t stage = L::stageBytes(xrows), base = smemAddr(tc_smem);
    const int n0 = blockIdx.y * L::BN;
    const T* W = static_cast<const T*>(a.w);
    const int K = a.in, KT = (K + BK - 1) / BK;
    const TileLoad<L::BN, BK, L::kThreads> wload;
    auto loadX = [&](uint32_t at, int kt) {  // xrows × BK floats, 16-byte chunks, into rows of kXLd floats
        constexpr int kChunks = BK / 4;
        for (int i = threadIdx.x; i < xrows * kChunks; i += L::kThreads) {
            const int r = i / kChunks, c = i % kChunks, k = kt * BK + c * 4;
            const bool ok = k < K;
            cpAsync16(at + L::BN * BK * 2 + (r * L::kXLd + c * 4) * 4, ok ? a.x + r * a.ldx + k : a.x, ok ? 16 : 0);
        }
    };

#pragma unroll
    for (int s = 0; s < S - 1; ++s)  // weights first: they do not depend on the previous kernel
        if (s < KT) wload.load(base + s * stage, W, n0, a.out, K, s);
    pdlWait();
    pdlLaunchDependents();
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {  // one commit group per stage: the weights of all stages land in group 0
        if (s < KT) loadX(base + s * stage, s);
        cpAsyncCommit();
    }

    const int g = lane >> 2, t = lane & 3;
    // The A fragment from f32: a0 (row g, k 2t…2t+1), a1 (row g+8), a2 (row g, k +8), a3 (row g+8, k +8); rows that
    // do not exist are zeros.
    const bool lo = g < xrows, hi = g + 8 < xrows;
    const int xlo = g * L::kXLd + 2 * t, xhi = xlo + 8 * L::kXLd;
    const FragmentAddress<BK> bAddr(warp * 16, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
    float acc[1][2][4] = {};
    int st = 0;
    for (int kt = 0; kt < KT; ++kt) {
        cpAsyncWait<S - 2>();
        __syncthreads();
        const int next = kt + S - 1;
        const int nst = st == 0 ? S - 1 : st - 1;  // == next % S
        if (next < KT) {
            wload.load(base + nst * stage, W, n0, a.out, K, next);
            loadX(base + nst * stage, next);
        }
        cpAsyncCommit();
        const uint32_t sB = base + st * stage;
        const float* sx = reinterpret_cast<const float*>(tc_smem + st * stage + L::BN * BK * 2);
        // Few warps per SM here, so every fragment of the tile is read first and the chain of multiplies follows
        // (the asm statements keep their source order).
        const int chunks = min(KK, (K - kt * BK + 15) / 16);
        uint32_t af[KK][1][4], bf[KK][1][4];
#pragma unroll
        for (int kk = 0; kk < KK; ++kk) {
            if (kk < chunks) {
                const int k = kk * 16;
                const float2 v0 = lo ? *reinterpret_cast<const float2*>(sx + xlo + k) : make_float2(0.f, 0.f);
                const float2 v1 = hi ? *reinterpret_cast<const float2*>(sx + xhi + k) : make_float2(0.f, 0.f);
                const float2 v2 = lo ? *reinterpret_cast<const float2*>(sx + xlo + k + 8) : make_float2(0.f, 0.f);
                const float2 v3 = hi ? *reinterpret_cast<const float2*>(sx + xhi + k + 8) : make_float2(0.f, 0.f);
                af[kk][0][0] = packPair<T>(v0.x, v0.y);
                af[kk][0][1] = packPair<T>(v1.x, v1.y);
                af[kk][0][2] = packPair<T>(v2.x, v2.y);
                af[kk][0][3] = packPair<T>(v3.x, v3.y);
                ldmatrix4(bf[kk][0], sB + bAddr.at(kk));
            }
        }
#pragma unroll
        for (int kk = 0; kk < KK; ++kk)
            if (kk < chunks) multiply<T, 1, 1>(acc, af[kk], bf[kk]);
        st = st == S - 1 ? 0 : st + 1;
    }
    cpAsyncWait<0>();
    storeOutputs<1, 1>(a, acc, 0, n0 + warp * 16, lane);
}

// -- the packed family: x already in T (ld = in), WM×WN warps of MT×NT fragments --

template <int WM, int WN, int MT, int NT, int S>
struct PackedTile {
    static constexpr int kThreads = 32 * WM * WN, BM = WM * MT * 16, BN = WN * NT * 16, BK = 64;
    static constexpr int kStageBytes = (BM + BN) * BK * 2;  // x tile, then weight tile
    static constexpr size_t kSmem = static_cast<size_t>(S) * kStageBytes;
};

template <typename T, int WM, int WN, int MT, int NT, int S, int kMinBlocks>
__global__ void __launch_bounds__(32 * WM * WN, kMinBlocks) packedTierKernel(TcArgs a, const T* __restrict__ xp) {
    using L = PackedTile<WM, WN, MT, NT, S>;
    constexpr int BK = L::BK, KK = BK / 16;
    extern __shared__ __align__(16) unsigned char tc_smem[];
    const uint32_t base = smemAddr(tc_smem);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm = warp / WN, wn = warp % WN;
    // M tiles vary fastest: resident blocks share a few weight tiles, and the packed x stays in L2.
    const int64_t m0 = static_cast<int64_t>(blockIdx.x) * L::BM;
    const int n0 = blockIdx.y * L::BN;
    const T* W = static_cast<const T*>(a.w);
    const int K = a.in, KT = (K + BK - 1) / BK;
    const TileLoad<L::BM, BK, L::kThreads> xload;
    const TileLoad<L::BN, BK, L::kThreads> wload;
    constexpr uint32_t kB = L::BM * BK * 2;  // the weight tile's offset in a stage

#pragma unroll
    for (int s = 0; s < S - 1; ++s)
        if (s < KT) wload.load(base + s * L::kStageBytes + kB, W, n0, a.out, K, s);
    pdlWait();
    pdlLaunchDependents();
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
        if (s < KT) xload.load(base + s * L::kStageBytes, xp, m0, a.rows, K, s);
        cpAsyncCommit();
    }

    const FragmentAddress<BK> aAddr(wm * MT * 16, lane & 15, lane >> 4);
    const FragmentAddress<BK> bAddr(wn * NT * 16, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
    float acc[MT][2 * NT][4] = {};
    int st = 0;
    for (int kt = 0; kt < KT; ++kt) {
        cpAsyncWait<S - 2>();
        __syncthreads();
        const int next = kt + S - 1;
        const int nst = st == 0 ? S - 1 : st - 1;  // == next % S
        if (next < KT) {
            wload.load(base + nst * L::kStageBytes + kB, W, n0, a.out, K, next);
            xload.load(base + nst * L::kStageBytes, xp, m0, a.rows, K, next);
        }
        cpAsyncCommit();
        const uint32_t sA = base + st * L::kStageBytes, sB = sA + kB;
        // Fragments double-buffered in source order (the asm statements keep their order): chunk kk + 1 is read
        // while chunk kk is multiplied. Chunks entirely past `in` are skipped.
        const int chunks = min(KK, (K - kt * BK + 15) / 16);
        uint32_t af[2][MT][4], bf[2][NT][4];
        auto fragments = [&](int buf, int kk) {
#pragma unroll
            for (int i = 0; i < MT; ++i) ldmatrix4(af[buf][i], sA + i * 16 * BK * 2 + aAddr.at(kk));
#pragma unroll
            for (int j = 0; j < NT; ++j) ldmatrix4(bf[buf][j], sB + j * 16 * BK * 2 + bAddr.at(kk));
        };
        fragments(0, 0);
#pragma unroll
        for (int kk = 0; kk < KK; ++kk) {
            if (kk < chunks) {
                if (kk + 1 < chunks) fragments((kk + 1) & 1, kk + 1);
                multiply<T, MT, NT>(acc, af[kk & 1], bf[kk & 1]);
            }
        }
        st = st == S - 1 ? 0 : st + 1;
    }
    cpAsyncWait<0>();
    storeOutputs<MT, NT>(a, acc, m0 + wm * MT * 16, n0 + wn * NT * 16, lane);
}

// -- the chain family: ≤ 8 rows, one warp per chain, the weights straight from memory into registers --
//
// Decode is bound by a chain's latency and by how many weight bytes are in flight, not by the tensor cores. A warp
// owns one chain: 8 output columns over one part of k. Lane (g, t) of the m16n8k16 fragment layout loads the two
// 4-byte pieces of column g that its B fragment holds (k + 2t and k + 8 + 2t) for kChainDepth steps ahead into a
// register ring, so the loads of a whole product are issued before anything waits, and the first ones before
// pdlWait(). The loads are predicated, never branched around (a branch merged the ring into register copies, and a copy
// waits for its load: every step then waited a full L2 round trip, 2–3× slower). x (at most 8 rows, the fragment's
// upper half; its lower half is zeros) is rounded to T once per block into shared memory in fragment order, one
// 8-byte read per lane and step; with an rmsnorm prologue the block stages the row and the norm's weights by cp.async
// and normalises there (rmsnorm_row.cuh: the rmsnorm kernel's bits). A split weight's parts are warps of the same
// block, added in part order through shared memory as the cluster tiles add them. The conv epilogue (decode's in_proj,
// one row) runs convSilu's step on the finished outputs (conv_step.cuh: its bits).
//
// What bounds it (H200, docs/benchmarks.md "The chain tile"): ≈ 40 ns per k16 step of a chain — the 96-step 130m
// out_proj takes 6.5 µs, the few-rows TMA tile 8.7 — and the 4-byte loads, which stream the 1.4b/2.8b products slower
// than TMA; chainTakes picks it only where it wins.

constexpr int kChainDepth = 32;  // k16 steps of weights in flight per lane (two registers each)

struct ChainFusion {
    NormPrologue norm;    // NORM: the rmsnorm in front (norm.x → x, also written to norm.y)
    int norm_threads;     // the rmsnorm kernel's threads for this width (its sum order)
    bool norm_vec;        // ... and whether it sums 16-byte chunks
    ConvEpilogue conv;    // CONV: decode's conv step on the outputs below conv.channels
};

/** Words (pairs of 16-bit x) per staged row: conflict-free 8-byte fragment reads across the rows (stride ≡ 8 mod 32). */
__host__ __device__ inline int chainXLd(int in) {
    const int words = (in + 15) / 16 * 8;
    return words + (40 - words % 32) % 32;
}

/**
 * A 4-byte weight piece, or 0 where !ok: one predicated load, no branch. (A branch around the load would merge into a
 * copy of the ring's register, and a copy waits for the load to land.)
 */
__device__ __forceinline__ uint32_t chainPiece(const void* p, bool ok) {
    uint32_t v;
    asm volatile(
        "{\n .reg .pred q;\n setp.ne.b32 q, %2, 0;\n mov.b32 %0, 0;\n @q ld.global.nc.b32 %0, [%1];\n}\n"
        : "=r"(v)
        : "l"(p), "r"(static_cast<int>(ok)));
    return v;
}

template <typename T, int WARPS, bool NORM, bool CONV>
__global__ void __launch_bounds__(32 * WARPS) chainTierKernel(TcArgs a, KSplit split, ChainFusion f) {
    extern __shared__ __align__(16) uint32_t xs[];  // [rows + 1][chainXLd] pairs of T (the last row zeros)
    __shared__ float sums[WARPS][8][8];  // raw chain sums of a split weight, [warp][row][column]
    __shared__ float normPart[kRmsnormMaxWarps + 1];
    __shared__ float convIn[CONV ? WARPS : 1][8][8];  // per output: taps 0–3, history 0–2, bias
    const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
    const int g = lane >> 2, t = lane & 3;
    const int rows = static_cast<int>(a.rows), P = split.parts, K = a.in;
    const int chain = static_cast<int>(blockIdx.x) * WARPS + warp;  // parts fastest: a column group's parts share a block
    const int part = chain % P, n0 = chain / P * 8;
    const int kBegin = P > 1 ? part * split.part : 0;
    const int kEnd = P > 1 ? min(K, kBegin + split.part) : K;
    const int steps = n0 < a.out && kEnd > kBegin ? (kEnd - kBegin + 15) / 16 : 0;
    // Step s's two pieces are words 8s and 8s + 4 of the lane's column from kBegin + 2t on; the first exists for every
    // step, the second not in a last half chunk (K % 8 == 0: whole pairs); zeros past the edges.
    const int full = n0 + g < a.out ? (kEnd - kBegin) / 16 : 0, pieces = n0 + g < a.out ? steps : 0;
    const uint32_t* wq = reinterpret_cast<const uint32_t*>(static_cast<const T*>(a.w) +
                                                           static_cast<int64_t>(n0 + g < a.out ? n0 + g : 0) * K + kBegin + 2 * t);
    auto load = [&](int s, uint32_t(&r)[2]) {
        r[0] = chainPiece(wq + 8 * s, s < pieces);
        r[1] = chainPiece(wq + 8 * s + 4, s < full);
    };
    uint32_t ring[kChainDepth][2];
#pragma unroll
    for (int j = 0; j < kChainDepth; ++j) load(j, ring[j]);  // weights first: they do not depend on the previous kernel
    // The rmsnorm's input row and weights are staged in shared memory behind x's words by copies that are all in flight
    // at once (its sums, done from there, would otherwise wait on one load after another): the weights before
    // pdlWait(), like the product's.
    const int ldxs = chainXLd(K), quads = (K + 15) / 16 * 4;
    float* const xraw = reinterpret_cast<float*>(xs + (rows + 1) * ldxs);
    float* const wraw = xraw + quads * 4;
    auto stage = [&](float* dst, const float* src) {
        if (f.norm_vec) {
            for (int i = static_cast<int>(threadIdx.x); i < K / 4; i += 32 * WARPS) cpAsync16(smemAddr(dst + 4 * i), src + 4 * i, 16);
        } else {
            for (int i = static_cast<int>(threadIdx.x); i < K; i += 32 * WARPS) cpAsync4(dst + i, src + i);
        }
    };
    if constexpr (NORM) stage(wraw, f.norm.w);
    pdlWait();
    pdlLaunchDependents();
    if constexpr (NORM) stage(xraw, f.norm.x);

    if constexpr (CONV)  // the conv step's inputs, while the chain runs
        for (int q = lane; q < 64; q += 32) loadConvSlotEntry(f.conv, n0 + q / 8, q % 8, convIn[warp][q / 8]);

    // x rounded to T into xs, four values at a time, in fragment order: step s's words for lane t are 8s + 2t (k 16s
    // + 2t, + 1) and 8s + 2t + 1 (k 16s + 8 + 2t, + 1), one 8-byte read. Zeros from K up to whole k16 chunks, and a
    // row of zeros after the rows (row `rows`), which the lanes of the rows that do not exist read.
    auto word = [](int k) { return k / 16 * 8 + (k % 8) / 2 * 2 + (k % 16) / 8; };  // of the pair at even k
    auto put = [&](int r, int k, const float (&v)[4]) {
        xs[r * ldxs + word(k)] = packPair<T>(v[0], v[1]);
        xs[r * ldxs + word(k + 2)] = packPair<T>(v[2], v[3]);
    };
    if constexpr (NORM) {  // one row (tensorTierFuses)
        cpAsyncWaitAll();
        __syncthreads();
        const float scale = rmsnormScale(xraw, K, f.norm.eps, f.norm_vec, f.norm_threads, normPart);
        for (int c = static_cast<int>(threadIdx.x); c < quads; c += 32 * WARPS) {
            const int k = 4 * c;
            float v[4] = {0.f, 0.f, 0.f, 0.f};
            if (k < K) {
#pragma unroll
                for (int i = 0; i < 4; ++i) v[i] = rmsnormValue(xraw[k + i], wraw[k + i], scale);
                if (blockIdx.x == 0) {
#pragma unroll
                    for (int i = 0; i < 4; ++i) f.norm.y[k + i] = v[i];
                }
            }
            put(0, k, v);
        }
    } else {
        for (int r = 0; r < rows; ++r) {
            const float* xr = a.x + r * a.ldx;
#pragma unroll 4
            for (int c = static_cast<int>(threadIdx.x); c < quads; c += 32 * WARPS) {
                const int k = 4 * c;
                float v[4] = {0.f, 0.f, 0.f, 0.f};
                if (k < K) {
                    const float4 q = *reinterpret_cast<const float4*>(xr + k);
                    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
                }
                put(r, k, v);
            }
        }
    }
    for (int c = static_cast<int>(threadIdx.x); c < 2 * quads; c += 32 * WARPS) xs[rows * ldxs + c] = 0u;
    __syncthreads();

    // The chain: one mma per 16 k, in ascending k, from +0. Each step's mma reads its ring slot before the load of
    // step + kChainDepth refills it (so the slot's register is reused, never copied: a copy would wait for the load),
    // and the next step's x is read before this step's mma.
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    const uint2* xa = reinterpret_cast<const uint2*>(xs + (g < rows ? g : rows) * ldxs + kBegin / 2) + t;
    uint2 xnext = xa[0];
    auto step = [&](int s, const uint32_t(&b)[2]) {
        const uint2 x = xnext;
        xnext = xa[4 * min(s + 1, steps - 1)];
        const uint32_t af[4] = {x.x, 0u, x.y, 0u};
        mma16816<T>(acc, af, b[0], b[1]);
    };
    int s0 = 0;
    for (; s0 + kChainDepth <= steps; s0 += kChainDepth) {
#pragma unroll
        for (int j = 0; j < kChainDepth; ++j) {
            step(s0 + j, ring[j]);
            load(s0 + j + kChainDepth, ring[j]);
        }
    }
#pragma unroll
    for (int j = 0; j < kChainDepth; ++j)  // the last steps, already in the ring
        if (s0 + j < steps) step(s0 + j, ring[j]);
    const bool rowOk = g < rows;

    // Fragment element e < 2 of lane (g, t): row g, column n0 + 2t + e (elements 2, 3 are the zero rows g + 8).
    float out[2] = {acc[0], acc[1]};
    bool owner = true;
    if (P > 1) {  // the parts of a column group are warps part 0 … P − 1 of this block: added in part order
        if (rowOk) sums[warp][g][2 * t] = acc[0], sums[warp][g][2 * t + 1] = acc[1];
        __syncthreads();
        owner = part == 0;
        if (owner && rowOk) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float v = sums[warp][g][2 * t + e];
                for (int p = 1; p < P; ++p) v += sums[warp + p][g][2 * t + e];
                out[e] = v;
            }
        }
    }
    if constexpr (CONV) {
        cpAsyncWaitAll();
        __syncwarp();
    }
    if (!owner || !rowOk) return;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        const int col = n0 + 2 * t + e;
        if (col >= a.out) continue;
        float* yp = a.y + static_cast<int64_t>(g) * a.ldy + col;
        const float v = finishValue(a, col, yp, out[e]);
        *yp = v;
        if constexpr (CONV)  // one row: g == 0
            if (col < f.conv.channels) convSlotStep(f.conv, col, convIn[warp][2 * t + e], v);
    }
}

// ---- launching ----

/** Opts a kernel in to `bytes` of dynamic shared memory (an attribute of the device context: set on every launch,
 * cheap and legal while capturing, always to the same value for a kernel). */
template <typename Kernel>
void optIn(const Exec& ex, Kernel kernel, size_t bytes, size_t most) {
    if (bytes > static_cast<size_t>(ex.smem_optin))
        throw std::runtime_error("gemm (tensor-core tier): a tile needs " + std::to_string(bytes) +
                                 " bytes of shared memory; the device offers " + std::to_string(ex.smem_optin));
    if (bytes > 48 * 1024)
        check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(most)),
              "cudaFuncSetAttribute (tensor-core tier shared memory)");
}

template <typename T, int WN>
void launchDecode(const Exec& ex, const TcArgs& a) {
    using L = DecodeTile<WN>;
    const auto kernel = decodeTierKernel<T, WN>;
    const size_t smem = static_cast<size_t>(L::S) * L::stageBytes(static_cast<int>(a.rows));
    optIn(ex, kernel, smem, static_cast<size_t>(L::S) * L::stageBytes(16));
    launch("gemm (tensor-core tier, decode)", ex, kernel, dim3(1, blocksFor(a.out, L::BN)), dim3(L::kThreads), smem,
           a);
}

template <typename T, int WM, int WN, int MT, int NT, int S, int kMinBlocks>
void launchPacked(const Exec& ex, const TcArgs& a, const T* xp) {
    using L = PackedTile<WM, WN, MT, NT, S>;
    const auto kernel = packedTierKernel<T, WM, WN, MT, NT, S, kMinBlocks>;
    optIn(ex, kernel, L::kSmem, L::kSmem);
    launch("gemm (tensor-core tier)", ex, kernel, dim3(blocksFor(a.rows, L::BM), blocksFor(a.out, L::BN)),
           dim3(L::kThreads), L::kSmem, a, xp);
}

/** Bytes of x the chain tile stages per block, and the most it may: several blocks per SM, one fixed attribute. */
size_t chainSmem(int64_t rows, int in, bool norm) {
    const size_t raw = norm ? size_t{2} * ((in + 15) / 16 * 16) : 0;  // the rmsnorm's staged row and weights
    return (static_cast<size_t>(rows + 1) * chainXLd(in) + raw) * 4;
}
constexpr size_t kChainMaxSmem = 96 * 1024;
bool chainFits(int64_t rows, int in, bool norm) {
    return rows >= 1 && rows <= kChainMaxRows && chainSmem(rows, in, norm) <= kChainMaxSmem;
}

/**
 * Whether the auto rule (and the fused decode product) takes the chain tile: one row of a product whose chains' latency,
 * not its bytes, sets the time — the 130m/370m in_proj, x_proj and out_proj (H200 2026-12-04, weights streamed from
 * L2 by gemm_tc_bench: 0.6–0.85× the few-rows TMA tile's time). Not the shallow dt_proj (2.7 against 2.4 µs), not the
 * bandwidth-bound products of wider models: the chain tile's 4-byte loads stream 1.4b/2.8b in_proj at 0.8× the TMA
 * tile's rate from L2 and slower from HBM (their decode steps, fused: +30% and +21%). At more rows every block stages
 * every row of x, and the chain tile loses to the TMA tiles (130m in_proj at 8 rows: 9.5 against 5.7 µs).
 */
bool chainTakes(int64_t rows, int out, int in, bool norm) {
    return rows == 1 && chainFits(rows, in, norm) && in >= 256 && in <= 2048 &&
           static_cast<int64_t>(out) * in <= int64_t{4096} * 1024;
}

/** Warps per block of the chain tile: a split weight's parts side by side (they add up in the block), at least 2. */
int chainWarps(const KSplit& split) { return split.parts > 4 ? 8 : split.parts > 2 ? 4 : 2; }

template <typename T, int WARPS, bool NORM, bool CONV>
void launchChainWarps(const Exec& ex, const TcArgs& a, const KSplit& split, const ChainFusion& f) {
    const auto kernel = chainTierKernel<T, WARPS, NORM, CONV>;
    const size_t smem = chainSmem(a.rows, a.in, NORM);
    optIn(ex, kernel, smem, kChainMaxSmem);
    const int64_t chains = static_cast<int64_t>(blocksFor(a.out, 8)) * split.parts;
    launch("gemm (tensor-core tier, chain)", ex, kernel, dim3(blocksFor(chains, WARPS)), dim3(32 * WARPS), smem, a,
           split, f);
}

template <typename T, bool NORM, bool CONV>
void launchChain(const Exec& ex, const TcArgs& a, const KSplit& split, const ChainFusion& f) {
    if (!chainFits(a.rows, a.in, NORM))
        throw std::logic_error("gemm (tensor-core tier): the chain tile takes 1 to 8 rows of at most 96 KiB in shared memory");
    if constexpr (NORM) {  // a norm's product is never split (tensorTierFuses); 4 warps share a block's staging
        launchChainWarps<T, 4, NORM, CONV>(ex, a, split, f);
    } else {
        switch (chainWarps(split)) {
            case 2: launchChainWarps<T, 2, false, false>(ex, a, split, f); break;
            case 4: launchChainWarps<T, 4, false, false>(ex, a, split, f); break;
            default: launchChainWarps<T, 8, false, false>(ex, a, split, f); break;
        }
    }
}

template <typename T>
void launchTile(const Exec& ex, const TcArgs& a, const void* xp, TcTile tile, const KSplit& split = {}) {
    const T* p = static_cast<const T*>(xp);
    switch (tile) {
        case TcTile::kDecode32: launchDecode<T, 2>(ex, a); break;
        case TcTile::kChain: launchChain<T, false, false>(ex, a, split, ChainFusion{}); break;
        case TcTile::k64x32: launchPacked<T, 2, 2, 2, 1, 6, 1>(ex, a, p); break;
        case TcTile::k128x128: launchPacked<T, 2, 4, 4, 2, 3, 2>(ex, a, p); break;
        case TcTile::kTma128x256:
        case TcTile::kFewRows:
        case TcTile::kFewRowsF32x:
            launchWgmmaTile(ex, a, xp, std::is_same<T, __half>::value ? DTYPE_F16 : DTYPE_BF16, tile, split);
            break;
        default: throw std::logic_error("gemm (tensor-core tier): unknown tile");
    }
}

/**
 * The tile for a shape (speed only: every tile computes the same bits), from the H200 tile table in
 * docs/benchmarks.md: one row of a wide product streams the weights with x kept in f32 on chip; 128×128 tiles
 * once they fill the GPU; 64×32 tiles (many blocks, deep pipeline) for everything between — also for 2…16 rows,
 * where the decode tile's f32 x stages cost more than the packing launch (tried 2026-12-01: 1.6–2.7× slower).
 */
TcTile pickTile(const Exec& ex, int64_t rows, int out, int in, int parts, bool xOnChip) {
    // Hopper: the few-rows TMA tile up to 64 rows (1.3–2× the mma.sync tiles there, 2026-12-02) — reading f32 x
    // and rounding it on chip for ≤ 16 rows of a narrow or shallow weight, where every block re-reading f32 x costs
    // less than the packing launch (H200 2026-12-04: x_proj and dt_proj 0.6–1.1 µs faster, 130m/370m in_proj
    // 0.2–0.6 µs; 0.4–2.6 µs slower on the wide, deep ones); from 128 rows the TMA + wgmma tile, once it has 32
    // blocks (fewer: 130m's in_proj and the narrow x_proj at 256 rows, where the 64×32 tiles' many blocks win) or
    // when the weight's chains are cut into parts (only the TMA tiles run those).
    if (xOnChip && chainTakes(rows, out, in, false)) return TcTile::kChain;
    if (ex.cc == 90 && rows <= 64)
        return xOnChip && (out <= 256 || in <= 1024) ? TcTile::kFewRowsF32x : TcTile::kFewRows;
    if (ex.cc == 90 && (parts > 1 || ((rows + 127) / 128) * ((out + 255) / 256) >= 32)) return TcTile::kTma128x256;
    if (rows == 1 && xOnChip && out >= 4096) return TcTile::kDecode32;
    const int64_t blocks128 = ((rows + 127) / 128) * ((out + 127) / 128);
    return rows > 64 && blocks128 >= ex.sms ? TcTile::k128x128 : TcTile::k64x32;
}


/**
 * Runs `tile` on `a` in row chunks whose x, rounded to W's type, fits the workspace (none for the tiles that read
 * f32 x), every output's chain cut as `split` says.
 */
void runTile(const Exec& ex, const TcArgs& a, int wdtype, TcTile tile, const KSplit& split, void* workspace,
             size_t workspace_bytes) {
    const bool f32x = tile == TcTile::kDecode32 || tile == TcTile::kFewRowsF32x || tile == TcTile::kChain;
    if (f32x && (a.rows > (tile == TcTile::kChain ? kChainMaxRows : 16) || tensorTierPacks(a.x, a.ldx, 1)))
        throw std::logic_error("gemm (tensor-core tier): decode tiles take ≤ 16 aligned rows (the chain tile ≤ 8)");
    int64_t chunk = a.rows;
    if (!f32x) {
        chunk = static_cast<int64_t>(workspace_bytes / (static_cast<size_t>(a.in) * 2));
        if (!workspace || chunk < 1) throw std::logic_error("gemm (tensor-core tier): no workspace for packed rows");
    }
    for (int64_t r0 = 0; r0 < a.rows; r0 += chunk) {
        TcArgs b = a;
        b.x = a.x + r0 * a.ldx;
        b.y = a.y + r0 * a.ldy;
        b.rows = std::min(chunk, a.rows - r0);
        if (!f32x) rowsToLowp(ex, b.x, b.ldx, b.rows, b.in, workspace, wdtype);
        const void* xp = f32x ? nullptr : workspace;
        if (wdtype == DTYPE_BF16) launchTile<__nv_bfloat16>(ex, b, xp, tile, split);
        else launchTile<__half>(ex, b, xp, tile, split);
    }
}

}  // namespace

int tensorTierParts(const Exec& ex, int out, int in) { return tierSplit(ex, out, in).parts; }

bool tensorTileRuns(const Exec& ex, TcTile tile) {
    return tile < TcTile::kTma128x256 || tile == TcTile::kChain || ex.cc == 90;
}

bool tensorTierTakes(const void* w, int wdtype, int in) {
    return (wdtype == DTYPE_BF16 || wdtype == DTYPE_F16) && in > 0 && in % 8 == 0 && w != nullptr && aligned16(w);
}

bool tensorTierPacks(const float* x, int64_t ldx, int64_t rows) {
    return rows > 16 || !(aligned16(x) && ldx % 4 == 0);
}

void gemmTensorTier(const Exec& ex, const float* x, int64_t ldx, int64_t rows, const void* w, int wdtype, int out,
                    int in, const float* bias, float* y, int64_t ldy, float beta, void* workspace,
                    size_t workspace_bytes, TcTile tile) {
    if (rows <= 0 || out <= 0) return;
    if (!tensorTierTakes(w, wdtype, in)) throw std::logic_error("gemm (tensor-core tier): a weight it does not take");
    if (!tensorTileRuns(ex, tile)) throw std::logic_error("gemm (tensor-core tier): this tile does not run on this device");
    const TcArgs a{x, ldx, rows, w, out, in, bias, y, ldy, beta};
    // A product split over k runs on the TMA tiles only, so that every row count of its weight gets the same sums.
    const KSplit split = tierSplit(ex, out, in);
    const int parts = split.parts;
    if (tile == TcTile::kAuto) tile = pickTile(ex, rows, out, in, parts, !tensorTierPacks(x, ldx, rows));
    if (parts > 1 && tile != TcTile::kFewRows && tile != TcTile::kTma128x256 && tile != TcTile::kFewRowsF32x &&
        tile != TcTile::kChain)
        throw std::logic_error("gemm (tensor-core tier): a product split over k runs on the TMA and chain tiles only");
    runTile(ex, a, wdtype, tile, split, workspace, workspace_bytes);
}

bool tensorTierFuses(const Exec& ex, int64_t rows, const void* w, int wdtype, int out, int in, const ConvEpilogue* conv) {
    if (!tensorTierTakes(w, wdtype, in) || !chainTakes(rows, out, in, true) || tierSplit(ex, out, in).parts != 1)
        return false;
    return !conv || (rows == 1 && conv->width >= 1 && conv->width <= kConvEpilogueMaxWidth && conv->channels <= out);
}

void gemmTensorTierFused(const Exec& ex, int64_t rows, const void* w, int wdtype, int out, int in, const float* bias,
                         float* y, int64_t ldy, float beta, const NormPrologue& norm, const ConvEpilogue* conv) {
    if (rows <= 0 || out <= 0) return;
    if (!tensorTierFuses(ex, rows, w, wdtype, out, in, conv))
        throw std::logic_error("gemm (tensor-core tier): a fused product it does not take");
    const TcArgs a{norm.y, norm.ldy, rows, w, out, in, bias, y, ldy, beta};
    ChainFusion f{};
    f.norm = norm;
    f.norm_threads = rmsnormThreads(in);
    f.norm_vec = rmsnormVectorised(in, norm.ldx, norm.ldy, norm.x, norm.y, norm.w);
    if (conv) f.conv = *conv;
    const bool bf16 = wdtype == DTYPE_BF16;
    if (conv) {
        if (bf16) launchChain<__nv_bfloat16, true, true>(ex, a, KSplit{}, f);
        else launchChain<__half, true, true>(ex, a, KSplit{}, f);
    } else {
        if (bf16) launchChain<__nv_bfloat16, true, false>(ex, a, KSplit{}, f);
        else launchChain<__half, true, false>(ex, a, KSplit{}, f);
    }
}

}  // namespace mamba::cuda
