// Small-batch linear y = x·Wᵀ for rows ≤ kGemvMaxRows: a matrix-vector product bound by reading W once
// from HBM. One kernel template over the weight storage type (float / bf16 / half):
//  - G threads cooperate on one output (G = 8 … 256, chosen from the shape so that every SM has enough
//    loads in flight), each streaming 16-byte vectors of the weight row with evict-first loads through a
//    ring of 8 vectors in flight; with several activation rows a lane streams 2 or 4 weight rows side by
//    side, so that each activation vector read from L1 serves all of them;
//  - for batched rows and for one-row products of up to 3 waves, the grid holds at most the blocks the GPU
//    keeps resident, and every group computes the same number of outputs one after another, the ring running
//    on into the next output's row while this one is reduced: no tail wave, no pipeline refill between
//    outputs (see launchOne for when one output per group is faster);
//  - the R ≤ 8 activation rows are read from L1/L2 (they are tiny) and every weight vector is used for
//    all of them; f32 accumulation, warp-shuffle reduction, then shared memory across warps (G > 32);
//  - the first weight vectors are loaded before pdlWait(): weights never depend on the previous
//    kernel, so with programmatic dependent launch their latency hides under the previous kernel's tail.
#include "gemv.h"

#include "conv_epilogue.cuh"
#include "../cp_async.cuh"
#include "../lane_load.cuh"
#include "../lowp.cuh"
#include "mamba/mamba.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>

namespace mamba::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kBalancedMaxWaves = 3;  // one-row products up to this many waves take the balanced schedule

struct GemvArgs {
    const float* x;
    int64_t ldx;
    int rows;
    const void* w;
    int out, in;
    const float* bias;
    float* y;
    int64_t ldy;
    float beta;
    NormPrologue norm;  // NORM variant only
    int per_group;      // outputs each group computes: o = group + j·(groups in the grid), j < per_group
};

/**
 * The conv epilogue's inputs for output channel o — taps 0–3, history 0–2, bias — copied by lanes 0 … 7 of the output's
 * group into the group's 8 floats of shared memory with cp.async when the output's product starts: they arrive while
 * its weights stream and hold no register (the gemv kernels sit at their register cap; a window kept in registers
 * spilled).
 */
__device__ __forceinline__ void loadConvInputs(const ConvEpilogue& c, int o, int lane, float* slot) {
    if (lane < 8) loadConvSlotEntry(c, o, lane, slot);
}

/**
 * u[o] = SiLU(conv of the history and x), the history moved on by one (convSilu's stepwise arithmetic). All lanes of
 * the group call it; its lane 0 stores.
 */
__device__ __forceinline__ void convEpilogue(const ConvEpilogue& c, int o, int lane, float* slot, float x) {
    cpAsyncWaitAll();
    __syncwarp();
    if (lane == 0 && o < c.channels) convSlotStep(c, o, slot, x);
}

// A 16-byte chunk of weights (VEC) or a single element, and its conversion to f32 (lowp.cuh).
template <typename W, bool VEC> struct Chunk;
template <typename W> struct Chunk<W, true> {
    static constexpr int kElems = kChunkElems<W>;
    int4 raw;
    __device__ __forceinline__ void load(const W* p) { raw = __ldcs(reinterpret_cast<const int4*>(p)); }
    __device__ __forceinline__ void unpack(float (&f)[kElems]) const { unpack16<W>(raw, f); }
};
template <typename W> struct Chunk<W, false> {
    static constexpr int kElems = 1;
    W raw;
    __device__ __forceinline__ void load(const W* p) { raw = *p; }
    __device__ __forceinline__ void unpack(float (&f)[1]) const { f[0] = toFloat(raw); }
};

template <int N, bool VEC>
__device__ __forceinline__ void loadX(const float* p, float (&f)[N]) {
    loadFloats<N, VEC>(p, f, N);
}

/**
 * The rmsnorm prologue: each block normalises the (≤ R) input rows into shared memory, xs[r·K + k] =
 * w[k]·(x[r, k]·scale_r); block 0 also writes them to norm.y (the rmsnorm's output). Sums of squares use
 * the same per-thread strides and reduction tree whatever the row count, like the main loop.
 */
