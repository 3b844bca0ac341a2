// Backward of a linear layer through cuBLAS (true f32: the caller selects CUBLAS_DEFAULT_MATH).
//
// cuBLAS is column-major. A row-major matrix M[rows, cols] with row stride ld is the column-major
// cols×rows matrix with leading dimension ld, so with W [out, in] (ld in), dy [rows, out] (ld lddy),
// x [rows, in] (ld ldx):
//  - input gradient dx[rows, in] = dy·W     ⇔  dxᶜ(in×rows) = Wᶜ(in×out) · dyᶜ(out×rows):
//    transa = N, transb = N, m = in, n = rows, k = out;
//  - weight gradient dw[out, in] += dyᵀ·x   ⇔  dwᶜ(in×out) += xᶜ(in×rows) · (dyᶜ)ᵀ(rows×out):
//    transa = N, transb = T, m = in, n = out, k = rows, beta = 1.
// cuBLAS results are reproducible run to run for a fixed handle, stream and workspace (one stream per
// backend), and it uses no atomics unless asked to (cublasSetAtomicsMode, never called here).
#include "train_kernels.h"

#include <limits>
#include <stdexcept>
#include <string>

namespace mamba::cuda::train {
namespace {

int toInt(int64_t v, const char* what) {
    if (v > std::numeric_limits<int>::max())
        throw std::invalid_argument(std::string("linear backward: ") + what + " = " + std::to_string(v) +
                                    " exceeds the 32-bit range of cuBLAS");
    return static_cast<int>(v);
}

}  // namespace

void linearBackward(cublasHandle blas, const float* dy, int64_t lddy, int64_t rows, const float* w, int out, int in,
                    float* dx, int64_t lddx, float beta) {
    if (rows <= 0 || in <= 0) return;  // (out == 0: cuBLAS scales dx by beta, like an empty sum)
    const CublasApi& api = cublas();
    const float one = 1.f;
    checkCublas(api.sgemm(blas, kCublasOpN, kCublasOpN, in, toInt(rows, "rows"), out, &one, w, in, dy,
                          toInt(lddy, "lddy"), &beta, dx, toInt(lddx, "lddx")),
                "cublasSgemm_v2 (input gradient)");
}

void linearWeightGrad(const Exec& ex, cublasHandle blas, const float* dy, int64_t lddy, const float* x, int64_t ldx,
                      int64_t rows, int out, int in, float* dw, float* dbias, const Scratch& scratch) {
    if (rows <= 0 || out <= 0) return;
    if (in > 0) {
        const CublasApi& api = cublas();
        const float one = 1.f;
        checkCublas(api.sgemm(blas, kCublasOpN, kCublasOpT, in, out, toInt(rows, "rows"), &one, x, toInt(ldx, "ldx"),
                              dy, toInt(lddy, "lddy"), &one, dw, in),
                    "cublasSgemm_v2 (weight gradient)");
    }
    if (dbias) columnSums(ex, dy, lddy, nullptr, 0, nullptr, rows, out, dbias, scratch);
}

}  // namespace mamba::cuda::train
