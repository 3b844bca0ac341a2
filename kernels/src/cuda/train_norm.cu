// RMSNorm backward. Per row (one block): ρ = 1/sqrt(mean(x²) + eps), g = w ⊙ dy,
//   dx = beta·dx + ρ·(g − x·c) with c = Σ(g ⊙ x)·ρ²/d   (= ρ·(g − x̂·mean(g ⊙ x̂)), x̂ = ρ·x),
// sums per thread in a fixed stride order, then a fixed shared-memory tree. ρ of every row goes to a
// workspace; the weight gradient dw[j] += Σ_r dy[r, j]·(x[r, j]·ρ_r) is a deterministic column sum.
#include "train_kernels.h"

namespace mamba::cuda::train {
namespace {

template <int THREADS>
__device__ void blockSum2(float& a, float& b) {
    __shared__ float sa[THREADS], sb[THREADS];
    sa[threadIdx.x] = a;
    sb[threadIdx.x] = b;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (static_cast<int>(threadIdx.x) < s) {
            sa[threadIdx.x] += sa[threadIdx.x + s];
            sb[threadIdx.x] += sb[threadIdx.x + s];
        }
        __syncthreads();
    }
    a = sa[0];
    b = sb[0];
}

// dx may alias neither x nor dy (the model passes separate buffers); each dx element is written by one thread.
template <int THREADS>
__global__ void __launch_bounds__(THREADS) rmsnormBackwardKernel(const float* x, int64_t ldx, const float* w,
                                                                 const float* dy, int64_t lddy, int d, float eps,
                                                                 float* dx, int64_t lddx, float beta, float* rstd) {
    pdlWait();
    pdlLaunchDependents();
    const int64_t r = blockIdx.x;
    const float* xr = x + r * ldx;
    const float* gr = dy + r * lddy;
    float* out = dx + r * lddx;
    float ss = 0.f, dot = 0.f;
    for (int j = threadIdx.x; j < d; j += THREADS) {
        const float xv = xr[j];
        ss += xv * xv;
        dot += w[j] * gr[j] * xv;
    }
    blockSum2<THREADS>(ss, dot);
    const float rho = 1.f / sqrtf(ss / static_cast<float>(d) + eps);
    const float c = dot * rho * rho / static_cast<float>(d);
    if (threadIdx.x == 0) rstd[r] = rho;
    if (beta == 0.f) {
        for (int j = threadIdx.x; j < d; j += THREADS) out[j] = rho * (w[j] * gr[j] - c * xr[j]);
    } else {
        for (int j = threadIdx.x; j < d; j += THREADS) out[j] = beta * out[j] + rho * (w[j] * gr[j] - c * xr[j]);
    }
}

}  // namespace

void rmsnormBackward(const Exec& ex, const RmsNormBackwardArgs& a, const Scratch& scratch) {
    if (a.rows <= 0 || a.d <= 0) return;
    if (a.rows > 0x7fffffff) throw std::invalid_argument("rmsnormBackward: too many rows");
    float* rstd = scratch.get(3, a.rows);
    const dim3 grid(static_cast<unsigned>(a.rows));
    if (a.d <= 1024)
        launch("rmsnorm backward", ex, rmsnormBackwardKernel<128>, grid, dim3(128), 0, a.x, a.ldx, a.w, a.dy, a.lddy,
               a.d, a.eps, a.dx, a.lddx, a.beta, rstd);
    else
        launch("rmsnorm backward", ex, rmsnormBackwardKernel<256>, grid, dim3(256), 0, a.x, a.ldx, a.w, a.dy, a.lddy,
               a.d, a.eps, a.dx, a.lddx, a.beta, rstd);
    columnSums(ex, a.dy, a.lddy, a.x, a.ldx, rstd, a.rows, a.d, a.dw, scratch);
}

}  // namespace mamba::cuda::train
