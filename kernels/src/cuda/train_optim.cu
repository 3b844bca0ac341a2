// AdamW (PyTorch's torch.optim.AdamW, non-amsgrad), element-wise, with the same formula and operation
// order as the CPU backend (cpu_train.cpp):
//   g ← g·grad_scale;  m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²;
//   p ← p·(1 − lr·wd) − (lr/bc1)·m / (sqrt(v)/sqrt(bc2) + eps).
// The constants (decay, step, 1/sqrt(bc2)) are computed on the host exactly as the CPU does.
#include "train_kernels.h"

#include <algorithm>
#include <cmath>

namespace mamba::cuda::train {
namespace {

struct AdamWConst {
    float b1, b2, c1, c2, decay, step, inv_sqrt_bc2, eps, grad_scale;
};

__global__ void adamwKernel(float* p, const float* g, float* m, float* v, int64_t n, AdamWConst a) {
    pdlWait();
    pdlLaunchDependents();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float gi = g[i] * a.grad_scale;
        const float mi = a.b1 * m[i] + a.c1 * gi;
        const float vi = a.b2 * v[i] + a.c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const float denom = sqrtf(vi) * a.inv_sqrt_bc2 + a.eps;
        p[i] = p[i] * a.decay - a.step * mi / denom;
    }
}

}  // namespace

void adamw(const Exec& ex, float* p, const float* g, float* m, float* v, int64_t n, const AdamWArgs& a) {
    if (n <= 0) return;
    AdamWConst k;
    k.decay = 1.f - a.lr * a.weight_decay;
    k.step = a.lr / a.bias_correction1;
    k.inv_sqrt_bc2 = 1.f / std::sqrt(a.bias_correction2);
    k.b1 = a.beta1;
    k.b2 = a.beta2;
    k.c1 = 1.f - a.beta1;
    k.c2 = 1.f - a.beta2;
    k.eps = a.eps;
    k.grad_scale = a.grad_scale;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, int64_t{ex.sms} * 8));
    launch("adamw", ex, adamwKernel, dim3(blocks), dim3(256), 0, p, g, m, v, n, k);
}

}  // namespace mamba::cuda::train