template <int R>
__device__ __forceinline__ void normPrologue(const GemvArgs& a, float* xs) {
    const NormPrologue& n = a.norm;
    const int K = a.in;
    float ss[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        ss[r] = 0.f;
        if (r < a.rows)
            for (int k = threadIdx.x; k < K; k += kThreads) {
                const float v = n.x[r * n.ldx + k];
                ss[r] = fmaf(v, v, ss[r]);
            }
    }
    __shared__ float part[kThreads / 32][R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) ss[r] += __shfl_xor_sync(0xffffffffu, ss[r], off);
        if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32][r] = ss[r];
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < R; ++r) {
        if (r < a.rows) {
            float total = part[0][r];
#pragma unroll
            for (int j = 1; j < kThreads / 32; ++j) total += part[j][r];
            const float scale = 1.0f / sqrtf(total / static_cast<float>(K) + n.eps);
            for (int k = threadIdx.x; k < K; k += kThreads) {
                const float v = n.w[k] * (n.x[r * n.ldx + k] * scale);
                xs[r * K + k] = v;
                if (blockIdx.x == 0) n.y[r * n.ldy + k] = v;
            }
        }
    }
    __syncthreads();
}

/**
 * Weight rows a lane streams side by side: with R activation rows every x chunk read from L1 serves this many
 * weight chunks, so that L1 traffic (R × 32 bytes of f32 x per 16-byte bf16 chunk) does not bound batched decode.
 * The ring depth shrinks with it, keeping 8 weight chunks in flight per lane.
 */
template <int R> constexpr int kRowsPerLane = R == 1 ? 1 : R == 2 ? 2 : 4;
template <int R> constexpr int kRingDepth = 8 / kRowsPerLane<R>;

/** y[r, o] = v (+ bias) (+ beta·y); returns what it stored. */
__device__ __forceinline__ float storeOutput(const GemvArgs& a, int r, int o, float v) {
    float* yp = a.y + r * a.ldy + o;
    if (a.bias) v += a.bias[o];
    if (a.beta != 0.f) v += a.beta * *yp;
    *yp = v;
    return v;
}

/**
 * Sums each of the NO outputs' G lane partials (a lane order fixed by G alone) and writes them: y = acc (+ bias)
 * (+ beta·y). `red` is this tuple's half of a double buffer (parity of its index), so that the next tuple's
 * writes never race with this one's reads.
 */
template <int R, int G, int NO, bool CONV>
__device__ __forceinline__ void reduceAndStore(const GemvArgs& a, float (&acc)[NO][R], int lane, int grp, int o0,
                                               float (*red)[NO * R], const ConvEpilogue& conv, float* conv_slot) {
    constexpr int kWarpLanes = G < 32 ? G : 32;
#pragma unroll
    for (int t = 0; t < NO; ++t)
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int off = kWarpLanes / 2; off > 0; off >>= 1) acc[t][r] += __shfl_xor_sync(0xffffffffu, acc[t][r], off);
    if constexpr (G > 32) {
        const int warp = threadIdx.x / 32;
        if ((threadIdx.x & 31) == 0)
#pragma unroll
            for (int t = 0; t < NO; ++t)
#pragma unroll
                for (int r = 0; r < R; ++r) red[warp][t * R + r] = acc[t][r];
        __syncthreads();
        if (lane == 0) {
            constexpr int kWarpsPerGroup = G / 32;
            const int w0 = grp * kWarpsPerGroup;
#pragma unroll
            for (int t = 0; t < NO; ++t)
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    float s = red[w0][t * R + r];
#pragma unroll
                    for (int j = 1; j < kWarpsPerGroup; ++j) s += red[w0 + j][t * R + r];
                    acc[t][r] = s;
                }
        }
    }
    if constexpr (CONV) {
        // one row, one output per group (gemvBody's static_assert); every lane joins the epilogue's wait for its inputs
        const float v = lane == 0 && o0 < a.out ? storeOutput(a, 0, o0, acc[0][0]) : 0.f;
        convEpilogue(conv, o0, lane, conv_slot, v);
        __syncwarp();  // the slot is refilled for the next output only after lane 0 has read it
        return;
    }
    if (lane == 0) {
#pragma unroll
        for (int t = 0; t < NO; ++t) {
            const int o = o0 + t;
            if (o >= a.out) continue;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                if (r < a.rows) storeOutput(a, r, o, acc[t][r]);
            }
        }
    }
}

