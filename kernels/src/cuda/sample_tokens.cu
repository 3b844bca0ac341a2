// Token sampling on the GPU (Ops::sampleTokens): the rule and arithmetic of core/sampling.h, bit for bit the
// CPU backend's (cpu/cpu_sampler.cpp) and the Java TokenSampler's. No atomics; every sum is the fixed pairwise
// tree over token ids (a heap of kTile leaves per tile, then a heap over tiles); every double operation is an
// _rn intrinsic, so nvcc cannot contract it into an FMA. Seven launches, all graph-capturable, none synchronising (stages no row needs are skipped):
//
//   tileStats  (one block per tile and row) per tile: the lowest NaN/+Inf id, the argmax key, the finite count
//   tiles(0)   (one block per tile and row) each block reduces its row's tile results (block 0 writes them and
//                                           finishes greedy and rejected rows), then p = exp64((w − max)/T), stored
//   rowTopK    (one block per row)          the k-th largest w and the top-k set, sorted (no full sort)
//   tiles(1)   (rows with top-p)            tile sums of p masked by top-k → the tree for the norm
//   rowTopP    (one block per row)          the nucleus: c += p/norm over the sorted candidates, one thread
//   tiles(2)   (every sampling row)         tile sums of the final weights (top-k, top-p, min-p masks)
//   rowDraw    (one block per row)          u = nextDouble·total, descent of the tree → the token
//
// A candidate tier is every finite token with w >= max + T·ln(cut): a prefix of the order (w desc, id asc), so
// the result never depends on which tier decided it. Tiers of up to kSmemKeys keys sort in shared memory, larger
// ones in the row's global scratch (slower, only for nuclei spread over thousands of tokens).
#include "kernels.h"
#include "core/sampling.h"

#include <climits>
#include <cstdint>

