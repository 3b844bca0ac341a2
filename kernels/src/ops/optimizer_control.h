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

MAMBA_HOST_DEVICE inline bool finiteValue(double v) {
#if defined(__CUDA_ARCH__)
    return isfinite(v);
#else
    return std::isfinite(v);
#endif
}

MAMBA_HOST_DEVICE inline double squareRoot(double v) {
#if defined(__CUDA_ARCH__)
    return sqrt(v);
#else
    return std::sqrt(v);
#endif
}

/** Reads the sums (and the loss), writes factors->grad_scale, factors->skip and *norm (see OptimizerControlArgs). */
MAMBA_HOST_DEVICE inline void decideOptimizerStep(const double* sums, int nsums, const double* loss_sum, double loss_count,
                                                  bool loss_bad, float clip, float loss_scale, AdamWFactors* factors,
                                                  double* norm) {
    double ss = 0.0;
    for (int i = 0; i < nsums; ++i) ss += sums[i];
    const double n = squareRoot(ss) / loss_scale;  // of the unscaled gradient (a power-of-two scale: exact)
    *norm = n;
    bool bad = loss_bad;
    // The float the caller sees: a loss that overflows float is as useless as a NaN, even if its gradient is finite.
    if (loss_sum && loss_count > 0 && !finiteValue(static_cast<float>(*loss_sum / loss_count))) bad = true;
    if (!finiteValue(n) || bad) {
        factors->skip = 1.f;
        factors->grad_scale = 0.f;
        return;
    }
    factors->skip = 0.f;
    float gs = clip > 0.f && n > clip ? static_cast<float>(clip / (n + 1e-6)) : 1.f;
    gs /= loss_scale;  // unscale inside AdamW (exact for powers of two)
    factors->grad_scale = gs;
}

}  // namespace mamba