/**
 * Groups walk "tuples" of NO consecutive outputs: tuple q = group + j·groups for j < per_group, outputs
 * q·NO … q·NO + NO − 1. Each lane keeps the same k positions for every output, in ascending order, so an
 * output's arithmetic depends on G alone — not on R, NO, the grid or the schedule.
 */
template <typename W, int R, int G, bool VEC, bool NORM, bool CONV>
__device__ __forceinline__ void gemvBody(const GemvArgs& a, const ConvEpilogue& conv) {
    static_assert(!CONV || (R == 1 && NORM), "the conv epilogue is decode's in_proj: one row, rmsnorm fused");
    using C = Chunk<W, VEC>;
    constexpr int V = C::kElems;
    constexpr int NO = kRowsPerLane<R>;
    constexpr int D = kRingDepth<R>;
    constexpr int kGroupsPerBlock = kThreads / G;
    const int lane = threadIdx.x % G;
    const int grp = threadIdx.x / G;
    const int group = blockIdx.x * kGroupsPerBlock + grp;
    const int groups = gridDim.x * kGroupsPerBlock;
    const int K = a.in;
    const int stride = G * V;
    const int k0 = lane * V;
    const int steps = (K + stride - 1) / stride;  // weight chunks per lane and output (lanes past K skip)
    const int total = steps * a.per_group;        // the same for every group: control flow stays uniform
    const W* const w = static_cast<const W*>(a.w);
    // Outputs past the end (the last tuples of a grid that does not divide them) re-read the last row without
    // storing it, so that idle lanes still join the shuffles and barriers.
    auto rowOf = [&](int j, int t) {
        const int o = (group + j * groups) * NO + t;
        return w + static_cast<int64_t>(o < a.out ? o : a.out - 1) * K;
    };

    // The load cursor (tuple j, step s) runs D chunks ahead of the use cursor, across tuples.
    int load_s = 0, load_j = 0;
    const W* load_row[NO];
#pragma unroll
    for (int t = 0; t < NO; ++t) load_row[t] = rowOf(0, t);
    auto loadNext = [&](C (&slot)[NO]) {
        const int k = k0 + load_s * stride;
        if (k < K)
#pragma unroll
            for (int t = 0; t < NO; ++t) slot[t].load(load_row[t] + k);
        if (++load_s == steps) {
            load_s = 0;
            ++load_j;
#pragma unroll
            for (int t = 0; t < NO; ++t) load_row[t] = rowOf(load_j, t);
        }
    };
    C ring[D][NO];
#pragma unroll
    for (int u = 0; u < D; ++u)
        if (u < total) loadNext(ring[u]);
    pdlWait();  // weights never depend on the previous kernel: only x and y wait
    pdlLaunchDependents();

    extern __shared__ float4 smem4[];
    float* xs = reinterpret_cast<float*>(smem4);
    if constexpr (NORM) normPrologue<R>(a, xs);
    const float* xbase = NORM ? xs : a.x;
    const int64_t xld = NORM ? K : a.ldx;
    __shared__ float red[2][kThreads / 32][NO * R];  // cross-warp partials (G > 32), double-buffered by tuple parity

    float acc[NO][R];
#pragma unroll
    for (int t = 0; t < NO; ++t)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[t][r] = 0.f;
    int use_s = 0, use_j = 0;
    float* conv_slot = nullptr;  // CONV: the group's 8 floats of shared memory for the current output's conv inputs
    if constexpr (CONV) {
        __shared__ float conv_slots[kThreads / 8][8];
        conv_slot = conv_slots[grp];
        loadConvInputs(conv, group * NO, lane, conv_slot);
    }
    for (int f = 0; f < total; f += D) {
#pragma unroll
        for (int u = 0; u < D; ++u) {
            if (f + u < total) {
                C cur[NO];
#pragma unroll
                for (int t = 0; t < NO; ++t) cur[t] = ring[u][t];
                if (f + u + D < total) loadNext(ring[u]);
                const int k = k0 + use_s * stride;
                if (k < K) {
                    float wf[NO][V];
#pragma unroll
                    for (int t = 0; t < NO; ++t) cur[t].unpack(wf[t]);
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        if (r < a.rows) {
                            float xf[V];
                            loadX<V, VEC>(xbase + r * xld + k, xf);  // once for all NO weight rows
#pragma unroll
                            for (int t = 0; t < NO; ++t)
#pragma unroll
                                for (int v = 0; v < V; ++v) acc[t][r] = fmaf(wf[t][v], xf[v], acc[t][r]);
                        }
                    }
                }
                if (++use_s == steps) {
                    reduceAndStore<R, G, NO, CONV>(a, acc, lane, grp, (group + use_j * groups) * NO, red[use_j & 1], conv, conv_slot);
#pragma unroll
                    for (int t = 0; t < NO; ++t)
#pragma unroll
                        for (int r = 0; r < R; ++r) acc[t][r] = 0.f;
                    use_s = 0;
                    ++use_j;
                    if constexpr (CONV) {
                        if (use_j < a.per_group) loadConvInputs(conv, (group + use_j * groups) * NO, lane, conv_slot);
                    }
                }
            }
        }
    }
}