namespace mamba::cuda {
namespace {

using namespace sampling;

constexpr int kThreads = kTile;  // one thread per leaf of a tile
constexpr int kSmemKeys = 2048;
constexpr int kMaxGridRows = 65535;
constexpr int32_t kPending = -4;

__constant__ double kCoeffDev[14] = {MAMBA_SAMPLING_EXP_COEFFS};

/** What tiles(0) and the later stages leave for each other (64 bytes reserved per row). */
struct RowStats {
    int64_t cut_key;  // tokens with a larger key are outside the nucleus (INT64_MAX: no cut)
    double norm;
    float max, kth;   // kth: -Inf when top-k is off
    int32_t best, finite, done;
    int32_t tier_n;   // top-k rows: rowTopK leaves the sorted top-k set (w >= kth) in the row's global keys,
                      // tier_n of them (rowTopP's nucleus always lies within that set)
};
static_assert(sizeof(RowStats) <= 64, "RowStats must fit its scratch slot");

/** One tile's part of the row facts (16 bytes per tile in the scratch). */
struct TileStats {
    int64_t best;    // the smallest packDescending key of a finite w (INT64_MAX: none)
    int32_t bad;     // the lowest NaN/+Inf id (INT_MAX: none)
    int32_t finite;
};

struct Plan {
    SampleArgs a;
    int64_t tiles, tiles_pow2, p_off, keys_off, tree_off, partials_off, stats_off, row_bytes;
};

struct Row {
    const float* x;
    RowParams prm;
    uint32_t* seen;
    double* p;
    int64_t* keys;
    double* tree;
    RowStats* st;
    TileStats* partials;
};

__device__ Row rowOf(const Plan& P, int64_t b) {
    char* base = static_cast<char*>(P.a.scratch) + b * P.row_bytes;
    Row r;
    r.x = P.a.logits + b * P.a.ld;
    r.prm = static_cast<const RowParams*>(P.a.params)[b];
    r.seen = P.a.seen + b * P.a.seen_words;
    r.p = reinterpret_cast<double*>(base + P.p_off);
    r.keys = reinterpret_cast<int64_t*>(base + P.keys_off);
    r.tree = reinterpret_cast<double*>(base + P.tree_off);
    r.st = reinterpret_cast<RowStats*>(base + P.stats_off);
    r.partials = reinterpret_cast<TileStats*>(base + P.partials_off);
    return r;
}

__device__ __forceinline__ float penalized(const Row& r, int i) {
    float v = r.x[i];
    const float pen = r.prm.penalty;
    if (pen != 1.0f && (r.seen[i >> 5] >> (i & 31) & 1u)) v = v < 0.0f ? __fmul_rn(v, pen) : __fdiv_rn(v, pen);
    return v;
}

__device__ double exp64d(double d) {
    if (!(d >= kExpMin)) return 0.0;
    const double kd = floor(__dadd_rn(__dmul_rn(d, kInvLn2), 0.5));
    const double r = __dsub_rn(__dsub_rn(d, __dmul_rn(kd, kLn2Hi)), __dmul_rn(kd, kLn2Lo));
    double s = kCoeffDev[13];
    for (int n = 12; n >= 0; --n) s = __dadd_rn(__dmul_rn(s, r), kCoeffDev[n]);
    return __dmul_rn(s, powerOfTwo(static_cast<int>(kd)));
}

__device__ __forceinline__ double weightOf(const Row& r, float w, float max) {
    return w == -INFINITY ? 0.0
                          : exp64d(__ddiv_rn(__dsub_rn(static_cast<double>(w), static_cast<double>(max)), r.prm.temperature));
}

__device__ __forceinline__ bool topKActive(const Row& r) { return r.prm.top_k > 0 && r.prm.top_k < r.st->finite; }

/** The final weight of token i (after tiles(0) and the two row stages wrote p, kth and cut_key). */
__device__ __forceinline__ double finalWeight(const Row& r, int i) {
    const float w = penalized(r, i);
    double v = r.p[i];
    if (w < r.st->kth || (r.st->cut_key != INT64_MAX && packDescending(w, i) > r.st->cut_key)) v = 0.0;
    if (r.prm.min_p > 0.0 && v < r.prm.min_p) v = 0.0;
    return v;
}

// ---- block-wide helpers (blockDim.x == kThreads); every thread gets the result ----

template <class T, class Op>
__device__ T blockReduce(T v, Op op) {
    __shared__ T part[32];
    __shared__ T result;
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        T w = part[threadIdx.x];  // kThreads / 32 == 32 partials
        for (int o = 16; o > 0; o >>= 1) w = op(w, __shfl_xor_sync(0xffffffffu, w, o));
        if (threadIdx.x == 0) result = w;
    }
    __syncthreads();
    const T out = result;
    __syncthreads();
    return out;
}

struct MinOp {
    template <class T>
    __device__ T operator()(T a, T b) const { return b < a ? b : a; }
};
struct SumOp {
    __device__ int operator()(int a, int b) const { return a + b; }
};

/** Exclusive prefix sum of one int per thread (integers: exact in any order). */
__device__ int blockExclusiveScan(int v, int& total) {
    __shared__ int warpSums[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int x = v;
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) warpSums[warp] = x;
    __syncthreads();
    if (warp == 0) {
        int s = warpSums[lane];
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o) s += y;
        }
        warpSums[lane] = s;  // inclusive over warps
    }
    __syncthreads();
    const int before = (warp > 0 ? warpSums[warp - 1] : 0) + x - v;
    total = warpSums[31];
    __syncthreads();
    return before;
}

/** Ascending bitonic sort of n2 (a power of two) keys. */
__device__ void bitonicSort(int64_t* a, int64_t n2) {
    for (int64_t k = 2; k <= n2; k <<= 1)
        for (int64_t j = k >> 1; j > 0; j >>= 1) {
            for (int64_t i = threadIdx.x; i < n2; i += blockDim.x) {
                const int64_t l = i ^ j;
                if (l > i) {
                    const int64_t x = a[i], y = a[l];
                    const bool up = (i & k) == 0;
                    if ((x > y) == up) {
                        a[i] = y;
                        a[l] = x;
                    }
                }
            }
            __syncthreads();
        }
}

