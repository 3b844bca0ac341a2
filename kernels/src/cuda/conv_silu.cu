// Causal depthwise conv (width K ≤ 8) over T steps with the carried history, then SiLU.
// History per row b: [channels, K-1], oldest first; after the call it holds the last K-1 inputs of
// (old history ++ this call's inputs) — the CPU backend's semantics.
//
// Two shapes of the same arithmetic (acc = bias + Σ_k w[k]·v_k in tap order, then SiLU):
//  - stepwise: one thread per (row b, channel) walks the T steps with the window in registers and
//    rewrites the history itself — one launch, used for decode (T small) or when B·channels fill the GPU;
//  - parallel: one thread per (channel, tile of kTile positions of one row) loads the tile's inputs once (and
//    the history where the tile starts a row), then a second small kernel rewrites the history (it must
//    run after every position has read the old one).
#include "conv_step.cuh"
#include "kernels.h"
#include "lowp.cuh"

namespace mamba::cuda {
namespace {

constexpr int kTile = 8;  // positions per thread in the parallel kernel

/** u[r, d], and its rounded copy where one is asked for (ConvArgs::u16). */
__device__ __forceinline__ void storeU(const ConvArgs& c, int64_t r, int d, float v) {
    c.u[r * c.ldu + d] = v;
    if (c.u16.data) storeRounded(c.u16, r, d, v);
}

__global__ void convStepwiseKernel(ConvArgs c) {
    pdlWait();
    pdlLaunchDependents();
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= static_cast<int64_t>(c.batch) * c.channels) return;
    const int b = static_cast<int>(i / c.channels), d = static_cast<int>(i % c.channels);
    const int K = c.width, H = K - 1;
    float* hist = c.history + b * c.history_stride + static_cast<int64_t>(d) * H;
    float w[kConvMaxWidth], win[kConvMaxWidth];
#pragma unroll
    for (int k = 0; k < kConvMaxWidth; ++k) {
        w[k] = k < K ? c.w[d * K + k] : 0.f;
        win[k] = k < H ? hist[k] : 0.f;
    }
    const float bias = c.bias[d];
    const int64_t row0 = static_cast<int64_t>(b) * c.steps;
    for (int t = 0; t < c.steps; ++t) {
        const float xv = c.x[(row0 + t) * c.ldx + d];
#pragma unroll
        for (int k = 0; k < kConvMaxWidth; ++k)
            if (k == H) win[k] = xv;  // the newest tap (compile-time indices keep win in registers)
        storeU(c, row0 + t, d, convSiluStep(w, win, K, bias));
#pragma unroll
        for (int k = 0; k + 1 < kConvMaxWidth; ++k)
            if (k < H) win[k] = win[k + 1];
    }
#pragma unroll
    for (int k = 0; k < kConvMaxWidth; ++k)
        if (k < H) hist[k] = win[k];
}

/**
 * kTile positions of one row and one channel per thread: the tile's kTile + K − 1 inputs (the oldest from the
 * history where the tile starts a row) are loaded once, all in flight together, and each position's window is
 * taken from them — one load per input instead of K, and no division per position (a tile never crosses a row).
 */
__global__ void convParallelKernel(ConvArgs c) {
    pdlWait();
    pdlLaunchDependents();
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= c.channels) return;
    const int tiles_per_row = (c.steps + kTile - 1) / kTile;
    const int64_t tile = blockIdx.y + static_cast<int64_t>(blockIdx.z) * gridDim.y;
    if (tile >= static_cast<int64_t>(c.batch) * tiles_per_row) return;
    const int b = static_cast<int>(tile / tiles_per_row);
    const int t0 = static_cast<int>(tile - static_cast<int64_t>(b) * tiles_per_row) * kTile;
    const int K = c.width, H = K - 1, count = min(kTile, c.steps - t0);
    float w[kConvMaxWidth];
#pragma unroll
    for (int k = 0; k < kConvMaxWidth; ++k) w[k] = k < K ? c.w[d * K + k] : 0.f;
    const float bias = c.bias[d];
    const int64_t row0 = static_cast<int64_t>(b) * c.steps;
    const float* x = c.x + row0 * c.ldx + d;
    const float* hist = c.history + b * c.history_stride + static_cast<int64_t>(d) * H;
    // in[i] is the input of time t0 − H + i
    constexpr int kInputs = kTile + kConvMaxWidth - 1;
    float in[kInputs];
#pragma unroll
    for (int i = 0; i < kInputs; ++i) {
        const int src = t0 - H + i;
        in[i] = i >= H + count ? 0.f : src >= 0 ? x[static_cast<int64_t>(src) * c.ldx] : hist[H + src];
    }
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
        if (j >= count) break;
        float win[kConvMaxWidth];
#pragma unroll
        for (int k = 0; k < kConvMaxWidth; ++k) win[k] = in[j + k];
        storeU(c, row0 + t0 + j, d, convSiluStep(w, win, K, bias));
    }
}

__global__ void convHistoryKernel(ConvArgs c) {
    pdlWait();
    pdlLaunchDependents();
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= static_cast<int64_t>(c.batch) * c.channels) return;
    const int b = static_cast<int>(i / c.channels), d = static_cast<int>(i % c.channels);
    const int H = c.width - 1;
    float* hist = c.history + b * c.history_stride + static_cast<int64_t>(d) * H;
    const int64_t row0 = static_cast<int64_t>(b) * c.steps;
    float next[kConvMaxWidth];
#pragma unroll
    for (int k = 0; k < kConvMaxWidth; ++k) {
        const int src = c.steps - H + k;
        if (k < H) next[k] = src >= 0 ? c.x[(row0 + src) * c.ldx + d] : hist[H + src];
    }
#pragma unroll
    for (int k = 0; k < kConvMaxWidth; ++k)
        if (k < H) hist[k] = next[k];
}

}  // namespace

void convSilu(const Exec& ex, const ConvArgs& c) {
    if (c.batch <= 0 || c.steps <= 0 || c.channels <= 0) return;
    if (c.width < 1 || c.width > kConvMaxWidth)
        throw std::invalid_argument("convSilu: width " + std::to_string(c.width) + " is outside [1, 8]");
    const int64_t lanes = static_cast<int64_t>(c.batch) * c.channels;
    const bool stepwise = c.steps <= 8 || lanes >= static_cast<int64_t>(ex.sms) * 1024;
    if (stepwise) {
        launch("convSilu", ex, convStepwiseKernel, dim3(blocksFor(lanes, 128)), dim3(128), 0, c);
        return;
    }
    const int64_t tiles = static_cast<int64_t>(c.batch) * ((c.steps + kTile - 1) / kTile);
    const unsigned ychunks = static_cast<unsigned>(tiles < 65535 ? tiles : 65535);
    const unsigned zchunks = static_cast<unsigned>((tiles + ychunks - 1) / ychunks);
    const int threads = c.channels >= 128 ? 128 : 32;
    launch("convSilu", ex, convParallelKernel, dim3(blocksFor(c.channels, threads), ychunks, zchunks), dim3(threads),
           0, c);
    if (c.width > 1) launch("convSilu history", ex, convHistoryKernel, dim3(blocksFor(lanes, 128)), dim3(128), 0, c);
}

}  // namespace mamba::cuda
