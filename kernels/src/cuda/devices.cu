// CUDA device discovery and the backend factory. Safe on machines without a driver or GPU: every query
// reports "no CUDA device" (with the runtime's reason) instead of failing. The probe runs once per process
// and is read-only afterwards; each newCudaBackend() call makes a new, independent context.
#include "core/backends.h"
#include "core/errors.h"
#include "cuda_backend.h"
#include "mamba/mamba.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

namespace mamba {

namespace {
struct Probe {
    int count = 0;
    std::string reason;
};

const Probe& probe() {
    static Probe p;
    static std::once_flag once;
    std::call_once(once, [] {
        int n = 0;
        cudaError_t e = cudaGetDeviceCount(&n);
        if (e != cudaSuccess) {
            cudaGetLastError();  // clear the sticky-free error so later calls start clean
            // The runtime reports a missing driver as "driver version is insufficient"; say what it is.
            void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
            if (!driver) {
                const char* why = dlerror();
                p.reason = std::string("no NVIDIA driver was found (") + (why ? why : "libcuda.so.1 not found") +
                           "); install the NVIDIA driver to use a GPU, or run on the CPU";
                return;
            }
            dlclose(driver);
            p.reason = std::string("CUDA runtime: ") + cudaGetErrorString(e);
            int version = 0;
            if (e == cudaErrorInsufficientDriver && cudaDriverGetVersion(&version) == cudaSuccess && version > 0)
                p.reason += " (the NVIDIA driver supports CUDA " + std::to_string(version / 1000) + "." +
                            std::to_string(version % 1000 / 10) + ", this libmamba was built with CUDA " +
                            std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10) +
                            "; update the driver)";
            return;
        }
        p.count = n;
        if (n == 0) p.reason = "the CUDA driver reports no GPU";
    });
    return p;
}

void requireOrdinal(int ordinal) {
    const Probe& p = probe();
    if (p.count == 0) throw std::runtime_error("no CUDA device: " + p.reason);
    if (ordinal < 0 || ordinal >= p.count)
        failRange("CUDA device " + std::to_string(ordinal) + " does not exist (" +
                                std::to_string(p.count) + " present)");
}
}  // namespace

bool builtWithCuda() { return true; }

std::shared_ptr<Ops> newCudaBackend(int ordinal) {
    requireOrdinal(ordinal);
    return std::make_shared<cuda::CudaBackend>(ordinal);
}

void* allocPinnedHost(int ordinal, size_t bytes) {
    requireOrdinal(ordinal);
    void* p = nullptr;
    // portable: page-locked for every context, as each model's backend has its own
    if (cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocPortable) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    return p;
}

void freePinnedHost(void* p) noexcept {
    if (p && cudaFreeHost(p) != cudaSuccess) cudaGetLastError();
}

int cudaDeviceCount() { return probe().count; }
std::string cudaUnavailableReason() { return probe().reason; }

std::string cudaDeviceName(int ordinal) {
    requireOrdinal(ordinal);
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, ordinal) != cudaSuccess) throw std::runtime_error("cudaGetDeviceProperties failed");
    return prop.name;
}

static void memInfo(int ordinal, size_t* free_b, size_t* total_b) {
    requireOrdinal(ordinal);
    int prev = 0;
    cudaGetDevice(&prev);
    cudaSetDevice(ordinal);
    cudaError_t e = cudaMemGetInfo(free_b, total_b);
    cudaSetDevice(prev);
    if (e != cudaSuccess) throw std::runtime_error(std::string("cudaMemGetInfo: ") + cudaGetErrorString(e));
}

int64_t cudaDeviceTotalMemory(int ordinal) {
    size_t f, t;
    memInfo(ordinal, &f, &t);
    return static_cast<int64_t>(t);
}

int64_t cudaDeviceFreeMemory(int ordinal) {
    size_t f, t;
    memInfo(ordinal, &f, &t);
    return static_cast<int64_t>(f);
}

}  // namespace mamba