/** The cut value of candidate tier `tier` (any value would do: a tier of the form w >= c is a prefix of the order). */
__device__ float tierCutValue(const Row& r, int tier) {
    return tier < 2 ? static_cast<float>(static_cast<double>(r.st->max) + r.prm.temperature * log(tierCut(tier)))
                    : -INFINITY;
}

/**
 * Gathers tier `tier`'s keys (finite tokens with w >= the tier's cut value; every finite token in tier 2) and
 * sorts them: into shared `smem` when they fit, else into the row's global keys. Returns where; n = the count.
 */
__device__ int64_t* gatherTier(const Row& r, int vocab, int tier, int64_t* smem, int& n) {
    const float cut = tierCutValue(r, tier);
    int mine = 0;
#pragma unroll 4
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float w = penalized(r, i);
        if (w > -INFINITY && w >= cut) ++mine;
    }
    int at = blockExclusiveScan(mine, n);
    int64_t* keys = n <= kSmemKeys ? smem : r.keys;
#pragma unroll 4
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float w = penalized(r, i);
        if (w > -INFINITY && w >= cut) keys[at++] = packDescending(w, i);
    }
    int64_t n2 = 1;
    while (n2 < n) n2 <<= 1;
    for (int64_t j = n + threadIdx.x; j < n2; j += blockDim.x) keys[j] = INT64_MAX;
    __syncthreads();
    bitonicSort(keys, n2);
    return keys;
}

/** Finite tokens below tier `tier`'s cut whose weight p is > 0 (is the tier missing any mass?). */
__device__ int positiveBelow(const Row& r, int vocab, int tier) {
    const float cut = tierCutValue(r, tier);
    int mine = 0;
#pragma unroll 4
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float w = penalized(r, i);
        if (w > -INFINITY && !(w >= cut) && r.p[i] > 0.0) ++mine;
    }
    return blockReduce(mine, SumOp());
}

/** Zero-pads the tile leaves of the row's tree to a power of two and builds the heap over them; returns the root. */
__device__ double buildTopHeap(double* tree, int64_t tiles, int64_t tp2) {
    for (int64_t t = tiles + threadIdx.x; t < tp2; t += blockDim.x) tree[tp2 + t] = 0.0;
    __syncthreads();
    for (int64_t m = tp2 / 2; m >= 1; m >>= 1) {
        for (int64_t k = m + threadIdx.x; k < 2 * m; k += blockDim.x) tree[k] = __dadd_rn(tree[2 * k], tree[2 * k + 1]);
        __syncthreads();
    }
    return tree[1];
}

// ---- the stages ----

__global__ void __launch_bounds__(kThreads) tileStatsKernel(Plan P) {
    pdlWait();
    const int64_t t = blockIdx.x;
    const int i = static_cast<int>(t * kTile + threadIdx.x);
    for (int64_t b = blockIdx.y; b < P.a.batch; b += gridDim.y) {
        const Row r = rowOf(P, b);
        int bad = INT_MAX, finite = 0;
        int64_t best = INT64_MAX;
        if (i < P.a.vocab) {
            const float x = r.x[i];
            if (isnan(x) || x == INFINITY) {
                bad = i;
            } else {
                const float w = penalized(r, i);
                if (w > -INFINITY) {
                    finite = 1;
                    best = packDescending(w, i);
                }
            }
        }
        bad = blockReduce(bad, MinOp());
        best = blockReduce(best, MinOp());
        finite = blockReduce(finite, SumOp());
        if (threadIdx.x == 0) r.partials[t] = TileStats{best, bad, finite};
    }
}

