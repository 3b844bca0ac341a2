// Error checking and kernel-launch plumbing shared by every CUDA source of libmamba.
// Every CUDA call goes through check(); messages name the call that failed and the runtime's words.
#pragma once

#include "core/errors.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace mamba::cuda {

/** Throws for a failed CUDA call: OutOfMemoryError for allocation failures, std::runtime_error otherwise. */
[[noreturn]] inline void throwCuda(cudaError_t e, const std::string& what) {
    cudaGetLastError();  // clear a non-sticky error so the next call starts clean
    const std::string msg = what + " failed: " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
    if (e == cudaErrorMemoryAllocation) throw OutOfMemoryError(msg);
    throw std::runtime_error(msg);
}

inline void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throwCuda(e, what);
}

/** Where and how a stage runs: the backend's stream, whether kernels may overlap their predecessor's tail. */
struct Exec {
    cudaStream_t stream = nullptr;
    bool pdl = false;     // programmatic dependent launch (Hopper+): see docs/cuda-backend.md
    int sms = 132;        // multiprocessors of the device
    int cc = 0;           // compute capability, major·10 + minor (90 = Hopper: the wgmma tiles of the tensor tier)
    int smem_optin = 0;   // the most dynamic shared memory a block may opt in to (bytes)
    int gemv_group = 0;   // forced gemv group size (tests and benchmarks; 0: chosen from the shape)
    bool gemv_one_output_per_group = false;  // the gemv's former grid, for gemv_bench's side-by-side timing
};

/** What device `ordinal` offers an Exec (SMs, compute capability, opt-in shared memory); no stream, no PDL. */
inline Exec deviceExec(int ordinal) {
    Exec e;
    int major = 0, minor = 0;
    check(cudaDeviceGetAttribute(&e.sms, cudaDevAttrMultiProcessorCount, ordinal), "cudaDeviceGetAttribute");
    check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal), "cudaDeviceGetAttribute");
    check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ordinal), "cudaDeviceGetAttribute");
    e.cc = major * 10 + minor;
    check(cudaDeviceGetAttribute(&e.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ordinal),
          "cudaDeviceGetAttribute");
    return e;
}

/**
 * Launches `kernel` on exec.stream, with programmatic stream serialisation when exec.pdl is set:
 * the kernel may then start while its predecessor drains, and must call pdlWait() before it touches
 * anything the predecessor writes (or writes anything the predecessor reads). A `cluster` other than 1×1×1 groups
 * the blocks into thread-block clusters of that shape (Hopper+; the grid must be a multiple of it).
 */
template <typename... Params, typename... Args>
void launchClustered(const char* name, const Exec& exec, void (*kernel)(Params...), dim3 grid, dim3 block,
                     size_t smem, dim3 cluster, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = exec.stream;
    cudaLaunchAttribute attr[2];
    int n = 0;
    if (cluster.x * cluster.y * cluster.z > 1) {
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = cluster.x;
        attr[n].val.clusterDim.y = cluster.y;
        attr[n].val.clusterDim.z = cluster.z;
        ++n;
    }
    if (exec.pdl) {
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n].val.programmaticStreamSerializationAllowed = 1;
        ++n;
    }
    cfg.attrs = attr;
    cfg.numAttrs = n;
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...);
    if (e != cudaSuccess) throwCuda(e, std::string("CUDA kernel launch (") + name + ")");
}

/** launchClustered without clusters. */
template <typename... Params, typename... Args>
void launch(const char* name, const Exec& exec, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
            Args... args) {
    launchClustered(name, exec, kernel, grid, block, smem, dim3(1, 1, 1), args...);
}

inline unsigned blocksFor(int64_t n, int per) { return static_cast<unsigned>((n + per - 1) / per); }

#ifdef __CUDACC__
/** Waits until the preceding kernel in the stream has finished and its writes are visible (PDL). */
__device__ __forceinline__ void pdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
/** Lets the next kernel in the stream be scheduled now (it still waits for us in its pdlWait()). */
__device__ __forceinline__ void pdlLaunchDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ float siluf(float x) { return x / (1.0f + expf(-x)); }
/** softplus with PyTorch's threshold: x above 20, else log(1 + e^x). */
__device__ __forceinline__ float softplusf(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
#endif

}  // namespace mamba::cuda
