// Backward of the causal depthwise conv + SiLU (width K ≤ 8, H = K − 1 history taps).
//
// One thread per (channel, batch row b, tile of kConvTile steps [t0, t1)). It walks t = t0 … t1+H−1:
//  - recomputes conv_t = bias + Σ_k w[k]·x_{t−H+k} (taps before step 0 come from the starting history)
//    and dc_t = du_t·SiLU'(conv_t) for t < T (dc_t = 0 past the sequence end);
//  - for t < t1 adds dc_t to the bias gradient and dc_t·x_{t−H+k} to tap k's weight gradient;
//  - keeps the last K inputs and the last K values of dc in registers (the width K is a template argument, so the
//    windows shift at compile-time indices), loads each step's x and du one step ahead, and once t ≥ t0 + H emits
//    dx_s = Σ_k w[k]·dc_{s+H−k} for s = t − H (the steps s+H−k ≥ T contribute zero).
// The steps t1 … t1+H−1 are recomputed by the next tile too (H ≤ 7 extra steps per 32).
// Weight/bias gradients: one partial per (b, tile), then a second kernel adds them in (b, tile) order.
#include "lowp.cuh"
#include "train_kernels.h"

namespace mamba::cuda::train {
namespace {

constexpr int kMaxWidth = 8;

// SiLU'(x); 1/y as the correctly rounded reciprocal (the bits of 1.f / y without the division's slow path).
__device__ __forceinline__ float dsiluf(float x) {
    const float s = __frcp_rn(1.f + expf(-x));
    return s * (1.f + x * (1.f - s));
}

/** dx's element type: f32, or the 2-byte type it is written rounded to (ConvBackwardArgs::dx16). */
template <typename Out>
__device__ __forceinline__ Out asOutput(float v) { return toStorage<Out>(v); }
template <>
__device__ __forceinline__ float asOutput<float>(float v) { return v; }

template <int K, typename Out>
__global__ void convBackwardKernel(ConvBackwardArgs c, int tiles, float* pw, float* pb) {
    constexpr int H = K - 1;
    pdlWait();
    pdlLaunchDependents();
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= c.channels) return;
    const int64_t p = blockIdx.y + static_cast<int64_t>(blockIdx.z) * gridDim.y;  // (b, tile)
    if (p >= static_cast<int64_t>(c.batch) * tiles) return;
    const int b = static_cast<int>(p / tiles), tile = static_cast<int>(p % tiles);
    const int T = c.steps;
    const int t0 = tile * kConvTile, t1 = min(T, t0 + kConvTile);
    const float* hist = c.history + b * c.history_stride + static_cast<int64_t>(d) * H;
    const float* xp = c.x + static_cast<int64_t>(b) * T * c.ldx + d;   // x of row b, step s at xp[s·ldx]
    const float* dup = c.du + static_cast<int64_t>(b) * T * c.ldu + d;
    const int64_t lddx = c.dx ? c.lddx : c.dx16.ld;
    Out* dxp = static_cast<Out*>(c.dx ? static_cast<void*>(c.dx) : c.dx16.data) + static_cast<int64_t>(b) * T * lddx + d;
    float w[K], gw[K], xv[K], win[K];  // xv[k] = x_{t−H+k}; win[k] = dc_{t−k}
#pragma unroll
    for (int k = 0; k < K; ++k) {
        w[k] = c.w[static_cast<int64_t>(d) * K + k];
        gw[k] = 0.f;
        win[k] = 0.f;
        xv[k] = 0.f;
    }
    // the inputs before t0 (slots 1 … H, shifted down at the first step)
#pragma unroll
    for (int k = 1; k < K; ++k) {
        const int ts = t0 - K + k;
        xv[k] = ts >= 0 ? xp[static_cast<int64_t>(ts) * c.ldx] : hist[H + ts];
    }
    const float bias = c.bias[d];
    float gb = 0.f;
    // State carry: the end history holds the inputs s ≥ T − H (slot s − T + H), so its gradient adds to theirs; the
    // first tile also emits the starting history's gradient (inputs s = −H … −1, slot H + s).
    const float* dend = c.dhistory_end ? c.dhistory_end + b * c.dhistory_stride + static_cast<int64_t>(d) * H : nullptr;
    float* dhist = c.dhistory ? c.dhistory + b * c.dhistory_stride + static_cast<int64_t>(d) * H : nullptr;
    const int s_first = tile == 0 && dhist ? -H : t0;
    float x_next = t0 < T ? xp[static_cast<int64_t>(t0) * c.ldx] : 0.f;
    float du_next = t0 < T ? dup[static_cast<int64_t>(t0) * c.ldu] : 0.f;
    for (int t = t0; t < t1 + H; ++t) {
        const float x_t = x_next, du_t = du_next;
        if (t + 1 < T) {
            x_next = xp[static_cast<int64_t>(t + 1) * c.ldx];
            du_next = dup[static_cast<int64_t>(t + 1) * c.ldu];
        }
#pragma unroll
        for (int k = 0; k < K - 1; ++k) xv[k] = xv[k + 1];
        xv[K - 1] = x_t;
        float dct = 0.f;
        if (t < T) {
            float acc = bias;
#pragma unroll
            for (int k = 0; k < K; ++k) acc += w[k] * xv[k];
            dct = du_t * dsiluf(acc);
            if (t < t1) {
                gb += dct;
#pragma unroll
                for (int k = 0; k < K; ++k) gw[k] += dct * xv[k];
            }
        }
#pragma unroll
        for (int k = K - 1; k > 0; --k) win[k] = win[k - 1];
        win[0] = dct;
        const int s = t - H;
        if (s >= s_first) {
            float acc = 0.f;
#pragma unroll
            for (int k = 0; k < K; ++k) acc += w[k] * win[k];  // w[k]·dc_{s+H−k}
            const int e = s - (T - H);
            if (dend && e >= 0) acc += dend[e];
            if (s >= 0)
                dxp[static_cast<int64_t>(s) * lddx] = asOutput<Out>(acc);
            else
                dhist[H + s] = acc;
        }
    }
    float* pwr = pw + (p * c.channels + d) * K;
#pragma unroll
    for (int k = 0; k < K; ++k) pwr[k] = gw[k];
    pb[p * c.channels + d] = gb;
}

// dw[d, k] += Σ_p pw[p, d, k]; dbias[d] += Σ_p pb[p, d] over the partials p = (b, tile). One warp per output: lane j
// adds p = j, j + 32, … in order, then a fixed xor tree adds the lanes (a fixed order, and 32 loads in flight per sum).
__global__ void convGradFinishKernel(const float* pw, const float* pb, int64_t parts, int channels, int K, float* dw,
                                     float* dbias) {
    pdlWait();
    pdlLaunchDependents();
    const int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    const int64_t nw = static_cast<int64_t>(channels) * K;
    if (i >= nw + channels) return;  // whole warps: i is the same for all 32 lanes
    const bool weight = i < nw;
    const float* src = weight ? pw + i : pb + (i - nw);
    const int64_t stride = weight ? nw : channels;
    float s = 0.f;
    for (int64_t p = lane; p < parts; p += 32) s += src[p * stride];
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) {
        if (weight) dw[i] += s;
        else dbias[i - nw] += s;
    }
}