/**
 * The row facts from its tiles' parts (every block of tiles(0) reduces them itself: no launch in between). Block
 * (0, row) writes them, the ids of greedy and rejected rows and a greedy row's seen bit. Returns whether the row
 * samples on (then max is its largest w).
 */
__device__ bool rowFacts(const Plan& P, const Row& r, int64_t b, float& max) {
    int bad = INT_MAX, finite = 0;
    int64_t best = INT64_MAX;
    for (int64_t t = threadIdx.x; t < P.tiles; t += blockDim.x) {
        const TileStats s = r.partials[t];
        bad = min(bad, s.bad);
        best = min(best, s.best);
        finite += s.finite;
    }
    bad = blockReduce(bad, MinOp());
    best = blockReduce(best, MinOp());
    finite = blockReduce(finite, SumOp());
    const bool sampling = bad == INT_MAX && best != INT64_MAX && r.prm.temperature != 0.0;
    if (best != INT64_MAX) max = penalized(r, keyId(best));
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        RowStats s{INT64_MAX, 0.0, max, -INFINITY, -1, finite, sampling ? 0 : 1, 0};
        int32_t out = kPending, err = -1;
        if (bad != INT_MAX) {
            out = isnan(r.x[bad]) ? kErrNaN : kErrPosInf;
            err = bad;
        } else if (best == INT64_MAX) {
            out = kErrAllNegInf;
        } else {
            s.best = keyId(best);
            if (!sampling) {  // greedy
                out = s.best;
                r.seen[s.best >> 5] |= 1u << (s.best & 31);
            }
        }
        *r.st = s;
        P.a.out[b] = out;
        P.a.err_index[b] = err;
    }
    return sampling;
}

__global__ void __launch_bounds__(kThreads) tilesKernel(Plan P, int stage) {
    pdlWait();
    __shared__ double heap[2 * kTile];
    const int64_t t = blockIdx.x;
    const int i = static_cast<int>(t * kTile + threadIdx.x);
    for (int64_t b = blockIdx.y; b < P.a.batch; b += gridDim.y) {
        const Row r = rowOf(P, b);
        if (stage == 0) {
            float max = 0.0f;
            if (rowFacts(P, r, b, max) && i < P.a.vocab) r.p[i] = weightOf(r, penalized(r, i), max);
            __syncthreads();  // rowFacts' shared memory is reused by the next row
            continue;
        }
        if (r.st->done) continue;
        if (stage == 1 && !(r.prm.top_p < 1.0)) continue;
        double v = 0.0;
        if (i < P.a.vocab) {
            if (stage == 1) v = penalized(r, i) < r.st->kth ? 0.0 : r.p[i];
            else v = finalWeight(r, i);
        }
        heap[kTile + threadIdx.x] = v;
        __syncthreads();
        for (int m = kTile / 2; m >= 1; m >>= 1) {
            if (static_cast<int>(threadIdx.x) < m) {
                const int k = m + threadIdx.x;
                heap[k] = __dadd_rn(heap[2 * k], heap[2 * k + 1]);
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) r.tree[P.tiles_pow2 + t] = heap[1];
        __syncthreads();
    }
}

/** w's order as an unsigned key: larger w, larger key (-0 and +0 tie). */
__device__ __forceinline__ uint32_t orderedBits(float w) {
    const int32_t bits = __float_as_int(w == 0.0f ? 0.0f : w);
    return static_cast<uint32_t>(bits ^ ((bits >> 31) & 0x7fffffff)) ^ 0x80000000u;
}
__device__ __forceinline__ float fromOrderedBits(uint32_t u) {
    const int32_t asc = static_cast<int32_t>(u ^ 0x80000000u);
    return __int_as_float(asc ^ ((asc >> 31) & 0x7fffffff));
}

/**
 * The k-th largest finite w of the row (counting equal values), by radix selection over orderedBits: eight passes
 * of 4-bit digits, each counting, per digit, the tokens that match the digits chosen so far (integer counts
 * reduced across the block: exact in any order, no atomics). Reads the row 8 times and sorts nothing, however flat
 * the distribution (a sort of every candidate took ~1 ms per row on a near-uniform 50,280-token row).
 */
__device__ float kthLargest(const Row& r, int vocab, int k) {
    __shared__ int counts[kThreads / 32][16];
    __shared__ uint32_t chosen;
    __shared__ int left;
    uint32_t prefix = 0, mask = 0;
    if (threadIdx.x == 0) left = k;
    for (int shift = 28; shift >= 0; shift -= 4) {
        int c[16];
#pragma unroll
        for (int d = 0; d < 16; ++d) c[d] = 0;
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
            const float w = penalized(r, i);
            const uint32_t u = orderedBits(w);
            if (w > -INFINITY && (u & mask) == prefix) {
                const int digit = static_cast<int>(u >> shift) & 15;
#pragma unroll
                for (int d = 0; d < 16; ++d) c[d] += digit == d;
            }
        }
#pragma unroll
        for (int d = 0; d < 16; ++d) {
            for (int o = 16; o > 0; o >>= 1) c[d] += __shfl_xor_sync(0xffffffffu, c[d], o);
            if ((threadIdx.x & 31) == 0) counts[threadIdx.x >> 5][d] = c[d];
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int need = left, d = 15;
            for (;; --d) {  // the digit, from the largest, where the k-th largest lies (some digit always holds it)
                int n = 0;
                for (int w = 0; w < kThreads / 32; ++w) n += counts[w][d];
                if (n >= need || d == 0) break;
                need -= n;
            }
            left = need;
            chosen = static_cast<uint32_t>(d);
        }
        __syncthreads();
        prefix |= chosen << shift;
        mask |= 15u << shift;
        __syncthreads();  // `chosen` is rewritten in the next pass
    }
    return fromOrderedBits(prefix);
}

