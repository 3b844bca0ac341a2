// cp.async (sm_80+): copies global → shared memory without passing through registers, issued in commit groups and
// waited for by count, so a kernel can keep the next tiles in flight while it works on this one. Shared by the
// tensor-core tier's pipelines, the decode gemv's conv epilogue and the staged scan walk.
#pragma once

#include <cstdint>

namespace mamba::cuda {

__device__ __forceinline__ uint32_t smemAddr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/** Copies one float (4 bytes: no alignment beyond a float's asked of either side). */
__device__ __forceinline__ void cpAsync4(float* dst, const float* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smemAddr(dst)), "l"(src));
}

/** Copies 16 bytes; `bytes` = 0 writes 16 zero bytes instead. */
__device__ __forceinline__ void cpAsync16(uint32_t dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}

/** Closes the copies issued since the last commit into one group. */
__device__ __forceinline__ void cpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }

/** Waits until at most N of this thread's groups are still in flight (the oldest ones complete first). */
template <int N>
__device__ __forceinline__ void cpAsyncWait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/** Waits for every copy this thread issued. */
__device__ __forceinline__ void cpAsyncWaitAll() { asm volatile("cp.async.wait_all;\n" ::); }

}  // namespace mamba::cuda
