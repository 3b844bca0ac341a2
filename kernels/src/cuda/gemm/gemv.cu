// Small-batch linear y = x·Wᵀ for rows ≤ kGemvMaxRows: a matrix-vector product bound by reading W once
// from HBM. One kernel template over the weight storage type (float / bf16 / half):
//  - G threads cooperate on one output (G = 8 … 256, chosen from the shape so that every SM has enough
//    loads in flight), each streaming 16-byte vectors of the weight row with evict-first loads, four
//    vectors deep and double-buffered;
//  - the R ≤ 8 activation rows are read from L1/L2 (they are tiny) and every weight vector is used for
//    all of them; f32 accumulation, warp-shuffle reduction, then shared memory across warps (G > 32);
//  - the first weight vectors are loaded before pdlWait(): weights never depend on the previous
//    kernel, so with programmatic dependent launch their latency hides under the previous kernel's tail.
#include "gemv.h"

#include "../lowp.cuh"
#include "mamba/mamba.h"

#include <algorithm>
#include <stdexcept>

namespace mamba::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kDepth = 4;  // weight vectors in flight per thread (per buffer)

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
};

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
    if constexpr (VEC) {
#pragma unroll
        for (int i = 0; i < N; i += 4) {
            const float4 v = *reinterpret_cast<const float4*>(p + i);
            f[i] = v.x;
            f[i + 1] = v.y;
            f[i + 2] = v.z;
            f[i + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i) f[i] = p[i];
    }
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

template <typename W, int R, int G, bool VEC, bool NORM>
__global__ void __launch_bounds__(kThreads, R <= 2 ? 4 : 1) gemvKernel(GemvArgs a) {
    using C = Chunk<W, VEC>;
    constexpr int V = C::kElems;
    constexpr int kOutPerBlock = kThreads / G;
    const int lane = threadIdx.x % G;
    const int grp = threadIdx.x / G;
    const int o_raw = blockIdx.x * kOutPerBlock + grp;
    const bool active = o_raw < a.out;
    const int o = active ? o_raw : a.out - 1;  // idle groups still join the shuffles
    const W* wrow = static_cast<const W*>(a.w) + static_cast<int64_t>(o) * a.in;
    const int K = a.in;
    const int stride = G * V;
    const int k0 = lane * V;

    C buf[kDepth];
#pragma unroll
    for (int u = 0; u < kDepth; ++u) {
        const int k = k0 + u * stride;
        if (k < K) buf[u].load(wrow + k);
    }
    pdlWait();
    pdlLaunchDependents();

    extern __shared__ float4 smem4[];
    float* xs = reinterpret_cast<float*>(smem4);
    if constexpr (NORM) normPrologue<R>(a, xs);
    const float* xbase = NORM ? xs : a.x;
    const int64_t xld = NORM ? K : a.ldx;

    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.f;

    for (int base = k0; base < K; base += kDepth * stride) {
        C cur[kDepth];
#pragma unroll
        for (int u = 0; u < kDepth; ++u) cur[u] = buf[u];
#pragma unroll
        for (int u = 0; u < kDepth; ++u) {  // next batch in flight while this one is used
            const int k = base + (kDepth + u) * stride;
            if (k < K) buf[u].load(wrow + k);
        }
#pragma unroll
        for (int u = 0; u < kDepth; ++u) {
            const int k = base + u * stride;
            if (k < K) {
                float wf[V];
                cur[u].unpack(wf);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    if (r < a.rows) {
                        float xf[V];
                        loadX<V, VEC>(xbase + r * xld + k, xf);
#pragma unroll
                        for (int v = 0; v < V; ++v) acc[r] = fmaf(wf[v], xf[v], acc[r]);
                    }
                }
            }
        }
    }

    constexpr int kWarpLanes = G < 32 ? G : 32;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int off = kWarpLanes / 2; off > 0; off >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
    if constexpr (G > 32) {
        __shared__ float red[kThreads / 32][R];
        const int warp = threadIdx.x / 32;
        if ((threadIdx.x & 31) == 0)
#pragma unroll
            for (int r = 0; r < R; ++r) red[warp][r] = acc[r];
        __syncthreads();
        if (lane == 0) {
            constexpr int kWarpsPerGroup = G / 32;
            const int w0 = grp * kWarpsPerGroup;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                float s = red[w0][r];
#pragma unroll
                for (int j = 1; j < kWarpsPerGroup; ++j) s += red[w0 + j][r];
                acc[r] = s;
            }
        }
    }
    if (active && lane == 0) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (r < a.rows) {
                float* yp = a.y + r * a.ldy + o;
                float v = acc[r];
                if (a.bias) v += a.bias[o];
                if (a.beta != 0.f) v += a.beta * *yp;
                *yp = v;
            }
        }
    }
}

