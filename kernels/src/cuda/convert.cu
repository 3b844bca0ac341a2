// Element-wise stages: -exp(A_log), f32 ↔ bf16/f16 copies, packing activations for a low-precision
// GEMM, and the bias/beta pre-pass of a cuBLAS product. All grid-stride, 64-bit indices.
#include "kernels.h"
#include "lowp.cuh"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace mamba::cuda {
namespace {

unsigned gridFor(const Exec& ex, int64_t n, int threads) {
    const int64_t want = (n + threads - 1) / threads;
    return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(want, static_cast<int64_t>(ex.sms) * 16)));
}

__global__ void negExpKernel(const float* __restrict__ in, float* __restrict__ out, int64_t n) {
    pdlWait();
    pdlLaunchDependents();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        out[i] = -expf(in[i]);
}

template <typename T>
__global__ void toLowpKernel(const float* __restrict__ src, T* __restrict__ dst, int64_t n) {
    pdlWait();
    pdlLaunchDependents();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        dst[i] = toStorage<T>(src[i]);
}

template <typename T>
__global__ void fromLowpKernel(const T* __restrict__ src, float* __restrict__ dst, int64_t n) {
    pdlWait();
    pdlLaunchDependents();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        dst[i] = toFloat(src[i]);
}

template <typename T>
__global__ void rowsToLowpKernel(const float* __restrict__ x, int64_t ldx, int64_t rows, int cols, T* __restrict__ dst) {
    pdlWait();
    pdlLaunchDependents();
    const int64_t n = rows * cols;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t r = i / cols, c = i % cols;
        dst[i] = toStorage<T>(x[r * ldx + c]);
    }
}

// Four columns per thread (16-byte loads, 8-byte stores) when rows start 16-byte aligned and cols % 4 == 0;
// the flattened index is 32-bit (rows·cols/4 < 2³¹), so the row split is one 32-bit division.
template <typename T>
__global__ void rowsToLowpVec4Kernel(const float* __restrict__ x, int64_t ldx, uint32_t quads_per_row, uint32_t quads,
                                     uint2* __restrict__ dst) {
    pdlWait();
    pdlLaunchDependents();
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < quads; i += gridDim.x * blockDim.x) {
        const uint32_t r = i / quads_per_row, q = i - r * quads_per_row;
        const float4 v = *reinterpret_cast<const float4*>(x + r * ldx + 4 * static_cast<int64_t>(q));
        dst[i] = make_uint2(packPair<T>(v.x, v.y), packPair<T>(v.z, v.w));
    }
}

__global__ void biasInitKernel(float* __restrict__ y, int64_t ldy, int64_t rows, int n, const float* __restrict__ bias,
                               float beta) {
    pdlWait();
    pdlLaunchDependents();
    const int64_t total = rows * n;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t r = i / n, c = i % n;
        float* p = y + r * ldy + c;
        *p = beta == 0.f ? bias[c] : beta * *p + bias[c];
    }
}

}  // namespace

void negExp(const Exec& ex, const float* in, float* out, int64_t n) {
    if (n <= 0) return;
    launch("negExp", ex, negExpKernel, dim3(gridFor(ex, n, 256)), dim3(256), 0, in, out, n);
}

void toLowp(const Exec& ex, const float* src, void* dst, int64_t n, int dtype) {
    if (n <= 0) return;
    if (dtype == DTYPE_BF16)
        launch("toLowPrecision(bf16)", ex, toLowpKernel<__nv_bfloat16>, dim3(gridFor(ex, n, 256)), dim3(256), 0, src,
               static_cast<__nv_bfloat16*>(dst), n);
    else if (dtype == DTYPE_F16)
        launch("toLowPrecision(f16)", ex, toLowpKernel<__half>, dim3(gridFor(ex, n, 256)), dim3(256), 0, src,
               static_cast<__half*>(dst), n);
    else
        throw std::invalid_argument("toLowPrecision: dtype code " + std::to_string(dtype) + " is not BF16 or F16");
}

void fromLowp(const Exec& ex, const void* src, int dtype, float* dst, int64_t n) {
    if (n <= 0) return;
    if (dtype == DTYPE_BF16)
        launch("fromLowPrecision(bf16)", ex, fromLowpKernel<__nv_bfloat16>, dim3(gridFor(ex, n, 256)), dim3(256), 0,
               static_cast<const __nv_bfloat16*>(src), dst, n);
    else if (dtype == DTYPE_F16)
        launch("fromLowPrecision(f16)", ex, fromLowpKernel<__half>, dim3(gridFor(ex, n, 256)), dim3(256), 0,
               static_cast<const __half*>(src), dst, n);
    else
        throw std::invalid_argument("fromLowPrecision: dtype code " + std::to_string(dtype) + " is not BF16 or F16");
}

void rowsToLowp(const Exec& ex, const float* x, int64_t ldx, int64_t rows, int cols, void* dst, int dtype) {
    const int64_t n = rows * cols;
    if (n <= 0) return;
    const bool vec = cols % 4 == 0 && (rows == 1 || ldx % 4 == 0) && (reinterpret_cast<uintptr_t>(x) & 15) == 0 &&
                     (reinterpret_cast<uintptr_t>(dst) & 7) == 0 && n / 4 < (int64_t{1} << 31);
    if (vec) {
        const uint32_t quads = static_cast<uint32_t>(n / 4), per_row = static_cast<uint32_t>(cols / 4);
        if (dtype == DTYPE_BF16)
            launch("pack activations (bf16)", ex, rowsToLowpVec4Kernel<__nv_bfloat16>, dim3(gridFor(ex, quads, 256)),
                   dim3(256), 0, x, ldx, per_row, quads, static_cast<uint2*>(dst));
        else
            launch("pack activations (f16)", ex, rowsToLowpVec4Kernel<__half>, dim3(gridFor(ex, quads, 256)), dim3(256),
                   0, x, ldx, per_row, quads, static_cast<uint2*>(dst));
        return;
    }
    if (dtype == DTYPE_BF16)
        launch("pack activations (bf16)", ex, rowsToLowpKernel<__nv_bfloat16>, dim3(gridFor(ex, n, 256)), dim3(256), 0,
               x, ldx, rows, cols, static_cast<__nv_bfloat16*>(dst));
    else
        launch("pack activations (f16)", ex, rowsToLowpKernel<__half>, dim3(gridFor(ex, n, 256)), dim3(256), 0, x, ldx,
               rows, cols, static_cast<__half*>(dst));
}

void biasInit(const Exec& ex, float* y, int64_t ldy, int64_t rows, int n, const float* bias, float beta) {
    const int64_t total = rows * n;
    if (total <= 0) return;
    launch("bias", ex, biasInitKernel, dim3(gridFor(ex, total, 256)), dim3(256), 0, y, ldy, rows, n, bias, beta);
}

}  // namespace mamba::cuda
