// AdamW (PyTorch's torch.optim.AdamW, non-amsgrad), element-wise, with the same formula and operation
// order as the CPU backend (cpu_train.cpp):
//   g ← g·grad_scale;  m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²;
//   p ← p·(1 − lr·wd) − (lr/bc1)·m / (sqrt(v)/sqrt(bc2) + eps).
// The constants (decay, step, 1/sqrt(bc2): adamwFactors in ops.h) are computed on the host exactly as the CPU does
// and read from device memory with this step's grad_scale and skip flag (optimizerControl), so a captured step
// replays with each step's values.
#include "train_kernels.h"

#include <algorithm>
#include <cmath>

namespace mamba::cuda::train {
namespace {

__global__ void adamwKernel(float* p, const float* g, float* m, float* v, int64_t n, const AdamWFactors* f,
                            int decay_index) {
    pdlWait();
    pdlLaunchDependents();
    const AdamWFactors a = *f;
    if (a.skip != 0.f) return;
    const float decay = a.decay[decay_index];
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float gi = g[i] * a.grad_scale;
        const float mi = a.beta1 * m[i] + a.c1 * gi;
        const float vi = a.beta2 * v[i] + a.c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const float denom = sqrtf(vi) * a.inv_sqrt_bc2 + a.eps;
        p[i] = p[i] * decay - a.step * mi / denom;
    }
}

}  // namespace

void adamw(const Exec& ex, float* p, const float* g, float* m, float* v, int64_t n, const AdamWFactors* f, bool decayed) {
    if (n <= 0) return;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, int64_t{ex.sms} * 8));
    launch("adamw", ex, adamwKernel, dim3(blocks), dim3(256), 0, p, g, m, v, n, f, decayed ? 0 : 1);
}

}  // namespace mamba::cuda::train
