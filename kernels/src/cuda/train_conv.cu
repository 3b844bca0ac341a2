// Backward of the causal depthwise conv + SiLU (width K ≤ 8, H = K − 1 history taps).
//
// One thread per (channel, batch row b, tile of kConvTile steps [t0, t1)). It walks t = t0 … t1+H−1:
//  - recomputes conv_t = bias + Σ_k w[k]·x_{t−H+k} (taps before step 0 come from the starting history)
//    and dc_t = du_t·SiLU'(conv_t) for t < T (dc_t = 0 past the sequence end);
//  - for t < t1 adds dc_t to the bias gradient and dc_t·x_{t−H+k} to tap k's weight gradient;
//  - keeps the last K values of dc in registers, newest first, so that once t ≥ t0 + H it can emit
//    dx_s = Σ_k w[k]·dc_{s+H−k} for s = t − H (the steps s+H−k ≥ T contribute zero).
// The steps t1 … t1+H−1 are recomputed by the next tile too (H ≤ 7 extra steps per 32).
// Weight/bias gradients: one partial per (b, tile), then a second kernel adds them in (b, tile) order.
#include "train_kernels.h"

namespace mamba::cuda::train {
namespace {

constexpr int kMaxWidth = 8;

__device__ __forceinline__ float dsiluf(float x) {
    const float s = 1.f / (1.f + expf(-x));
    return s * (1.f + x * (1.f - s));
}

__global__ void convBackwardKernel(ConvBackwardArgs c, int tiles, float* pw, float* pb) {
    pdlWait();
    pdlLaunchDependents();
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= c.channels) return;
    const int64_t p = blockIdx.y + static_cast<int64_t>(blockIdx.z) * gridDim.y;  // (b, tile)
    if (p >= static_cast<int64_t>(c.batch) * tiles) return;
    const int b = static_cast<int>(p / tiles), tile = static_cast<int>(p % tiles);
    const int K = c.width, H = K - 1, T = c.steps;
    const int t0 = tile * kConvTile, t1 = min(T, t0 + kConvTile);
    const float* hist = c.history + b * c.history_stride + static_cast<int64_t>(d) * H;
    const int64_t row0 = static_cast<int64_t>(b) * T;
    float w[kMaxWidth], gw[kMaxWidth], win[kMaxWidth];  // win[k] = dc_{t−k}
#pragma unroll
    for (int k = 0; k < kMaxWidth; ++k) {
        w[k] = k < K ? c.w[static_cast<int64_t>(d) * K + k] : 0.f;
        gw[k] = 0.f;
        win[k] = 0.f;
    }
    const float bias = c.bias[d];
    float gb = 0.f;
    // State carry: the end history holds the inputs s ≥ T − H (slot s − T + H), so its gradient adds to theirs; the
    // first tile also emits the starting history's gradient (inputs s = −H … −1, slot H + s).
    const float* dend = c.dhistory_end ? c.dhistory_end + b * c.dhistory_stride + static_cast<int64_t>(d) * H : nullptr;
    float* dhist = c.dhistory ? c.dhistory + b * c.dhistory_stride + static_cast<int64_t>(d) * H : nullptr;
    const int s_first = tile == 0 && dhist ? -H : t0;
    for (int t = t0; t < t1 + H; ++t) {
        float dct = 0.f;
        if (t < T) {
            float v[kMaxWidth];
            float acc = bias;
#pragma unroll
            for (int k = 0; k < kMaxWidth; ++k) {
                if (k < K) {
                    const int ts = t - H + k;
                    v[k] = ts >= 0 ? c.x[(row0 + ts) * c.ldx + d] : hist[H + ts];
                    acc += w[k] * v[k];
                }
            }
            dct = c.du[(row0 + t) * c.ldu + d] * dsiluf(acc);
            if (t < t1) {
                gb += dct;
#pragma unroll
                for (int k = 0; k < kMaxWidth; ++k)
                    if (k < K) gw[k] += dct * v[k];
            }
        }
#pragma unroll
        for (int k = kMaxWidth - 1; k > 0; --k) win[k] = win[k - 1];
        win[0] = dct;
        const int s = t - H;
        if (s >= s_first) {
            float acc = 0.f;
#pragma unroll
            for (int k = 0; k < kMaxWidth; ++k)
                if (k < K) acc += w[k] * win[k];  // w[k]·dc_{s+H−k}
            const int e = s - (T - H);
            if (dend && e >= 0) acc += dend[e];
            if (s >= 0)
                c.dx[(row0 + s) * c.lddx + d] = acc;
            else
                dhist[H + s] = acc;
        }
    }
    float* pwr = pw + (p * c.channels + d) * K;
#pragma unroll
    for (int k = 0; k < kMaxWidth; ++k)
        if (k < K) pwr[k] = gw[k];
    pb[p * c.channels + d] = gb;
}

// dw[d, k] += Σ_p pw[p, d, k]; dbias[d] += Σ_p pb[p, d], partials p = (b, tile) in order.
__global__ void convGradFinishKernel(const float* pw, const float* pb, int64_t parts, int channels, int K, float* dw,
                                     float* dbias) {
    pdlWait();
    pdlLaunchDependents();
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    const int64_t nw = static_cast<int64_t>(channels) * K;
    if (i < nw) {
        float s = 0.f;
        for (int64_t p = 0; p < parts; ++p) s += pw[p * nw + i];
        dw[i] += s;
    } else if (i < nw + channels) {
        const int64_t d = i - nw;
        float s = 0.f;
        for (int64_t p = 0; p < parts; ++p) s += pb[p * channels + d];
        dbias[d] += s;
    }
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
    launch("convSilu backward", ex, convBackwardKernel, dim3(blocksFor(c.channels, threads), ychunks, zchunks),
           dim3(threads), 0, c, tiles, pw, pb);
    const int64_t n = static_cast<int64_t>(c.channels) * (c.width + 1);
    launch("convSilu backward finish", ex, convGradFinishKernel, dim3(blocksFor(n, 128)), dim3(128), 0,
           static_cast<const float*>(pw), static_cast<const float*>(pb), parts, c.channels, c.width, c.dw, c.dbias);
}

}  // namespace mamba::cuda::train