template <typename Kernel>
void launchOne(const Exec& ex, Kernel kernel, const GemvArgs& a, int g, size_t smem) {
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
    launch(smem ? "gemv (rmsnorm fused)" : "gemv", ex, kernel, dim3(blocksFor(a.out, kThreads / g)), dim3(kThreads),
           smem, a);
}

template <typename W, int R, bool VEC, bool NORM>
void launchG(const Exec& ex, const GemvArgs& a, int G) {
    const size_t smem = NORM ? static_cast<size_t>(a.rows) * a.in * sizeof(float) : 0;
    if constexpr (!VEC) {
        launchOne(ex, gemvKernel<W, R, 32, false, false>, a, 32, 0);
    } else {
        switch (G) {
            case 8: launchOne(ex, gemvKernel<W, R, 8, true, NORM>, a, 8, smem); break;
            case 16: launchOne(ex, gemvKernel<W, R, 16, true, NORM>, a, 16, smem); break;
            case 32: launchOne(ex, gemvKernel<W, R, 32, true, NORM>, a, 32, smem); break;
            case 64: launchOne(ex, gemvKernel<W, R, 64, true, NORM>, a, 64, smem); break;
            case 128: launchOne(ex, gemvKernel<W, R, 128, true, NORM>, a, 128, smem); break;
            default: launchOne(ex, gemvKernel<W, R, 256, true, NORM>, a, 256, smem); break;
        }
    }
}

template <typename W, int R, bool VEC>
void launchN(const Exec& ex, const GemvArgs& a, int G, bool norm) {
    if constexpr (VEC) {
        if (norm) {
            // the prologue caps G at 32 (see gemv()), so only those instantiations exist
            switch (G) {
                case 8: launchOne(ex, gemvKernel<W, R, 8, true, true>, a, 8, a.rows * a.in * sizeof(float)); break;
                case 16: launchOne(ex, gemvKernel<W, R, 16, true, true>, a, 16, a.rows * a.in * sizeof(float)); break;
                default: launchOne(ex, gemvKernel<W, R, 32, true, true>, a, 32, a.rows * a.in * sizeof(float)); break;
            }
            return;
        }
    }
    launchG<W, R, VEC, false>(ex, a, G);
}

template <typename W, bool VEC>
void launchR(const Exec& ex, const GemvArgs& a, int G, bool norm) {
    if (a.rows <= 1) launchN<W, 1, VEC>(ex, a, G, norm);
    else if (a.rows <= 2) launchN<W, 2, VEC>(ex, a, G, norm);
    else if (a.rows <= 4) launchN<W, 4, VEC>(ex, a, G, norm);
    else launchN<W, 8, VEC>(ex, a, G, norm);
}

template <typename W>
void launchW(const Exec& ex, const GemvArgs& a, bool vec, int G, bool norm) {
    if (vec) launchR<W, true>(ex, a, G, norm);
    else launchR<W, false>(ex, a, G, norm);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }
bool isLowp(int wdtype) { return wdtype == DTYPE_BF16 || wdtype == DTYPE_F16; }

}  // namespace

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
          const float* bias, float* y, int64_t ldy, float beta, const NormPrologue* norm) {
    if (rows <= 0 || out <= 0) return;
    if (rows > kGemvMaxRows) throw std::logic_error("gemv: rows > kGemvMaxRows");
    const int V = isLowp(wdtype) ? 8 : 4;
    // The vector path needs whole 16-byte weight chunks per row and 16-byte aligned activation rows. The
    // choice depends on the shape and layout only, never on `rows`, so batch rows stay bit-identical.
    const bool vec = norm ? gemvNormFusable(ex, rows, w, wdtype, in)
                          : in % V == 0 && aligned16(w) && aligned16(x) && ldx % 4 == 0;
    if (norm && !vec) throw std::logic_error("gemv: rmsnorm prologue on a weight that gemvNormFusable rejects");
    const GemvArgs a{x, ldx, rows, w, out, in, bias, y, ldy, beta, norm ? *norm : NormPrologue{}};
    int G = gemvGroupSize(ex, wdtype, out, in, vec);
    // With the prologue every block normalises the input again: at least 8 outputs per block keep that
    // re-read (from L2) small next to the weights; between ~1.2 and ~2.2 waves, half the group size
    // makes it one wave instead.
    if (norm) {
        if (G > 32) G = 32;
        const double waves = static_cast<double>(out) * G / kThreads / (4.0 * ex.sms);
        if (G >= 16 && waves >= 1.2 && waves <= 2.2) G /= 2;
    }
    if (wdtype == DTYPE_BF16) launchW<__nv_bfloat16>(ex, a, vec, G, norm != nullptr);
    else if (wdtype == DTYPE_F16) launchW<__half>(ex, a, vec, G, norm != nullptr);
    else launchW<float>(ex, a, vec, G, norm != nullptr);
}

}  // namespace mamba::cuda