/**
 * Sorts the finite tokens with w >= `floor` into `keys` (n of them, padded with INT64_MAX to a power of two).
 * `keys` must hold the padded count.
 */
__device__ void sortAtLeast(const Row& r, int vocab, float floor, int64_t* keys, int n) {
    int mine = 0;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) mine += penalized(r, i) >= floor;
    int total;
    int at = blockExclusiveScan(mine, total);
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float w = penalized(r, i);
        if (w >= floor) keys[at++] = packDescending(w, i);
    }
    int64_t n2 = 1;
    while (n2 < n) n2 <<= 1;
    for (int64_t j = n + threadIdx.x; j < n2; j += blockDim.x) keys[j] = INT64_MAX;
    __syncthreads();
    bitonicSort(keys, n2);
}

/** Finite tokens with w >= floor (-Inf never counts). */
__device__ int countAtLeast(const Row& r, int vocab, float floor) {
    int mine = 0;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float w = penalized(r, i);
        mine += w > -INFINITY && w >= floor;
    }
    return blockReduce(mine, SumOp());
}

/**
 * The k-th largest w of a row and its top-k set (w >= kth), sorted into r.keys (tier_n keys). Fast path (k <=
 * kThreads): the k-th largest of the threads' maxima is a floor below which no top-k token lies (k distinct tokens
 * reach it), so only the tokens above that floor are sorted — three passes over the row. When that floor lets
 * too many tokens through (ties, tiny rows), radix selection finds the k-th value instead (kthLargest).
 */