template <typename W, int R, int G, bool VEC, bool NORM>
__global__ void __launch_bounds__(kThreads, R == 1 ? 4 : R <= 4 ? 2 : 1) gemvKernel(GemvArgs a) {
    gemvBody<W, R, G, VEC, NORM, false>(a, ConvEpilogue{});
}

/** The fused rmsnorm + one-row gemv with decode's conv step in its epilogue (ConvEpilogue). */
template <typename W, int G>
__global__ void __launch_bounds__(kThreads, 4) gemvConvKernel(GemvArgs a, ConvEpilogue conv) {
    gemvBody<W, 1, G, true, true, true>(a, conv);
}

/**
 * Blocks of `kernel` with `smem` bytes of dynamic shared memory that one SM keeps resident (asked once per
 * device, kernel and size: the answer is fixed, and the query must not cost every decode launch).
 */
template <typename Kernel>
int residentBlocksPerSm(Kernel kernel, size_t smem) {
    static std::mutex mu;
    static std::map<std::tuple<int, const void*, size_t>, int> known;
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice (gemv)");
    const auto key = std::make_tuple(device, reinterpret_cast<const void*>(kernel), smem);
    std::lock_guard<std::mutex> lock(mu);
    auto it = known.find(key);
    if (it != known.end()) return it->second;
    int blocks = 0;
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, smem),
          "cudaOccupancyMaxActiveBlocksPerMultiprocessor (gemv)");
    blocks = std::max(blocks, 1);
    known.emplace(key, blocks);
    return blocks;
}

template <typename Kernel, typename... Extra>
void launchOne(const Exec& ex, Kernel kernel, const GemvArgs& args, int g, size_t smem, int rows_per_lane,
               const Extra&... extra) {
    // Above 48 KiB a kernel must opt in to more dynamic shared memory. The attribute belongs to the device
    // context, which every backend on the device shares, so it is set on each such launch (a cheap host
    // call, legal during graph capture) instead of being remembered in a process-wide flag, and always to
    // the same value, so that concurrent setters on other threads cannot lower it under a launch.
    if (smem > 48 * 1024) {
        const size_t most = std::min<size_t>(static_cast<size_t>(kNormFuseMaxWidth) * kGemvMaxRows * sizeof(float),
                                             static_cast<size_t>(ex.smem_optin));
        if (smem > most)
            throw std::logic_error("gemv: the rmsnorm prologue needs more shared memory than the device has");
        check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(most)),
              "cudaFuncSetAttribute (gemv shared memory)");
    }
    // The schedule (gemv_bench on the H200, docs/cuda-backend.md): with several activation rows, and for products
    // of at most kBalancedMaxWaves waves, every group takes ceil(tuples / resident groups) tuples and the grid
    // shrinks to the groups that this many tuples each need — one wave, equal work, no tail wave. One-row
    // products of more waves (2.8b in_proj, LM heads) stream faster as a grid of one tuple per group, whose
    // blocks the scheduler staggers across four resident blocks per SM. Either way an output's bits are the same.
    const int per_block = kThreads / g;
    const int64_t tuples = (args.out + rows_per_lane - 1) / rows_per_lane;
    const int64_t one_per_group_blocks = (tuples + per_block - 1) / per_block;
    int64_t per_group = 1;
    if (!ex.gemv_one_output_per_group) {
        const int64_t resident_blocks = static_cast<int64_t>(residentBlocksPerSm(kernel, smem)) * ex.sms;
        if (rows_per_lane > 1 || one_per_group_blocks <= kBalancedMaxWaves * resident_blocks) {
            const int64_t resident = resident_blocks * per_block;
            per_group = (tuples + resident - 1) / resident;
        }
    }
    GemvArgs a = args;
    a.per_group = static_cast<int>(per_group);
    launch(smem ? "gemv (rmsnorm fused)" : "gemv", ex, kernel, dim3(blocksFor(tuples, per_block * a.per_group)),
           dim3(kThreads), smem, a, extra...);
}