using Kernel = void (*)(ConvBackwardArgs, int, float*, float*);

template <typename Out>
Kernel kernelOfWidth(int width) {
    constexpr Kernel kByWidth[kMaxWidth] = {convBackwardKernel<1, Out>, convBackwardKernel<2, Out>,
                                            convBackwardKernel<3, Out>, convBackwardKernel<4, Out>,
                                            convBackwardKernel<5, Out>, convBackwardKernel<6, Out>,
                                            convBackwardKernel<7, Out>, convBackwardKernel<8, Out>};
    return kByWidth[width - 1];
}

/** The kernel for the conv's width and dx's element type. */
Kernel kernelFor(const ConvBackwardArgs& c) {
    if (c.dx) return kernelOfWidth<float>(c.width);
    return c.dx16.dtype == DTYPE_BF16 ? kernelOfWidth<__nv_bfloat16>(c.width) : kernelOfWidth<__half>(c.width);
}

}  // namespace

void convSiluBackward(const Exec& ex, const ConvBackwardArgs& c, const Scratch& scratch) {
    if (c.batch <= 0 || c.steps <= 0 || c.channels <= 0) return;
    if (c.width < 1 || c.width > kMaxWidth)
        throw std::invalid_argument("convSiluBackward: width " + std::to_string(c.width) + " is outside [1, 8]");
    const int tiles = (c.steps + kConvTile - 1) / kConvTile;
    const int64_t parts = static_cast<int64_t>(c.batch) * tiles;
    float* pw = scratch.get(0, parts * c.channels * c.width);
    float* pb = scratch.get(1, parts * c.channels);
    const int threads = c.channels >= 128 ? 128 : 32;
    const unsigned ychunks = static_cast<unsigned>(parts < 65535 ? parts : 65535);
    const unsigned zchunks = static_cast<unsigned>((parts + ychunks - 1) / ychunks);
    const dim3 grid(blocksFor(c.channels, threads), ychunks, zchunks);
    launch("convSilu backward", ex, kernelFor(c), grid, dim3(threads), 0, c, tiles, pw, pb);
    const int64_t n = static_cast<int64_t>(c.channels) * (c.width + 1);
    launch("convSilu backward finish", ex, convGradFinishKernel, dim3(blocksFor(n * 32, 128)), dim3(128), 0,
           static_cast<const float*>(pw), static_cast<const float*>(pb), parts, c.channels, c.width, c.dw, c.dbias);
}

}  // namespace mamba::cuda::train