__global__ void __launch_bounds__(kThreads) rowTopKKernel(Plan P) {
    pdlWait();
    __shared__ int64_t smem[kSmemKeys];
    for (int64_t b = blockIdx.x; b < P.a.batch; b += gridDim.x) {
        const Row r = rowOf(P, b);
        if (r.st->done || !topKActive(r)) continue;
        const int k = r.prm.top_k, vocab = P.a.vocab;
        float kth = -INFINITY;
        int n = 0;
        if (k <= kThreads) {
            float m = -INFINITY;
            for (int i = threadIdx.x; i < vocab; i += blockDim.x) m = fmaxf(m, penalized(r, i));
            smem[threadIdx.x] = packDescending(m, threadIdx.x);
            __syncthreads();
            bitonicSort(smem, kThreads);
            const float floor = keyValue(smem[k - 1]);
            __syncthreads();
            const int c = floor > -INFINITY ? countAtLeast(r, vocab, floor) : INT_MAX;
            if (c <= kSmemKeys) {
                sortAtLeast(r, vocab, floor, smem, c);
                kth = keyValue(smem[k - 1]);
                int mine = 0;
                for (int j = threadIdx.x; j < c; j += blockDim.x) mine += keyValue(smem[j]) >= kth;
                n = blockReduce(mine, SumOp());
            }
        }
        if (n == 0) {  // radix selection, then the set sorted where it fits
            kth = kthLargest(r, vocab, k);
            n = countAtLeast(r, vocab, kth);
            sortAtLeast(r, vocab, kth, n <= kSmemKeys ? smem : r.keys, n);
        }
        if (n <= kSmemKeys)
            for (int j = threadIdx.x; j < n; j += blockDim.x) r.keys[j] = smem[j];
        if (threadIdx.x == 0) {
            r.st->kth = kth;
            r.st->tier_n = n;
        }
        __syncthreads();
    }
}

__global__ void __launch_bounds__(kThreads) rowTopPKernel(Plan P) {
    pdlWait();
    __shared__ int64_t smem[kSmemKeys];
    __shared__ double q[kThreads];
    __shared__ int found;
    for (int64_t b = blockIdx.x; b < P.a.batch; b += gridDim.x) {
        const Row r = rowOf(P, b);
        if (r.st->done || !(r.prm.top_p < 1.0)) continue;
        const double norm = buildTopHeap(r.tree, P.tiles, P.tiles_pow2);
        const bool kActive = topKActive(r);
        const float kth = r.st->kth;
        for (int tier = 0; tier <= 2; ++tier) {
            // A top-k row's candidates are rowTopK's sorted top-k set: it decides.
            int n;
            int64_t* keys = kActive ? r.keys : gatherTier(r, P.a.vocab, tier, smem, n);
            if (kActive) n = r.st->tier_n;
            int mine = 0;
            for (int j = threadIdx.x; j < n; j += blockDim.x) mine += keyValue(keys[j]) >= kth;
            const int keep = kActive ? blockReduce(mine, SumOp()) : n;
            if (threadIdx.x == 0) found = -1;
            double c = 0.0;  // thread 0's running sum
            for (int j0 = 0; j0 < keep; j0 += kThreads) {
                const int j = j0 + threadIdx.x;
                if (j < keep) q[threadIdx.x] = __ddiv_rn(r.p[keyId(keys[j])], norm);
                __syncthreads();
                if (threadIdx.x == 0) {
                    const int m = min(kThreads, keep - j0);
                    for (int k = 0; k < m; ++k) {
                        c = __dadd_rn(c, q[k]);
                        if (c >= r.prm.top_p) {
                            found = j0 + k;
                            break;
                        }
                    }
                }
                __syncthreads();
                if (found >= 0) break;
            }
            // Not reached: the nucleus reaches below this tier if some weight lies there (rounding aside).
            if (found < 0 && !kActive && tier < 2 && positiveBelow(r, P.a.vocab, tier) > 0) continue;
            if (threadIdx.x == 0) r.st->cut_key = found >= 0 ? keys[found] : INT64_MAX;
            break;
        }
        __syncthreads();
    }
}