template <typename W, int R, bool VEC, bool NORM>
void launchG(const Exec& ex, const GemvArgs& a, int G) {
    const size_t smem = NORM ? static_cast<size_t>(a.rows) * a.in * sizeof(float) : 0;
    if constexpr (!VEC) {
        launchOne(ex, gemvKernel<W, R, 32, false, false>, a, 32, 0, kRowsPerLane<R>);
    } else {
        switch (G) {
            case 8: launchOne(ex, gemvKernel<W, R, 8, true, NORM>, a, 8, smem, kRowsPerLane<R>); break;
            case 16: launchOne(ex, gemvKernel<W, R, 16, true, NORM>, a, 16, smem, kRowsPerLane<R>); break;
            case 32: launchOne(ex, gemvKernel<W, R, 32, true, NORM>, a, 32, smem, kRowsPerLane<R>); break;
            case 64: launchOne(ex, gemvKernel<W, R, 64, true, NORM>, a, 64, smem, kRowsPerLane<R>); break;
            case 128: launchOne(ex, gemvKernel<W, R, 128, true, NORM>, a, 128, smem, kRowsPerLane<R>); break;
            default: launchOne(ex, gemvKernel<W, R, 256, true, NORM>, a, 256, smem, kRowsPerLane<R>); break;
        }
    }
}

template <typename W, int R, bool VEC>
void launchN(const Exec& ex, const GemvArgs& a, int G, bool norm, const ConvEpilogue* conv) {
    if constexpr (VEC) {
        if (norm) {
            // the prologue caps G at 32 (see gemv()), so only those instantiations exist
            if constexpr (R == 1) {
                if (conv) {
                    const size_t smem = a.in * sizeof(float);
                    switch (G) {
                        case 8: launchOne(ex, gemvConvKernel<W, 8>, a, 8, smem, 1, *conv); break;
                        case 16: launchOne(ex, gemvConvKernel<W, 16>, a, 16, smem, 1, *conv); break;
                        default: launchOne(ex, gemvConvKernel<W, 32>, a, 32, smem, 1, *conv); break;
                    }
                    return;
                }
            }
            switch (G) {
                case 8: launchOne(ex, gemvKernel<W, R, 8, true, true>, a, 8, a.rows * a.in * sizeof(float), kRowsPerLane<R>); break;
                case 16: launchOne(ex, gemvKernel<W, R, 16, true, true>, a, 16, a.rows * a.in * sizeof(float), kRowsPerLane<R>); break;
                default: launchOne(ex, gemvKernel<W, R, 32, true, true>, a, 32, a.rows * a.in * sizeof(float), kRowsPerLane<R>); break;
            }
            return;
        }
    }
    launchG<W, R, VEC, false>(ex, a, G);
}

template <typename W, bool VEC>
void launchR(const Exec& ex, const GemvArgs& a, int G, bool norm, const ConvEpilogue* conv) {
    if (a.rows <= 1) launchN<W, 1, VEC>(ex, a, G, norm, conv);
    else if (a.rows <= 2) launchN<W, 2, VEC>(ex, a, G, norm, conv);
    else if (a.rows <= 4) launchN<W, 4, VEC>(ex, a, G, norm, conv);
    else launchN<W, 8, VEC>(ex, a, G, norm, conv);
}

template <typename W>
void launchW(const Exec& ex, const GemvArgs& a, bool vec, int G, bool norm, const ConvEpilogue* conv) {
    if (vec) launchR<W, true>(ex, a, G, norm, conv);
    else launchR<W, false>(ex, a, G, norm, conv);
}

bool isLowp(int wdtype) { return wdtype == DTYPE_BF16 || wdtype == DTYPE_F16; }

/** Waves of a gemv of `out` outputs with group size G (4 blocks of kThreads per SM). */
double wavesOf(const Exec& ex, int out, int G) { return static_cast<double>(out) * G / kThreads / (4.0 * ex.sms); }

}  // namespace

