// Decode's conv step riding behind a one-row product (ConvEpilogue, gemv.h), shared by the fast modes' gemv and the
// tensor-core tier's chain tile: each output's inputs sit in an 8-float slot — taps 0–3, history 0–2, bias — copied
// while the product runs, and the step is convSilu's arithmetic (conv_step.cuh), so both give the conv kernel's bits.
#pragma once

#include "gemv.h"
#include "../conv_step.cuh"
#include "../cp_async.cuh"

#include <cstdint>

namespace mamba::cuda {

/** Copies entry i (< 8) of output o's slot by cp.async; nothing for o past the channels or taps the width leaves out. */
__device__ __forceinline__ void loadConvSlotEntry(const ConvEpilogue& c, int o, int i, float* slot) {
    if (o >= c.channels) return;
    const int K = c.width, H = K - 1;
    const float* src = nullptr;
    if (i < 4) src = i < K ? c.w + o * K + i : nullptr;
    else if (i < 7) src = i - 4 < H ? c.history + static_cast<int64_t>(o) * H + i - 4 : nullptr;
    else src = c.bias + o;
    if (src) cpAsync4(slot + i, src);
}

/** u[o] = SiLU(conv of the history and x) and the history moved on by one, from output o's (landed) slot. */
__device__ __forceinline__ void convSlotStep(const ConvEpilogue& c, int o, const float* slot, float x) {
    constexpr int W = kConvEpilogueMaxWidth;
    const int K = c.width, H = K - 1;
    float w[W], win[W];
#pragma unroll
    for (int k = 0; k < W; ++k) {
        w[k] = k < K ? slot[k] : 0.f;
        win[k] = k < H ? slot[4 + k] : k == H ? x : 0.f;
    }
    c.u[o] = convSiluStep(w, win, K, slot[7]);
    float* hist = c.history + static_cast<int64_t>(o) * H;
#pragma unroll
    for (int k = 0; k + 1 < W; ++k)
        if (k < H) hist[k] = win[k + 1];
}

}  // namespace mamba::cuda
