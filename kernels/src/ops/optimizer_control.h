// The optimizer's per-step decision (OptimizerControlArgs in ops.h), written once for both backends: the CPU calls it
// on host memory, the CUDA backend from a one-thread kernel on device memory, with the same double arithmetic (IEEE
// sqrt and division on both), so an eager step and its captured replay take the same decision with the same bits.
#pragma once

#include "ops.h"

#include <cmath>

#if defined(__CUDACC__)
#define MAMBA_HOST_DEVICE __host__ __device__
#else
#define MAMBA_HOST_DEVICE
#endif

namespace mamba {

/** Reads the sums (and the loss), writes factors->grad_scale, factors->skip and *norm (see OptimizerControlArgs). */
MAMBA_HOST_DEVICE inline void decideOptimizerStep(const OptimizerControlArgs& a) {
    double ss = 0.0;
    for (int i = 0; i < a.nsums; ++i) ss += a.sums[i];
    const double n = std::sqrt(ss) / a.loss_scale;  // of the unscaled gradient (a power-of-two scale: exact)
    *a.norm = n;
    bool bad = a.loss_bad;
    // The float the caller sees: a loss that overflows float is as useless as a NaN, even if its gradient is finite.
    if (a.loss_sum && a.loss_count > 0 && !std::isfinite(static_cast<float>(*a.loss_sum / a.loss_count))) bad = true;
    if (!std::isfinite(n) || bad) {
        a.factors->skip = 1.f;
        a.factors->grad_scale = 0.f;
        return;
    }
    a.factors->skip = 0.f;
    float gs = a.clip > 0.f && n > a.clip ? static_cast<float>(a.clip / (n + 1e-6)) : 1.f;
    gs /= a.loss_scale;  // unscale inside AdamW (exact for powers of two)
    a.factors->grad_scale = gs;
}

}  // namespace mamba