int normGroupSize(const Exec& ex, int wdtype, int out, int in) {
    int G = gemvGroupSize(ex, wdtype, out, in, true);
    // With the prologue every block normalises the input again: at least 8 outputs per block keep that
    // re-read (from L2) small next to the weights; between ~1.2 and ~2.2 waves, half the group size
    // makes it one wave instead.
    if (G > 32) G = 32;
    const double waves = wavesOf(ex, out, G);
    if (G >= 16 && waves >= 1.2 && waves <= 2.2) G /= 2;
    return G;
}

bool gemvNormFusionPays(const Exec& ex, int rows, int wdtype, int out, int in) {
    // One row at more than 2.2 waves of the prologue's capped group size and at most kBalancedMaxWaves (the balanced
    // schedule): 2.8b's in_proj (2.4 waves). There the plain gemv, with its larger group, plus a separate rmsnorm
    // beat the fused kernel (H200, 2026-12-02, docs/benchmarks.md: B = 1 decode 4,260 -> 3,882 us F32, 2,713 -> 2,590
    // BF16); every other size measured was faster fused (130m / 370m / 1.4b: 3-15%).
    if (rows != 1) return true;
    const double waves = wavesOf(ex, out, normGroupSize(ex, wdtype, out, in));
    return waves <= 2.2 || waves > kBalancedMaxWaves;
}

int gemvGroupSize(const Exec& ex, int wdtype, int out, int in, bool vectorised) {
    if (!vectorised) return 32;
    if (ex.gemv_group > 0) return ex.gemv_group;
    const int V = isLowp(wdtype) ? 8 : 4;
    const int vecs = (in + V - 1) / V;
    const int64_t min_threads = static_cast<int64_t>(ex.sms) * 1024;  // half the resident threads of the GPU
    int G = 8;
    while (G < 256 && G < vecs && (vecs > 8 * G || static_cast<int64_t>(out) * G < min_threads)) G *= 2;
    return G;
}

bool gemvNormFusable(const Exec& ex, int rows, const void* w, int wdtype, int in) {
    const int V = isLowp(wdtype) ? 8 : 4;
    const size_t smem = static_cast<size_t>(rows) * static_cast<size_t>(in) * sizeof(float);
    return rows >= 1 && rows <= kGemvMaxRows && in % V == 0 && aligned16(w) && in <= kNormFuseMaxWidth &&
           (smem <= 48 * 1024 || smem <= static_cast<size_t>(ex.smem_optin));
}

void gemv(const Exec& ex, const float* x, int64_t ldx, int rows, const void* w, int wdtype, int out, int in,
          const float* bias, float* y, int64_t ldy, float beta, const NormPrologue* norm, const ConvEpilogue* conv) {
    if (rows <= 0 || out <= 0) return;
    if (rows > kGemvMaxRows) throw std::logic_error("gemv: rows > kGemvMaxRows");
    const int V = isLowp(wdtype) ? 8 : 4;
    // The vector path needs whole 16-byte weight chunks per row and 16-byte aligned activation rows. The
    // choice depends on the shape and layout only, never on `rows`, so batch rows stay bit-identical.
    const bool vec = norm ? gemvNormFusable(ex, rows, w, wdtype, in)
                          : in % V == 0 && aligned16(w) && aligned16(x) && ldx % 4 == 0;
    if (norm && !vec) throw std::logic_error("gemv: rmsnorm prologue on a weight that gemvNormFusable rejects");
    if (conv && (conv->width < 1 || conv->width > kConvEpilogueMaxWidth || conv->channels > out || rows != 1 || !norm))
        throw std::logic_error("gemv: a conv epilogue needs one row, the rmsnorm prologue, a width in [1, 4] and no more "
                               "channels than outputs");
    const GemvArgs a{x, ldx, rows, w, out, in, bias, y, ldy, beta, norm ? *norm : NormPrologue{}, 1};
    const int G = norm ? normGroupSize(ex, wdtype, out, in) : gemvGroupSize(ex, wdtype, out, in, vec);
    if (wdtype == DTYPE_BF16) launchW<__nv_bfloat16>(ex, a, vec, G, norm != nullptr, conv);
    else if (wdtype == DTYPE_F16) launchW<__half>(ex, a, vec, G, norm != nullptr, conv);
    else launchW<float>(ex, a, vec, G, norm != nullptr, conv);
}

}  // namespace mamba::cuda
