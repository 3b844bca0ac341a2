// Small-batch linear y = x·Wᵀ for rows ≤ kGemvMaxRows: a matrix-vector product bound by reading W once
// from HBM. One kernel template over the weight storage type (float / bf16 / half):
//  - G threads cooperate on one output (G = 8 … 256, chosen from the shape so that every SM has enough
//    loads in flight), each streaming 16-byte vectors of the weight row with evict-first loads, four
//    vectors deep and double-buffered;
//  - the R ≤ 8 activation rows are read from L1/L2 (they are tiny) and every weight vector is used for
//    all of them; f32 accumulation, warp-shuffle reduction, then shared memory across warps (G > 32);
//  - the first weight vectors are loaded before pdlWait(): weights never depend on the previous
//    kernel, so with programmatic dependent launch their latency hides under the previous kernel's tail.
#include "kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

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
};

// A 16-byte chunk of weights (VEC) or a single element, and its conversion to f32.
template <typename W, bool VEC> struct Chunk;
template <typename W> struct Chunk<W, true> {
    static constexpr int kElems = 16 / sizeof(W);
    int4 raw;
    __device__ __forceinline__ void load(const W* p) { raw = __ldcs(reinterpret_cast<const int4*>(p)); }
    __device__ __forceinline__ void unpack(float (&f)[kElems]) const;
};
template <> __device__ __forceinline__ void Chunk<float, true>::unpack(float (&f)[4]) const {
    f[0] = __int_as_float(raw.x);
    f[1] = __int_as_float(raw.y);
    f[2] = __int_as_float(raw.z);
    f[3] = __int_as_float(raw.w);
}
template <> __device__ __forceinline__ void Chunk<__nv_bfloat16, true>::unpack(float (&f)[8]) const {
    const unsigned u[4] = {static_cast<unsigned>(raw.x), static_cast<unsigned>(raw.y), static_cast<unsigned>(raw.z),
                           static_cast<unsigned>(raw.w)};
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // bf16 → f32 is exact: the 16 bits become the top half of the float
        f[2 * i] = __uint_as_float(u[i] << 16);
        f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
}
template <> __device__ __forceinline__ void Chunk<__half, true>::unpack(float (&f)[8]) const {
    const int u[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        __half2 h;
        memcpy(&h, &u[i], sizeof h);
        const float2 v = __half22float2(h);
        f[2 * i] = v.x;
        f[2 * i + 1] = v.y;
    }
}
template <typename W> struct Chunk<W, false> {
    static constexpr int kElems = 1;
    W raw;
    __device__ __forceinline__ void load(const W* p) { raw = *p; }
    __device__ __forceinline__ void unpack(float (&f)[1]) const { f[0] = static_cast<float>(raw); }
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

template <typename W, int R, int G, bool VEC>
__global__ void __launch_bounds__(kThreads) gemvKernel(GemvArgs a) {
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
                        loadX<V, VEC>(a.x + r * a.ldx + k, xf);
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

template <typename W, int R, bool VEC>
void launchG(const Exec& ex, const GemvArgs& a, int G) {
    auto go = [&](auto kernel, int g) {
        const int per = kThreads / g;
        launch("gemv", ex, kernel, dim3(blocksFor(a.out, per)), dim3(kThreads), 0, a);
    };
    if constexpr (!VEC) {
        go(gemvKernel<W, R, 32, false>, 32);
    } else {
        switch (G) {
            case 8: go(gemvKernel<W, R, 8, true>, 8); break;
            case 16: go(gemvKernel<W, R, 16, true>, 16); break;
            case 32: go(gemvKernel<W, R, 32, true>, 32); break;
            case 64: go(gemvKernel<W, R, 64, true>, 64); break;
            case 128: go(gemvKernel<W, R, 128, true>, 128); break;
            default: go(gemvKernel<W, R, 256, true>, 256); break;
        }
    }
}

template <typename W, bool VEC>
void launchR(const Exec& ex, const GemvArgs& a, int G) {
    if (a.rows <= 1) launchG<W, 1, VEC>(ex, a, G);
    else if (a.rows <= 2) launchG<W, 2, VEC>(ex, a, G);
    else if (a.rows <= 4) launchG<W, 4, VEC>(ex, a, G);
    else launchG<W, 8, VEC>(ex, a, G);
}

template <typename W>
void launchW(const Exec& ex, const GemvArgs& a, bool vec, int G) {
    if (vec) launchR<W, true>(ex, a, G);
    else launchR<W, false>(ex, a, G);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }
bool isLowp(int wdtype) { return wdtype == DTYPE_BF16 || wdtype == DTYPE_F16; }

}  // namespace

int gemvGroupSize(const Exec& ex, int wdtype, int out, int in, bool vectorised) {
    if (!vectorised) return 32;
    const int V = isLowp(wdtype) ? 8 : 4;
    const int vecs = (in + V - 1) / V;
    const int64_t min_threads = static_cast<int64_t>(ex.sms) * 1024;  // half the resident threads of the GPU
    int G = 8;
    while (G < 256 && G < vecs && (vecs > 8 * G || static_cast<int64_t>(out) * G < min_threads)) G *= 2;
    return G;
}

void gemv(const Exec& ex, const float* x, int64_t ldx, int rows, const void* w, int wdtype, int out, int in,
          const float* bias, float* y, int64_t ldy, float beta) {
    if (rows <= 0 || out <= 0) return;
    if (rows > kGemvMaxRows) throw std::logic_error("gemv: rows > kGemvMaxRows");
    const int V = isLowp(wdtype) ? 8 : 4;
    // The vector path needs whole 16-byte weight chunks per row and 16-byte aligned activation rows. The
    // choice depends on the shape and layout only, never on `rows`, so batch rows stay bit-identical.
    const bool vec = in % V == 0 && aligned16(w) && aligned16(x) && ldx % 4 == 0;
    const GemvArgs a{x, ldx, rows, w, out, in, bias, y, ldy, beta};
    const int G = gemvGroupSize(ex, wdtype, out, in, vec);
    if (wdtype == DTYPE_BF16) launchW<__nv_bfloat16>(ex, a, vec, G);
    else if (wdtype == DTYPE_F16) launchW<__half>(ex, a, vec, G);
    else launchW<float>(ex, a, vec, G);
}

}  // namespace mamba::cuda