__global__ void __launch_bounds__(kThreads) rowDrawKernel(Plan P) {
    pdlWait();
    __shared__ double heap[2 * kTile];
    __shared__ double shared_u, shared_acc;
    __shared__ int64_t shared_tile;
    for (int64_t b = blockIdx.x; b < P.a.batch; b += gridDim.x) {
        const Row r = rowOf(P, b);
        if (r.st->done) continue;
        const double total = buildTopHeap(r.tree, P.tiles, P.tiles_pow2);
        if (threadIdx.x == 0) {
            uint64_t state = P.a.rng[b];
            const double u = __dmul_rn(nextDouble(state), total);
            P.a.rng[b] = state;
            double acc = 0.0;
            int64_t k = 1;
            while (k < P.tiles_pow2) {
                const double left = r.tree[2 * k], right = r.tree[2 * k + 1];
                if (right > 0.0 && (left == 0.0 || u >= __dadd_rn(acc, left))) {
                    acc = __dadd_rn(acc, left);
                    k = 2 * k + 1;
                } else {
                    k = 2 * k;
                }
            }
            shared_u = u;
            shared_acc = acc;
            shared_tile = k - P.tiles_pow2;
        }
        __syncthreads();
        const int64_t t = shared_tile;
        const int i = static_cast<int>(t * kTile + threadIdx.x);
        heap[kTile + threadIdx.x] = i < P.a.vocab ? finalWeight(r, i) : 0.0;
        __syncthreads();
        for (int m = kTile / 2; m >= 1; m >>= 1) {
            if (static_cast<int>(threadIdx.x) < m) {
                const int k = m + threadIdx.x;
                heap[k] = __dadd_rn(heap[2 * k], heap[2 * k + 1]);
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            const double u = shared_u;
            double acc = shared_acc;
            int k = 1;
            while (k < kTile) {
                const double left = heap[2 * k], right = heap[2 * k + 1];
                if (right > 0.0 && (left == 0.0 || u >= __dadd_rn(acc, left))) {
                    acc = __dadd_rn(acc, left);
                    k = 2 * k + 1;
                } else {
                    k = 2 * k;
                }
            }
            const int id = static_cast<int>(t * kTile + (k - kTile));
            P.a.out[b] = id;
            r.seen[id >> 5] |= 1u << (id & 31);
        }
        __syncthreads();
    }
}

}  // namespace

void sampleTokens(const Exec& ex, const SampleArgs& a) {
    if (a.batch <= 0) return;
    const ScratchLayout L(a.vocab);
    const Plan P{a, L.tiles, L.tiles_pow2, L.p_offset, L.keys_offset, L.tree_offset, L.partials_offset, L.stats_offset,
                 L.bytes};
    const unsigned rows = static_cast<unsigned>(a.batch < kMaxGridRows ? a.batch : kMaxGridRows);
    const dim3 tileGrid(static_cast<unsigned>(L.tiles), rows);
    // Stages no row needs are not launched (a greedy batch runs two kernels); every launched stage skips the rows
    // it has nothing to do for.
    launch("sampleTokens.tileStats", ex, tileStatsKernel, tileGrid, dim3(kThreads), 0, P);
    launch("sampleTokens.tiles", ex, tilesKernel, tileGrid, dim3(kThreads), 0, P, 0);
    if (!(a.needs & kNeedsSampling)) return;
    if (a.needs & kNeedsTopK) launch("sampleTokens.rowTopK", ex, rowTopKKernel, dim3(rows), dim3(kThreads), 0, P);
    if (a.needs & kNeedsTopP) {
        launch("sampleTokens.tiles", ex, tilesKernel, tileGrid, dim3(kThreads), 0, P, 1);
        launch("sampleTokens.rowTopP", ex, rowTopPKernel, dim3(rows), dim3(kThreads), 0, P);
    }
    launch("sampleTokens.tiles", ex, tilesKernel, tileGrid, dim3(kThreads), 0, P, 2);
    launch("sampleTokens.rowDraw", ex, rowDrawKernel, dim3(rows), dim3(kThreads), 0, P);
}

}  // namespace mamba::cuda
