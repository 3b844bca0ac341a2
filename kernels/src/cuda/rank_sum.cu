// Ops::sumRanks on CUDA: the rank-order sum of data-parallel training (ops.h). One thread per element adds the
// ranks' slices in rank order with __fadd_rn (round to nearest, never contracted): no atomics, no tree, so the
// bits equal the host fold of org.mamba4j.parallel and do not depend on the launch shape.
#include "cuda_backend.h"
#include "cuda_check.h"

#include <algorithm>

namespace mamba::cuda {
namespace {

__global__ void sumRanksKernel(const float* __restrict__ slices, int ranks, int64_t n, float* __restrict__ out) {
    pdlWait();
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        float acc = slices[i];
        for (int r = 1; r < ranks; ++r) acc = __fadd_rn(acc, slices[r * n + i]);
        out[i] = acc;
    }
}

}  // namespace

void CudaBackend::sumRanks(const float* slices, int ranks, int64_t n, float* out) {
    Lock lock(mu_);
    if (n <= 0 || ranks <= 0) return;
    enter();
    launch("sumRanks", nextExec(), sumRanksKernel, dim3(std::min<unsigned>(blocksFor(n, 256), 8192)), dim3(256), 0,
           slices, ranks, n, out);
}

}  // namespace mamba::cuda
