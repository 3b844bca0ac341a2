// One step of the causal depthwise conv + SiLU, shared by convSilu's stepwise kernel and the decode gemv's conv
// epilogue (gemm/gemv.cu), so that the fused and the separate decode give the same bits.
#pragma once

#include "cuda_check.h"

namespace mamba::cuda {

constexpr int kConvMaxWidth = 8;

/** SiLU(bias + Σ_{k<K} w[k]·win[k]), the taps summed in order (convSilu's parallel kernel sums in the same order). */
template <int N>
__device__ __forceinline__ float convSiluStep(const float (&w)[N], const float (&win)[N], int K, float bias) {
    float acc = bias;
#pragma unroll
    for (int k = 0; k < N; ++k)
        if (k < K) acc += w[k] * win[k];
    return siluf(acc);
}

}  // namespace mamba::cuda
