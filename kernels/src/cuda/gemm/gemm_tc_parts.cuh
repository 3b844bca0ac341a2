// The parts of the tensor-core tier that both of its translation units use: the kernel arguments,
// the swizzled shared-memory tile loader and the epilogue's per-element rule. gemm_tc.cu holds the mma.sync tiles
// (sm_80+), gemm_tc_sm90a.cu the wgmma tiles (sm_90a only); both must feed the tensor cores the same values in the
// same order and finish every element the same way, so these pieces exist once.
#pragma once

#include "gemm_tc.h"
#include "../cp_async.cuh"

#include <cstdint>

namespace mamba::cuda {
namespace tc {

struct TcArgs {
    const float* x;
    int64_t ldx;
    int64_t rows;
    const void* w;
    int out, in;
    const float* bias;
    float* y;
    int64_t ldy;
    float beta;
};

// Shared-memory tiles of 16-bit values are [rows][BK] with rows of BK·2 bytes; the 16-byte chunk c of row r sits at
// chunk position c ^ (r & 7), so the 8 rows an ldmatrix phase reads hit 8 different bank groups. Every address is
// computed once per thread as a byte offset (the kernels are otherwise bound by address arithmetic).

/** One thread's share of loading a [ROWS][BK] 16-bit tile: chunk c of rows r0, r0 + kRowStep, … */
template <int ROWS, int BK, int kThreads>
struct TileLoad {
    static constexpr int kChunks = BK / 8, kRowStep = kThreads / kChunks, kPerThread = ROWS / kRowStep;
    static_assert(kThreads % kChunks == 0 && ROWS % kRowStep == 0, "whole rows per pass");
    int r0, c;
    __device__ TileLoad() : r0(static_cast<int>(threadIdx.x) / kChunks), c(static_cast<int>(threadIdx.x) % kChunks) {}
    /** Byte offset in the tile of this thread's j-th chunk. */
    __device__ __forceinline__ uint32_t offset(int j) const {
        const int r = r0 + j * kRowStep;
        return static_cast<uint32_t>(r * BK + ((c ^ (r & 7)) << 3)) * 2;
    }
    /**
     * Requests k tile `kt` of rows [row0, row0 + ROWS) of the row-major matrix m [rows, K] (ld K) into the tile at
     * shared byte address `tile`; chunks past `rows` or K are zero-filled.
     */
    template <typename T>
    __device__ __forceinline__ void load(uint32_t tile, const T* m, int64_t row0, int64_t rows, int K, int kt) const {
        const int k = kt * BK + c * 8;
        const bool kin = k < K;
        const T* src = m + (row0 + r0) * K + k;
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) {
            const bool ok = kin && row0 + r0 + j * kRowStep < rows;
            cpAsync16(tile + offset(j), ok ? src + static_cast<int64_t>(j) * kRowStep * K : m, ok ? 16 : 0);
        }
    }
};

/**
 * A cut of every output's chain into `parts` parts of `part` elements of k (parts = 1: one chain over all of k).
 * The blocks of one output tile's parts form a thread-block cluster along y (blockIdx.y = the part); each block
 * chains its part from +0 and leaves the raw sums in its shared memory, and the cluster adds them in part order
 * through distributed shared memory before finishing each element — no global scratch, no second launch.
 */
struct KSplit {
    int part = 0;
    int parts = 1;
};

/** The epilogue of every tile: acc (+ bias) (+ beta·y), in this order, for the element at column n, y at yp. */
__device__ __forceinline__ float finishValue(const TcArgs& a, int n, const float* yp, float acc) {
    float v = acc;
    if (a.bias) v += a.bias[n];
    if (a.beta != 0.f) v += a.beta * *yp;
    return v;
}

/** finishValue stored in place, for one element inside the product. */
__device__ __forceinline__ void finishElement(const TcArgs& a, int64_t m, int n, float acc) {
    float* yp = a.y + m * a.ldy + n;
    *yp = finishValue(a, n, yp, acc);
}

}  // namespace tc

/** Launches a wgmma tile (gemm_tc_sm90a.cu) on x already packed to W's type in `xp`; a 9.0 device only. */
void launchWgmmaTile(const Exec& ex, const tc::TcArgs& a, const void* xp, int wdtype, TcTile tile,
                     tc::KSplit split = {});

}  // namespace mamba::cuda
