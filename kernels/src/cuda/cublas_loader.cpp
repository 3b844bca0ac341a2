#include "cublas_loader.h"

#include "core/errors.h"

#include "runtime_library.h"

#include <stdexcept>

namespace mamba::cuda {
namespace {

const char* statusName(int s) {
    switch (s) {
        case 0: return "CUBLAS_STATUS_SUCCESS";
        case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
        case 7: return "CUBLAS_STATUS_INVALID_VALUE";
        case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
        case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
        case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
        case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
        case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
        case 16: return "CUBLAS_STATUS_LICENSE_ERROR";
        default: return nullptr;
    }
}

CublasApi load() {
    CublasApi api{};
    void* lib = nullptr;
    std::string errors;
    for (const char* name : {"libcublas.so.13", "libcublas.so.12"}) {
        lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (lib) {
            api.library = name;
            break;
        }
        const char* e = dlerror();
        errors += std::string(errors.empty() ? "" : "; ") + (e ? e : name);
    }
    if (!lib)
        throw std::runtime_error(
            "cuBLAS was not found: the CUDA backend loads libcublas.so.13 or libcublas.so.12 at run time (" + errors +
            "). Fix: install cuBLAS (the CUDA toolkit, or NVIDIA's libcublas-13-0 package) and put its lib folder on "
            "LD_LIBRARY_PATH, or add org.bytedeco:cuda with classifier linux-x86_64-redist and call "
            "Loader.load(org.bytedeco.cuda.global.cublas.class) before using the GPU (docs/getting-started.md, 'GPU')");
    bindSymbol(lib, "cuBLAS", api.library, "cublasCreate_v2", api.create);
    bindSymbol(lib, "cuBLAS", api.library, "cublasDestroy_v2", api.destroy);
    bindSymbol(lib, "cuBLAS", api.library, "cublasSetStream_v2", api.setStream);
    bindSymbol(lib, "cuBLAS", api.library, "cublasSetMathMode", api.setMathMode);
    bindSymbol(lib, "cuBLAS", api.library, "cublasSetWorkspace_v2", api.setWorkspace);
    bindSymbol(lib, "cuBLAS", api.library, "cublasSgemm_v2", api.sgemm);
    bindSymbol(lib, "cuBLAS", api.library, "cublasGemmEx", api.gemmEx);
    api.statusString = reinterpret_cast<const char* (*)(int)>(dlsym(lib, "cublasGetStatusString"));
    return api;  // the library stays loaded for the life of the process
}

}  // namespace

const CublasApi& cublas() {
    return loadOnce<CublasApi>(load);
}

void checkCublas(int status, const char* what) {
    if (status == kCublasSuccess) return;
    const char* name = statusName(status);
    std::string s = name ? name : "cuBLAS status " + std::to_string(status);
    if (!name && cublas().statusString) s += std::string(" (") + cublas().statusString(status) + ")";
    if (status == kCublasAllocFailed) throw OutOfMemoryError(std::string(what) + " failed: " + s);
    throw std::runtime_error(std::string(what) + " failed: " + s);
}

}  // namespace mamba::cuda
