// cuBLAS loaded at run time (dlopen), with our own declarations of the few entry points we call: the
// build machines have no cuBLAS headers, and a libmamba without a hard cuBLAS dependency loads on any
// machine. Values of the enums below are cuBLAS 12/13's (see docs/cuda-backend.md).
#pragma once

#include <cuda_runtime.h>
#include <library_types.h>

#include <cstddef>
#include <string>

namespace mamba::cuda {

using cublasHandle = void*;

enum : int {
    kCublasSuccess = 0,
    kCublasAllocFailed = 3,
    kCublasOpN = 0,
    kCublasOpT = 1,
    kCublasDefaultMath = 0,
    kCublasPedanticMath = 2,
    kCublasTf32TensorOpMath = 3,
    kCublasCompute32F = 68,
    kCublasGemmDefault = -1,
};

struct CublasApi {
    std::string library;  // the file that was loaded
    int (*create)(cublasHandle* handle);
    int (*destroy)(cublasHandle handle);
    int (*setStream)(cublasHandle handle, cudaStream_t stream);
    int (*setMathMode)(cublasHandle handle, int mode);
    int (*setWorkspace)(cublasHandle handle, void* workspace, size_t bytes);
    int (*sgemm)(cublasHandle handle, int transa, int transb, int m, int n, int k, const float* alpha, const float* A,
                 int lda, const float* B, int ldb, const float* beta, float* C, int ldc);
    int (*gemmEx)(cublasHandle handle, int transa, int transb, int m, int n, int k, const void* alpha, const void* A,
                  cudaDataType Atype, int lda, const void* B, cudaDataType Btype, int ldb, const void* beta, void* C,
                  cudaDataType Ctype, int ldc, int computeType, int algo);
    const char* (*statusString)(int status);  // may be null on old versions
};

/** Loads libcublas.so.13, else libcublas.so.12, once per process; throws std::runtime_error if neither loads. */
const CublasApi& cublas();

/**
 * Throws std::runtime_error("<what> failed: CUBLAS_STATUS_…") unless status is success
 * (mamba::OutOfMemoryError for CUBLAS_STATUS_ALLOC_FAILED).
 */
void checkCublas(int status, const char* what);

}  // namespace mamba::cuda
